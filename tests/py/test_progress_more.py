"""Progress where issue 37 found none: torch.distributed.checkpoint saves and loads through
S3DirectStorageWriter/Reader, and safe_open reads (one running sum over every read of the
file, a summary line at close off a terminal)."""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")

import s3direct  # noqa: E402


def calls_ok(calls, total, header=0):
    """Done never goes backwards and ends at the total: the tensor bytes (plus, for a save,
    up to `header` bytes of the object's header, which a save counts)."""
    assert calls, "progress was never called"
    dones = [d for d, _ in calls]
    assert dones == sorted(dones), "done went backwards"
    d, t = calls[-1]
    assert d == t and total <= t <= total + header, (calls[-1], total)


def test_dcp_progress(bucket):
    dcp = pytest.importorskip("torch.distributed.checkpoint")
    from s3direct.dcp import S3DirectStorageReader, S3DirectStorageWriter

    sd = {f"w{i}": torch.randn(256, 1024) for i in range(6)}
    total = sum(t.nbytes for t in sd.values())
    path = f"s3://{bucket}/dcp-progress"
    saved, loaded = [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # single process: torch warns that it runs no_dist
        dcp.save(sd, storage_writer=S3DirectStorageWriter(
            path, progress=lambda d, t: saved.append((d, t))))
        out = {k: torch.empty_like(v) for k, v in sd.items()}
        dcp.load(out, storage_reader=S3DirectStorageReader(
            path, progress=lambda d, t: loaded.append((d, t))))
    calls_ok(saved, total, header=64 << 10)
    calls_ok(loaded, total)
    assert all(torch.equal(out[k], sd[k]) for k in sd)


def test_safe_open_progress(bucket, capsys):
    sd = {"a": torch.randn(512, 512), "b": torch.randn(1000), "c": torch.randn(64, 64)}
    uri = f"s3://{bucket}/so.safetensors"
    s3direct.save(sd, uri)
    calls = []
    with s3direct.safe_open(uri, "pt", progress=lambda d, t: calls.append((d, t))) as f:
        a = f.get_tensor("a")
        b = f.get_slice("b")[10:20]
    assert torch.equal(a, sd["a"]) and torch.equal(b, sd["b"][10:20])
    calls_ok(calls, sd["a"].nbytes + 10 * 4)
    # progress=True off a terminal: one summary line for the file, at close.
    with s3direct.safe_open(uri, "pt", progress=True) as f:
        for k in f.keys():
            f.get_tensor(k)
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if "safe_open so.safetensors" in ln]
    assert len(lines) == 1 and " in " in lines[0], err
