"""torch.distributed.checkpoint through S3DirectStorageWriter / S3DirectStorageReader: gloo
process groups of 2, 4 and 8 ranks on this machine, saved with one world size and loaded with
another, to S3 and to a local folder. Tensors are DTensors sharded by rows and by columns
(column chunks are not contiguous byte ranges), plus a replicated tensor and non-tensor values.
A save at world 8 in which one rank dies must leave the previous checkpoint at the path
loadable and nothing of the new one visible.

Run as a script, this file is one rank: test_dcp.py MODE PATH RANK WORLD PORT. MODE is save,
save2 (the second version: every value times 2, step 43) or load; S3D_TEST_DCP_VERSION tells
load which version to expect (default 1); S3D_TEST_DCP_KILL_RANK=R makes rank R os._exit(1)
at the end of its write_data (its objects written, its results never reported)."""

from __future__ import annotations

import os
import pickle
import re
import socket
import subprocess
import sys
import time

import pytest


def reference(version=1):
    import torch

    g = torch.Generator().manual_seed(11)
    # 24 columns, 8 rows: shardable over 2, 4 and 8 ranks both ways.
    return {
        "w": torch.arange(8 * 24, dtype=torch.float32).reshape(8, 24) * version,
        "c": (torch.randn(8, 24, generator=g) * version).to(torch.bfloat16),
        "b": torch.randn(5, generator=g) * version,
        "ids": torch.arange(6, dtype=torch.int64) * version,
        "big": torch.randn(1024, 1024, generator=g) * version,  # 4 MiB, replicated
    }


def worker(mode, path, rank, world, port):
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    from s3direct.dcp import S3DirectStorageReader, S3DirectStorageWriter

    import datetime

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    mesh = init_device_mesh("cpu", (world,))
    version = 2 if mode == "save2" else int(os.environ.get("S3D_TEST_DCP_VERSION", "1"))
    ref = reference(version)
    kill = os.environ.get("S3D_TEST_DCP_KILL_RANK")
    if kill is not None and int(kill) == rank:
        real = S3DirectStorageWriter.write_data

        def write_data(self, plan, planner):
            real(self, plan, planner)
            os._exit(1)  # killed mid-save: written, never reported

        S3DirectStorageWriter.write_data = write_data

    def state(fill):
        src = {k: (v if fill else torch.zeros_like(v)) for k, v in ref.items()}
        return {
            "model": {"w": distribute_tensor(src["w"], mesh, [Shard(0)]),
                      "c": distribute_tensor(src["c"], mesh, [Shard(1)]),
                      "b": src["b"].clone(), "big": src["big"].clone()},
            "ids": src["ids"].clone(),
            "step": 41 + version if fill else 0,
            "meta": {"name": "run" if fill else ""},
        }

    if mode == "replaced":
        # load(group=) while the checkpoint is replaced between the ranks' reads of
        # .metadata: rank 0 reads the old one, then rank 1 puts the new save's files in place
        # (as the folder S3D_TEST_DCP_NEW holds them: objects, then .metadata by rename) and
        # reads the new one. Every rank must raise; none may load.
        import shutil

        # (Inside dcp.load: it starts with a collective, so rank 1 cannot wait outside it.)
        flag = path + ".read"
        real = S3DirectStorageReader.read_metadata

        def read_metadata(self, *a, **k):
            if rank == 0:
                md = real(self, *a, **k)
                open(flag, "w").close()
                return md
            deadline = time.monotonic() + 60
            while not os.path.exists(flag) and time.monotonic() < deadline:
                time.sleep(0.02)
            new = os.environ["S3D_TEST_DCP_NEW"]
            for f in sorted(os.listdir(new), key=lambda f: f == ".metadata"):
                shutil.copy(os.path.join(new, f), os.path.join(path, f + ".tmp"))
                os.rename(os.path.join(path, f + ".tmp"), os.path.join(path, f))
            return real(self, *a, **k)

        S3DirectStorageReader.read_metadata = read_metadata
        sd = state(False)
        try:
            dcp.load(sd, storage_reader=S3DirectStorageReader(path, group=dist.group.WORLD))
        except BaseException as e:  # DCP wraps the ranks' errors in CheckpointException
            print(f"RAISED {type(e).__name__}: {' '.join(str(e).split())}", flush=True)
        else:
            print(f"NO ERROR step={sd['step']}", flush=True)
        os._exit(0)
    if mode in ("save", "save2"):
        dcp.save(state(True), storage_writer=S3DirectStorageWriter(path))
    else:
        sd = state(False)
        shared = os.environ.get("S3D_TEST_DCP_SHARED") == "1"
        kw = {"group": dist.group.WORLD} if shared else {}
        dcp.load(sd, storage_reader=S3DirectStorageReader(path, **kw))
        assert torch.equal(sd["model"]["big"], ref["big"])
        assert torch.equal(sd["model"]["w"].full_tensor(), ref["w"])
        assert torch.equal(sd["model"]["c"].full_tensor(), ref["c"])
        assert torch.equal(sd["model"]["b"], ref["b"])
        assert torch.equal(sd["ids"], ref["ids"])
        assert sd["step"] == 41 + version and sd["meta"]["name"] == "run", (sd["step"],
                                                                           sd["meta"])
    dist.barrier()
    # Every rank has finished its work (the barrier). Leave without gloo's teardown: its
    # threads can abort the process at exit ("terminate called without an active
    # exception", CI of stop 43; pytorch/pytorch#190489), which says nothing about us.
    sys.stdout.flush()
    os._exit(0)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_world(mode, path, world, env=None, check=True):
    port = _free_port()
    e = dict(os.environ, **(env or {}))
    procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), mode, path, str(r),
                               str(world), str(port)], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, env=e) for r in range(world)]
    outs = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        outs.append((p.returncode, out))
    bad = [(i, rc, out[-3000:]) for i, (rc, out) in enumerate(outs) if rc != 0]
    if check:
        assert not bad, f"{mode} with world {world} failed: {bad}"
    return outs


