"""What a sharded save leaves behind (issue 35, item 6): a save that does not commit removes
what it wrote, a save that committed reports success, and a dead writer's temporaries are
swept.

- Ctrl-C before the commit point (the index write): the save raises KeyboardInterrupt and no
  new shard remains; the old checkpoint loads. Before the fix a cancel that reached the index
  write left the new shards (S3: the cancel stopped the index PUT and the shards were kept, as
  for an index write that may have reached the server unanswered).
- Ctrl-C after the commit point (while the old shards are removed): the save returns, the new
  checkpoint is in place, the old shards are gone. Before, KeyboardInterrupt was raised
  although the new index was in place.
- A local save killed mid-shard leaves ".SHARD.s3d-tmp-PID-RAND"; the next save of the index
  removes it once no writer holds its lock (a locked one, a live writer's, stays). Before, it
  was never removed: each save's shard names are new, so no later save writes that target.
- Of two saves to one index at once, the one whose index is replaced removes its own shards.
  Before, its shards stayed until the stale sweep, a day later (S3 16 of 16 rounds, a folder
  97 of 200, in the tester's runs).

Each Ctrl-C runs in a child process, which signals itself from a callback running on the C
call's thread and sleeps there, so the main thread requests the cancel before the save goes
on: from the log line of the read of the index in place (just before the index write), or of
the removal of the old shards (just after it)."""

from __future__ import annotations

import fcntl
import logging
import json
import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest
import torch

import s3direct

KiB = 1 << 10
SIZE = 1 << 20  # bytes per tensor, a shard each
SHARD = SIZE + 64 * KiB

CHILD = textwrap.dedent("""
    import logging, os, signal, sys, time, torch, s3direct
    signal.signal(signal.SIGINT, signal.default_int_handler)
    uri, when = sys.argv[1:3]
    SIZE, SHARD = %d, %d
    c = s3direct.Client(max_concurrency=4)
    s3direct.save({f"a{i}": torch.full((SIZE // 4,), 1.0) for i in range(4)}, uri,
                  shard_size=SHARD, client=c)
    fired = []

    def interrupt():
        if not fired:
            fired.append(1)
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.5)  # the main thread requests the cancel meanwhile

    class Trigger(logging.Handler):
        def emit(self, r):
            m = r.getMessage()
            if when == "before" and "GetObject" in m and m.split()[2].endswith(".index.json"):
                interrupt()  # the read of the index in place: the index write is next
            if when == "after" and "removed" in m and "old shard" in m:
                interrupt()  # the index is in place; the old shards are being removed

    def progress(done, total):
        if when == "before" and not uri.startswith("s3://") and done >= total:
            interrupt()  # a folder: the last shard's data is written

    log = logging.getLogger("s3direct")
    log.setLevel(logging.DEBUG)
    log.addHandler(Trigger())
    try:
        s3direct.save({f"b{i}": torch.full((SIZE // 4,), 2.0) for i in range(4)}, uri,
                      shard_size=SHARD, client=c, progress=progress)
        print("returned", len(fired), flush=True)
    except KeyboardInterrupt:
        print("interrupted", len(fired), flush=True)
""" % (SIZE, SHARD))


def _names_s3(boto3_client, bucket: str, prefix: str) -> set[str]:
    out = set()
    for page in boto3_client.get_paginator("list_objects_v2").paginate(Bucket=bucket,
                                                                       Prefix=prefix):
        out.update(o["Key"][len(prefix):] for o in page.get("Contents", []))
    return out


def _index_shards(index_json: bytes) -> set[str]:
    return set(json.loads(index_json)["weight_map"].values())


@pytest.mark.parametrize("where", ["s3", "local"])
@pytest.mark.parametrize("when", ["before", "after"])
def test_ctrl_c_around_the_commit_point(where, when, request, tmp_path, lib_path):
    if where == "s3":
        env = request.getfixturevalue("s3_env")
        bucket = request.getfixturevalue("bucket")
        s3 = request.getfixturevalue("boto3_client")
        uri = f"s3://{bucket}/ck/model.safetensors.index.json"
    else:
        env = {}
        uri = str(tmp_path / "model.safetensors.index.json")
    p = subprocess.run([sys.executable, "-c", CHILD, uri, when], capture_output=True, text=True,
                       timeout=120, env={**os.environ, **env})
    assert p.returncode == 0, p.stderr
    if where == "s3":
        names = _names_s3(s3, bucket, "ck/")
        index = s3.get_object(Bucket=bucket, Key="ck/model.safetensors.index.json")["Body"].read()
    else:
        names = set(os.listdir(tmp_path))
        index = (tmp_path / "model.safetensors.index.json").read_bytes()
    got = s3direct.load(uri)
    if when == "before":
        assert p.stdout.split() == ["interrupted", "1"], (p.stdout, p.stderr)
        assert sorted(got) == ["a0", "a1", "a2", "a3"]  # the old checkpoint
    else:
        assert p.stdout.split() == ["returned", "1"], (p.stdout, p.stderr)
        assert sorted(got) == ["b0", "b1", "b2", "b3"]  # the new one, committed
    # Nothing but the checkpoint in place: no new shards left by a cancelled save, no old
    # ones by a committed one.
    assert names == _index_shards(index) | {"model.safetensors.index.json"}, sorted(names)


