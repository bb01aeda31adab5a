"""Incremental saves (issue 33): s3direct.save(base=), SaveStats, CheckpointManager and the
Lightning plugin's base.

A save with a base does not send again the tensors equal in it (name, dtype, shape, CRC-32C):
on S3 their byte ranges are UploadPartCopy parts of the base (so only runs of at least 5 MiB,
S3's smallest part, can be copied: the S3 tests use 6 MiB tensors), in a folder they are
copied with copy_file_range. Every result is checked bit for bit with s3direct.load and with
the safetensors library (bytes fetched by boto3 for S3), and the stats the library reports
are checked against what changed. A base that cannot be used gives a full save.
"""

from __future__ import annotations

import ctypes
import os
import select
import shutil
import signal
import subprocess
import sys
import textwrap
import threading

import pytest

from conftest import REPO

torch = pytest.importorskip("torch")

MiB = 1 << 20
BIG = (1536, 1024)  # float32: 6 MiB, above S3's 5 MiB part minimum
SMALL = (256, 256)  # float32: 256 KiB


def _state(seed, shape=SMALL, n=5):
    """n weights of shape and n small biases, interleaved (the file keeps this order)."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for i in range(n):
        out[f"layer.{i}.weight"] = torch.randn(shape, generator=g)
        out[f"layer.{i}.bias"] = torch.randn(shape[-1], generator=g)
    return out


def _changed(state, name, seed=99):
    """state with one tensor replaced by other values of the same dtype and shape."""
    out = dict(state)
    g = torch.Generator().manual_seed(seed)
    out[name] = torch.randn(state[name].shape, generator=g)
    return out


def _same(got, want):
    assert list(got) == list(want)
    for k in want:
        assert got[k].dtype == want[k].dtype and got[k].shape == want[k].shape, k
        assert torch.equal(got[k], want[k]), k


def _nbytes(t):
    return t.numel() * t.element_size()


def _check_file(path, want):
    """path read back by s3direct and by the safetensors library, both bit for bit."""
    import s3direct
    from safetensors import safe_open

    _same(s3direct.load(path), want)
    with safe_open(str(path), framework="pt") as f:
        _same({k: f.get_tensor(k) for k in want}, want)
        assert sorted(f.keys()) == sorted(want)


def _check_s3(boto3_client, bucket, key, want):
    import s3direct
    from safetensors.torch import load as st_load

    _same(s3direct.load(f"s3://{bucket}/{key}"), want)
    body = boto3_client.get_object(Bucket=bucket, Key=key)["Body"].read()
    got = st_load(body)
    assert sorted(got) == sorted(want)
    _same({k: got[k] for k in want}, want)
    return len(body)


def _full(stats, size, n, reused=0):
    """The stats of a save that used no base (reused: tensors equal in the base all the same,
    too small to copy)."""
    assert stats.base_used is False
    assert stats.bytes_total == size
    assert stats.bytes_sent == size
    assert stats.bytes_copied == 0
    assert stats.parts_copied == 0
    assert stats.tensors_total == n
    assert stats.tensors_reused == reused


def _incremental(stats, size, n, reused, changed_bytes):
    """The stats of a save that copied the unchanged tensors from its base."""
    assert stats.base_used is True
    assert stats.bytes_total == size
    assert stats.tensors_total == n
    assert stats.tensors_reused == reused
    assert stats.bytes_copied > 0
    assert stats.parts_copied >= 1
    assert stats.bytes_sent + stats.bytes_copied == stats.bytes_total
    assert changed_bytes <= stats.bytes_sent < stats.bytes_total


# ---- the binding -----------------------------------------------------------------------------
def test_write_stats_layout(tmp_path):
    """WriteStats and WriteOptions' new fields at the offsets the C header gives them."""
    from s3direct import _capi

    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    lines = ['#include <stdio.h>', '#include <stddef.h>', '#include "s3direct/s3direct.h"',
             "int main(void) {"]
    checks = [("WriteStats", "s3d_write_stats", [f for f, _ in _capi.WriteStats._fields_]),
              ("WriteOptions", "s3d_write_options", ["base", "stats"]),
              ("ReadStats", "s3d_read_stats", [f for f, _ in _capi.ReadStats._fields_]),
              ("ReadOptions", "s3d_read_options", ["on_ready", "stats"])]
    for cls, c_name, fields in checks:
        lines.append(f'printf("{cls} =sizeof %zu\\n", sizeof(struct {c_name}));')
        for f in fields:
            lines.append(f'printf("{cls} {f} %zu\\n", offsetof(struct {c_name}, {f}));')
    lines.append("return 0; }")
    (tmp_path / "l.c").write_text("\n".join(lines))
    subprocess.run([cc, "-std=c11", "-I", os.path.join(REPO, "include"), str(tmp_path / "l.c"),
                    "-o", str(tmp_path / "l")], check=True)
    out = subprocess.run([str(tmp_path / "l")], check=True, capture_output=True,
                         text=True).stdout
    for line in out.splitlines():
        cls_name, what, value = line.split()
        cls = getattr(_capi, cls_name)
        want = ctypes.sizeof(cls) if what == "=sizeof" else getattr(cls, what).offset
        assert want == int(value), f"{cls_name}.{what}: ctypes {want}, C {value}"


