"""s3direct.fs with what reaches S3 through fsspec: s3fs's answers on the same objects (s3fs
from tests/.lightning-s3fs, in a subprocess: its pinned botocore stays out of this process),
torch DCP's FsspecWriter/FsspecReader, pandas (CSV, JSON lines, parquet), Hugging Face
datasets, and Lightning's
ModelCheckpoint, load_from_checkpoint and resume over s3direct:// and, after register_s3(),
s3:// -- with no s3fs in the process."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys

import pytest

from conftest import PYDIR, REPO

fsspec = pytest.importorskip("fsspec")
S3FS_DIR = os.path.join(REPO, "tests", ".lightning-s3fs")


@pytest.fixture
def fs(s3_env):
    from s3direct.fs import S3DirectFileSystem

    return S3DirectFileSystem(skip_instance_cache=True)


@pytest.fixture
def s3_registered(lib_path):
    """register_s3() for one test, fsspec's registry put back after it."""
    import s3direct.fs

    reg = importlib.import_module("fsspec.registry")._registry
    old = {p: reg.get(p) for p in ("s3", "s3a")}
    s3direct.fs.register_s3()
    yield
    for p, v in old.items():
        reg.pop(p, None)
        if v is not None:
            reg[p] = v


# ---- the same answers as s3fs ---------------------------------------------------------------

# One list of questions, asked of s3fs (in its subprocess) and of S3DirectFileSystem.
_ANSWERS = r"""
def answers(fs, bucket):
    def norm(e):
        return {k: e.get(k) for k in ("name", "size", "type", "ETag")}

    def err(call):
        try:
            call()
            return None
        except Exception as e:
            return [c.__name__ for c in type(e).__mro__ if c.__module__ == "builtins"]

    return {
        "ls": [norm(e) for e in fs.ls(bucket, detail=True)],
        "ls_a": [norm(e) for e in fs.ls(bucket + "/a", detail=True)],
        "ls_names": fs.ls(bucket + "/a/", detail=False),
        "ls_file": fs.ls(bucket + "/a/x", detail=False),
        "info_file": norm(fs.info(bucket + "/a/big")),
        "info_dir": norm(fs.info(bucket + "/a/sub")),
        "info_bucket": norm(fs.info(bucket)),
        "find": fs.find(bucket),
        "find_dirs": fs.find(bucket + "/a", withdirs=True),
        "find_depth": fs.find(bucket, maxdepth=1, withdirs=True),
        "exists": [fs.exists(bucket + p) for p in ("/a", "/a/x", "/a/s", "/nope", "/a/sub/")],
        "isdir": [fs.isdir(bucket + p) for p in ("/a", "/a/x", "/a/sub", "/a.txt")],
        "isfile": [fs.isfile(bucket + p) for p in ("/a", "/a/x", "/a.txt")],
        "size": fs.size(bucket + "/a/big"),
        "cat": fs.cat_file(bucket + "/a/big").hex(),
        "ranges": [fs.cat_file(bucket + "/a/big", start=s, end=e).hex()
                   for s, e in ((0, 10), (100, 5000), (-10, None), (None, 7), (5, -5))],
        "read": fs.open(bucket + "/a/big", "rb").read(300).hex(),
        "du": fs.du(bucket),
        "glob": fs.glob(bucket + "/a/*"),
        "glob2": fs.glob(bucket + "/**/y"),
        "err_info": err(lambda: fs.info(bucket + "/nope")),
        "err_cat": err(lambda: fs.cat_file(bucket + "/nope")),
        "err_ls": err(lambda: fs.ls(bucket + "/nope")),
        "err_open": err(lambda: fs.open(bucket + "/nope", "rb")),
    }
"""

_S3FS_RUN = r"""
import json, os, sys
import s3fs
fs = s3fs.S3FileSystem(client_kwargs={"endpoint_url": os.environ["AWS_ENDPOINT_URL"]})
print(json.dumps(answers(fs, sys.argv[1])))
"""


