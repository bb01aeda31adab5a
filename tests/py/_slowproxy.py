"""A TCP forwarder that slows the server's answers down, so a test can stop a transfer while
it is running. Not a test module (the name starts with an underscore).

    with SlowProxy("127.0.0.1", 8000, rate=256 * 1024) as p:
        endpoint = p.url   # http://127.0.0.1:<port>

Each accepted connection gets two threads: server -> client throttled to `rate` bytes per
second per connection, client -> server to `up_rate` (0: full speed). `listen_port` picks the
port to listen on (0: any free one). `bytes_down` and `bytes_up` count what went each way
(with rate=0 it is a counting relay: the bytes the server served)."""

from __future__ import annotations

import socket
import threading
import time


class SlowProxy:
    def __init__(self, host: str, port: int, rate: int = 256 * 1024, up_rate: int = 0,
                 listen_port: int = 0):
        self.target = (host, port)
        self.rate = rate
        self.up_rate = up_rate
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", listen_port))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.closed = False
        self.conns: list[socket.socket] = []
        self.bytes_down = 0  # server -> client
        self.bytes_up = 0
        self._count_lock = threading.Lock()
        self.thread = threading.Thread(target=self._accept, daemon=True)

    def __enter__(self) -> "SlowProxy":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.closed = True
        try:
            self.sock.close()
        except OSError:
            pass
        for c in self.conns:
            try:
                c.close()
            except OSError:
                pass

    def _accept(self) -> None:
        while not self.closed:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            try:
                s = socket.create_connection(self.target)
            except OSError:
                c.close()
                continue
            self.conns += [c, s]
            threading.Thread(target=self._pipe, args=(c, s, self.up_rate, False),
                             daemon=True).start()
            threading.Thread(target=self._pipe, args=(s, c, self.rate, True), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, rate: int, down: bool) -> None:
        chunk = 16 * 1024 if rate else 256 * 1024
        try:
            while True:
                b = src.recv(chunk)
                if not b:
                    break
                dst.sendall(b)
                with self._count_lock:
                    if down:
                        self.bytes_down += len(b)
                    else:
                        self.bytes_up += len(b)
                if rate:
                    time.sleep(len(b) / rate)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