def test_save_stats_exported():
    import dataclasses

    import s3direct

    assert "SaveStats" in s3direct.__all__ and "CheckpointManager" in s3direct.__all__
    s = s3direct.SaveStats(bytes_total=3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.bytes_total = 4


# ---- local files -----------------------------------------------------------------------------
def test_local_incremental(lib_path, tmp_path):
    import s3direct

    s0 = _state(1)
    a, b = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    st0 = s3direct.save(s0, a)
    _full(st0, os.path.getsize(a), 10)
    # Host tensors to a file: every tensor byte through the page cache (headers not counted).
    assert (st0.bytes_cufile, st0.bytes_direct) == (0, 0)
    assert st0.bytes_buffered == sum(_nbytes(t) for t in s0.values())
    s1 = _changed(s0, "layer.2.weight")
    st1 = s3direct.save(s1, b, base=a)
    _incremental(st1, os.path.getsize(b), 10, 9, _nbytes(s1["layer.2.weight"]))
    assert (st1.bytes_cufile, st1.bytes_direct) == (0, 0)
    assert _nbytes(s1["layer.2.weight"]) <= st1.bytes_buffered < st1.bytes_sent
    _check_file(b, s1)
    _check_file(a, s0)  # the base is untouched
    os.remove(a)
    _check_file(b, s1)  # and the result does not refer to it

    # A folder as the base: its model file. A save over the base itself.
    folder = tmp_path / "m"
    folder.mkdir()
    s3direct.save(s1, folder)
    s2 = _changed(s1, "layer.4.bias", seed=7)
    st2 = s3direct.save(s2, folder, base=folder)
    _incremental(st2, os.path.getsize(folder / "model.safetensors"), 10, 9,
                 _nbytes(s2["layer.4.bias"]))
    _check_file(folder / "model.safetensors", s2)


def test_local_incremental_sharded(lib_path, tmp_path):
    import s3direct

    s0 = _state(2)
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    shard = 600 * 1024  # about two weights per shard
    st0 = s3direct.save(s0, one, shard_size=shard)
    assert st0.base_used is False and st0.tensors_total == 10
    s1 = _changed(s0, "layer.0.weight")
    # The base is the previous index; here found in its folder.
    st1 = s3direct.save(s1, two, shard_size=shard, base=one)
    files = [p for p in two.iterdir() if p.name.endswith(".safetensors")]
    assert len(files) >= 2
    _incremental(st1, sum(os.path.getsize(p) for p in files)
                 + os.path.getsize(two / "model.safetensors.index.json"), 10, 9,
                 _nbytes(s1["layer.0.weight"]))
    _same(s3direct.load(two), s1)
    from safetensors import safe_open

    got = {}
    for p in files:
        with safe_open(str(p), framework="pt") as f:
            got.update({k: f.get_tensor(k) for k in f.keys()})
    _same({k: got[k] for k in s1}, s1)
    shutil.rmtree(one)
    _same(s3direct.load(two / "model.safetensors.index.json"), s1)


def test_local_unusable_bases_give_full_saves(lib_path, tmp_path):
    import s3direct

    s0 = _state(3)
    good = tmp_path / "good.safetensors"
    s3direct.save(s0, good)
    out = tmp_path / "out.safetensors"
    s1 = _changed(s0, "layer.1.weight")

    # Missing.
    st = s3direct.save(s1, out, base=tmp_path / "missing.safetensors")
    _full(st, os.path.getsize(out), 10)
    _check_file(out, s1)

    # Same names, other shapes.
    other = tmp_path / "other.safetensors"
    s3direct.save({k: v.reshape(-1) for k, v in s0.items()}, other)
    st = s3direct.save(s1, out, base=other)
    _full(st, os.path.getsize(out), 10, reused=5)  # the biases: 1-D in both, too small to copy
    _check_file(out, s1)

    # A base written without checksums: nothing to compare with.
    nocrc = tmp_path / "nocrc.safetensors"
    s3direct.save(s0, nocrc, checksum=False)
    st = s3direct.save(s1, out, base=nocrc)
    _full(st, os.path.getsize(out), 10)
    _check_file(out, s1)

    # A save without checksums cannot prove anything equal.
    st = s3direct.save(s1, out, base=good, checksum=False)
    _full(st, os.path.getsize(out), 10)
    _check_file(out, s1)

    # Not a safetensors file at all.
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"not a checkpoint" * 100)
    st = s3direct.save(s1, out, base=junk)
    _full(st, os.path.getsize(out), 10)
    _check_file(out, s1)


