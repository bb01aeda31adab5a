"""Every address of the endpoint (issue 19): connections spread over all the addresses its
name resolves to, and an address that refuses connections is skipped.

The endpoint name must resolve to two addresses. The CLI runs in a private mount namespace
(`unshare -m`, root only) with /etc/hosts bind-mounted over by one that lists `localhost` as
127.0.0.1 and 127.0.0.2 (the test server accepts `localhost` as its own name in the Host
header; another name would be taken for a bucket). s3d-pathsim listens on both addresses, on
the same port, in front of the server, and counts the connections each one accepted. Without
the spreading every connection goes to the first address.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import time

import pytest

from test_concurrency_path import _cli_bin, _pathsim_bin

MiB = 1 << 20


def _can_unshare() -> bool:
    if shutil.which("unshare") is None or os.geteuid() != 0:
        return False
    r = subprocess.run(["unshare", "-m", "true"], capture_output=True)
    return r.returncode == 0


@pytest.fixture
def hosts(tmp_path):
    if not _can_unshare():
        pytest.skip("needs root and unshare -m (a private /etc/hosts)")
    h = tmp_path / "hosts"
    h.write_text("127.0.0.1 localhost\n127.0.0.2 localhost\n")
    # Both lines must come back (glibc: "multi on" or two lines of one name in files).
    r = subprocess.run(["unshare", "-m", "sh", "-c",
                        f"mount --bind {h} /etc/hosts && getent ahostsv4 localhost"],
                       capture_output=True, text=True)
    if r.returncode != 0 or "127.0.0.2" not in r.stdout:
        pytest.skip(f"a private /etc/hosts does not work here: {r.stdout} {r.stderr}")
    return h


def _free_port() -> int:
    """A port free on both 127.0.0.1 and 127.0.0.2."""
    for _ in range(50):
        with socket.socket() as a:
            a.bind(("127.0.0.1", 0))
            port = a.getsockname()[1]
            with socket.socket() as b:
                try:
                    b.bind(("127.0.0.2", port))
                except OSError:
                    continue
        return port
    raise RuntimeError("no port free on both loopback addresses")


class Proxy:
    def __init__(self, s3_env, stats, addrs):
        exe = _pathsim_bin()
        if exe is None or os.environ.get("S3D_TEST_INSTALLED") == "1":
            pytest.skip("s3d-pathsim is not built (build/bench/s3d-pathsim)")
        up = s3_env["AWS_ENDPOINT_URL"].split("//", 1)[1].rstrip("/")
        self.stats = stats
        self.port = _free_port()
        args = [exe]
        for a in addrs:
            args += ["--listen", f"{a}:{self.port}"]
        args += ["--upstream", up, "--stats", str(stats), "--max-seconds", "300"]
        self.p = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
        for _ in addrs:
            line = self.p.stdout.readline() if self.p.stdout else ""
            assert line.startswith("pathsim: listening on "), line

    def counters(self) -> dict:
        time.sleep(0.25)  # the file is rewritten at most every 100 ms
        return json.loads(self.stats.read_text())

    def close(self):
        self.p.terminate()
        self.p.wait(timeout=10)


def _cli(hosts, env, *args):
    cli = _cli_bin()
    if cli is None:
        pytest.skip("the CLI is not built")
    cmd = " ".join(["mount --bind", str(hosts), "/etc/hosts && exec", cli] +
                   [f"'{a}'" for a in args])
    r = subprocess.run(["unshare", "-m", "sh", "-c", cmd], env=env, capture_output=True,
                       text=True, timeout=240)
    assert r.returncode == 0, r.stderr[-4000:]
    return r


@pytest.fixture
def big(bucket, boto3_client):
    data = os.urandom(64 * MiB)
    boto3_client.put_object(Bucket=bucket, Key="big", Body=data)
    return data


def test_connections_spread_over_every_address(hosts, s3_env, bucket, big, boto3_client,
                                               tmp_path):
    px = Proxy(s3_env, tmp_path / "stats.json", ["127.0.0.1", "127.0.0.2"])
    try:
        env = dict(os.environ, AWS_ENDPOINT_URL=f"http://localhost:{px.port}")
        out = tmp_path / "big.out"
        r = _cli(hosts, env, "--debug", "--part-size", "1MiB", "--concurrency", "16", "cp",
                 f"s3://{bucket}/big", str(out))
        got = px.counters()
        assert hashlib.sha256(out.read_bytes()).digest() == hashlib.sha256(big).digest()
        per = {lst["addr"].split(":")[0]: lst["accepted"] for lst in got["listeners"]}
        total = per["127.0.0.1"] + per["127.0.0.2"]
        assert total >= 16, got
        assert per["127.0.0.1"] >= total // 4 and per["127.0.0.2"] >= total // 4, (got,
                                                                                   r.stderr[-3000:])
        assert "resolves to 2 addresses (127.0.0.1, 127.0.0.2)" in r.stderr, r.stderr[-3000:]
        assert "new connection to localhost" in r.stderr
        # Connections are still reused: 64 requests did not each open one.
        assert total <= 40, got

        # Uploads spread too (12 parts of 5 MiB at 8 in flight).
        src = tmp_path / "up.bin"
        src.write_bytes(big[:60 * MiB])
        before = per
        _cli(hosts, env, "--part-size", "5MiB", "--concurrency", "8", "cp", str(src),
             f"s3://{bucket}/up")
        got = px.counters()
        now = {lst["addr"].split(":")[0]: lst["accepted"] for lst in got["listeners"]}
        assert now["127.0.0.1"] > before["127.0.0.1"] and now["127.0.0.2"] > before["127.0.0.2"], got
        body = boto3_client.get_object(Bucket=bucket, Key="up")["Body"].read()
        assert hashlib.sha256(body).digest() == hashlib.sha256(big[:60 * MiB]).digest()
    finally:
        px.close()


def test_a_dead_address_is_skipped(hosts, s3_env, bucket, big, tmp_path):
    # Nothing listens on 127.0.0.2: connections there are refused.
    px = Proxy(s3_env, tmp_path / "stats.json", ["127.0.0.1"])
    try:
        env = dict(os.environ, AWS_ENDPOINT_URL=f"http://localhost:{px.port}",
                   S3D_TEST_RETRY_BASE_MS="20")
        out = tmp_path / "big.out"
        r = _cli(hosts, env, "--debug", "--part-size", "1MiB", "--concurrency", "16", "cp",
                 f"s3://{bucket}/big", str(out))
        assert hashlib.sha256(out.read_bytes()).digest() == hashlib.sha256(big).digest()
        assert "could not connect to 127.0.0.2; skipping it" in r.stderr, r.stderr[-3000:]
        # Skipped once, not once per request that was on its way there.
        assert r.stderr.count("could not connect to 127.0.0.2") == 1, r.stderr[-3000:]
        got = px.counters()
        assert got["listeners"][0]["accepted"] >= 1, got
    finally:
        px.close()
