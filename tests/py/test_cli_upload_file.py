"""Uploads from a regular file (issue 34): `s3direct cp FILE s3://...` sends each part from
the file itself (its checksums from one pass of small reads, then curl reads the bytes
straight into its own buffer: engine/xfer.h, from_fd), so the CLI holds no part in memory.
Sixteen 8 MiB parts in flight took at least 128 MiB of part buffers before; now the peak RSS
of uploading 256 MiB stays near the CLI's own. The object's bytes are the file's."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys

from test_cli import MiB, cli, run  # noqa: F401  (cli is a fixture)


# Spawned from a fresh, small interpreter: a child's peak RSS counts the memory of the process
# it was forked from until its exec (pytest's, with the file's bytes, here).
_MEASURE = """
import os, subprocess, sys
p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
err = p.stderr.read()
_, status, ru = os.wait4(p.pid, 0)
sys.stderr.buffer.write(err)
print(os.waitstatus_to_exitcode(status), ru.ru_maxrss)
"""


def _peak_rss_kib(cli, *args):
    """Runs the CLI; returns (exit status, stderr, its peak RSS in KiB, from wait4)."""
    r = subprocess.run([sys.executable, "-c", _MEASURE, cli, *args], capture_output=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    rc, peak = (int(x) for x in r.stdout.split())
    return rc, r.stderr, peak


def test_cp_file_upload_holds_no_part_buffers(cli, s3_env, bucket, boto3_client, tmp_path):
    src = tmp_path / "big.bin"
    body = os.urandom(256 * MiB)
    src.write_bytes(body)
    rc, err, peak = _peak_rss_kib(cli, "cp", "--concurrency", "16", "--part-size", str(8 * MiB),
                                  str(src), f"s3://{bucket}/big.bin")
    assert rc == 0, err[-2000:]
    # 16 parts of 8 MiB in flight held 128 MiB of buffers at least; the file's bytes are
    # never copied into memory of the CLI's own now.
    assert peak < 64 * 1024, f"peak RSS {peak} KiB"
    got = boto3_client.get_object(Bucket=bucket, Key="big.bin")["Body"].read()
    assert hashlib.sha256(got).digest() == hashlib.sha256(body).digest()


def test_cp_stdin_still_uploads_through_buffers(cli, s3_env, bucket, boto3_client):
    body = os.urandom(20 * MiB + 5)
    r = run(cli, "cp", "--part-size", str(8 * MiB), "-", f"s3://{bucket}/in.bin", input=body)
    assert r.returncode == 0, r.stderr[-2000:]
    assert boto3_client.get_object(Bucket=bucket, Key="in.bin")["Body"].read() == body
