"""Throttling absorbed (issue 35, item 3): S3 answers 503 SlowDown when a prefix's request rate
is exceeded, for as long as a burst lasts. A relay in front of the S3 server answers every
request with 503 SlowDown during bursts of 2 s every 4 s and forwards the rest: a default save,
load and `cp` (up and down) come through with exact bytes, where five tries (about 0.75 s of
waiting) failed them before. A relay that never stops throttling fails a transfer within the
documented bound (30 s after the request's first try), naming the attempts and the request id.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import threading
import time

import pytest

from _relay import HttpRelay
from test_cli import _cli_path

MiB = 1 << 20

SLOWDOWN = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code>'
            b"<Message>Please reduce your request rate.</Message>"
            b"<RequestId>throttle-relay-1</RequestId></Error>")


class _ThrottleRelay(HttpRelay):
    """Answers every request with 503 SlowDown while in_burst(), forwards the rest."""

    def __init__(self, target: str, burst_s: float, period_s: float):
        self.burst_s, self.period_s = burst_s, period_s
        self.t0 = time.monotonic()
        self.throttled = 0
        self.lock = threading.Lock()
        super().__init__(target, intercept=self._throttle)

    def in_burst(self) -> bool:
        if self.period_s <= 0:
            return True
        return (time.monotonic() - self.t0) % self.period_s < self.burst_s

    def _throttle(self, handler, body):
        if not self.in_burst():
            return None
        with self.lock:
            self.throttled += 1
        return (503, [("Content-Type", "application/xml"),
                      ("x-amz-request-id", "throttle-relay-1")], SLOWDOWN)


@pytest.fixture
def bursts(s3_env):
    relay = _ThrottleRelay(s3_env["AWS_ENDPOINT_URL"], burst_s=2.0, period_s=4.0)
    yield relay
    relay.close()


def test_save_and_load_survive_bursts(bursts, bucket):
    import torch

    import s3direct

    g = torch.Generator().manual_seed(5)
    state = {f"w{i}": torch.randn(2 * MiB, generator=g) for i in range(6)}  # 48 MiB
    c = s3direct.Client(endpoint_url=bursts.url)
    try:
        # Start inside a burst, so that the first requests meet it.
        while not bursts.in_burst():
            time.sleep(0.05)
        uri = f"s3://{bucket}/throttled.safetensors"
        s3direct.save(state, uri, client=c)
        back = s3direct.load(uri, client=c)
    finally:
        c.close()
    assert set(back) == set(state)
    for k in state:
        assert torch.equal(back[k], state[k]), k
    assert bursts.throttled > 0


def test_cli_cp_survives_bursts(bursts, bucket, tmp_path):
    cli = _cli_path()
    if cli is None:
        pytest.skip("the s3direct CLI is not built")
    src = tmp_path / "src.bin"
    src.write_bytes(os.urandom(40 * MiB))
    env = dict(os.environ, AWS_ENDPOINT_URL=bursts.url)
    while not bursts.in_burst():
        time.sleep(0.05)
    r = subprocess.run([cli, "cp", "--no-progress", str(src), f"s3://{bucket}/cp.bin"],
                       capture_output=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    dst = tmp_path / "dst.bin"
    r = subprocess.run([cli, "cp", "--no-progress", f"s3://{bucket}/cp.bin", str(dst)],
                       capture_output=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert hashlib.sha256(dst.read_bytes()).digest() == hashlib.sha256(src.read_bytes()).digest()
    assert bursts.throttled > 0


def test_throttle_that_never_ends_fails_in_bounded_time(s3_env, bucket, tmp_path):
    """Every request throttled: the upload fails after the 30 s budget, not before its five
    tries are up and not much after, naming the attempts and the request id; --max-attempts
    does not shorten a throttle's budget, and AWS_MAX_ATTEMPTS is read."""
    cli = _cli_path()
    if cli is None:
        pytest.skip("the s3direct CLI is not built")
    relay = _ThrottleRelay(s3_env["AWS_ENDPOINT_URL"], burst_s=1.0, period_s=0)
    try:
        src = tmp_path / "src.bin"
        src.write_bytes(os.urandom(1 * MiB))
        env = dict(os.environ, AWS_ENDPOINT_URL=relay.url, AWS_MAX_ATTEMPTS="2")
        t0 = time.monotonic()
        r = subprocess.run([cli, "cp", "--no-progress", str(src), f"s3://{bucket}/never.bin"],
                           capture_output=True, env=env, timeout=120)
        took = time.monotonic() - t0
    finally:
        relay.close()
    err = r.stderr.decode()
    assert r.returncode != 0
    assert "SlowDown" in err and "throttle-relay-1" in err, err
    assert "attempts" in err, err
    assert 20 <= took <= 60, took
    assert relay.throttled >= 5


def test_bad_retry_settings_are_refused(lib_path):
    import s3direct

    for env, bad in (({"AWS_MAX_ATTEMPTS": "zero"}, "AWS_MAX_ATTEMPTS"),
                     ({"AWS_RETRY_MODE": "eager"}, "AWS_RETRY_MODE")):
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            with pytest.raises(s3direct.ConfigError, match=bad):
                s3direct.Client(endpoint_url="http://127.0.0.1:1")
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
