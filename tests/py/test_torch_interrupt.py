"""Ctrl-C in Python stops a running save or load within about a second (issue 9): before,
KeyboardInterrupt waited for the C call to return (the whole save, or ~150 s against a stalled
server). A child process saves or loads through a slow proxy and gets SIGINT mid-transfer;
KeyboardInterrupt must reach its code within 1.5 s of the signal (after a save's cancel and
the abort of its upload), the child must exit with it, the previous object must be intact and
no multipart upload left open. The time is taken when the child catches the interrupt (the
monotonic clock is the machine's): the interpreter's own exit with torch loaded takes 2-3 s
on a loaded test machine, which says nothing about s3direct."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from urllib.parse import urlparse

import pytest
import torch

import s3direct
from _slowproxy import SlowProxy

MiB = 1 << 20
N = 24 * MiB // 4  # float32 elements: 24 MiB

# A shell that starts the test run in the background (`make test &`) makes its children ignore
# SIGINT, and Python then installs no KeyboardInterrupt handler: the child restores it first.
CHILD = textwrap.dedent("""
    import signal, sys, time, torch, s3direct
    signal.signal(signal.SIGINT, signal.default_int_handler)
    mode, endpoint, uri = sys.argv[1:4]
    c = s3direct.Client(endpoint_url=endpoint, part_size=5 << 20, max_concurrency=2,
                        max_attempts=1)
    state = {"w": torch.full((%d,), 2.0)}
    print("start", flush=True)
    try:
        if mode == "save":
            s3direct.save(state, uri, client=c)
        else:
            s3direct.load(uri, client=c)
    except KeyboardInterrupt:
        print("interrupted at", time.monotonic(), file=sys.stderr, flush=True)
        raise
    print("finished", flush=True)
""" % N)


def _interrupt(mode, endpoint, uri, after=1.0):
    p = subprocess.Popen([sys.executable, "-c", CHILD, mode, endpoint, uri],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "start", p.stderr.read()
        time.sleep(after)  # the transfer is under way
        assert p.poll() is None, "finished before the signal (proxy too fast)"
        t0 = time.monotonic()
        p.send_signal(signal.SIGINT)
        p.wait(timeout=60)
        out, err = p.communicate()
    finally:
        if p.poll() is None:
            p.kill()
    assert "finished" not in out
    assert "KeyboardInterrupt" in err, err
    assert p.returncode in (-signal.SIGINT, 128 + signal.SIGINT, 1), (p.returncode, err)
    at = [float(line.split()[-1]) for line in err.splitlines()
          if line.startswith("interrupted at")]
    assert at, err
    print(f"{mode}: KeyboardInterrupt {at[0] - t0:.3f} s after SIGINT")
    return at[0] - t0


@pytest.fixture
def proxy(s3_env):
    u = urlparse(s3_env["AWS_ENDPOINT_URL"])
    with SlowProxy(u.hostname, u.port or 80, rate=256 * 1024, up_rate=512 * 1024) as p:
        yield p


def test_ctrl_c_stops_a_save(s3_env, bucket, boto3_client, proxy):
    uri = f"s3://{bucket}/ckpt.safetensors"
    s3direct.save({"w": torch.full((N,), 1.0)}, uri)
    took = _interrupt("save", proxy.url, uri)
    assert took < 1.5, f"KeyboardInterrupt came {took:.2f} s after SIGINT"
    back = s3direct.load(uri)
    assert torch.equal(back["w"], torch.full((N,), 1.0)), "the previous object changed"
    assert not boto3_client.list_multipart_uploads(Bucket=bucket).get("Uploads")


def test_ctrl_c_stops_a_load(s3_env, bucket, proxy):
    uri = f"s3://{bucket}/ckpt.safetensors"
    s3direct.save({"w": torch.full((N,), 1.0)}, uri)
    took = _interrupt("load", proxy.url, uri, after=3.0)  # past the header: in the read
    assert took < 1.5, f"KeyboardInterrupt came {took:.2f} s after SIGINT"


def test_ctrl_c_stops_a_load_from_a_stalled_server(s3_env, bucket):
    """The server sends the header, then nothing (1 KiB/s): no wait for a timeout."""
    uri = f"s3://{bucket}/ckpt.safetensors"
    s3direct.save({"w": torch.full((N,), 1.0)}, uri)
    u = urlparse(s3_env["AWS_ENDPOINT_URL"])
    with SlowProxy(u.hostname, u.port or 80, rate=1024) as p:
        took = _interrupt("load", p.url, uri)
    assert took < 1.5, f"KeyboardInterrupt came {took:.2f} s after SIGINT"


def test_calls_outside_the_main_thread_run_directly(tmp_path, lib_path):
    """save/load from another thread (save_async's worker, a user's thread) still work."""
    import threading

    path = str(tmp_path / "t.safetensors")
    box = {}

    def work():
        s3direct.save({"a": torch.arange(4)}, path)
        box["out"] = s3direct.load(path)

    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert torch.equal(box["out"]["a"], torch.arange(4))


def test_sigterm_handler_raising_systemexit_aborts_the_save(s3_env, bucket, boto3_client,
                                                            proxy):
    """A program whose SIGTERM handler calls sys.exit (as many trainers do) stops the same way:
    the save is cancelled and its upload aborted before the exception goes on."""
    uri = f"s3://{bucket}/ckpt.safetensors"
    s3direct.save({"w": torch.full((N,), 1.0)}, uri)
    child = CHILD.replace("import signal, sys, time, torch, s3direct",
                          "import signal, sys, time, torch, s3direct\n"
                          "signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))")
    assert child != CHILD
    p = subprocess.Popen([sys.executable, "-c", child, "save", proxy.url, uri],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "start", p.stderr.read()
        time.sleep(1.0)
        assert p.poll() is None, "finished before the signal (proxy too fast)"
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=60)
        out, err = p.communicate()
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 143, (p.returncode, err)
    assert "finished" not in out
    back = s3direct.load(uri)
    assert torch.equal(back["w"], torch.full((N,), 1.0)), "the previous object changed"
    assert not boto3_client.list_multipart_uploads(Bucket=bucket).get("Uploads")


def test_sigterm_at_default_action_leaves_the_upload_open(s3_env, bucket, boto3_client, proxy,
                                                          cli_path_for_abort):
    """What README and docs/python.md say: with no SIGTERM handler the process ends at once,
    its multipart upload stays open (the previous object intact), and abort-uploads removes
    it."""
    uri = f"s3://{bucket}/ckpt.safetensors"
    s3direct.save({"w": torch.full((N,), 1.0)}, uri)
    p = subprocess.Popen([sys.executable, "-c", CHILD, "save", proxy.url, uri],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "start", p.stderr.read()
        time.sleep(1.0)
        assert p.poll() is None, "finished before the signal (proxy too fast)"
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == -signal.SIGTERM
    back = s3direct.load(uri)
    assert torch.equal(back["w"], torch.full((N,), 1.0)), "the previous object changed"
    assert boto3_client.list_multipart_uploads(Bucket=bucket).get("Uploads")
    r = subprocess.run([cli_path_for_abort, "abort-uploads", f"s3://{bucket}",
                        "--older-than", "0"], capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert not boto3_client.list_multipart_uploads(Bucket=bucket).get("Uploads")


@pytest.fixture
def cli_path_for_abort():
    from test_cli import _cli_path

    path = _cli_path()
    if path is None:
        pytest.skip("the s3direct CLI is not built")
    return path
