"""s3direct.lightning.S3DirectCheckpointIO (issue 24.2): Lightning's CheckpointIO over
s3direct.save / load. Skipped where lightning is not importable (scripts/deps.sh installs it).

The Trainer tests run in a subprocess (_lightning_fit.py): a fit with ModelCheckpoint to
s3://, a resume from its last.ckpt, the same losses as an uninterrupted fit. ModelCheckpoint
lists and checks its s3:// dirpath through fsspec, so that process has s3fs, from the folder
scripts/deps.sh installs it into (tests/.lightning-s3fs): in the main environment its pinned
botocore would replace the one boto3 and the AWS CLI use.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections import OrderedDict

import pytest

from conftest import PYDIR, REPO

S3FS_DIR = os.path.join(REPO, "tests", ".lightning-s3fs")


@pytest.fixture(scope="module")
def io_cls(lib_path):
    pytest.importorskip("torch")
    pytest.importorskip("lightning", reason="lightning is not installed (scripts/deps.sh)")
    from s3direct.lightning import S3DirectCheckpointIO

    return S3DirectCheckpointIO


def _checkpoint():
    """What a default Trainer checkpoint of a plain module holds (Lightning 2.6), smaller."""
    import torch
    from lightning.fabric.utilities.data import AttributeDict

    return {
        "epoch": 1, "global_step": 8, "pytorch-lightning_version": "2.6.6",
        "state_dict": OrderedDict([("l.weight", torch.randn(2, 3)), ("l.bias", torch.zeros(2))]),
        "loops": {"fit_loop": {"state_dict": {}, "epoch_loop.state_dict":
                               {"_batches_that_stepped": 8},
                               "epoch_loop.batch_progress": {"is_last_batch": True}}},
        "callbacks": {"ModelCheckpoint{'monitor': None, 'mode': 'min'}": {
            "monitor": None, "best_model_score": None, "kth_value": torch.tensor(float("inf")),
            "best_k_models": {}, "dirpath": "s3://b/ckpts"}},
        "optimizer_states": [{"state": {0: {"momentum_buffer": torch.ones(2, 3)},
                                        1: {"momentum_buffer": torch.ones(2)}},
                              "param_groups": [{"lr": 0.1, "momentum": 0.9, "foreach": None,
                                                "params": [0, 1]}]}],
        "lr_schedulers": [{"step_size": 1, "gamma": 0.7, "base_lrs": [0.1], "_last_lr": [0.07]}],
        "hparams_name": "kwargs",
        # A plain dict in a Trainer's checkpoint; an AttributeDict where user code puts one.
        "hyper_parameters": AttributeDict(lr=0.1, model=AttributeDict(width=8)),
    }


def _same(a, b):
    import torch

    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return (isinstance(b, dict) and list(a) == list(b)
                and all(_same(a[k], b[k]) for k in a))
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same, a, b))
    return a == b


def test_import_s3direct_does_not_import_lightning(lib_path):
    code = ("import sys, s3direct; s3direct.Client; s3direct.default_client(); "
            "assert 'lightning' not in sys.modules, 'lightning imported'")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr


def test_local_roundtrip(io_cls, tmp_path):
    import safetensors
    import torch
    from lightning.fabric.utilities.data import AttributeDict

    io = io_cls()
    ckpt = _checkpoint()
    path = tmp_path / "run" / "ckpts" / "epoch=1-step=8.ckpt"  # parent folders made
    io.save_checkpoint(ckpt, path)
    assert type(ckpt["hyper_parameters"]) is AttributeDict  # the caller's dict untouched

    back = io.load_checkpoint(path, map_location="cpu")
    want = dict(ckpt, hyper_parameters={"lr": 0.1, "model": {"width": 8}})
    assert _same(want, back)
    assert type(back["state_dict"]) is OrderedDict
    assert type(back["hyper_parameters"]) is dict
    assert list(back["optimizer_states"][0]["state"]) == [0, 1]  # int keys stay ints

    # A plain safetensors file: the tensors under their paths, nothing pickled.
    with safetensors.safe_open(str(path), framework="pt") as f:
        assert "state_dict.l.weight" in f.keys()
        assert torch.equal(f.get_tensor("state_dict.l.weight"), ckpt["state_dict"]["l.weight"])
        assert "s3direct_tree" in f.metadata()
    assert not open(path, "rb").read(4).startswith(b"PK")  # not a torch.save zip

    io.remove_checkpoint(path)
    assert not path.exists()
    io.remove_checkpoint(path)  # missing: not an error, as TorchCheckpointIO
    (tmp_path / "sharded").mkdir()
    (tmp_path / "sharded" / "x").write_bytes(b"1")
    io.remove_checkpoint(str(tmp_path / "sharded"))  # another plugin's folder: removed whole
    assert not (tmp_path / "sharded").exists()


def test_load_map_location(io_cls, tmp_path):
    import torch

    io = io_cls()
    path = str(tmp_path / "m.ckpt")
    w = torch.arange(6.0).reshape(2, 3)
    io.save_checkpoint({"state_dict": {"w": w, "tied": w}, "epoch": 0}, path)
    for loc in (None, "cpu", torch.device("cpu")):
        got = io.load_checkpoint(path, map_location=loc)
        assert got["state_dict"]["w"].device.type == "cpu" and torch.equal(got["state_dict"]["w"], w)

    # torch.load's function form, applied after the load with location "cpu"; tied tensors
    # stay tied.
    seen = []

    def fn(storage, location):
        seen.append(location)
        return storage.clone()

    got = io.load_checkpoint(path, map_location=fn)
    assert seen == ["cpu"]
    sd = got["state_dict"]
    assert torch.equal(sd["w"], w) and sd["w"].data_ptr() == sd["tied"].data_ptr()
    got = io.load_checkpoint(path, map_location=lambda s, loc: s)  # TorchCheckpointIO's default
    assert torch.equal(got["state_dict"]["w"], w)

    import s3direct

    with pytest.raises(s3direct.InvalidArgument, match="map_location.*records none"):
        io.load_checkpoint(path, map_location={"cuda:0": "cpu"})


def test_non_json_leaf_names_allow_pickle(io_cls, tmp_path):
    import s3direct

    ckpt = {"epoch": 0, "hyper_parameters": {"args": argparse.Namespace(lr=0.1)}}
    path = str(tmp_path / "ns.ckpt")
    with pytest.raises(s3direct.InvalidArgument) as ei:
        io_cls().save_checkpoint(ckpt, path)
    msg = str(ei.value)
    assert "hyper_parameters.args" in msg and "argparse.Namespace" in msg
    assert "S3DirectCheckpointIO(allow_pickle=True)" in msg
    assert not os.path.exists(path)

    pickling = io_cls(allow_pickle=True)
    pickling.save_checkpoint(ckpt, path)
    assert pickling.load_checkpoint(path)["hyper_parameters"]["args"] == argparse.Namespace(lr=0.1)
    with pytest.raises(s3direct.PickleRefused):
        io_cls().load_checkpoint(path)  # the default plugin never unpickles
    with pytest.raises(s3direct.PickleRefused):
        pickling.load_checkpoint(path, weights_only=True)


def test_storage_options(io_cls, tmp_path):
    import safetensors
    import torch

    io = io_cls()
    path = str(tmp_path / "o.ckpt")
    io.save_checkpoint({"w": torch.ones(1)}, path, storage_options={"metadata": {"run": "r1"}})
    with safetensors.safe_open(path, framework="pt") as f:
        assert f.metadata()["run"] == "r1"
    with pytest.raises(TypeError, match="bogus"):
        io.save_checkpoint({"w": torch.ones(1)}, path, storage_options={"bogus": 1})
    with pytest.raises(TypeError, match="storage_options"):
        io.save_checkpoint({"w": torch.ones(1)}, path, storage_options="fast")


def test_s3_client_choices(io_cls, s3_env, bucket):
    import s3direct
    import torch

    uri = f"s3://{bucket}/c/x.ckpt"
    ckpt = {"state_dict": {"w": torch.randn(3)}, "epoch": 2}
    with s3direct.Client() as c:
        io = io_cls(client=c)
        io.save_checkpoint(ckpt, uri)
        assert _same(ckpt, io.load_checkpoint(uri))
        io.teardown()  # a given client stays open
        assert c.is_open
        assert [o.key for o in c.list(f"s3://{bucket}/c/")] == ["c/x.ckpt"]

    own = io_cls(s3_env.get("AWS_DEFAULT_REGION", "us-east-1"),
                 endpoint_url=s3_env["AWS_ENDPOINT_URL"])
    assert _same(ckpt, own.load_checkpoint(uri))
    own.teardown()  # closes its own client; the next call makes another
    own.remove_checkpoint(uri)
    own.remove_checkpoint(uri)  # missing: not an error
    with pytest.raises(s3direct.NoSuchKey):
        own.load_checkpoint(uri)
    own.teardown()
    with pytest.raises(ValueError, match="not both"):
        io_cls("us-east-1", client=s3direct.Client())


@pytest.mark.parametrize("where", ["s3", "local"])
def test_trainer_fit_resume(io_cls, where, tmp_path, request):
    """ModelCheckpoint(dirpath=s3://..., save_last=True, save_top_k=1) through the plugin;
    fit(ckpt_path=<last.ckpt>) continues at epoch 2 with the losses of an uninterrupted fit;
    the checkpoint is plain safetensors; save_top_k=1 left only the newest epoch's object."""
    import safetensors
    import torch

    import s3direct

    env = dict(os.environ)
    path = [PYDIR, env.get("PYTHONPATH", "")]
    if where == "s3":
        request.getfixturevalue("s3_env")
        if not os.path.isdir(os.path.join(S3FS_DIR, "s3fs")):
            pytest.skip(f"s3fs is not in {S3FS_DIR} (scripts/deps.sh installs it there)")
        bucket = request.getfixturevalue("bucket")
        root = f"s3://{bucket}/run"
        path.insert(0, S3FS_DIR)
    else:
        root = str(tmp_path / "run")
    env["PYTHONPATH"] = os.pathsep.join(p for p in path if p)
    out = tmp_path / "out.json"
    r = subprocess.run([sys.executable, os.path.join(os.path.dirname(__file__),
                                                     "_lightning_fit.py"), root, str(out)],
                       capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-6000:]
    res = json.loads(out.read_text())

    steps = len(res["first"])
    assert steps == 8 and len(res["full"]) == 16
    assert res["first"] == res["full"][:steps]
    assert res["resumed_epochs"] == [2, 3]
    assert res["resumed"] == res["full"][steps:]  # same seed, same data: the same losses
    ckpts = f"{root}/ckpts"
    assert res["after_first"] == {"best": f"{ckpts}/epoch=1-step=8.ckpt",
                                  "last": f"{ckpts}/last.ckpt"}
    assert res["after_resume"]["best"] == f"{ckpts}/epoch=3-step=16.ckpt"

    # save_top_k=1: each newer epoch's checkpoint replaced the one before (remove_checkpoint).
    if where == "s3":
        names = sorted(o.key.rsplit("/", 1)[1] for o in s3direct.Client().list(ckpts + "/"))
    else:
        names = sorted(os.listdir(ckpts))
    assert names == ["epoch=3-step=16.ckpt", "last.ckpt"]

    last = f"{ckpts}/last.ckpt"
    local = last
    if where == "s3":
        local = str(tmp_path / "last.ckpt")
        with s3direct.reader(last) as src, open(local, "wb") as dst:
            dst.write(src.read())
    with safetensors.safe_open(local, framework="pt") as f:
        keys = set(f.keys())
        w = f.get_tensor("state_dict.net.0.weight")
    assert {"state_dict.net.0.weight", "state_dict.net.2.bias"} <= keys
    assert any(k.startswith("optimizer_states.0.state.") for k in keys)

    io = io_cls()
    ck = io.load_checkpoint(last, map_location="cpu")
    assert ck["epoch"] == 3 and ck["global_step"] == 16
    assert ck["hyper_parameters"] == {"lr": 0.05, "width": 8}
    assert torch.equal(ck["state_dict"]["net.0.weight"], w)
    io.remove_checkpoint(last)
    if where == "s3":
        names = [o.key for o in s3direct.Client().list(ckpts + "/")]
        assert names == ["run/ckpts/epoch=3-step=16.ckpt"]
    else:
        assert os.listdir(ckpts) == ["epoch=3-step=16.ckpt"]
