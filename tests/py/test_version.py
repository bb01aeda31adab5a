"""The version is written once, in include/s3direct/version.h: CMake's project version, the
wheel's metadata (scikit-build-core's regex provider, configured in pyproject.toml), the Python
package's __version__ and the loaded library's s3d_version_string() all agree with it."""

from __future__ import annotations

import os
import re

import pytest

from conftest import REPO

HEADER = os.path.join(REPO, "include", "s3direct", "version.h")


def header_version():
    if not os.path.exists(HEADER):
        pytest.skip("include/s3direct/version.h is not beside the tests")
    text = open(HEADER, encoding="utf-8").read()
    nums = [re.search(rf"^#define S3D_VERSION_{p} (\d+)$", text, re.M) for p in
            ("MAJOR", "MINOR", "PATCH")]
    assert all(nums), "version.h lost one of S3D_VERSION_MAJOR/MINOR/PATCH"
    return ".".join(m.group(1) for m in nums)


def test_python_package_version():
    import s3direct

    assert s3direct.__version__ == header_version()


def test_library_version(lib_path):
    import s3direct

    assert s3direct.library_version() == header_version()
    major, minor, patch = (int(x) for x in header_version().split("."))
    from s3direct import _capi

    assert _capi.lib().s3d_version() == (major << 16) | (minor << 8) | patch


def test_pyproject_reads_header():
    """The regex of pyproject.toml, run by scikit-build-core's own provider, yields the same
    version as the header."""
    tomllib = pytest.importorskip("tomllib")
    regex = pytest.importorskip("scikit_build_core.metadata.regex")
    pyproject = os.path.join(REPO, "pyproject.toml")
    if not os.path.exists(pyproject):
        pytest.skip("pyproject.toml is not beside the tests")
    with open(pyproject, "rb") as f:
        conf = tomllib.load(f)
    assert "version" in conf["project"]["dynamic"]
    assert "version" not in conf["project"]
    settings = dict(conf["tool"]["scikit-build"]["metadata"]["version"])
    assert settings.pop("provider") == "scikit_build_core.metadata.regex"
    settings["input"] = os.path.join(REPO, settings["input"])
    assert regex.dynamic_metadata("version", settings) == header_version()


def test_cmake_project_version():
    """The build directory's CMake cache holds the project version parsed from the header."""
    build = os.environ.get("S3D_BUILD_DIR")
    cache = os.path.join(build, "CMakeCache.txt") if build else ""
    if not cache or not os.path.exists(cache):
        pytest.skip("S3D_BUILD_DIR with a CMakeCache.txt is not set")
    text = open(cache, encoding="utf-8").read()
    m = re.search(r"^CMAKE_PROJECT_VERSION:STATIC=(.*)$", text, re.M)
    assert m and m.group(1) == header_version()


def test_installed_metadata_agrees():
    """An installed package (the wheel test) carries the same version in its metadata."""
    from importlib import metadata

    try:
        dist = metadata.version("s3direct")
    except metadata.PackageNotFoundError:
        pytest.skip("s3direct is not installed (source checkout)")
    import s3direct

    assert dist == s3direct.__version__ == header_version()
