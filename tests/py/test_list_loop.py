"""A server whose ListObjectsV2 pages hand back a continuation token it already gave
(issue 35, item 4): `ls`, `rm --recursive` and Client.list used to run forever, growing
without bound. As botocore's paginator does, a repeated token now ends the listing with a
clear error, after a bounded number of requests.

The origin is a stdlib HTTP server on loopback that answers every ListObjectsV2 with a
truncated page; the token cycles through `period` values (1: the same token every time)."""

from __future__ import annotations

import http.server
import os
import subprocess
import threading
from urllib.parse import parse_qs, urlparse

import pytest

from test_cli import _cli_path

PAGE = """<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
<Name>bkt</Name><Prefix></Prefix><KeyCount>2</KeyCount><MaxKeys>1000</MaxKeys>
<IsTruncated>true</IsTruncated>{cont}<NextContinuationToken>{tok}</NextContinuationToken>
<Contents><Key>k{n}a</Key><Size>1</Size><LastModified>2026-12-01T00:00:00.000Z</LastModified>
<ETag>"x"</ETag></Contents>
<Contents><Key>k{n}b</Key><Size>1</Size><LastModified>2026-12-01T00:00:00.000Z</LastModified>
<ETag>"y"</ETag></Contents>
</ListBucketResult>"""


class _Origin(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, period: int):
        self.period = period
        self.requests = 0
        super().__init__(("127.0.0.1", 0), _Handler)


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):  # quiet
        pass

    def do_GET(self):
        srv = self.server
        srv.requests += 1
        q = parse_qs(urlparse(self.path).query)
        if "list-type" not in q:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        n = srv.requests
        tok = f"tok{n % srv.period}"
        cont = ""
        if "continuation-token" in q:
            cont = f"<ContinuationToken>{q['continuation-token'][0]}</ContinuationToken>"
        body = PAGE.format(tok=tok, n=n, cont=cont).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(params=[1, 3])
def origin(request):
    srv = _Origin(request.param)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv
    srv.shutdown()


def _env(origin):
    e = dict(os.environ)
    e.update(AWS_ENDPOINT_URL=f"http://127.0.0.1:{origin.server_address[1]}",
             AWS_ACCESS_KEY_ID="AKIDEXAMPLE", AWS_SECRET_ACCESS_KEY="secret",
             AWS_DEFAULT_REGION="us-east-1", AWS_EC2_METADATA_DISABLED="true")
    return e


@pytest.mark.parametrize("args", [["ls", "s3://bkt/"], ["ls", "--recursive", "s3://bkt/"],
                                  ["rm", "--recursive", "s3://bkt/"]])
def test_cli_stops_on_repeated_token(origin, args, lib_path):
    cli = _cli_path()
    if cli is None:
        pytest.skip("the s3direct CLI is not built")
    r = subprocess.run([cli, *args], capture_output=True, env=_env(origin), timeout=60,
                       input=b"")
    assert r.returncode != 0
    assert b"continuation marker it had already given" in r.stderr, r.stderr[-500:]
    # period + 1 pages at most: the first repeat stops it.
    assert origin.requests <= origin.period + 2


def test_client_list_stops(origin, lib_path):
    import s3direct

    c = s3direct.Client(endpoint_url=f"http://127.0.0.1:{origin.server_address[1]}",
                        region="us-east-1", access_key_id="AKIDEXAMPLE",
                        secret_access_key="secret")
    try:
        with pytest.raises(s3direct.S3DirectError, match="already given"):
            c.list("s3://bkt/")
    finally:
        c.close()
    assert origin.requests <= origin.period + 2
