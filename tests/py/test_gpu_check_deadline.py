"""scripts/gpu-check.sh keeps what it measured when its time runs out (issue 39): one overall
deadline (GPU_CHECK_DEADLINE_S) that later steps' timeouts shrink to, a step with too little
time left recorded as "cut", and summary.json, the bench rows and gpu-check.json written as
the run goes, so that a run killed from outside leaves valid partial JSON that says which step
was running. Emulated (GPU_CHECK_EMULATE=1) on a bundle of this build (S3D_GLIBC228=0)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "gpu-check.sh")


@pytest.fixture(scope="module")
def bundle(lib_path, tmp_path_factory):
    if not os.path.exists(SCRIPT):
        pytest.skip("no scripts/ beside the tests (a checkout-free copy)")
    if shutil.which("dpkg") is None or shutil.which("ldd") is None:
        pytest.skip("no dpkg or ldd: the bundle is built on Debian")
    build = os.path.dirname(lib_path)
    for exe in ("tools/s3direct", "tests/bin/bench_gpu", "tests/bin/s3origin_get"):
        if not os.access(os.path.join(build, exe), os.X_OK):
            pytest.skip(f"{exe} is not built beside the library")
    out = tmp_path_factory.mktemp("gpu") / "bundle"
    r = subprocess.run([os.path.join(ROOT, "scripts", "gpu-bundle.sh"), build, str(out)],
                       capture_output=True, text=True, env=dict(os.environ, S3D_GLIBC228="0"),
                       timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return out


def _env(tmp_path, **extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "S3D_"))}
    env.update(GPU_CHECK_EMULATE="1", OUT=str(tmp_path / "out"),
               GPU_CHECK_SCRATCH=str(tmp_path / "scratch"), **extra)
    return env


def _json_lines(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def test_steps_past_the_deadline_are_cut_and_said_so(bundle, tmp_path):
    """24 s, less the 5 s kept for the last summary: at most 19 s are ever left, under the
    20 s each bench step and the 30 s the PyTorch step need to start, so those three are cut
    however fast the machine runs the steps before them (a 27 s deadline left the file bench
    20 s on a fast CI machine); the C tests (15 s each) run or are cut as the clock says. The
    run ends inside its deadline, exit 0 (a cut is not a failure), and the summary names the
    steps cut."""
    t = time.monotonic()
    r = subprocess.run([SCRIPT, str(bundle)], capture_output=True, text=True, timeout=120,
                       env=_env(tmp_path, GPU_CHECK_DEADLINE_S="24"))
    took = time.monotonic() - t
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert took < 24, took
    with open(tmp_path / "out" / "summary.json") as f:
        s = json.load(f)
    assert s["complete"] is True and s["running"] is None and s["deadline_s"] == 24
    status = {st["step"]: st["status"] for st in s["steps"]}
    for name in ("glibc", "machine", "libraries", "origin"):
        assert status[name] == "ok", status
    assert {"bench_s3", "gpu_check", "bench_files"} <= set(s["cut"]), s["cut"]
    assert all(status[n] == "cut" for n in s["cut"])
    assert set(status.values()) <= {"ok", "cut", "skip"}, status
    assert "CUT   gpu_check" in r.stdout


def test_a_killed_run_leaves_partial_json(bundle, tmp_path):
    """Killed (SIGKILL, the whole process group, as a device call's time limit does) while the
    PyTorch checks run: summary.json is valid and says gpu_check was running and the run is
    not complete; the S3 -> GPU and S3 -> host rows, measured first, are in bench.json; the
    checks done so far are in gpu-check.json."""
    out = tmp_path / "out"
    p = subprocess.Popen([SCRIPT, str(bundle)], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, env=_env(tmp_path), start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and p.poll() is None:
            try:
                with open(out / "gpu-check.json") as f:
                    if json.load(f)["results"]:
                        break
            except (OSError, ValueError):
                pass
            time.sleep(0.05)
        assert p.poll() is None, "the run ended before it could be killed"
        os.killpg(p.pid, signal.SIGKILL)
        p.wait(timeout=30)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=30)
    with open(out / "summary.json") as f:
        s = json.load(f)
    assert s["complete"] is False and s["running"] == "gpu_check", s
    assert {st["step"]: st["status"] for st in s["steps"]}["bench_s3"] == "ok", s
    rows = {r["row"]: r for r in _json_lines(out / "bench.json")}
    for name in ("S3->GPU (reader, CRC verified, warm client)",
                 "S3->host (reader, CRC verified, warm client)"):
        assert rows[name]["gbps"] and rows[name]["bytes"] > 0, rows
    with open(out / "gpu-check.json") as f:
        assert json.load(f)["results"]