def test_save_async_returns_stats(lib_path, tmp_path):
    import s3direct

    s0 = _state(4)
    a, b = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    f0 = s3direct.save_async(s0, a)
    s1 = _changed(s0, "layer.3.weight")
    # Submitted before the first is done: saves run in order, so its base is complete.
    f1 = s3direct.save_async(s1, b, base=a)
    _full(f0.result(), os.path.getsize(a), 10)
    _incremental(f1.result(), os.path.getsize(b), 10, 9, _nbytes(s1["layer.3.weight"]))
    _check_file(b, s1)


# ---- S3 --------------------------------------------------------------------------------------
def test_s3_incremental(s3_env, bucket, boto3_client):
    """Four of five 6 MiB weights unchanged: copied by the server, not sent."""
    import s3direct

    s0 = _state(5, BIG)
    st0 = s3direct.save(s0, f"s3://{bucket}/a.safetensors")
    size0 = boto3_client.head_object(Bucket=bucket, Key="a.safetensors")["ContentLength"]
    _full(st0, size0, 10)
    assert (st0.bytes_cufile, st0.bytes_direct, st0.bytes_buffered) == (0, 0, 0)  # S3
    s1 = _changed(s0, "layer.2.weight")
    st1 = s3direct.save(s1, f"s3://{bucket}/b.safetensors", base=f"s3://{bucket}/a.safetensors")
    size1 = _check_s3(boto3_client, bucket, "b.safetensors", s1)
    _incremental(st1, size1, 10, 9, _nbytes(s1["layer.2.weight"]))
    assert st1.copies_refused == 0
    assert st1.bytes_copied >= 5 * MiB
    boto3_client.delete_object(Bucket=bucket, Key="a.safetensors")
    _check_s3(boto3_client, bucket, "b.safetensors", s1)  # no reference to the base


def test_s3_incremental_sharded(s3_env, bucket, boto3_client):
    import s3direct

    s0 = _state(6, BIG, n=3)
    shard = 13 * MiB  # two weights per shard
    s3direct.save(s0, f"s3://{bucket}/one/", shard_size=shard)
    s1 = _changed(s0, "layer.0.bias")
    st = s3direct.save(s1, f"s3://{bucket}/two/", shard_size=shard,
                       base=f"s3://{bucket}/one/model.safetensors.index.json")
    keys = [o["Key"] for o in boto3_client.list_objects_v2(Bucket=bucket,
                                                           Prefix="two/")["Contents"]]
    total = 0
    got = {}
    from safetensors.torch import load as st_load

    for k in keys:
        body = boto3_client.get_object(Bucket=bucket, Key=k)["Body"].read()
        total += len(body)
        if k.endswith(".safetensors"):
            got.update(st_load(body))
    _same({k: got[k] for k in s1}, s1)
    _same(s3direct.load(f"s3://{bucket}/two/"), s1)
    _incremental(st, total, 6, 5, _nbytes(s1["layer.0.bias"]))
    assert st.bytes_copied >= 5 * MiB


