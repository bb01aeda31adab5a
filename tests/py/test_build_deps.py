"""Building from source without the C development packages stops with one line that names
the packages to install (CMakeLists.txt), for cmake and for `pip install .`.

Missing packages are simulated: pkg-config is pointed at an empty folder (libcurl, jansson)
and CMake is told not to find OpenSSL."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from conftest import REPO

LINE = "s3direct: missing build dependencies:"


def _need_source():
    if not os.path.exists(os.path.join(REPO, "CMakeLists.txt")):
        pytest.skip("not a source checkout")
    if shutil.which("cmake") is None or (shutil.which("cc") or shutil.which("gcc")) is None:
        pytest.skip("cmake or a C compiler is missing")


def _env(tmp_path):
    empty = tmp_path / "empty-pkgconfig"
    empty.mkdir(exist_ok=True)
    env = dict(os.environ)
    env.update(PKG_CONFIG_LIBDIR=str(empty), PKG_CONFIG_PATH="")
    return env


def _the_line(out):
    lines = [ln.strip() for ln in out.splitlines() if LINE in ln]
    assert len(lines) == 1, out[-3000:]
    return lines[0]


@pytest.mark.parametrize("no_openssl", [False, True])
def test_cmake_names_the_missing_packages(tmp_path, no_openssl):
    _need_source()
    args = ["cmake", "-S", REPO, "-B", str(tmp_path / "b"), "-DS3D_TESTS=OFF"]
    if no_openssl:
        args.append("-DCMAKE_DISABLE_FIND_PACKAGE_OpenSSL=ON")
    r = subprocess.run(args, env=_env(tmp_path), capture_output=True, text=True, timeout=300)
    assert r.returncode != 0
    line = _the_line(r.stdout + r.stderr)
    for pkg in ("libcurl4-openssl-dev", "libjansson-dev", "libcurl-devel", "jansson-devel"):
        assert pkg in line
    assert ("libssl-dev" in line and "openssl-devel" in line) == no_openssl
    # One error, not a trace from FindPkgConfig per package.
    assert "FindPkgConfig" not in r.stderr


def test_pip_install_shows_the_line(tmp_path):
    _need_source()
    pytest.importorskip("scikit_build_core")
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", REPO, "--no-deps",
                        "--no-build-isolation", "-w", str(tmp_path / "w"),
                        "-C", f"build-dir={tmp_path / 'build'}"],
                       env=_env(tmp_path), capture_output=True, text=True, timeout=600)
    assert r.returncode != 0
    line = _the_line(r.stdout + r.stderr)
    assert "libcurl4-openssl-dev" in line and "libjansson-dev" in line
    assert not list((tmp_path).glob("w/*.whl"))
