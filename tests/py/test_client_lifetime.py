"""Closing a Client (or a reader / writer) while another thread is using it never frees the C
object under that thread (issue 23 item 1): close() waits for the calls running on it, a
save_async still pending keeps it open until it is done, and calls that start after close()
raise ConfigError / ValueError.

Each scenario runs 100 times in a child process, so a use-after-free (SIGSEGV, or an abort
from glibc's heap checks) fails the test instead of killing pytest.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import uuid

import pytest

ROUNDS = 100

_PRELUDE = textwrap.dedent("""
    import random, sys, threading, time
    import torch
    import s3direct
    from s3direct import errors

    bucket, rounds = sys.argv[1], int(sys.argv[2])
    base = f"s3://{bucket}"
    # Another client checks what landed: the one under test is closed by then.
    check = s3direct.Client()
    rng = random.Random(23)
    outcome = {"done": 0, "refused": 0}

    def closed_error(e):
        # The only failure a race with close() may give: the client (or file) is closed.
        return isinstance(e, (errors.ConfigError, ValueError)) and "closed" in str(e)

    def run_beside(fn):
        box = {}
        def work():
            try:
                box["value"] = fn()
            except BaseException as e:
                box["error"] = e
        t = threading.Thread(target=work)
        t.start()
        return t, box

    def settle(t, box, what):
        t.join(60)
        assert not t.is_alive(), f"{what}: the worker is still running"
        if "error" in box:
            if not closed_error(box["error"]):
                raise AssertionError(f"{what}: unexpected error {box['error']!r}")
            outcome["refused"] += 1
            return None
        outcome["done"] += 1
        return box.get("value")

    def after_close(c):
        try:
            c.head(bucket, "nothing")
        except errors.ConfigError as e:
            assert "closed" in str(e), e
        else:
            raise AssertionError("a call after close() did not raise")