def test_s3_unusable_bases_give_full_saves(s3_env, bucket, boto3_client, tmp_path):
    import s3direct

    s0 = _state(7)
    uri = f"s3://{bucket}/out.safetensors"

    def size():
        return boto3_client.head_object(Bucket=bucket, Key="out.safetensors")["ContentLength"]

    st = s3direct.save(s0, uri, base=f"s3://{bucket}/missing.safetensors")
    _full(st, size(), 10)
    st = s3direct.save(s0, uri, base=f"s3://{bucket}/missing-folder/")
    _full(st, size(), 10)
    st = s3direct.save(s0, uri, base=f"s3://{bucket}-missing/folder/")
    _full(st, size(), 10)
    st = s3direct.save(s0, uri, base=f"s3://{bucket}-missing/a.safetensors")
    _full(st, size(), 10)
    # A local base for an S3 save: other storage.
    local = tmp_path / "local.safetensors"
    s3direct.save(s0, local)
    st = s3direct.save(s0, uri, base=local)
    _full(st, size(), 10)
    _check_s3(boto3_client, bucket, "out.safetensors", s0)
    # A base of other shapes.
    s3direct.save({k: v.reshape(-1) for k, v in s0.items()}, f"s3://{bucket}/flat.safetensors")
    st = s3direct.save(s0, uri, base=f"s3://{bucket}/flat.safetensors")
    _full(st, size(), 10, reused=5)  # the biases were 1-D already
    _check_s3(boto3_client, bucket, "out.safetensors", s0)


# ---- CheckpointManager -----------------------------------------------------------------------
def _steps_state(step, shape):
    """Two constant weights and a small tensor that changes every step."""
    s = _state(11, shape, n=2)
    s["step"] = torch.full((16,), float(step))
    return s


def test_manager_local(lib_path, tmp_path):
    import s3direct

    root = tmp_path / "run"
    m = s3direct.CheckpointManager(root, keep=2)
    assert m.steps() == [] and m.latest() is None
    with pytest.raises(s3direct.NoSuchFile):
        m.restore()
    root.mkdir()
    # Leftovers that are not complete steps: an unrelated file, a temporary file of the
    # library, truncated and unpadded names, a step folder with a shard and no index.
    for name in ("notes.txt", "step-0000000009.safetensors.s3d-tmp-1234",
                 ".step-0000000009.safetensors.s3d-tmp-99", "step-0000000008.safetensor",
                 "step-00000000", "step-7.safetensors", "step-00000000007.safetensors"):
        (root / name).write_bytes(b"x" * 100)
    (root / "step-0000000001").mkdir()
    (root / "step-0000000001" / "model-0123456789abcdef-00001-of-00002.safetensors"
     ).write_bytes(b"y" * 100)
    (root / "step-0000000012").mkdir()
    (root / "step-0000000012" / "model-0123456789abcdef-00001-of-00002.safetensors"
     ).write_bytes(b"y" * 100)
    assert m.steps() == [] and m.latest() is None

    stats = []
    for step in range(4):
        stats.append(m.save(step, _steps_state(step, SMALL)))
        assert m.latest() == step
    assert m.steps() == [2, 3]
    assert sorted(p.name for p in root.iterdir() if p.name.startswith("step-0")) == [
        "step-00000000", "step-00000000007.safetensors", "step-0000000002.safetensors",
        "step-0000000003.safetensors", "step-0000000008.safetensor", "step-0000000009"
        ".safetensors.s3d-tmp-1234", "step-0000000012"]
    # step-0000000001/ (no index, older than the newest step) was removed; the folder of a
    # later step, which a running save of another process might still complete, was not.
    assert m.uri(3) == os.path.join(str(root), "step-0000000003.safetensors")
    _same(m.restore(), _steps_state(3, SMALL))
    _same(m.restore(2), _steps_state(2, SMALL))
    _check_file(m.uri(3), _steps_state(3, SMALL))
    with pytest.raises(s3direct.NoSuchFile):
        m.restore(1)
    _full(stats[0], stats[0].bytes_total, 5)
    for st in stats[1:]:
        assert st.base_used and st.tensors_reused == 4 and st.bytes_copied > 0
    # restore_into: into existing tensors.
    target = {k: torch.zeros_like(v) for k, v in _steps_state(0, SMALL).items()}
    m.restore_into(target)
    _same(target, _steps_state(3, SMALL))

    # Not incremental: full saves.
    m2 = s3direct.CheckpointManager(f"file://{root}", keep=2, incremental=False)
    st = m2.save(4, _steps_state(4, SMALL))
    _full(st, os.path.getsize(m2.uri(4)), 5)
    assert m.steps() == [3, 4]