def test_dcp_s3_save4_load2(bucket, boto3_client):
    pytest.importorskip("torch.distributed.checkpoint")
    path = f"s3://{bucket}/ckpt/step42"
    run_world("save", path, 4)
    keys = sorted(o["Key"] for o in boto3_client.list_objects_v2(Bucket=bucket)["Contents"])
    assert "ckpt/step42/.metadata" in keys
    assert any(k.endswith("_0.safetensors") for k in keys)
    run_world("load", path, 2)


def test_dcp_replicated_read_once(bucket, boto3_client):
    """Loaded at world 4 with group=: the replicated 4 MiB tensor every rank needs is served
    once by the server (counted at a relay), not four times; every rank has all of it."""
    from _slowproxy import SlowProxy

    pytest.importorskip("torch.distributed.checkpoint")
    path = f"s3://{bucket}/rep"
    run_world("save", path, 2)
    pages = boto3_client.list_objects_v2(Bucket=bucket, Prefix="rep/")["Contents"]
    total, nobj = sum(o["Size"] for o in pages), len(pages)
    m = re.match(r"https?://([^:/]+):(\d+)", os.environ["AWS_ENDPOINT_URL"])
    with SlowProxy(m.group(1), int(m.group(2)), rate=0) as relay:
        run_world("load", path, 4, env={"S3D_TEST_DCP_SHARED": "1",
                                         "AWS_ENDPOINT_URL": relay.url})
    big = 4 << 20
    # Each object once at most, plus a header read (256 KiB) per rank and object; without
    # group= it is at least total + 3 * big.
    assert relay.bytes_down <= total + 4 * nobj * (256 << 10) + (64 << 10), \
        (relay.bytes_down, total)
    assert relay.bytes_down < total + big, (relay.bytes_down, total)


def test_dcp_local_save2_load4(tmp_path, lib_path):
    pytest.importorskip("torch.distributed.checkpoint")
    path = os.path.join(tmp_path, "ckpt")
    run_world("save", path, 2)
    names = sorted(os.listdir(path))
    rank0 = [n for n in names if re.fullmatch(r"__0_[0-9a-f]{16}_0\.safetensors", n)]
    assert ".metadata" in names and len(rank0) == 1, names
    assert not any(".tmp" in n for n in names)
    # The rank files are plain safetensors.
    st = pytest.importorskip("safetensors.torch")
    assert st.load_file(os.path.join(path, rank0[0]))
    run_world("load", path, 4)
    # Saved again at the same path: the first save's objects are gone once the second is
    # complete.
    run_world("save2", path, 2)
    names2 = sorted(os.listdir(path))
    assert rank0[0] not in names2 and len(names2) == len(names), (names, names2)
    run_world("load", path, 2, env={"S3D_TEST_DCP_VERSION": "2"})


def _objects(boto3_client, bucket, prefix):
    pages = boto3_client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return sorted(o["Key"][len(prefix):] for page in pages for o in page.get("Contents", []))