def test_same_answers_as_s3fs(fs, bucket, s3_env):
    if not os.path.isdir(os.path.join(S3FS_DIR, "s3fs")):
        pytest.skip("s3fs not installed in tests/.lightning-s3fs (scripts/deps.sh)")
    big = bytes(range(256)) * 300
    for k, v in (("a/x", b"x"), ("a/sub/y", b"yy"), ("a/big", big), ("top", b"t"),
                 ("a.txt", b"a")):
        fs.pipe_file(f"{bucket}/{k}", v)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([S3FS_DIR, PYDIR]))
    r = subprocess.run([sys.executable, "-c", _ANSWERS + _S3FS_RUN, bucket],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    theirs = json.loads(r.stdout)
    ns: dict = {}
    exec(_ANSWERS, ns)
    fs.invalidate_cache()
    ours = json.loads(json.dumps(ns["answers"](fs, bucket)))
    assert {k: v for k, v in ours.items() if v != theirs[k]} == {}


# ---- pandas ----------------------------------------------------------------------------------

_PANDAS_S3FS = r"""
import io, os, sys
import pandas as pd
opts = {"client_kwargs": {"endpoint_url": os.environ["AWS_ENDPOINT_URL"]}}
bucket = sys.argv[1]
# s3fs reads what s3direct wrote, and writes what s3direct then reads.
df = pd.read_csv(f"s3://{bucket}/pd/by-s3direct.csv", storage_options=opts)
sys.stdout.write(df.to_csv(index=False))
df.assign(c=df["a"] * 2).to_json(f"s3://{bucket}/pd/by-s3fs.jsonl", orient="records",
                                 lines=True, storage_options=opts)
"""


@pytest.mark.parametrize("scheme", ["s3direct", "s3"])
def test_pandas_csv_and_json_lines(fs, bucket, s3_registered, scheme):
    """pandas reads and writes CSV and JSON lines through s3direct:// (and s3:// after
    register_s3()), with s3fs-style storage_options too; s3fs (in its subprocess) reads the
    same CSV to the same text and writes a file pandas then reads through s3direct."""
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame({"a": range(2000), "b": [f"row {i}, quoted" for i in range(2000)],
                       "x": [i / 7 for i in range(2000)]})
    uri = f"{scheme}://{bucket}/pd/by-s3direct.csv"
    df.to_csv(uri, index=False)
    back = pd.read_csv(uri)
    pd.testing.assert_frame_equal(back, df)
    opts = {"key": os.environ["AWS_ACCESS_KEY_ID"], "secret": os.environ["AWS_SECRET_ACCESS_KEY"],
            "client_kwargs": {"endpoint_url": os.environ["AWS_ENDPOINT_URL"]}}
    pd.testing.assert_frame_equal(pd.read_csv(uri, storage_options=opts), df)
    assert "s3fs" not in sys.modules
    if not os.path.isdir(os.path.join(S3FS_DIR, "s3fs")):
        pytest.skip("s3fs not installed in tests/.lightning-s3fs (scripts/deps.sh)")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([S3FS_DIR, PYDIR]))
    r = subprocess.run([sys.executable, "-c", _PANDAS_S3FS, bucket], capture_output=True,
                       text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout == df.to_csv(index=False)
    fs.invalidate_cache()
    theirs = pd.read_json(f"{scheme}://{bucket}/pd/by-s3fs.jsonl", lines=True)
    pd.testing.assert_frame_equal(theirs, df.assign(c=df["a"] * 2))


_PARQUET_S3FS = r"""
import os, sys
import pandas as pd
opts = {"client_kwargs": {"endpoint_url": os.environ["AWS_ENDPOINT_URL"]}}
sys.stdout.write(pd.read_parquet(f"s3://{sys.argv[1]}", storage_options=opts).to_csv(index=False))
"""


@pytest.mark.parametrize("scheme", ["s3direct", "s3"])
def test_datasets_and_parquet(fs, bucket, s3_registered, scheme, tmp_path):
    """Hugging Face datasets over s3direct:// (and s3:// after register_s3()): load_dataset of
    a CSV, save_to_disk / load_from_disk of a folder, to_parquet read back by pandas, and by
    s3fs (in its subprocess) to the same rows."""
    pd = pytest.importorskip("pandas")
    datasets = pytest.importorskip("datasets")
    df = pd.DataFrame({"text": [f"line {i}" for i in range(500)],
                       "label": [i % 3 for i in range(500)]})
    root = f"{scheme}://{bucket}/ds-{scheme}"
    df.to_csv(f"{root}/train.csv", index=False)
    ds = datasets.load_dataset("csv", data_files=f"{root}/train.csv", split="train",
                               cache_dir=str(tmp_path / "cache"))
    assert ds.num_rows == 500 and ds[7] == {"text": "line 7", "label": 1}
    d2 = datasets.Dataset.from_pandas(df)
    d2.save_to_disk(f"{root}/saved")
    names = sorted(n.rsplit("/", 1)[1] for n in fs.ls(f"{bucket}/ds-{scheme}/saved",
                                                       detail=False))
    assert "dataset_info.json" in names and any(n.endswith(".arrow") for n in names), names
    back = datasets.load_from_disk(f"{root}/saved")
    assert back.num_rows == 500 and back[499] == {"text": "line 499", "label": 1}
    d2.to_parquet(f"{root}/x.parquet")
    pd.testing.assert_frame_equal(pd.read_parquet(f"{root}/x.parquet"), df)
    assert "s3fs" not in sys.modules
    if not os.path.isdir(os.path.join(S3FS_DIR, "s3fs")):
        pytest.skip("s3fs not installed in tests/.lightning-s3fs (scripts/deps.sh)")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([S3FS_DIR, PYDIR]))
    r = subprocess.run([sys.executable, "-c", _PARQUET_S3FS, f"{bucket}/ds-{scheme}/x.parquet"],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout == df.to_csv(index=False)


# ---- torch DCP's fsspec storage -------------------------------------------------------------

def test_dcp_fsspec_writer_reader(fs, bucket):
    torch = pytest.importorskip("torch")
    dcp = pytest.importorskip("torch.distributed.checkpoint")
    from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader, FsspecWriter

    g = torch.Generator().manual_seed(3)
    state = {"w": torch.randn(64, 32, generator=g), "b": torch.arange(10.0),
             "nested": {"m": torch.randn(3, 3, generator=g)}}
    root = f"s3direct://{bucket}/dcp/step1"
    dcp.save(state, storage_writer=FsspecWriter(root))
    names = fs.ls(f"{bucket}/dcp/step1", detail=False)
    assert f"{bucket}/dcp/step1/.metadata" in names and len(names) >= 2
    back = {"w": torch.zeros(64, 32), "b": torch.zeros(10), "nested": {"m": torch.zeros(3, 3)}}
    dcp.load(back, storage_reader=FsspecReader(root))
    assert torch.equal(back["w"], state["w"]) and torch.equal(back["b"], state["b"])
    assert torch.equal(back["nested"]["m"], state["nested"]["m"])


# ---- Lightning ------------------------------------------------------------------------------

def _tiny_fit(dirpath, epochs, ckpt_path=None, plugins=(), mc_cls=None):
    torch = pytest.importorskip("torch")
    L = pytest.importorskip("lightning")
    from lightning.pytorch.callbacks import ModelCheckpoint

    ModelCheckpoint = mc_cls or ModelCheckpoint  # noqa: N806
    from torch.utils.data import DataLoader, TensorDataset

    class Tiny(L.LightningModule):
        def __init__(self, width: int = 4) -> None:
            super().__init__()
            self.save_hyperparameters()
            self.net = torch.nn.Linear(4, 1)
            self.epochs: list[int] = []

        def training_step(self, batch, batch_idx):
            if batch_idx == 0:
                self.epochs.append(self.current_epoch)
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.net(x), y)
            self.log("loss", loss)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.05)

    g = torch.Generator().manual_seed(1)
    x = torch.randn(16, 4, generator=g)
    data = DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=8)
    mc = ModelCheckpoint(dirpath=dirpath, save_last=True, save_top_k=1, monitor="loss")
    L.seed_everything(1)
    model = Tiny()
    trainer = L.Trainer(max_epochs=epochs, callbacks=[mc], logger=False, plugins=list(plugins),
                        enable_progress_bar=False, enable_model_summary=False,
                        accelerator="cpu", devices=1)
    trainer.fit(model, data, ckpt_path=ckpt_path)
    return Tiny, model, mc, trainer


