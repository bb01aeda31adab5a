"""What a user gets besides the code (issue 37): the licence files in the checkout, in the
installed package's metadata and in the wheel (tests/wheel/check-file.sh checks the wheel file
itself), the package metadata, and `python -m s3direct`, which is the CLI."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LICENCE_FILES = ("LICENSE", "NOTICE", "THIRD_PARTY_LICENSES")


def _text(name):
    with open(os.path.join(ROOT, name), encoding="utf-8") as f:
        return f.read()


def test_licence_is_apache_2():
    text = _text("LICENSE")
    assert text.startswith("Copyright 2026 The s3direct authors\n")
    assert "Apache License\n" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text
    assert "Copyright 2026 The s3direct authors" in _text("NOTICE")


def test_third_party_notices_cover_the_static_set():
    """Every source package scripts/build-glibc228.sh builds into the wheel and the GPU
    bundle (the glibc 2.28 set) has its licence text in THIRD_PARTY_LICENSES."""
    script = _text(os.path.join("scripts", "build-glibc228.sh"))
    built = set(re.findall(r"\$\(src (\w+)\)", script))
    assert built == {"jansson", "openssl", "curl"}, built  # a new one needs its notice here
    notices = _text("THIRD_PARTY_LICENSES")
    marks = {"openssl": "Apache License", "curl": "Daniel Stenberg",
             "jansson": "Petri Lehtinen"}
    for pkg in built:
        assert marks[pkg] in notices, pkg
    # zig cc's compiler_rt and glibc's libc_nonshared objects are linked in as well
    assert "Copyright (c) Zig contributors" in notices
    assert "unlimited\npermission to link the compiled version" in notices


def test_pyproject_metadata():
    text = _text("pyproject.toml")
    assert re.search(r'^license = "Apache-2.0"$', text, re.M)
    files = re.search(r"^license-files = \[(.*)\]$", text, re.M)
    assert files and re.findall(r'"([^"]+)"', files.group(1)) == list(LICENCE_FILES)
    for field in ("classifiers", "keywords", "readme", "authors"):
        assert re.search(rf"^{field} = ", text, re.M), field
    # PEP 639: a licence expression and licence classifiers do not go together
    assert "License ::" not in text


def test_installed_package_carries_the_licences():
    """The installed distribution (a wheel, or pip install -e .) lists the three files under
    .dist-info/licenses/, with the checkout's bytes."""
    from importlib import metadata

    try:
        dist = metadata.distribution("s3direct")
    except metadata.PackageNotFoundError:
        pytest.skip("s3direct is not installed (source checkout)")
    meta = dist.metadata
    assert meta["License-Expression"] == "Apache-2.0"
    assert sorted(meta.get_all("License-File") or []) == sorted(LICENCE_FILES)
    for name in LICENCE_FILES:
        got = [f for f in dist.files or () if f.as_posix().endswith(".dist-info/licenses/" + name)]
        assert got, name
        with open(os.path.join(ROOT, name), "rb") as f:
            assert got[0].locate().read_bytes() == f.read()


def _cli_or_skip():
    from s3direct import _cli

    if not any(os.access(c, os.X_OK) for c in _cli.candidate_paths()):
        pytest.skip("the s3direct CLI is not built (set S3D_BUILD_DIR)")


def _python_m(*args):
    env = dict(os.environ)
    if os.environ.get("S3D_TEST_INSTALLED") != "1":
        env["PYTHONPATH"] = os.path.join(ROOT, "python")
    return subprocess.run([sys.executable, "-m", "s3direct", *args], capture_output=True,
                          text=True, env=env, cwd="/", timeout=60)


def test_python_m_runs_the_cli():
    """`python -m s3direct` is the CLI: its --version line, its usage error and exit status."""
    _cli_or_skip()
    r = _python_m("--version")
    assert r.returncode == 0, r.stderr
    import s3direct

    assert r.stdout.startswith(f"s3direct {s3direct.__version__} (library "), r.stdout
    r = _python_m("no-such-command")
    assert r.returncode == 2 and 'unknown command "no-such-command"' in r.stderr, r