def _metadata_objects(boto3_client, bucket, prefix):
    """The objects the checkpoint's .metadata names."""
    from s3direct.dcp import S3DirectStorageInfo

    body = boto3_client.get_object(Bucket=bucket, Key=prefix + ".metadata")["Body"].read()
    md = pickle.loads(body)
    return md, sorted({i.relative_path for i in md.storage_data.values()
                       if isinstance(i, S3DirectStorageInfo)})


def test_dcp_s3_world8_save_load4(bucket, boto3_client):
    """Eight ranks write their objects in parallel, the coordinator one .metadata naming every
    object; loaded back resharded at world 4."""
    pytest.importorskip("torch.distributed.checkpoint")
    path = f"s3://{bucket}/ckpt8"
    run_world("save", path, 8)
    objs = _objects(boto3_client, bucket, "ckpt8/")
    _, named = _metadata_objects(boto3_client, bucket, "ckpt8/")
    assert [o for o in objs if o != ".metadata"] == named, (objs, named)
    # One tensor object per rank, all under the save's one token.
    tensor_objs = [re.fullmatch(r"__(\d)_([0-9a-f]{16})_0\.safetensors", n)
                   for n in named if n.endswith(".safetensors")]
    assert all(tensor_objs) and len({m.group(2) for m in tensor_objs}) == 1, named
    assert sorted(int(m.group(1)) for m in tensor_objs) == list(range(8)), named
    run_world("load", path, 4)


def test_dcp_s3_world8_rank_killed_mid_save(bucket, boto3_client):
    """Saved (at world 2), then saved again at the same path at world 8 while rank 5 dies at
    the end of its write_data: the save fails, the first checkpoint stays complete and loads,
    and no .metadata names the second save's objects."""
    pytest.importorskip("torch.distributed.checkpoint")
    path = f"s3://{bucket}/ckpt8"
    run_world("save", path, 2)
    md1, named1 = _metadata_objects(boto3_client, bucket, "ckpt8/")
    outs = run_world("save2", path, 8, env={"S3D_TEST_DCP_KILL_RANK": "5"}, check=False)
    assert outs[5][0] == 1 and any(rc != 0 for i, (rc, _) in enumerate(outs) if i != 5), \
        [(rc, out[-500:]) for rc, out in outs]
    md2, named2 = _metadata_objects(boto3_client, bucket, "ckpt8/")
    assert named2 == named1 and md2.storage_meta.save_id == md1.storage_meta.save_id
    assert set(named1) <= set(_objects(boto3_client, bucket, "ckpt8/"))
    run_world("load", path, 2)
    # The next complete save replaces it and deletes the previous objects; the dead save's
    # orphans are not named by any .metadata.
    run_world("save2", path, 2)
    _, named3 = _metadata_objects(boto3_client, bucket, "ckpt8/")
    left = set(_objects(boto3_client, bucket, "ckpt8/"))
    assert set(named3) <= left and not set(named1) & left


def test_dcp_group_load_across_a_replace_raises(tmp_path, lib_path):
    """S3DirectStorageReader(group=): rank 0 reads the old .metadata, the checkpoint is then
    replaced by a later save, rank 1 reads the new one. Each rank would read the objects its
    own .metadata names and load another checkpoint (step 42 and 43); the ranks compare the
    .metadata they read first and both raise, naming rank 1."""
    import shutil

    pytest.importorskip("torch.distributed.checkpoint")
    old, new = str(tmp_path / "ckpt"), str(tmp_path / "later")
    run_world("save", old, 2)
    shutil.copytree(old, new)
    run_world("save2", new, 2)  # a later save to the copy: new objects, new .metadata
    outs = run_world("replaced", old, 2, env={"S3D_TEST_DCP_NEW": new})
    for r, (rc, out) in enumerate(outs):
        line = next((x for x in out.splitlines() if x.startswith(("RAISED", "NO ERROR"))), None)
        assert line is not None, (r, out[-3000:])
        assert line.startswith("RAISED"), (r, line)
        assert "TransferError" in line and "different versions of .metadata" in line, line
        assert "rank 1 of the group" in line, line


@pytest.mark.parametrize("where", ["local", "s3"])
def test_dcp_single_process_and_async_save(where, request, tmp_path, lib_path):
    """Without a process group DCP runs as one rank: save, async_save and load in-process."""
    import torch
    import torch.distributed.checkpoint as dcp

    from s3direct.dcp import S3DirectStorageReader, S3DirectStorageWriter

    if where == "s3":
        request.getfixturevalue("s3_env")
        base = f"s3://{request.getfixturevalue('bucket')}/dcp"
    else:
        base = os.path.join(tmp_path, "dcp")
    model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.LayerNorm(4))
    ref = {k: v.clone() for k, v in model.state_dict().items()}
    sd = {"model": model.state_dict(), "step": 5}
    dcp.save(sd, storage_writer=S3DirectStorageWriter(base + "/sync"))
    fut = dcp.async_save(sd, storage_writer=S3DirectStorageWriter(base + "/async"))
    fut.result()
    for sub in ("sync", "async"):
        fresh = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.LayerNorm(4))
        out = {"model": fresh.state_dict(), "step": 0}
        dcp.load(out, storage_reader=S3DirectStorageReader(f"{base}/{sub}"))
        for k, v in ref.items():
            assert torch.equal(fresh.state_dict()[k], v), (sub, k)
        assert out["step"] == 5