""")

_SCENARIOS = {
    # save_async, then close() at once: close waits for the pending save, which completes
    # (its calls still run once close() has begun).
    "save_async": """
        for i in range(rounds):
            c = s3direct.Client()
            t = torch.full((256,), float(i))
            fut = s3direct.save_async({"t": t, "i": i}, f"{base}/a{i}.safetensors", client=c)
            time.sleep(rng.random() * 0.004)
            c.close()
            assert fut.done(), "close() returned before the pending save_async finished"
            fut.result(timeout=60)  # never refused: close() waited for it
            back = s3direct.load(f"{base}/a{i}.safetensors", client=check)
            assert torch.equal(back["t"], t) and back["i"] == i
            outcome["done"] += 1
            after_close(c)
    """,
    # load on a worker thread while the main thread closes the client.
    "load": """
        ref = {"w": torch.arange(4096, dtype=torch.float32), "b": torch.ones(7)}
        s3direct.save(ref, f"{base}/ref.safetensors", client=check)
        for i in range(rounds):
            c = s3direct.Client()
            t, box = run_beside(lambda: s3direct.load(f"{base}/ref.safetensors", client=c))
            time.sleep(rng.random() * 0.006)
            c.close()
            back = settle(t, box, f"load round {i}")
            if back is not None:
                assert torch.equal(back["w"], ref["w"]) and torch.equal(back["b"], ref["b"])
            after_close(c)
    """,
    # A writer (upload stream) on a worker thread while the main thread closes the client.
    "writer": """
        chunk = bytes(range(256)) * 64
        for i in range(rounds):
            c = s3direct.Client()
            key = f"w{i}.bin"
            def write():
                with s3direct.writer(f"{base}/{key}", client=c) as f:
                    for _ in range(8):
                        f.write(chunk)
            t, box = run_beside(write)
            time.sleep(rng.random() * 0.006)
            c.close()
            if settle(t, box, f"writer round {i}") is None and "error" not in box:
                assert check.download_bytes(bucket, key) == chunk * 8
            after_close(c)
    """,
    # One writer shared by two threads: one writes, the other closes it.
    "shared_writer": """
        chunk = b"x" * 4096
        c = s3direct.Client()
        for i in range(rounds):
            f = s3direct.writer(f"{base}/s{i}.bin", client=c)
            n = [0]
            def write():
                for _ in range(16):
                    f.write(chunk)
                    n[0] += 1
            t, box = run_beside(write)
            time.sleep(rng.random() * 0.002)
            f.close()
            settle(t, box, f"shared writer round {i}")
            # Whatever the writer took before close() is the object: no byte more or less.
            assert check.download_bytes(bucket, f"s{i}.bin") == chunk * n[0]
        c.close()
    """,
    # One safe_open reader shared by two threads: one reads, the other closes it.
    "shared_reader": """
        ref = {"w": torch.arange(4096, dtype=torch.float32)}
        s3direct.save(ref, f"{base}/r.safetensors", client=check)
        c = s3direct.Client()
        for i in range(rounds):
            f = s3direct.safe_open(f"{base}/r.safetensors", client=c)
            t, box = run_beside(lambda: [f.get_tensor("w") for _ in range(4)])
            time.sleep(rng.random() * 0.004)
            f.close()
            got = settle(t, box, f"shared reader round {i}")
            for w in got or []:
                assert torch.equal(w, ref["w"])
        c.close()
    """,
}


@pytest.fixture(scope="module")
def children(boto3_client, s3_env):
    """Every scenario's child process, started together (they mostly wait on the server), in
    one bucket of their own; each test then waits for its own."""
    from conftest import _empty_and_delete

    name = f"s3d-py-life-{uuid.uuid4().hex[:12]}"
    boto3_client.create_bucket(Bucket=name)
    procs = {}
    for scenario, body in _SCENARIOS.items():
        code = _PRELUDE + textwrap.dedent(body) + textwrap.dedent("""
            print("outcome", outcome["done"], outcome["refused"])
        """)
        procs[scenario] = subprocess.Popen(
            [sys.executable, "-c", code, name, str(ROUNDS)], stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, env=dict(os.environ))
    yield procs
    for p in procs.values():
        if p.poll() is None:
            p.kill()
            p.communicate()
    _empty_and_delete(boto3_client, name)


@pytest.mark.parametrize("scenario", sorted(_SCENARIOS))
def test_close_while_in_use(scenario, children):
    p = children[scenario]
    try:
        out, err = p.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        pytest.fail(f"{scenario}: hung (a close() that never returned?)\n{err[-4000:]}")
    assert p.returncode == 0, f"{scenario}: exit {p.returncode}\n{out[-2000:]}\n{err[-4000:]}"
    done, refused = map(int, out.split("outcome", 1)[1].split())
    assert done + refused == ROUNDS, out


def test_handle_close_waits_for_calls_and_holds(lib_path):
    """Handle (the counter under Client, readers and writers): close() frees only after the
    running call and the hold end; calls after it raise; a finalizer's close never waits; a
    close from inside a call raises instead of waiting for itself."""
    import ctypes
    import threading

    from s3direct.client import Handle

    freed = []
    h = Handle(ctypes.c_void_p(1), lambda: ValueError("thing is closed"))
    entered, go_on = threading.Event(), threading.Event()

    def call():
        with h.use():
            entered.set()
            go_on.wait(30)

    t = threading.Thread(target=call)
    t.start()
    assert entered.wait(30)
    h.hold()
    closer = threading.Thread(target=lambda: h.close(freed.append))
    closer.start()
    closer.join(0.2)
    assert closer.is_alive() and not freed  # waiting for the call and the hold
    with pytest.raises(ValueError, match="closed"):
        with h.use():
            pass
    with pytest.raises(ValueError, match="closed"):
        h.hold()
    with h.use(held=True) as raw:  # the holder's own calls still run
        assert raw.value == 1 and not freed
    go_on.set()
    t.join(30)
    closer.join(0.2)
    assert closer.is_alive() and not freed  # the hold is still there
    h.release()
    closer.join(30)
    assert not closer.is_alive() and len(freed) == 1
    h.close(freed.append)
    assert len(freed) == 1  # idempotent

    # A finalizer's close (wait=False) leaks a handle still in use rather than free it.
    h2 = Handle(ctypes.c_void_p(2), lambda: ValueError("closed"))
    h2.hold()
    h2.close(freed.append, wait=False)
    assert len(freed) == 1
    # close() inside a call on the same handle would wait for itself.
    h3 = Handle(ctypes.c_void_p(3), lambda: ValueError("closed"))
    with h3.use():
        with pytest.raises(RuntimeError, match="inside a call"):
            h3.close(freed.append)
    h3.close(freed.append)
    assert len(freed) == 2
