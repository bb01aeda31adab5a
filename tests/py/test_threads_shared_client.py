"""32 threads sharing one Client while its credentials are refreshed and its log lines go to a
Python callback.

Each thread saves and loads checkpoints under keys of its own (a single-part and, for some, a
multipart object) and round-trips raw bytes with upload_bytes / download_bytes; every load
must give back exactly what that thread saved. The credentials come from a loopback container
endpoint (AWS_CONTAINER_CREDENTIALS_FULL_URI) and live 4 s, so the library refreshes them
(from ~2 s before they expire) while requests are being signed on the other threads. The
"s3direct" logger is at DEBUG with a handler that records each line and the thread it was
called on, and one more thread flips the logger's level, so s3d_log_set_callback runs while
worker threads log.

`make tsan` runs this file with the ThreadSanitizer build of the library (LD_PRELOAD of
libtsan); here it checks the behaviour, there TSan checks the memory accesses behind it.
"""

from __future__ import annotations

import datetime
import http.server
import json
import logging
import os
import threading
import time

import pytest

torch = pytest.importorskip("torch")

import s3direct  # noqa: E402

THREADS = 32
ROUNDS_MIN = 2          # rounds every thread completes before the test may stop
ROUNDS_MAX = 40         # bound on each thread's rounds
FETCHES_MIN = 3         # credential fetches (the first + at least two refreshes)
CRED_LIFE_S = 4


def _iso(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%SZ")


class _CredHandler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_GET(self):
        srv = self.server
        body = json.dumps({"AccessKeyId": srv.key_id, "SecretAccessKey": srv.secret,
                           "Token": "", "Expiration": _iso(time.time() + CRED_LIFE_S)})
        data = body.encode()
        with srv.lock:
            srv.fetches += 1
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def cred_server(s3_env):
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _CredHandler)
    srv.key_id, srv.secret = s3_env["AWS_ACCESS_KEY_ID"], s3_env["AWS_SECRET_ACCESS_KEY"]
    srv.lock = threading.Lock()
    srv.fetches = 0
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    srv.url = f"http://127.0.0.1:{srv.server_address[1]}/creds"
    yield srv
    srv.shutdown()
    srv.server_close()


class _Recorder(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lock_ = threading.Lock()
        self.lines: list[tuple[int, str]] = []

    def emit(self, record):
        with self.lock_:
            self.lines.append((threading.get_ident(), record.getMessage()))


def test_32_threads_share_a_client_through_refreshes(s3_env, bucket, cred_server, tmp_path,
                                                     monkeypatch):
    for k in list(os.environ):
        if k.startswith("AWS_") and k != "AWS_ENDPOINT_URL":
            monkeypatch.delenv(k)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.aws of the machine
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", cred_server.url)

    log = logging.getLogger("s3direct")
    rec = _Recorder()
    saved_level = log.level
    log.addHandler(rec)
    log.setLevel(logging.DEBUG)

    c = s3direct.Client(endpoint_url=s3_env["AWS_ENDPOINT_URL"], region="us-east-1",
                        part_size=5 << 20, max_concurrency=16, staging_bytes=64 << 20)
    stop = threading.Event()
    rounds = [0] * THREADS
    errors: list[tuple[int, BaseException]] = []
    start = threading.Barrier(THREADS + 1)

    def worker(i: int) -> None:
        try:
            start.wait()
            g = torch.Generator().manual_seed(i)
            # Threads 0, 8, 16, 24 write multipart objects (6 MiB > part_size).
            n = (6 << 20) if i % 8 == 0 else (64 << 10) + 4096 * i
            for r in range(ROUNDS_MAX):
                if stop.is_set() and r >= ROUNDS_MIN:
                    break
                state = {"w": torch.randint(0, 255, (n,), dtype=torch.uint8, generator=g),
                         "step": torch.tensor([i * 1000 + r], dtype=torch.int64)}
                uri = f"s3://{bucket}/t{i}/r{r}.safetensors"
                s3direct.save(state, uri, client=c)
                back = s3direct.load(uri, client=c)
                assert back.keys() == state.keys(), (i, r)
                assert torch.equal(back["w"], state["w"]), (i, r)
                assert back["step"].item() == i * 1000 + r, (i, r)
                raw = bytes([i, r]) * (1000 + i)
                c.upload_bytes(bucket, f"t{i}/raw{r}", raw)
                assert c.download_bytes(bucket, f"t{i}/raw{r}") == raw, (i, r)
                c.delete_object(bucket, f"t{i}/raw{r}")
                rounds[i] = r + 1
        except BaseException as e:  # reported by the main thread
            errors.append((i, e))

    def flipper() -> None:
        # The package re-syncs the C callback level whenever it reaches the library.
        levels = (logging.DEBUG, logging.INFO)
        k = 0
        while not stop.wait(0.05):
            log.setLevel(levels[k % 2])
            k += 1
        log.setLevel(logging.DEBUG)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(THREADS)]
    flip = threading.Thread(target=flipper)
    try:
        for t in threads:
            t.start()
        flip.start()
        start.wait()
        # Until the credentials were refreshed at least twice (or every thread ran out of
        # rounds, which the asserts below then report).
        while any(t.is_alive() for t in threads):
            with cred_server.lock:
                enough = cred_server.fetches >= FETCHES_MIN
            if enough and min(rounds) >= ROUNDS_MIN:
                stop.set()
            time.sleep(0.1)
        stop.set()
        for t in threads:
            t.join()
        flip.join()
        c.close()
    finally:
        stop.set()
        log.removeHandler(rec)
        log.setLevel(saved_level)

    assert not errors, errors[:3]
    assert min(rounds) >= ROUNDS_MIN, rounds
    assert cred_server.fetches >= FETCHES_MIN, f"{cred_server.fetches} credential fetches"
    # The library's own lines reached the callback, from more than one thread.
    supplied = [m for _, m in rec.lines if m.startswith("credentials: ") and "supplied key" in m]
    assert len(supplied) >= 2, rec.lines[:20]
    assert len({tid for tid, _ in rec.lines}) >= 2
