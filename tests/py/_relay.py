"""An HTTP relay for tests (not a test module): forwards each request to an S3 server and
sends its answer back, with two hooks. Requests stay signed as the client sent them (the Host
header is the relay's, which the server checks the signature with).

    relay = HttpRelay("http://127.0.0.1:8000", intercept=fn, rewrite=fn2)
    ... relay.url ...
    relay.close()

intercept(handler, body) may answer instead of the server: it returns (status, headers,
body) or None to forward. rewrite(handler, status, data) may change the server's answer's
body: it returns the new body."""

from __future__ import annotations

import http.client
import http.server
import threading
from typing import Any, Callable, Optional
from urllib.parse import urlparse


class HttpRelay(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, target: str, intercept: Optional[Callable[..., Any]] = None,
                 rewrite: Optional[Callable[..., bytes]] = None):
        u = urlparse(target)
        self.target = (u.hostname, u.port)
        self.intercept = intercept
        self.rewrite = rewrite
        super().__init__(("127.0.0.1", 0), _Handler)
        self.url = f"http://127.0.0.1:{self.server_address[1]}"
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.shutdown()
        self.server_close()


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def _answer(self, status, headers, data):
        self.send_response(status)
        length = str(len(data))
        for k, v in headers:
            if k.lower() == "content-length" and self.command == "HEAD":
                length = v  # a HEAD's is the object's, with no body
            elif k.lower() not in ("content-length", "transfer-encoding", "connection"):
                self.send_header(k, v)
        self.send_header("Content-Length", length)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _relay(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        srv = self.server
        if srv.intercept is not None:
            own = srv.intercept(self, body)
            if own is not None:
                self._answer(*own)
                return
        conn = http.client.HTTPConnection(*srv.target, timeout=120)
        headers = {k: v for k, v in self.headers.items() if k.lower() != "expect"}
        conn.request(self.command, self.path, body=body, headers=headers)
        r = conn.getresponse()
        data = r.read()
        if srv.rewrite is not None:
            data = srv.rewrite(self, r.status, data)
        self._answer(r.status, r.getheaders(), data)
        conn.close()

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _relay
