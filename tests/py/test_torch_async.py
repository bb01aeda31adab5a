"""save_async snapshots the tensors before it returns; file-like reader/writer for torch.save."""

from __future__ import annotations

import io
import os

import pytest
import torch

import s3direct


@pytest.fixture(params=["local", "s3"])
def uri_base(request, tmp_path, lib_path):
    if request.param == "local":
        return str(tmp_path)
    request.getfixturevalue("s3_env")
    return f"s3://{request.getfixturevalue('bucket')}"


def test_save_async_snapshots(uri_base):
    model = torch.nn.Linear(64, 32)
    extra = torch.arange(1000, dtype=torch.float32)
    expect = {k: v.clone() for k, v in model.state_dict().items()}
    uri = f"{uri_base}/async.safetensors"
    fut = s3direct.save_async({"model": model.state_dict(), "extra": extra, "step": 9}, uri)
    # Mutate everything right away: the stored values must be the old ones.
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1000.0)
        extra.zero_()
    assert isinstance(fut.result(timeout=120), s3direct.SaveStats)
    back = s3direct.load(uri)
    for k, v in expect.items():
        assert torch.equal(back["model"][k], v), k
    assert torch.equal(back["extra"], torch.arange(1000, dtype=torch.float32))
    assert back["step"] == 9


def test_save_async_host_only_never_touches_cuda(tmp_path, lib_path, monkeypatch):
    """On a machine with CUDA (is_available faked: this torch has none), a save_async of CPU
    tensors must not initialise CUDA: pinning the snapshot would make a context on the
    current device (a forked DataLoader worker could no longer use CUDA, and every rank
    would hold one on GPU 0). The C writer sends host tensors from their own memory, so
    pinning gains nothing."""
    pinned = []
    real_empty = torch.empty

    def empty(*args, **kwargs):
        if kwargs.get("pin_memory"):
            pinned.append(args)
        return real_empty(*args, **{k: v for k, v in kwargs.items() if k != "pin_memory"})

    def no_cuda(*args, **kwargs):
        raise AssertionError("CUDA initialised by a host-only save_async")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "init", no_cuda)
    monkeypatch.setattr(torch.cuda, "_lazy_init", no_cuda)
    monkeypatch.setattr(torch, "empty", empty)
    extra = torch.arange(1000, dtype=torch.float32)
    uri = os.path.join(tmp_path, "host-only.safetensors")
    fut = s3direct.save_async({"extra": extra, "step": 3}, uri)
    extra.zero_()
    assert isinstance(fut.result(timeout=120), s3direct.SaveStats)
    assert pinned == []
    monkeypatch.undo()
    back = s3direct.load(uri)
    assert torch.equal(back["extra"], torch.arange(1000, dtype=torch.float32))
    assert back["step"] == 3


def test_save_async_waits_only_for_work_queued_before_it(tmp_path, lib_path, monkeypatch):
    """The background writer orders its copies after the stream it is given, as that stream is
    when the write starts: by then the caller has queued more (the next step's kernels, a
    second save's snapshot). torch.cuda.Stream() hands out reused pool streams, here the
    caller's current stream itself (as a pool can), so a fence made of one waits for that
    later work too (issue 39). The fence is an event recorded on the current stream after the
    snapshot copies, handed to the write (cuda_events), which waits for it and is given no
    stream. This torch has no CUDA: the streams, events and the device tensor are stand-ins
    that log what each stream holds."""
    from s3direct import _save

    queues: dict[int, list] = {}  # stream handle -> what is queued on it, in order
    events: dict[int, tuple[int, int]] = {}  # event handle -> (stream, queue length at record)

    class FakeStream:  # the pool hands back the caller's current stream
        def __init__(self, device=None, handle=77):
            self.cuda_stream = handle
            queues.setdefault(handle, [])

        def wait_stream(self, other):
            queues[self.cuda_stream].append(("wait-stream", other.cuda_stream,
                                             len(queues[other.cuda_stream])))

    class FakeEvent:
        def record(self, stream):
            self.cuda_event = 9000 + len(events)
            events[self.cuda_event] = (stream.cuda_stream, len(queues[stream.cuda_stream]))

    def waited(event):
        """Everything a wait for event (when the write starts) waits for."""
        s, n = events[event]
        return queues[s][:n]

    current = FakeStream(0)
    real_prepare = _save._prepare
    log = []

    def prepare(t, name, path):
        s = real_prepare(t, name, path)
        return _save._Src(s.name, s.tensor, s.dtype, 0)  # "on cuda:0"

    def snapshot(s):
        queues[77].append(("snapshot copy", s.name))
        return s

    def write(client, uri, srcs, meta, tree_json, **kw):
        assert not kw["cuda_stream"], kw  # no stream to wait for: the events only
        log.append(("write", [waited(h) for h in kw["cuda_events"] if h]))

    monkeypatch.setattr(torch.cuda, "current_stream", lambda d=None: current)
    monkeypatch.setattr(torch.cuda, "Stream", FakeStream)
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "device", lambda d: __import__("contextlib").nullcontext())
    monkeypatch.setattr(_save, "_prepare", prepare)
    monkeypatch.setattr(_save, "_snapshot", snapshot)
    monkeypatch.setattr(_save, "_write", write)
    gate = __import__("threading").Event()
    # Keep the executor busy so that the write can only start after save_async returned.
    blocker = _save._get_executor().submit(gate.wait, 60)
    fut = s3direct.save_async({"w": torch.zeros(4)}, os.path.join(tmp_path, "f.safetensors"))
    queues[77].append(("long kernel queued after save_async returned",))
    gate.set()
    blocker.result(timeout=60)
    assert fut.result(timeout=60) is None
    assert len(log) == 1 and len(log[0][1]) == 1, log
    ops = log[0][1][0]
    assert ("snapshot copy", "w") in ops, ops  # the fence holds the snapshot copies
    assert ("long kernel queued after save_async returned",) not in ops, ops