@pytest.mark.parametrize("scheme", ["s3direct", "s3"])
def test_lightning_model_checkpoint(fs, bucket, s3_registered, scheme):
    """The default CheckpointIO writes through fsspec: ModelCheckpoint, save_top_k pruning,
    load_from_checkpoint and a resume, all through S3DirectFileSystem. (ckpt_path="last" needs
    s3direct.lightning.ModelCheckpoint: test_lightning_resume_from_last.)"""
    pytest.importorskip("lightning")
    dirpath = f"{scheme}://{bucket}/run/ckpts"
    Tiny, model, mc, trainer = _tiny_fit(dirpath, 3)
    names = sorted(n.rsplit("/", 1)[1] for n in fs.ls(f"{bucket}/run/ckpts", detail=False))
    assert names == sorted({"last.ckpt", mc.best_model_path.rsplit("/", 1)[1]}), names
    assert mc.best_model_path.startswith(dirpath) and len(names) == 2  # top-1 pruned others
    back = Tiny.load_from_checkpoint(f"{dirpath}/last.ckpt")
    for a, b in zip(back.parameters(), model.parameters()):
        assert (a == b).all()
    _, resumed, _, t2 = _tiny_fit(dirpath, 4, ckpt_path=f"{dirpath}/last.ckpt")
    assert resumed.epochs == [3] and t2.current_epoch == 4 and trainer.current_epoch == 3
    assert "s3fs" not in sys.modules


