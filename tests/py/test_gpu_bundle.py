"""What the GPU bundle needs of the build (scripts/gpu-bundle.sh, scripts/gpu-check.sh): the
tests it carries run from any folder (no absolute run path into this build), and gpu-check.sh
refuses a machine whose glibc is older than the bundle needs, in one line, before anything
else."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run_paths(path):
    out = subprocess.run(["readelf", "-d", path], capture_output=True, text=True, check=True)
    paths = []
    for line in out.stdout.splitlines():
        if "(RPATH)" in line or "(RUNPATH)" in line:
            paths += line.split("[", 1)[1].rstrip("]").split(":")
    return paths


@pytest.mark.parametrize("name", ["test_cuda_fake", "test_cuda_rules"])
def test_fake_driver_tests_run_from_a_copy(name, lib_path, tmp_path):
    if shutil.which("readelf") is None:
        pytest.skip("no readelf")
    build = os.path.dirname(lib_path)
    exe = os.path.join(build, "tests", "bin", name)
    if not os.access(exe, os.X_OK):
        pytest.skip(f"{name} not built")
    paths = _run_paths(exe)
    assert paths and all(p.startswith("$ORIGIN") for p in paths), paths
    if name != "test_cuda_fake":
        return
    # the layout of the bundle: tests/bin and tests/fakecuda side by side
    (tmp_path / "tests" / "bin").mkdir(parents=True)
    shutil.copy2(exe, tmp_path / "tests" / "bin" / name)
    shutil.copytree(os.path.join(build, "tests", "fakecuda"), tmp_path / "tests" / "fakecuda",
                    symlinks=True)
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    env["TMPDIR"] = str(tmp_path)
    r = subprocess.run([str(tmp_path / "tests" / "bin" / name)], capture_output=True, text=True,
                       env=env, timeout=240)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]


@pytest.mark.parametrize("manifest", ["newest glibc symbol version required: GLIBC_99.0\n", ""])
def test_gpu_check_refuses_an_older_glibc_first(manifest, tmp_path):
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "MANIFEST").write_text("s3direct GPU bundle\n" + manifest)
    out = tmp_path / "out"
    r = subprocess.run([os.path.join(ROOT, "scripts", "gpu-check.sh"), str(bundle)],
                       capture_output=True, text=True, env=dict(os.environ, OUT=str(out)),
                       timeout=60)
    assert r.returncode == 3, r.stdout + r.stderr
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("glibc: ") and "refusing" in lines[0], lines
    assert ("older than the 99.0" in lines[0]) == bool(manifest)
    assert '"step": "glibc", "status": "fail"' in (out / "summary.json").read_text()



def test_bundle_carries_the_licences(lib_path, tmp_path):
    """The bundle carries s3direct's LICENSE, NOTICE and THIRD_PARTY_LICENSES, and for every
    shared library it copies into deps/ the copyright file of the Debian package it came from,
    with the common licence texts those files refer to (issue 37)."""
    if shutil.which("dpkg") is None or shutil.which("ldd") is None:
        pytest.skip("no dpkg or ldd: the bundle is built on Debian")
    build = os.path.dirname(lib_path)
    if not os.access(os.path.join(build, "tools", "s3direct"), os.X_OK):
        pytest.skip("the CLI is not built beside the library")
    out = tmp_path / "bundle"
    r = subprocess.run([os.path.join(ROOT, "scripts", "gpu-bundle.sh"), build, str(out)],
                       capture_output=True, text=True, env=dict(os.environ, S3D_GLIBC228="0"),
                       timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    for name in ("LICENSE", "NOTICE", "THIRD_PARTY_LICENSES"):
        with open(os.path.join(ROOT, name), "rb") as f:
            assert (out / name).read_bytes() == f.read()
    deps = sorted(os.listdir(out / "deps"))
    if not deps:
        return
    listed = dict(line.split() for line in (out / "licenses" / "PACKAGES").read_text().splitlines())
    assert sorted(listed) == deps
    for pkg in set(listed.values()):
        text = (out / "licenses" / f"{pkg}.copyright").read_text(errors="replace")
        assert "Copyright" in text or "copyright" in text, pkg
    if "libcurl.so.4" in listed:  # the system libcurl and what it links (libssl at least)
        assert "libssl.so.3" in listed
    refs = set()
    for f in (out / "licenses").glob("*.copyright"):
        refs |= set(re.findall(r"/usr/share/common-licenses/(L?GPL-[0-9.]*[0-9])",
                               f.read_text(errors="replace")))
    for name in refs:
        assert (out / "licenses" / "common-licenses" / name).is_file(), name
