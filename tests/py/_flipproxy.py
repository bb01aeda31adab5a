"""A TCP forwarder that corrupts what the server sends: every occurrence of a marker in the
server -> client stream gets its first byte flipped (one bit), whatever response it is in.
Not a test module (the name starts with an underscore).

    with FlipProxy("127.0.0.1", 8000, marker=b"...") as p:
        endpoint = p.url   # http://127.0.0.1:<port>
        ...
        assert p.flips > 0

The client -> server direction is forwarded unchanged (requests stay signed as sent). A marker
split across two reads is still found: the last len(marker) - 1 bytes of each read are held
back until the next read, or sent after 50 ms without one."""

from __future__ import annotations

import socket
import threading


class FlipProxy:
    def __init__(self, host: str, port: int, marker: bytes):
        assert len(marker) >= 2
        self.target = (host, port)
        self.marker = marker
        self.flips = 0
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.closed = False
        self.conns: list[socket.socket] = []
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._accept, daemon=True)

    def __enter__(self) -> "FlipProxy":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
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
            threading.Thread(target=self._up, args=(c, s), daemon=True).start()
            threading.Thread(target=self._down, args=(s, c), daemon=True).start()

    @staticmethod
    def _close(*socks: socket.socket) -> None:
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _up(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                b = src.recv(256 * 1024)
                if not b:
                    break
                dst.sendall(b)
        except OSError:
            pass
        self._close(src, dst)

    def _down(self, src: socket.socket, dst: socket.socket) -> None:
        keep = len(self.marker) - 1
        pending = b""
        src.settimeout(0.05)
        try:
            while True:
                try:
                    b = src.recv(256 * 1024)
                except socket.timeout:
                    if pending:
                        dst.sendall(pending)
                        pending = b""
                    continue
                if not b:
                    break
                buf = bytearray(pending + b)
                i = buf.find(self.marker)
                while i >= 0:
                    buf[i] ^= 0x01
                    with self.lock:
                        self.flips += 1
                    i = buf.find(self.marker, i + 1)
                dst.sendall(bytes(buf[:-keep]))
                pending = bytes(buf[-keep:])
            if pending:
                dst.sendall(pending)
        except OSError:
            pass
        self._close(src, dst)