@pytest.mark.parametrize("where", ["local", "s3"])
def test_dcp_incremental(where, request, tmp_path, lib_path):
    """A writer's second save (one step later, a new checkpoint_id) uses its first save's
    tensor object as base: the unchanged weight is copied, not sent; both load exactly; with
    incremental=False the second save sends everything."""
    import torch
    import torch.distributed.checkpoint as dcp

    from s3direct.dcp import S3DirectStorageReader, S3DirectStorageWriter

    if where == "s3":
        request.getfixturevalue("s3_env")
        root = f"s3://{request.getfixturevalue('bucket')}/dcp"
    else:
        root = os.path.join(tmp_path, "dcp")
    g = torch.Generator().manual_seed(3)
    frozen = torch.randn(3 << 20, generator=g)  # 12 MiB: above S3's 5 MiB part
    for incremental in (True, False):
        w = S3DirectStorageWriter(f"{root}/{incremental}/step1", incremental=incremental)
        states = []
        for step in (1, 2):
            sd = {"frozen": frozen, "head": torch.full((64,), float(step)), "step": step}
            w.reset(f"{root}/{incremental}/step{step}")
            dcp.save(sd, storage_writer=w)
            states.append(sd)
        st = w.last_stats
        assert st is not None
        if incremental:
            assert st.base_used and st.bytes_copied >= 6 << 20
            assert st.bytes_sent < st.bytes_total - (6 << 20)
        else:
            assert not st.base_used and st.bytes_sent == st.bytes_total
        for step, sd in zip((1, 2), states):
            out = {"frozen": torch.empty_like(frozen), "head": torch.empty(64), "step": 0}
            dcp.load(out, storage_reader=S3DirectStorageReader(f"{root}/{incremental}/step{step}"))
            assert torch.equal(out["frozen"], frozen) and torch.equal(out["head"], sd["head"])
            assert out["step"] == step


def test_overwrite_keeps_old_metadata_until_finish(tmp_path, lib_path):
    """The ranks write under this save's own names while the old .metadata stays: a save that
    dies before finish() leaves the previous checkpoint as it was."""
    from torch.distributed.checkpoint.planner import SavePlan

    from s3direct.dcp import METADATA_NAME, S3DirectStorageWriter

    path = os.path.join(tmp_path, "ck")
    os.makedirs(path)
    open(os.path.join(path, METADATA_NAME), "wb").write(b"old")
    w = S3DirectStorageWriter(path)
    w.set_up_storage_writer(True, rank=0, use_collectives=True)
    plans = w.prepare_global_plan([w.prepare_local_plan(SavePlan([])), SavePlan([])])
    tok = w.save_id[:16]
    assert [p.storage_data.prefix for p in plans] == [f"__0_{tok}_", f"__1_{tok}_"]
    assert open(os.path.join(path, METADATA_NAME), "rb").read() == b"old"


@pytest.mark.parametrize("shape,offsets,lengths,expect", [
    ((8, 12), (0, 0), (8, 12), (0, 96)),          # whole tensor
    ((8, 12), (2, 0), (3, 12), (24, 36)),         # rows: contiguous
    ((8, 12), (0, 6), (8, 6), None),              # columns: strided
    ((8, 12), (5, 3), (1, 4), (63, 4)),           # part of one row
    ((4, 3, 2), (1, 2, 0), (1, 1, 2), (10, 2)),   # length-1 leading dims
    ((4, 3, 2), (1, 1, 0), (2, 1, 2), None),      # second dim cut after a >1 dim
    ((), (), (), (0, 1)),                         # 0-d
])
def test_contiguous_range(shape, offsets, lengths, expect):
    from s3direct.dcp import _contiguous_range

    assert _contiguous_range(shape, offsets, lengths, 1) == expect
    if expect is not None:
        assert _contiguous_range(shape, offsets, lengths, 4) == (expect[0] * 4, expect[1] * 4)


if __name__ == "__main__":
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                    "python"))
    worker(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
