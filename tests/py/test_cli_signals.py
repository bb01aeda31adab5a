"""SIGTERM and SIGHUP stop the CLI the way Ctrl-C does (issue 9): the transfer is canceled,
the temporary file of a download is removed, the multipart upload of an upload is aborted,
and the exit status is 128 + the signal. `timeout`, `docker stop` and a closed terminal send
these; before, they killed the process and left `*.s3d-tmp-*` files and open uploads."""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import time
from urllib.parse import urlparse

import pytest

from _slowproxy import SlowProxy
from test_cli import MiB, cli, data  # noqa: F401  (cli is a fixture)

SIGNALS = [signal.SIGINT, signal.SIGTERM, signal.SIGHUP]


@pytest.fixture
def slow_endpoint(s3_env):
    u = urlparse(s3_env["AWS_ENDPOINT_URL"])
    with SlowProxy(u.hostname, u.port or 80, rate=512 * 1024) as p:
        yield p.url


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: s.name)
def test_signal_during_download_removes_the_temporary_file(cli, s3_env, bucket, boto3_client,
                                                           tmp_path, slow_endpoint, sig):
    boto3_client.put_object(Bucket=bucket, Key="big.bin", Body=data(16 * MiB, seed=3))
    out = tmp_path / "big.bin"
    p = subprocess.Popen([cli, "cp", f"s3://{bucket}/big.bin", str(out), "--endpoint-url",
                          slow_endpoint, "--part-size", "1M", "--concurrency", "2"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 20
        while not glob.glob(str(tmp_path / ".*.s3d-tmp-*")) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert glob.glob(str(tmp_path / ".*.s3d-tmp-*")), "the download never started"
        time.sleep(0.5)
        assert p.poll() is None, "the download finished before the signal (proxy too fast)"
        p.send_signal(sig)
        p.wait(timeout=30)
        err = p.stderr.read().decode()
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 128 + sig, (p.returncode, err)
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("s3direct: interrupted"), lines
    assert os.listdir(tmp_path) == [], os.listdir(tmp_path)


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: s.name)
def test_signal_during_upload_aborts_it(cli, s3_env, bucket, boto3_client, sig):
    p = subprocess.Popen([cli, "cp", "-", f"s3://{bucket}/up.bin", "--part-size", "5M"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        p.stdin.write(data(7 * MiB, seed=4))  # one part goes out, then stdin stalls
        p.stdin.flush()
        deadline = time.monotonic() + 20
        while (not boto3_client.list_multipart_uploads(Bucket=bucket).get("Uploads")
               and time.monotonic() < deadline):
            time.sleep(0.1)
        assert boto3_client.list_multipart_uploads(Bucket=bucket).get("Uploads")
        p.send_signal(sig)
        time.sleep(0.5)
        p.stdin.close()  # EOF after the signal must not complete the upload
        p.wait(timeout=60)
        err = p.stderr.read().decode()
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 128 + sig, (p.returncode, err)
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("s3direct: interrupted"), lines
    assert boto3_client.list_objects_v2(Bucket=bucket)["KeyCount"] == 0
    assert not boto3_client.list_multipart_uploads(Bucket=bucket).get("Uploads")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_signal_during_recursive_upload(cli, s3_env, bucket, boto3_client, tmp_path, sig):
    """A recursive copy stops at the files it is on (up to 8 at once), aborts their uploads,
    starts no further file and exits 128 + the signal. 20 files of 2 MiB at 1 MiB/s per
    connection: three rounds of 8, the signal comes after the first file is done."""
    u = urlparse(s3_env["AWS_ENDPOINT_URL"])
    src = tmp_path / "src"
    src.mkdir()
    for i in range(20):
        (src / f"f{i:02d}.bin").write_bytes(data(2 * MiB, seed=10 + i))
    with SlowProxy(u.hostname, u.port or 80, rate=0, up_rate=1024 * 1024) as proxy:
        p = subprocess.Popen([cli, "cp", "-r", str(src), f"s3://{bucket}/r/", "--endpoint-url",
                              proxy.url, "--part-size", "5M"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 30
            while (boto3_client.list_objects_v2(Bucket=bucket)["KeyCount"] == 0
                   and time.monotonic() < deadline):
                time.sleep(0.05)
            time.sleep(0.5)
            assert p.poll() is None, "the copy finished before the signal (proxy too fast)"
            p.send_signal(sig)
            p.wait(timeout=60)
            err = p.stderr.read().decode()
        finally:
            if p.poll() is None:
                p.kill()
    assert p.returncode == 128 + sig, (p.returncode, err)
    assert "interrupted" in err.splitlines()[-1], err
    assert boto3_client.list_objects_v2(Bucket=bucket)["KeyCount"] < 20
    assert not boto3_client.list_multipart_uploads(Bucket=bucket).get("Uploads")


def test_no_verify_ssl_warns(cli, s3_env, bucket):
    """--no-verify-ssl says on stderr that certificates are not checked (issue 9), once, also
    with --debug and with --quiet."""
    from test_cli import run

    for extra in ([], ["--debug"], ["--quiet"]):
        r = run(cli, "ls", f"s3://{bucket}/", "--no-verify-ssl", *extra, check=0)
        warn = [ln for ln in r.stderr.decode().splitlines() if "--no-verify-ssl" in ln]
        assert len(warn) == 1 and warn[0].startswith("s3direct: warning:"), r.stderr
        assert "not verified" in warn[0]
    r = run(cli, "ls", f"s3://{bucket}/", check=0)
    assert b"warning" not in r.stderr


class _Mute:
    """A server that accepts connections and never answers (one that stopped responding)."""

    def __init__(self) -> None:
        import socket
        import threading

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.conns: list = []
        self.t = threading.Thread(target=self._accept, daemon=True)
        self.t.start()

    def _accept(self) -> None:
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(c)

    def close(self) -> None:
        self.sock.close()
        for c in self.conns:
            c.close()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=lambda s: s.name)
@pytest.mark.parametrize("cmd", ["download", "upload", "ls-recursive"])
def test_signal_stops_at_once_against_a_server_that_stopped_answering(cli, s3_env, tmp_path,
                                                                      sig, cmd):
    """Issue 24.3: against a server that accepts and never answers, Ctrl-C took 148 s (the
    stall timeout, five times over) because the first request of a download runs no progress
    callback. Now every request of the CLI's client sees the stop within about 100 ms."""
    mute = _Mute()
    src = tmp_path / "up.bin"
    src.write_bytes(os.urandom(MiB))
    args = {"download": ["cp", "s3://b0000/k", str(tmp_path / "k.out")],
            "upload": ["cp", str(src), "s3://b0000/k"],
            "ls-recursive": ["cp", "-r", "s3://b0000/p/", str(tmp_path / "tree")]}[cmd]
    try:
        p = subprocess.Popen([cli, "--endpoint-url", mute.url, *args], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env=dict(os.environ, **s3_env))
        time.sleep(1.0)
        assert p.poll() is None, p.stderr.read()
        t0 = time.monotonic()
        p.send_signal(sig)
        rc = p.wait(timeout=60)
        took = time.monotonic() - t0
        err = p.stderr.read().decode()
    finally:
        mute.close()
    assert rc == 128 + sig, (rc, err)
    assert "interrupted" in err, err
    # Not a timed assert on the library's speed: the old behaviour took the 30 s stall
    # timeout at least; anything near that means the stop was not seen.
    assert took < 10, took
    assert not glob.glob(str(tmp_path / ".*.s3d-tmp-*"))