def test_manager_local_sharded_async(lib_path, tmp_path):
    import s3direct

    root = tmp_path / "run"
    m = s3direct.CheckpointManager(str(root) + "/", keep=2, shard_size=300 * 1024)
    futs = [m.save_async(step, _steps_state(step, SMALL)) for step in range(4)]
    stats = [f.result() for f in futs]
    m.wait_until_finished()
    assert m.steps() == [2, 3]
    assert sorted(p.name for p in root.iterdir()) == ["step-0000000002", "step-0000000003"]
    assert m.uri(3) == os.path.join(str(root), "step-0000000003",
                                    "model.safetensors.index.json")
    assert os.path.isfile(m.uri(3))
    _same(m.restore(), _steps_state(3, SMALL))
    _same(m.restore(2), _steps_state(2, SMALL))
    assert stats[0].base_used is False
    for st in stats[1:]:
        assert st.base_used and st.tensors_reused == 4 and st.bytes_copied > 0


_KILLED_SAVE = textwrap.dedent('''
    import os, sys, time, torch, s3direct
    sys.path.insert(0, os.path.dirname(sys.argv[3]))
    from test_incremental import _steps_state, BIG, SMALL

    shape = BIG if sys.argv[2] == "big" else SMALL
    shard = int(sys.argv[4]) or None
    m = s3direct.CheckpointManager(sys.argv[1], keep=1, shard_size=shard)

    def progress(done, total):
        if 0 < done < total:
            print("mid", flush=True)
            time.sleep(120)
        return None

    m.save(1, _steps_state(1, shape), progress=progress)
    print("finished", flush=True)
''')


def _killed_save(prefix, size, shard):
    """Runs a save of step 1 under prefix in another process, killed half-way."""
    p = subprocess.Popen([sys.executable, "-c", _KILLED_SAVE, prefix, size, __file__,
                          str(shard or 0)], stdout=subprocess.PIPE, text=True)
    try:
        ready, _, _ = select.select([p.stdout], [], [], 300)
        assert ready, "the save never reported progress"
        line = p.stdout.readline()
        assert line == "mid\n", line
    finally:
        os.kill(p.pid, signal.SIGKILL)
        p.wait()


def test_manager_killed_save_is_never_latest(lib_path, tmp_path):
    import s3direct

    root = tmp_path / "run"
    m = s3direct.CheckpointManager(root, keep=1, shard_size=7 * MiB)
    m.save(0, _steps_state(0, BIG))
    _killed_save(str(root), "big", 7 * MiB)
    assert (root / "step-0000000001").is_dir()
    assert m.steps() == [0] and m.latest() == 0
    _same(m.restore(), _steps_state(0, BIG))
    # The next save completes, keeps one step and removes the killed save's leftovers.
    m.save(2, _steps_state(2, BIG))
    assert m.steps() == [2]
    assert sorted(p.name for p in root.iterdir()) == ["step-0000000002"]


