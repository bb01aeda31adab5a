"""The `s3direct` console script of a pip install: runs the C CLI installed in _lib/."""

from __future__ import annotations

import os
import sys


def main() -> None:
    from . import __path__ as pkg_path

    # The wheel's _lib/, or (pip install -e .) the installed _lib/ that the package's __path__
    # lists beside the source folder.
    here = os.path.dirname(os.path.abspath(__file__))
    cands = [os.path.join(d, "_lib", "s3direct") for d in [here] + list(pkg_path)]
    exe = next((c for c in cands if os.access(c, os.X_OK)), cands[0])
    if not os.access(exe, os.X_OK):
        sys.exit(f"s3direct: the command-line tool is not installed at {exe}")
    # certifi's CA file for the bundled libcurl, as the Python layer passes it to the library
    # (client.py); the CLI reads it from S3D_DEFAULT_CA_BUNDLE (tools/common.c).
    if not os.environ.get("S3D_DEFAULT_CA_BUNDLE"):
        from .client import _certifi_bundle

        ca = _certifi_bundle()
        if ca:
            os.environ["S3D_DEFAULT_CA_BUNDLE"] = ca
    os.execv(exe, [exe] + sys.argv[1:])


if __name__ == "__main__":
    main()
