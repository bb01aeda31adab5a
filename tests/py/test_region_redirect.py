"""A bucket in another region (issue 24.3): S3 answers a request signed for the wrong region
with 301 PermanentRedirect (or 400 AuthorizationHeaderMalformed) and names the bucket's region
in x-amz-bucket-region; botocore resends there and remembers it. s3direct does the same,
says so at info level, and keeps it for the bucket.

The test server is RGW behind a relay that plays S3's part: a request whose SigV4 scope names
another region than HOME gets S3's answer (301 with the header, or 400 with <Region> in the
body); a request signed for HOME is forwarded as it came (RGW accepts any region)."""

from __future__ import annotations

import http.client
import http.server
import os
import re
import subprocess
import threading

import pytest

from test_cli import cli  # noqa: F401  (a fixture)

HOME = "eu-west-2"


class _Relay(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, upstream: tuple[str, int], style: str) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.upstream = upstream
        self.style = style  # "301", "400", or "always" (a 301 whatever the region)
        self.wrong = 0  # requests answered with the redirect
        self.lock = threading.Lock()


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Relay

    def log_message(self, *args: object) -> None:
        pass

    def _relay(self) -> None:
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        m = re.search(r"Credential=[^/]+/\d{8}/([^/]+)/s3/aws4_request",
                      self.headers.get("Authorization", ""))
        if m is None or m.group(1) != HOME or self.server.style == "always":
            with self.server.lock:
                self.server.wrong += 1
            if self.server.style != "400":
                status, code = 301, "PermanentRedirect"
                msg = ("The bucket you are attempting to access must be addressed using the "
                       "specified endpoint.")
            else:
                status, code = 400, "AuthorizationHeaderMalformed"
                msg = (f"The authorization header is malformed; the region "
                       f"'{m.group(1) if m else '?'}' is wrong; expecting '{HOME}'")
            xml = (f"<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>{code}</Code>"
                   f"<Message>{msg}</Message><Region>{HOME}</Region>"
                   f"<RequestId>r1</RequestId></Error>").encode()
            self.send_response(status)
            self.send_header("x-amz-bucket-region", HOME)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", "0" if self.command == "HEAD" else str(len(xml)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(xml)
            return
        c = http.client.HTTPConnection(*self.server.upstream, timeout=60)
        c.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
        for k, v in self.headers.items():
            c.putheader(k, v)
        c.endheaders(body if body else None)
        r = c.getresponse()
        data = r.read()
        self.send_response(r.status)
        for k, v in r.getheaders():
            if k.lower() not in ("content-length", "transfer-encoding", "connection"):
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
        c.close()

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _relay


@pytest.fixture(params=["301", "400"])
def relay(request, s3_env):
    host, port = s3_env["AWS_ENDPOINT_URL"].split("//", 1)[1].rstrip("/").split(":")
    srv = _Relay((host, int(port)), request.param)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv, f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def test_python_follows_the_bucket_region(relay, s3_env, bucket, lib_path, caplog):
    import logging

    import torch

    import s3direct

    srv, url = relay
    state = {"w": torch.arange(3 << 20, dtype=torch.float32), "step": 4}
    with s3direct.Client(endpoint_url=url, region="us-east-1", part_size=5 << 20) as c:
        with caplog.at_level(logging.INFO, logger="s3direct"):
            s3direct.save(state, f"s3://{bucket}/m.safetensors", client=c)  # multipart: 3 parts
            back = s3direct.load(f"s3://{bucket}/m.safetensors", client=c)
        assert torch.equal(back["w"], state["w"]) and back["step"] == 4
        # The first request found the region; the rest were sent there at once.
        assert srv.wrong == 1, srv.wrong
        assert any(f"the bucket is in region {HOME}, not us-east-1" in r.getMessage()
                   for r in caplog.records), [r.getMessage() for r in caplog.records]
        assert c.config()["region"] == "us-east-1"  # the client's own region is unchanged


def test_cli_follows_the_bucket_region(relay, s3_env, bucket, cli, tmp_path):  # noqa: F811
    srv, url = relay
    src = tmp_path / "f.bin"
    src.write_bytes(os.urandom(12 << 20))
    env = dict(os.environ, **s3_env)
    env.update(AWS_ENDPOINT_URL=url, AWS_REGION="us-east-1", AWS_DEFAULT_REGION="us-east-1")
    up = subprocess.run([cli, "--debug", "--part-size", "5MiB", "cp", str(src),
                         f"s3://{bucket}/f.bin"], env=env, capture_output=True, text=True)
    assert up.returncode == 0, up.stderr[-2000:]
    assert f"the bucket is in region {HOME}" in up.stderr
    out = tmp_path / "back.bin"
    down = subprocess.run([cli, "cp", f"s3://{bucket}/f.bin", str(out)], env=env,
                          capture_output=True, text=True)
    assert down.returncode == 0, down.stderr[-2000:]
    assert out.read_bytes() == src.read_bytes()
    assert srv.wrong == 2, srv.wrong  # once per process


def test_a_redirect_that_persists_names_the_region(s3_env, bucket, lib_path):
    """A server that keeps answering 301 gets one resend, then the error names the region."""
    import torch

    import s3direct

    host, port = s3_env["AWS_ENDPOINT_URL"].split("//", 1)[1].rstrip("/").split(":")
    srv = _Relay((host, int(port)), "always")
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        with s3direct.Client(endpoint_url=f"http://127.0.0.1:{srv.server_address[1]}",
                             region="us-east-1", max_attempts=1) as c:
            with pytest.raises(s3direct.S3DirectError,
                               match=f"PermanentRedirect.*the bucket is in region {HOME}"):
                s3direct.save({"a": torch.ones(2)}, f"s3://{bucket}/x.safetensors", client=c)
        assert srv.wrong == 2, srv.wrong  # the first answer and the one resend
    finally:
        srv.shutdown()
        srv.server_close()