def test_manager_s3(s3_env, bucket, boto3_client):
    import s3direct

    prefix = f"s3://{bucket}/run"
    m = s3direct.CheckpointManager(prefix, keep=2)
    assert m.steps() == [] and m.latest() is None
    with pytest.raises(s3direct.NoSuchKey):
        m.restore()
    # Leftovers that are not complete steps: unrelated and truncated names, a step folder
    # with no index, an upload never completed.
    for key in ("run/notes.txt", "run/step-0000000008.safetensor", "run/step-7.safetensors",
                "run/step-0000000012/model-0123456789abcdef-00001-of-00002.safetensors",
                "run/step-0000000001/model-0123456789abcdef-00001-of-00002.safetensors",
                "runs/step-0000000020.safetensors"):
        boto3_client.put_object(Bucket=bucket, Key=key, Body=b"x" * 100)
    up = boto3_client.create_multipart_upload(Bucket=bucket,
                                              Key="run/step-0000000013.safetensors")
    boto3_client.upload_part(Bucket=bucket, Key="run/step-0000000013.safetensors",
                             UploadId=up["UploadId"], PartNumber=1, Body=b"z" * 100)
    assert m.steps() == []

    stats = []
    for step in range(4):
        stats.append(m.save(step, _steps_state(step, BIG)))
        assert m.latest() == step
    assert m.steps() == [2, 3]
    keys = sorted(o["Key"] for o in boto3_client.list_objects_v2(Bucket=bucket)["Contents"])
    assert keys == ["run/notes.txt", "run/step-0000000002.safetensors",
                    "run/step-0000000003.safetensors", "run/step-0000000008.safetensor",
                    "run/step-0000000012/model-0123456789abcdef-00001-of-00002.safetensors",
                    "run/step-7.safetensors", "runs/step-0000000020.safetensors"]
    assert m.uri(3) == f"s3://{bucket}/run/step-0000000003.safetensors"
    _same(m.restore(), _steps_state(3, BIG))
    _same(m.restore(2), _steps_state(2, BIG))
    _check_s3(boto3_client, bucket, "run/step-0000000003.safetensors", _steps_state(3, BIG))
    stats0 = stats[0]
    _full(stats0, stats0.bytes_total, 5)
    for st in stats[1:]:
        _incremental(st, st.bytes_total, 5, 4, 16 * 4)
        assert st.bytes_copied >= 5 * MiB

    # Sharded steps under another prefix, a killed save never the latest.
    ms = s3direct.CheckpointManager(f"s3://{bucket}/sharded/", keep=1, shard_size=13 * MiB)
    ms.save(0, _steps_state(0, BIG))
    _killed_save(f"s3://{bucket}/sharded/", "big", 13 * MiB)
    assert ms.steps() == [0]
    _same(ms.restore(), _steps_state(0, BIG))
    st = ms.save(2, _steps_state(2, BIG))
    assert st.base_used and st.tensors_reused == 4
    assert ms.steps() == [2]
    left = sorted(o["Key"] for o in boto3_client.list_objects_v2(
        Bucket=bucket, Prefix="sharded/")["Contents"])
    assert left and all(k.startswith("sharded/step-0000000002/") for k in left), left
    _same(ms.restore(), _steps_state(2, BIG))


# ---- Lightning -------------------------------------------------------------------------------
@pytest.fixture
def spied_io(lib_path, monkeypatch):
    """S3DirectCheckpointIO with s3direct.save recorded: (base given, stats returned)."""
    pytest.importorskip("lightning", reason="lightning is not installed (scripts/deps.sh)")
    from s3direct import _save
    from s3direct.lightning import S3DirectCheckpointIO

    calls = []
    real = _save.save
    hooks = {}

    def spy(*args, **kwargs):
        hook = hooks.get("before")
        if hook is not None:
            hook(kwargs.get("base"))
        st = real(*args, **kwargs)
        calls.append((kwargs.get("base"), st))
        return st

    monkeypatch.setattr(_save, "save", spy)
    return S3DirectCheckpointIO, calls, hooks


