"""torch.distributed.checkpoint through S3DirectStorageWriter / S3DirectStorageReader: gloo
process groups of 2 and 4 ranks on this machine, saved with one world size and loaded with
the other, to S3 and to a local folder. Tensors are DTensors sharded by rows and by columns
(column chunks are not contiguous byte ranges), plus a replicated tensor and non-tensor values.

Run as a script, this file is one rank: test_dcp.py MODE PATH RANK WORLD PORT."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest


def reference():
    import torch

    g = torch.Generator().manual_seed(11)
    return {
        "w": torch.arange(8 * 12, dtype=torch.float32).reshape(8, 12),
        "c": torch.randn(4, 12, generator=g).to(torch.bfloat16),
        "b": torch.randn(5, generator=g),
        "ids": torch.arange(6, dtype=torch.int64),
    }


def worker(mode, path, rank, world, port):
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    from s3direct.dcp import S3DirectStorageReader, S3DirectStorageWriter

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    mesh = init_device_mesh("cpu", (world,))
    ref = reference()

    def state(fill):
        src = {k: (v if fill else torch.zeros_like(v)) for k, v in ref.items()}
        return {
            "model": {"w": distribute_tensor(src["w"], mesh, [Shard(0)]),
                      "c": distribute_tensor(src["c"], mesh, [Shard(1)]),
                      "b": src["b"].clone()},
            "ids": src["ids"].clone(),
            "step": 42 if fill else 0,
            "meta": {"name": "run" if fill else ""},
        }

    if mode == "save":
        dcp.save(state(True), storage_writer=S3DirectStorageWriter(path))
    else:
        sd = state(False)
        dcp.load(sd, storage_reader=S3DirectStorageReader(path))
        assert torch.equal(sd["model"]["w"].full_tensor(), ref["w"])
        assert torch.equal(sd["model"]["c"].full_tensor(), ref["c"])
        assert torch.equal(sd["model"]["b"], ref["b"])
        assert torch.equal(sd["ids"], ref["ids"])
        assert sd["step"] == 42 and sd["meta"]["name"] == "run", (sd["step"], sd["meta"])
    dist.barrier()
    dist.destroy_process_group()


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_world(mode, path, world):
    port = _free_port()
    procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), mode, path, str(r),
                               str(world), str(port)], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for r in range(world)]
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
    assert not bad, f"{mode} with world {world} failed: {bad}"


def test_dcp_s3_save4_load2(bucket, boto3_client):
    pytest.importorskip("torch.distributed.checkpoint")
    path = f"s3://{bucket}/ckpt/step42"
    run_world("save", path, 4)
    keys = sorted(o["Key"] for o in boto3_client.list_objects_v2(Bucket=bucket)["Contents"])
    assert "ckpt/step42/.metadata" in keys
    assert any(k.endswith("_0.safetensors") for k in keys)
    run_world("load", path, 2)


def test_dcp_local_save2_load4(tmp_path, lib_path):
    pytest.importorskip("torch.distributed.checkpoint")
    path = os.path.join(tmp_path, "ckpt")
    run_world("save", path, 2)
    names = sorted(os.listdir(path))
    assert ".metadata" in names and "__0_0.safetensors" in names
    assert not any(".tmp" in n for n in names)
    # The rank files are plain safetensors.
    st = pytest.importorskip("safetensors.torch")
    assert st.load_file(os.path.join(path, "__0_0.safetensors"))
    run_world("load", path, 4)


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


def test_overwrite_drops_old_metadata_first(tmp_path, lib_path):
    from torch.distributed.checkpoint.planner import SavePlan

    from s3direct.dcp import METADATA_NAME, S3DirectStorageWriter

    path = os.path.join(tmp_path, "ck")
    os.makedirs(path)
    open(os.path.join(path, METADATA_NAME), "wb").write(b"old")
    w = S3DirectStorageWriter(path)
    w.set_up_storage_writer(True, rank=0, use_collectives=True)
    plans = w.prepare_global_plan([w.prepare_local_plan(SavePlan([])), SavePlan([])])
    assert [p.storage_data.prefix for p in plans] == ["__0_", "__1_"]
    assert not os.path.exists(os.path.join(path, METADATA_NAME))


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