def test_dead_writers_shard_temporaries_are_swept(tmp_path, lib_path, monkeypatch):
    monkeypatch.delenv("S3D_STALE_SHARD_AGE", raising=False)  # the default: a day
    monkeypatch.delenv("S3D_STALE_TMP_AGE", raising=False)  # the default: 60 s
    uri = str(tmp_path / "model.safetensors.index.json")
    sd = {f"w{i}": torch.full((SIZE // 4,), float(i)) for i in range(2)}
    s3direct.save(sd, uri, shard_size=SHARD)
    # What a save killed while writing its first shard leaves: the shard's temporary file,
    # a shard's size, unlocked (its writer is gone), older than the temporary-file age. And
    # one of a live writer of another save (its lock held), as old.
    dead = tmp_path / f".model-{'1' * 16}-00001-of-00002.safetensors.s3d-tmp-999999-0badf00d"
    live = tmp_path / f".model-{'2' * 16}-00001-of-00002.safetensors.s3d-tmp-{os.getpid()}-1"
    other = tmp_path / ".notes.txt.s3d-tmp-999999-0badf00d"  # not this index's
    for f in (dead, live, other):
        f.write_bytes(b"\0" * SIZE)
        old = time.time() - 3600
        os.utime(f, (old, old))
    fd = os.open(live, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        s3direct.save(sd, uri, shard_size=SHARD)
        left = set(os.listdir(tmp_path))
    finally:
        os.close(fd)
    assert dead.name not in left, sorted(left)
    assert live.name in left  # a writer holds it
    assert other.name in left  # another target's: its own writer's sweep decides
    index = (tmp_path / "model.safetensors.index.json").read_bytes()
    assert left == _index_shards(index) | {"model.safetensors.index.json", live.name,
                                           other.name}


ROUNDS = 8


@pytest.mark.parametrize("where", ["s3", "local"])
def test_the_losing_save_removes_its_shards(where, request, tmp_path, lib_path):
    if where == "s3":
        request.getfixturevalue("s3_env")
        bucket = request.getfixturevalue("bucket")
        s3 = request.getfixturevalue("boto3_client")
    client = s3direct.Client()
    leaks = []
    try:
        for r in range(ROUNDS):
            if where == "s3":
                uri = f"s3://{bucket}/r{r}/model.safetensors.index.json"
            else:
                os.makedirs(tmp_path / f"r{r}")
                uri = str(tmp_path / f"r{r}" / "model.safetensors.index.json")
            go = threading.Barrier(2)
            errs: list[BaseException] = []

            def save(v: float) -> None:
                try:
                    go.wait()
                    s3direct.save({f"w{i}": torch.full((SIZE // 4,), v) for i in range(3)},
                                  uri, shard_size=SHARD, client=client)
                except BaseException as e:  # reported by the main thread
                    errs.append(e)

            ts = [threading.Thread(target=save, args=(v,)) for v in (1.0, 2.0)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            assert not errs, errs
            if where == "s3":
                names = _names_s3(s3, bucket, f"r{r}/")
                index = s3.get_object(Bucket=bucket,
                                      Key=f"r{r}/model.safetensors.index.json")["Body"].read()
            else:
                names = set(os.listdir(tmp_path / f"r{r}"))
                index = (tmp_path / f"r{r}" / "model.safetensors.index.json").read_bytes()
            extra = names - _index_shards(index) - {"model.safetensors.index.json"}
            if extra:
                leaks.append((r, sorted(extra)))
            assert len(s3direct.load(uri, client=client)) == 3
    finally:
        client.close()
    assert not leaks, f"{len(leaks)} of {ROUNDS} rounds left shards: {leaks}"


def test_a_save_that_read_an_older_index_writes_over_the_newer_one(request, lib_path):
    """The race the test above meets by chance, made certain: save A reads the index in place,
    then (held in its log callback, on its own thread) waits while save B runs whole, index
    and cleanup. A's index write must not replace B's unseen: it is conditional on the index
    A read (If-Match), meets 412, reads B's index and writes over that one, removing B's
    shards as old. Before, A's plain write replaced B's index after B's own check had found
    its index in place, and B's shards stayed (every run, by this order)."""
    request.getfixturevalue("s3_env")
    bucket = request.getfixturevalue("bucket")
    s3 = request.getfixturevalue("boto3_client")
    uri = f"s3://{bucket}/race/model.safetensors.index.json"
    client, client_b = s3direct.Client(), s3direct.Client()

    def sd(v: float) -> dict[str, torch.Tensor]:
        return {f"w{i}": torch.full((SIZE // 4,), v) for i in range(3)}

    s3direct.save(sd(0.0), uri, shard_size=SHARD, client=client)
    a_read, b_done = threading.Event(), threading.Event()
    lines: list[str] = []
    errs: list[BaseException] = []

    class Hold(logging.Handler):
        def handle(self, record: logging.LogRecord) -> bool:  # type: ignore[override]
            self.emit(record)  # without the handler's lock, which B's lines would wait on
            return True

        def emit(self, r: logging.LogRecord) -> None:
            m = r.getMessage()
            if threading.current_thread().name != "save-a":
                return
            lines.append(m)
            if not a_read.is_set() and "GetObject" in m and m.split()[2].endswith(".index.json"):
                a_read.set()  # A has read the index in place; its write is next
                b_done.wait(120)

    def save_a() -> None:
        try:
            s3direct.save(sd(1.0), uri, shard_size=SHARD, client=client)
        except BaseException as e:  # reported by the main thread
            errs.append(e)

    log = logging.getLogger("s3direct")
    level = log.level
    hold = Hold()
    log.setLevel(logging.DEBUG)
    log.addHandler(hold)
    a = threading.Thread(target=save_a, name="save-a")
    try:
        a.start()
        assert a_read.wait(120), "save A never read the index"
        s3direct.save(sd(2.0), uri, shard_size=SHARD, client=client_b)  # B, whole
        b_done.set()
        a.join(120)
    finally:
        b_done.set()
        log.removeHandler(hold)
        log.setLevel(level)
        client.close()
        client_b.close()
    assert not a.is_alive() and not errs, errs
    names = _names_s3(s3, bucket, "race/")
    index = s3.get_object(Bucket=bucket, Key="race/model.safetensors.index.json")["Body"].read()
    assert names == _index_shards(index) | {"model.safetensors.index.json"}, sorted(names)
    assert any("another save's index came in place" in m for m in lines), lines[-20:]
    got = s3direct.load(uri)
    assert all(torch.equal(t, torch.full((SIZE // 4,), 1.0)) for t in got.values())  # A's


def test_a_server_without_conditional_writes_gets_a_plain_index_write(request, lib_path):
    """A server that answers 501 NotImplemented to a PutObject carrying If-Match or
    If-None-Match (the index write's condition) still gets the save: the index goes again
    without a condition, and the old shards are removed as always. Before, that 501 failed
    the save after its shards were written."""
    from _relay import HttpRelay

    env = request.getfixturevalue("s3_env")
    bucket = request.getfixturevalue("bucket")
    s3 = request.getfixturevalue("boto3_client")
    refused: list[str] = []

    def intercept(h, body):  # type: ignore[no-untyped-def]
        if h.command == "PUT" and ("If-Match" in h.headers or "If-None-Match" in h.headers):
            refused.append(h.path)
            err = (b"<?xml version=\"1.0\"?><Error><Code>NotImplemented</Code><Message>"
                   b"no conditional writes here</Message></Error>")
            return 501, [("Content-Type", "application/xml")], err
        return None

    relay = HttpRelay(env["AWS_ENDPOINT_URL"], intercept=intercept)
    client = s3direct.Client(endpoint_url=relay.url)
    uri = f"s3://{bucket}/plain/model.safetensors.index.json"
    try:
        for v in (1.0, 2.0):
            s3direct.save({f"w{i}": torch.full((SIZE // 4,), v) for i in range(3)}, uri,
                          shard_size=SHARD, client=client)
        got = s3direct.load(uri, client=client)
    finally:
        client.close()
        relay.close()
    assert len(refused) == 2, refused  # one conditional try per save
    assert all(torch.equal(t, torch.full((SIZE // 4,), 2.0)) for t in got.values())
    names = _names_s3(s3, bucket, "plain/")
    index = s3.get_object(Bucket=bucket, Key="plain/model.safetensors.index.json")["Body"].read()
    assert names == _index_shards(index) | {"model.safetensors.index.json"}, sorted(names)
