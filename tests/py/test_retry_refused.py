"""A server that refuses connections for a couple of seconds (radosgw restarting takes 1-2 s)
does not fail a request: connection-refused is retried for S3D_RETRY_CONNECT_BUDGET_MS (5 s)
past max_attempts, as botocore's standard mode with its backoff covers a few seconds. Before,
five tries with full-jitter waits (0.75 s on average in all) gave up after about 1 s.

The port is free when the request starts and a forwarder to the test server starts listening
on it 2 s later."""

from __future__ import annotations

import socket
import threading
import time
from urllib.parse import urlparse

import pytest
import torch

import s3direct
from _slowproxy import SlowProxy

DELAY_S = 2.0


def _free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class LateServer:
    """The test server behind a forwarder that starts listening DELAY_S after start()."""

    def __init__(self, s3_env):
        u = urlparse(s3_env["AWS_ENDPOINT_URL"])
        self.target = (u.hostname, u.port or 80)
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proxy = None
        self.opened_at = None
        self.t = threading.Thread(target=self._late, daemon=True)

    def _late(self):
        time.sleep(DELAY_S)
        self.proxy = SlowProxy(*self.target, rate=1 << 30, listen_port=self.port).__enter__()
        self.opened_at = time.monotonic()

    def __enter__(self):
        self.t.start()
        return self

    def __exit__(self, *exc):
        self.t.join()
        if self.proxy is not None:
            self.proxy.__exit__()


@pytest.mark.parametrize("op", ["list", "save_load"])
def test_connection_refused_for_2s_is_retried(s3_env, bucket, op):
    with LateServer(s3_env) as late:
        c = s3direct.Client(endpoint_url=late.url)  # default max_attempts (5)
        try:
            t0 = time.monotonic()
            if op == "list":  # one request (ListObjectsV2)
                assert c.list(f"s3://{bucket}/") == []
            else:  # the transfer engine's requests
                uri = f"s3://{bucket}/late.safetensors"
                s3direct.save({"a": torch.arange(1000)}, uri, client=c)
                assert torch.equal(s3direct.load(uri, client=c)["a"], torch.arange(1000))
            took = time.monotonic() - t0
        finally:
            c.close()
    assert took >= DELAY_S - 0.1, took  # it really waited for the listener


def test_max_attempts_1_is_not_retried(s3_env, bucket):
    """max_attempts=1 still means one try: the budget does not apply."""
    with LateServer(s3_env) as late:
        c = s3direct.Client(endpoint_url=late.url, max_attempts=1)
        try:
            with pytest.raises(s3direct.TransferError, match="refused"):
                c.list(f"s3://{bucket}/")
        finally:
            c.close()
