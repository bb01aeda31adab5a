"""The adaptive concurrency through a simulated path (issue 19).

s3d-pathsim (bench/pathsim.c) sits in front of the test server and caps each connection at
1 MB/s in each direction, with 5 ms added to each request: a path where the starting 24
requests move 24 MB/s and more requests move more. At its defaults the CLI must find that out
itself: the first window always doubles the start (24 -> 48, blind), so the test asserts the
level went past that on a measured rise (a fixed concurrency, or a controller that stops after
its first step, fails it), that --concurrency 8 still means exactly 8, that uploads grow
too, and that every byte arrives intact both ways.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import time

import pytest

from conftest import REPO

PER_CONN = 1_000_000  # bytes/s per connection, each direction
MiB = 1 << 20


def _pathsim_bin() -> str | None:
    cands = []
    if os.environ.get("S3D_BUILD_DIR"):
        cands.append(os.path.join(os.environ["S3D_BUILD_DIR"], "bench", "s3d-pathsim"))
    cands.append(os.path.join(REPO, "build", "bench", "s3d-pathsim"))
    return next((c for c in cands if os.access(c, os.X_OK)), None)


def _cli_bin() -> str | None:
    cands = []
    if os.environ.get("S3D_BUILD_DIR"):
        cands.append(os.path.join(os.environ["S3D_BUILD_DIR"], "tools", "s3direct"))
    cands.append(os.path.join(REPO, "build", "tools", "s3direct"))
    return next((c for c in cands if os.access(c, os.X_OK)), None)


@pytest.fixture
def path(s3_env, tmp_path):
    """A pathsim in front of the server: (endpoint URL, function returning its counters)."""
    exe = _pathsim_bin()
    if exe is None or os.environ.get("S3D_TEST_INSTALLED") == "1":
        pytest.skip("s3d-pathsim is not built (build/bench/s3d-pathsim)")
    up = s3_env["AWS_ENDPOINT_URL"].split("//", 1)[1].rstrip("/")
    stats = tmp_path / "stats.json"
    p = subprocess.Popen([exe, "--listen", "127.0.0.1:0", "--upstream", up, "--rate",
                          str(PER_CONN), "--delay-ms", "5", "--stats", str(stats),
                          "--max-seconds", "300"], stdout=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline() if p.stdout else ""
        assert line.startswith("pathsim: listening on "), line
        addr = line.split()[-1]

        def counters(reset: bool = False) -> dict:
            if reset:
                before = json.loads(stats.read_text())["resets"] if stats.exists() else 0
                p.send_signal(signal.SIGUSR1)
                for _ in range(200):
                    if stats.exists() and json.loads(stats.read_text())["resets"] > before:
                        break
                    time.sleep(0.01)
            time.sleep(0.25)  # the file is rewritten at most every 100 ms
            return json.loads(stats.read_text())

        yield f"http://{addr}", counters
    finally:
        p.terminate()
        p.wait(timeout=10)


def _run(cli, env, *args):
    r = subprocess.run([cli, *args], env=env, capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr
    return r


def test_adaptive_concurrency_follows_a_capped_path(path, s3_env, bucket, boto3_client,
                                                    tmp_path):
    cli = _cli_bin()
    if cli is None:
        pytest.skip("the CLI is not built")
    url, counters = path
    data = os.urandom(128 * MiB)  # 128 ranges of 1 MiB: 16 s at 8 x 1 MB/s
    boto3_client.put_object(Bucket=bucket, Key="big", Body=data)
    env = dict(os.environ, AWS_ENDPOINT_URL=url)
    out = tmp_path / "big.out"

    # Defaults: the level starts at 24 and, after the blind double, quadruples because the
    # rate rose in proportion to the requests.
    counters(reset=True)
    r = _run(cli, env, "--debug", "--part-size", "1MiB", "cp", f"s3://{bucket}/big", str(out))
    got = counters()
    assert hashlib.sha256(out.read_bytes()).digest() == hashlib.sha256(data).digest()
    assert "concurrency 24 -> 48" in r.stderr, r.stderr[-2000:]
    assert "concurrency 48 -> 192" in r.stderr, r.stderr[-2000:]
    assert got["peak_open"] >= 64, (got, r.stderr[-2000:])
    del data
    boto3_client.delete_object(Bucket=bucket, Key="big")

    # --concurrency 8 is exactly 8, as before.
    small = os.urandom(16 * MiB)
    boto3_client.put_object(Bucket=bucket, Key="small", Body=small)
    counters(reset=True)
    out.unlink()
    _run(cli, env, "--concurrency", "8", "--part-size", "1MiB", "cp", f"s3://{bucket}/small",
         str(out))
    fixed = counters()
    assert hashlib.sha256(out.read_bytes()).digest() == hashlib.sha256(small).digest()
    assert fixed["peak_open"] <= 9, fixed  # 8 + the first GET's connection at most

    # Uploads: the parts in flight follow too. A target of 400 MB/s (never reached here) starts
    # the level at 8 (400 / 50 MB/s per connection), so that 60 parts of the 5 MiB minimum
    # outnumber it: more than 16 connections open only if a step past the blind 8 -> 16
    # followed a measured rise. Uploads are measured by whole answered parts: each takes 5 s
    # at 1 MB/s, so 8 -> 16 comes when the first 8 are answered (5 s) and the next step when
    # those started at 16 are (10 s), with 36 parts still to start.
    src = tmp_path / "up.bin"
    up_data = os.urandom(300 * MiB)
    src.write_bytes(up_data)
    counters(reset=True)
    r = _run(cli, env, "--debug", "--target-throughput", "400000000", "--part-size", "5MiB", "cp",
             str(src), f"s3://{bucket}/up")
    up = counters()
    body = boto3_client.get_object(Bucket=bucket, Key="up")["Body"].read()
    assert hashlib.sha256(body).digest() == hashlib.sha256(up_data).digest()
    assert "concurrency 8 -> 16" in r.stderr, r.stderr[-2000:]
    assert "concurrency 16 -> " in r.stderr, r.stderr[-2000:]
    assert up["peak_open"] >= 20, (up, r.stderr[-2000:])
    boto3_client.delete_object(Bucket=bucket, Key="up")


def test_recursive_copies_run_files_at_once(path, s3_env, bucket, boto3_client, tmp_path):
    """cp --recursive and sync start several files at once (issue 19.4): a folder of 24 files
    of 256 KiB, each one request, keeps more than 4 connections open (one file at a time keeps
    one), both ways, and every file arrives intact; the index still comes last."""
    cli = _cli_bin()
    if cli is None:
        pytest.skip("the CLI is not built")
    url, counters = path
    env = dict(os.environ, AWS_ENDPOINT_URL=url)
    src = tmp_path / "src"
    src.mkdir()
    files = {f"f{i:02d}.bin": os.urandom(256 * 1024) for i in range(24)}
    files["m.safetensors.index.json"] = b"{}"
    for name, body in files.items():
        (src / name).write_bytes(body)

    counters(reset=True)
    r = _run(cli, env, "cp", "-r", str(src), f"s3://{bucket}/tree/")
    up = counters()
    assert up["peak_open"] > 4, up
    assert r.stdout.splitlines()[-1].endswith("/tree/m.safetensors.index.json"), r.stdout
    for name, body in files.items():
        assert boto3_client.get_object(Bucket=bucket, Key=f"tree/{name}")["Body"].read() == body

    dst = tmp_path / "dst"
    counters(reset=True)
    _run(cli, env, "sync", f"s3://{bucket}/tree/", str(dst))
    down = counters()
    assert down["peak_open"] > 4, down
    assert {p.name: p.read_bytes() for p in dst.iterdir()} == files


def test_python_client_options(s3_env):
    import s3direct

    with s3direct.Client(max_concurrency=64, min_concurrency=64) as c:
        cfg = c.config()
        assert (cfg["min_concurrency"], cfg["max_concurrency"], cfg["concurrency"]) == (64, 64,
                                                                                         64)
    with s3direct.Client(target_throughput="10Gb/s") as c:
        cfg = c.config()
        assert cfg["target_throughput"] == 10 * (1 << 30) // 8
        assert cfg["concurrency"] == (cfg["target_throughput"] + 49_999_999) // 50_000_000
        assert cfg["min_concurrency"] == 1 and cfg["max_concurrency"] == 512
    with s3direct.Client(throughput_target_gbps=10) as c:
        assert c.config()["target_throughput"] == 1_250_000_000
    with s3direct.Client() as c:
        cfg = c.config()
        assert cfg["concurrency"] == 24 and cfg["target_throughput"] == 0
    with pytest.raises(s3direct.ConfigError, match="target_throughput"):
        s3direct.Client(target_throughput="fast")
    with pytest.raises(ValueError):
        s3direct.Client(target_throughput="1Gb/s", throughput_target_gbps=1)
    with pytest.raises(s3direct.S3DirectError, match="min_concurrency"):
        s3direct.Client(max_concurrency=4, min_concurrency=8)


def test_dcp_reads_several_objects_at_once(path, s3_env, bucket):
    """A resharded DCP load (saved by 4 ranks, loaded by one process) reads the 4 ranks'
    objects at once on the client's one budget (issue 19.4): through the path simulator
    more than 2 connections are open at once (one object after another reuses one idle
    connection), and every tensor arrives intact."""
    pytest.importorskip("torch.distributed.checkpoint")
    import torch
    import torch.distributed.checkpoint as dcp

    import s3direct
    from s3direct.dcp import S3DirectStorageReader
    from test_dcp import reference, run_world

    ckpt = f"s3://{bucket}/dcp/step42"
    run_world("save", ckpt, 4)
    url, counters = path
    ref = reference()
    out = {"model": {"w": torch.zeros_like(ref["w"]), "c": torch.zeros_like(ref["c"]),
                     "b": torch.zeros_like(ref["b"])},
           "ids": torch.zeros_like(ref["ids"]), "step": 0, "meta": {"name": ""}}
    counters(reset=True)
    with s3direct.Client(endpoint_url=url) as c:
        dcp.load(out, storage_reader=S3DirectStorageReader(ckpt, client=c), no_dist=True)
    got = counters()
    for k in ("w", "c", "b"):
        assert torch.equal(out["model"][k], ref[k]), k
    assert torch.equal(out["ids"], ref["ids"])
    assert out["step"] == 42 and out["meta"]["name"] == "run"
    assert got["peak_open"] > 2, got