def _lightning_ckpt(seed, shape=(512, 512)):
    """A weight that does not change (1 MiB: files copy runs of 64 KiB and more; S3 tests
    pass BIG) and optimizer state that does."""
    return {"epoch": seed, "global_step": 8 * seed,
            "state_dict": {"l.weight": torch.ones(shape), "l.bias": torch.zeros(shape[-1])},
            "optimizer_states": [{"state": {0: {"momentum_buffer": torch.full(
                (shape[-1],), float(seed))}}, "param_groups": [{"lr": 0.1, "params": [0]}]}]}


def test_lightning_uses_previous_checkpoint(spied_io, tmp_path):
    io_cls, calls, _ = spied_io
    io = io_cls()
    p = [str(tmp_path / f"ck{i}.ckpt") for i in range(5)]
    io.save_checkpoint(_lightning_ckpt(0), p[0])
    io.save_checkpoint(_lightning_ckpt(1), p[1])
    assert [c[0] for c in calls] == [None, p[0]]
    st = calls[1][1]
    assert st.base_used and st.tensors_reused == 2 and st.tensors_total == 3
    io.remove_checkpoint(p[0])  # not the base of the next save: nothing changes
    io.save_checkpoint(_lightning_ckpt(2), p[2])
    assert calls[-1][0] == p[1]
    io.remove_checkpoint(p[2])  # the next save's base: it is gone, a full save
    io.save_checkpoint(_lightning_ckpt(3), p[3])
    assert calls[-1][0] is None and calls[-1][1].base_used is False
    loaded = io.load_checkpoint(p[3])
    assert loaded["epoch"] == 3 and torch.equal(loaded["state_dict"]["l.weight"],
                                                torch.ones(512, 512))
    # A save failing leaves the base as it was.
    with pytest.raises(Exception):
        io.save_checkpoint({"bad": object()}, p[4])
    io.save_checkpoint(_lightning_ckpt(4), p[4])
    assert calls[-1][0] == p[3]

    off = io_cls(incremental=False)
    off.save_checkpoint(_lightning_ckpt(0), p[0])
    off.save_checkpoint(_lightning_ckpt(1), p[1])
    assert [c[0] for c in calls[-2:]] == [None, None]


def test_lightning_remove_waits_for_the_save_reading_it(spied_io, tmp_path):
    """AsyncCheckpointIO removes old checkpoints from Lightning's thread while the plugin
    saves in another: the base of a running save is removed only once that save is done."""
    io_cls, calls, hooks = spied_io
    io = io_cls()
    a, b = str(tmp_path / "a.ckpt"), str(tmp_path / "b.ckpt")
    io.save_checkpoint(_lightning_ckpt(0), a)
    started, gate = threading.Event(), threading.Event()

    def before(base):
        if base is not None:
            started.set()
            assert gate.wait(60)

    hooks["before"] = before
    saver = threading.Thread(target=io.save_checkpoint, args=(_lightning_ckpt(1), b))
    saver.start()
    assert started.wait(60)
    remover = threading.Thread(target=io.remove_checkpoint, args=(a,))
    remover.start()
    remover.join(0.5)
    assert remover.is_alive() and os.path.exists(a)
    gate.set()
    saver.join(60)
    remover.join(60)
    assert not os.path.exists(a)
    assert calls[-1][0] == a and calls[-1][1].base_used
    assert io.load_checkpoint(b)["epoch"] == 1


def test_lightning_s3(spied_io, s3_env, bucket, boto3_client):
    io_cls, calls, _ = spied_io
    io = io_cls()
    a, b = f"s3://{bucket}/ck/a.ckpt", f"s3://{bucket}/ck/b.ckpt"
    # The weight first after the header: 5 MiB of it are sent with the header (S3's first
    # part), so it is 12 MiB for the rest to be copied.
    io.save_checkpoint(_lightning_ckpt(0, (3072, 1024)), a)
    io.save_checkpoint(_lightning_ckpt(1, (3072, 1024)), b)
    st = calls[-1][1]
    assert calls[-1][0] == a and st.base_used and st.tensors_reused == 2
    assert st.bytes_copied >= 5 * MiB
    io.remove_checkpoint(b)
    io.save_checkpoint(_lightning_ckpt(2, (3072, 1024)), a)
    assert calls[-1][0] is None
    assert io.load_checkpoint(a)["epoch"] == 2
