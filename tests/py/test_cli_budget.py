"""cp moves bytes on the library's load/save budget (issue 34: through a relay capping each
connection at 12 MB/s, `s3direct cp` opened 32 connections and reached 0.221 GB/s where
`s3direct.load` of the same object opened 119 and reached 0.374).

Two differences made cp slower, each checked here by what cp does, not by its time:
- Its first GET asked for a whole part (8 MiB: 0.7 s alone at 12 MB/s) before any other range
  could start; a load's first GET asks for 256 KiB. Checked with the CLI through a relay that
  records each GET's Range: cp's first range, to a file and to standard output, is the load's.
- Its ranges and parts each held a buffer out of staging_bytes / part_size (32 at the
  defaults), so the level stopped there; a load lands its ranges in the tensors, bounded only
  by the level. Checked through s3d-pathsim (1 MB/s per connection, so the requests overlap):
  with staging for 4 buffers, the functions cp calls (s3d_download_to_file to a file and to a
  pipe, s3d_upload_from_file) keep as many connections open as a load of the same bytes on the
  same client, far more than 4. The CLI cannot set staging_bytes, hence the library's entry
  points for this half.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import threading

import pytest

from _relay import HttpRelay
from test_concurrency_path import _cli_bin, path  # noqa: F401 (path: the pathsim fixture)

MiB = 1 << 20


def _first_range(ranges: list[str]) -> str:
    assert ranges, "no GET seen"
    return ranges[0]


def test_cp_first_range_is_the_loads(s3_env, bucket, boto3_client, tmp_path):
    torch = pytest.importorskip("torch")
    import s3direct

    cli = _cli_bin()
    if cli is None:
        pytest.skip("the CLI is not built")
    uri = f"s3://{bucket}/budget/m.safetensors"
    s3direct.save({"w": torch.arange(6 * MiB, dtype=torch.int32)}, uri)  # 24 MiB
    seen: list[str] = []
    lock = threading.Lock()

    def record(h, body):
        if h.command == "GET" and h.headers.get("Range"):
            with lock:
                seen.append(h.headers["Range"])
        return None

    relay = HttpRelay(s3_env["AWS_ENDPOINT_URL"], intercept=record)
    try:
        with s3direct.Client(endpoint_url=relay.url) as c:
            got = s3direct.load(uri, client=c)
        assert torch.equal(got["w"], torch.arange(6 * MiB, dtype=torch.int32))
        load_first = _first_range(seen)
        whole = boto3_client.get_object(Bucket=bucket, Key="budget/m.safetensors")["Body"].read()
        env = dict(os.environ, AWS_ENDPOINT_URL=relay.url)
        for dst in (str(tmp_path / "m.out"), "-"):
            seen.clear()
            r = subprocess.run([cli, "cp", uri, dst], env=env, capture_output=True,
                               timeout=120)
            assert r.returncode == 0, r.stderr
            data = r.stdout if dst == "-" else (tmp_path / "m.out").read_bytes()
            assert data == whole
            # Before: bytes=0-8388607, a whole part before any other range.
            assert _first_range(seen) == load_first == "bytes=0-262143", (dst, seen[:3])
            assert len(seen) > 3, seen  # and the rest in parallel ranges
    finally:
        relay.close()
    boto3_client.delete_object(Bucket=bucket, Key="budget/m.safetensors")


def _call(c, fn, *args):
    from s3direct._capi import enc

    with c.call() as h:
        c._lib.check(getattr(c._lib, fn)(h, *(enc(a) for a in args), None))


def test_file_transfers_follow_the_level_not_the_staging(path, s3_env, bucket,  # noqa: F811
                                                         boto3_client, tmp_path):
    torch = pytest.importorskip("torch")
    import s3direct

    url, counters = path
    n = 32  # ranges of 1 MiB: the level starts at 24, staging holds 4
    w = torch.randint(0, 1 << 30, (n * MiB // 4,), dtype=torch.int32)
    uri = f"s3://{bucket}/budget/b.safetensors"
    s3direct.save({"w": w}, uri)
    key = "budget/b.safetensors"
    want = hashlib.sha256(boto3_client.get_object(Bucket=bucket, Key=key)["Body"].read())
    def client():
        # A fresh client for each measurement: the pathsim counts open connections, and a
        # client keeps its idle ones.
        return s3direct.Client(endpoint_url=url, part_size=MiB, staging_bytes=4 * MiB)

    with client() as c:
        counters(reset=True)
        got = s3direct.load(uri, client=c)
        load_peak = counters()["peak_open"]
    assert torch.equal(got["w"], w)
    del got
    assert load_peak >= 16, load_peak  # what the level gives a load here

    # Download to a regular file: the ranges land in the mapped temporary file.
    out = tmp_path / "b.out"
    with client() as c:
        counters(reset=True)
        _call(c, "s3d_download_to_file", bucket, key, str(out))
        file_peak = counters()["peak_open"]
    assert hashlib.sha256(out.read_bytes()).digest() == want.digest()

    # Download to a pipe: written in order, through buffers that follow the level.
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    h = hashlib.sha256()

    def drain():
        with open(fifo, "rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)

    t = threading.Thread(target=drain)
    t.start()
    with client() as c:
        counters(reset=True)
        try:
            _call(c, "s3d_download_to_file", bucket, key, str(fifo))
        finally:
            t.join(timeout=60)
        pipe_peak = counters()["peak_open"]
    assert h.digest() == want.digest()

    # Before: at most 4 buffers, so 4 ranges in flight (+ the first GET's connection).
    assert file_peak >= load_peak - 2, (file_peak, load_peak)
    assert pipe_peak >= load_peak - 2, (pipe_peak, load_peak)

    # Upload from a file: 12 parts of 5 MiB (5 s each at 1 MB/s) with staging for 2.
    src = tmp_path / "up.bin"
    src.write_bytes(os.urandom(60 * MiB))
    with s3direct.Client(endpoint_url=url, part_size=5 * MiB, staging_bytes=10 * MiB) as c:
        counters(reset=True)
        _call(c, "s3d_upload_from_file", bucket, "budget/up", str(src))
        up_peak = counters()["peak_open"]
    body = boto3_client.get_object(Bucket=bucket, Key="budget/up")["Body"].read()
    assert hashlib.sha256(body).digest() == hashlib.sha256(src.read_bytes()).digest()
    assert up_peak >= 12, up_peak  # before: 2 parts at a time
    for k in (key, "budget/up"):
        boto3_client.delete_object(Bucket=bucket, Key=k)