def test_save_async_error_from_result(tmp_path, lib_path):
    fut = s3direct.save_async({"a": torch.ones(2)},
                              os.path.join(tmp_path, "no", "such", "dir", "x.safetensors"))
    with pytest.raises(s3direct.S3DirectError):
        fut.result(timeout=60)


def test_torch_save_load_through_streams(uri_base):
    obj = {"w": torch.randn(300, 200), "cfg": {"lr": 0.1}, "ids": list(range(5))}
    uri = f"{uri_base}/obj.pt"
    with s3direct.writer(uri) as f:
        torch.save(obj, f)
    with s3direct.reader(uri) as f:
        back = torch.load(f, weights_only=True)
    assert torch.equal(back["w"], obj["w"]) and back["cfg"] == obj["cfg"]
    assert back["ids"] == obj["ids"]


def test_reader_seek_and_ranged_reads(bucket, boto3_client):
    data = os.urandom(3 * 1024 * 1024 + 17)
    boto3_client.put_object(Bucket=bucket, Key="blob", Body=data)
    r = s3direct.reader(f"s3://{bucket}/blob", read_ahead=256 * 1024)
    assert r.seekable() and r.size == len(data)
    assert r.read(10) == data[:10]
    r.seek(1_000_000)
    assert r.read(5) == data[1_000_000:1_000_005]
    assert r.tell() == 1_000_005
    r.seek(-7, io.SEEK_END)
    assert r.read() == data[-7:]
    assert r.read(3) == b""
    r.seek(100)
    big = bytearray(2 * 1024 * 1024)     # larger than the read-ahead: straight into it
    assert r.readinto(big) == len(big) and bytes(big) == data[100:100 + len(big)]
    r.seek(0)
    assert r.read() == data
    r.close()


def test_writer_object_visible_only_after_close(bucket, boto3_client):
    w = s3direct.writer(f"s3://{bucket}/stream.bin", part_size=5 * 1024 * 1024)
    chunks = [os.urandom(1024 * 1024 + i) for i in range(7)]
    for c in chunks:
        w.write(c)
    listed = boto3_client.list_objects_v2(Bucket=bucket).get("Contents", [])
    assert not any(o["Key"] == "stream.bin" for o in listed)
    w.close()
    got = boto3_client.get_object(Bucket=bucket, Key="stream.bin")["Body"].read()
    assert got == b"".join(chunks)
    # An exception inside the with block discards the upload.
    with pytest.raises(RuntimeError):
        with s3direct.writer(f"s3://{bucket}/aborted.bin") as w2:
            w2.write(b"x" * 100)
            raise RuntimeError("boom")
    listed = boto3_client.list_objects_v2(Bucket=bucket).get("Contents", [])
    assert not any(o["Key"] == "aborted.bin" for o in listed)


def test_local_writer_atomic(tmp_path):
    path = os.path.join(tmp_path, "f.bin")
    with pytest.raises(RuntimeError):
        with s3direct.writer(path) as w:
            w.write(b"abc")
            raise RuntimeError("boom")
    assert os.listdir(tmp_path) == []
    with s3direct.writer(path) as w:
        w.write(b"abc")
        assert not os.path.exists(path)
    assert open(path, "rb").read() == b"abc"