@pytest.mark.parametrize("scheme,plugin", [("s3direct", False), ("s3", False), ("s3", True)])
def test_lightning_resume_from_last(fs, bucket, s3_registered, scheme, plugin):
    """fit(ckpt_path="last") on an S3 dirpath with s3direct.lightning.ModelCheckpoint: the
    newest last.ckpt is found and the fit continues at epoch 3 (Lightning's own class lists
    protocol-less names, looks for them on the local disk and starts again at epoch 0)."""
    pytest.importorskip("lightning")
    from s3direct.lightning import ModelCheckpoint, S3DirectCheckpointIO

    plugins = [S3DirectCheckpointIO()] if plugin else []
    dirpath = f"{scheme}://{bucket}/last-{scheme}-{int(plugin)}/ckpts"
    _, _, mc, _ = _tiny_fit(dirpath, 3, plugins=plugins, mc_cls=ModelCheckpoint)
    assert mc.last_model_path == f"{dirpath}/last.ckpt"
    plugins = [S3DirectCheckpointIO()] if plugin else []
    _, resumed, _, t2 = _tiny_fit(dirpath, 4, ckpt_path="last", plugins=plugins,
                                  mc_cls=ModelCheckpoint)
    assert resumed.epochs == [3] and t2.current_epoch == 4
    assert t2.ckpt_path == f"{dirpath}/last.ckpt"
    assert "s3fs" not in sys.modules


def test_lightning_plugin_with_s3_dirpath(fs, bucket, s3_registered):
    """S3DirectCheckpointIO writes and prunes; ModelCheckpoint checks and lists its s3://
    dirpath through S3DirectFileSystem: no s3fs."""
    pytest.importorskip("lightning")
    pytest.importorskip("torch")
    from s3direct.lightning import S3DirectCheckpointIO

    dirpath = f"s3://{bucket}/plug/ckpts"
    _, model, mc, _ = _tiny_fit(dirpath, 3, plugins=[S3DirectCheckpointIO()])
    names = fs.ls(f"{bucket}/plug/ckpts", detail=False)
    assert len(names) == 2 and f"{bucket}/plug/ckpts/last.ckpt" in names, names
    _, resumed, _, t2 = _tiny_fit(dirpath, 4, ckpt_path=f"{dirpath}/last.ckpt",
                                  plugins=[S3DirectCheckpointIO()])
    assert resumed.epochs == [3] and t2.current_epoch == 4
    assert "s3fs" not in sys.modules
