"""The command-line tool from Python: the `s3direct` console script of a pip install and
`python -m s3direct` (__main__.py) both exec the C CLI, so its arguments, output and exit
status are the CLI's own."""

from __future__ import annotations

import os
import sys


def candidate_paths() -> list[str]:
    """Where the CLI binary is looked for, in order: the package's _lib/ (a wheel; for `pip
    install -e .` every entry of the package's __path__, where the installed _lib/ is listed
    beside the source folder), then a source checkout's build tree ($S3D_BUILD_DIR/tools,
    build/tools), as the library itself is found (_capi.candidate_paths)."""
    from . import __path__ as pkg_path

    here = os.path.dirname(os.path.abspath(__file__))
    out = [os.path.join(d, "_lib", "s3direct") for d in [here] + list(pkg_path)]
    bdir = os.environ.get("S3D_BUILD_DIR")
    if bdir:
        out.append(os.path.join(bdir, "tools", "s3direct"))
    out.append(os.path.join(os.path.dirname(os.path.dirname(here)), "build", "tools", "s3direct"))
    return out


def main() -> None:
    """Replaces this process with the CLI, passing sys.argv[1:]; exits with status 1 and one
    line when the binary is not there."""
    cands = candidate_paths()
    exe = next((c for c in cands if os.access(c, os.X_OK)), None)
    if exe is None:
        sys.exit(f"s3direct: the command-line tool is not installed (looked for {cands[0]})")
    # certifi's CA file for the bundled libcurl, as the Python layer passes it to the library
    # (client.py); the CLI reads it from S3D_DEFAULT_CA_BUNDLE (tools/common.c).
    if not os.environ.get("S3D_DEFAULT_CA_BUNDLE"):
        from .client import _certifi_bundle

        ca = _certifi_bundle()
        if ca:
            os.environ["S3D_DEFAULT_CA_BUNDLE"] = ca
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(exe, [exe] + sys.argv[1:])


if __name__ == "__main__":
    main()
