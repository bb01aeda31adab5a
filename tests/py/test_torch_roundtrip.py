"""save / load / load_into round trips of nested training state, locally and on S3."""

from __future__ import annotations

import math
import os
from collections import OrderedDict

import pytest
import torch

import s3direct


@pytest.fixture(params=["local", "s3"])
def uri_base(request, tmp_path, lib_path):
    """A place to write checkpoints: a temp folder, or a fresh bucket on the test server."""
    if request.param == "local":
        return str(tmp_path)
    request.getfixturevalue("s3_env")
    bucket = request.getfixturevalue("bucket")
    return f"s3://{bucket}"


def join(base, name):
    return f"{base}/{name}"


class TinyLM(torch.nn.Module):
    def __init__(self, vocab=50, d=16):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, d)
        self.enc = torch.nn.TransformerEncoder(
            torch.nn.TransformerEncoderLayer(d, 2, 32, dropout=0.0, batch_first=True), 2)
        self.norm = torch.nn.LayerNorm(d)
        self.head = torch.nn.Linear(d, vocab)
        self.register_buffer("pos", torch.arange(8, dtype=torch.int64))

    def forward(self, x):
        return self.head(self.norm(self.enc(self.emb(x))))


def train_state(seed=0, steps=3):
    torch.manual_seed(seed)
    model = TinyLM()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    for _ in range(steps):
        x = torch.randint(0, 50, (4, 8))
        loss = model(x).logsumexp(-1).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    return model, opt, sched


def assert_same(a, b, path="root"):
    """Deep equality: tensors bitwise (dtype, shape, bytes), floats exactly (nan == nan)."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor), path
        assert a.dtype == b.dtype and a.shape == b.shape, f"{path}: {a.dtype}{a.shape} vs " \
                                                          f"{b.dtype}{b.shape}"
        if a.numel():
            assert torch.equal(a.cpu().reshape(-1).view(torch.uint8),
                               b.cpu().reshape(-1).view(torch.uint8)), path
        return
    assert type(a) is type(b), f"{path}: {type(a)} vs {type(b)}"
    if isinstance(a, dict):
        assert list(a.keys()) == list(b.keys()), path
        for k in a:
            assert_same(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{path}.{i}")
    elif isinstance(a, float):
        assert (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) ==
                                                     math.copysign(1, b)), path
    else:
        assert a == b, path


def test_nested_training_state_round_trip(uri_base):
    model, opt, sched = train_state()
    state = {
        "model": model.state_dict(),
        "optim": opt.state_dict(),
        "sched": sched.state_dict(),
        "step": 3,
        "rng": torch.get_rng_state(),
        "extra": {"loss": 2.5, "best": float("inf"), "worst": float("-inf"), "nan": math.nan,
                  "neg0": -0.0, "tiny": 5e-324, "big": 2 ** 70, "name": "run-1", "none": None,
                  "flag": True, "tuple": (1, 2.0, "x"), "size": torch.Size([2, 3]),
                  "dtype": torch.bfloat16},
    }
    uri = join(uri_base, "train.safetensors")
    s3direct.save(state, uri)
    back = s3direct.load(uri)
    assert_same(state, back)
    # Optimizer state: int keys survive, step counts are tensors, moments are equal.
    assert set(back["optim"]["state"].keys()) == set(state["optim"]["state"].keys())
    assert all(isinstance(k, int) for k in back["optim"]["state"])
    assert isinstance(back["model"], OrderedDict)

    # load_into a freshly built model and optimizer: bytes go into the existing tensors.
    torch.manual_seed(123)
    model2 = TinyLM()
    opt2 = torch.optim.AdamW(model2.parameters(), lr=5.0)
    ptrs = {k: v.data_ptr() for k, v in model2.state_dict().items()}
    out = s3direct.load_into({"model": model2, "optim": opt2}, uri, strict=False)
    for k, v in model2.state_dict().items():
        assert v.data_ptr() == ptrs[k], f"{k} was reallocated"
        assert torch.equal(v, state["model"][k]), k
    assert_same(opt2.state_dict(), state["optim"])
    assert opt2.param_groups[0]["lr"] == opt.param_groups[0]["lr"]
    assert out["step"] == 3
    # The restored optimizer steps exactly like the original.
    x = torch.randint(0, 50, (4, 8))
    for m, o in ((model, opt), (model2, opt2)):
        o.zero_grad()
        m(x).logsumexp(-1).mean().backward()
        o.step()
    for (k, a), b in zip(model.state_dict().items(), model2.state_dict().values()):
        assert torch.equal(a, b), k


def test_load_into_module_plain_state_dict(uri_base):
    model, _, _ = train_state(seed=1, steps=1)
    uri = join(uri_base, "model.safetensors")
    s3direct.save(model.state_dict(), uri)
    fresh = TinyLM()
    s3direct.load_into(fresh, uri)
    for k, v in fresh.state_dict().items():
        assert torch.equal(v, model.state_dict()[k]), k


def test_keys_subset(uri_base):
    state = {"a": {"x": torch.arange(5), "y": torch.ones(2, 2)}, "b": torch.zeros(3), "n": 7}
    uri = join(uri_base, "sub.safetensors")
    s3direct.save(state, uri)
    got = s3direct.load(uri, keys=["a.y", "b"])
    assert set(got) == {"a.y", "b"}
    assert torch.equal(got["a.y"], state["a"]["y"]) and torch.equal(got["b"], state["b"])
    got = s3direct.load(uri, keys="a")
    assert set(got) == {"a.x", "a.y"}
    with pytest.raises(KeyError, match="nope"):
        s3direct.load(uri, keys=["nope"])


def _all_dtypes():
    names = ["bool", "uint8", "int8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
             "float16", "bfloat16", "float32", "float64", "complex64", "float8_e4m3fn",
             "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu"]
    return [getattr(torch, n) for n in names if hasattr(torch, n)]


def _sample(dtype, shape, seed):
    g = torch.Generator().manual_seed(seed)
    raw = torch.randint(0, 256, (int(torch.Size(shape).numel()) *
                                 torch.empty((), dtype=dtype).element_size(),),
                        dtype=torch.uint8, generator=g)
    if dtype == torch.bool:
        return (raw % 2).bool().reshape(shape)
    return raw.view(dtype).reshape(shape)


def test_dtypes_and_shapes(uri_base):
    state = {}
    for i, dt in enumerate(_all_dtypes()):
        name = str(dt).replace("torch.", "")
        state[name] = _sample(dt, (3, 5), i)
        state[name + "_scalar"] = _sample(dt, (), 100 + i)
        state[name + "_empty"] = torch.empty((0, 4), dtype=dt)
    uri = join(uri_base, "dtypes.safetensors")
    s3direct.save(state, uri)
    assert_same(state, s3direct.load(uri))


def test_noncontiguous_and_shared_storage(uri_base):
    base = torch.arange(60, dtype=torch.float32).reshape(6, 10)
    emb = torch.randn(10, 4)
    state = {
        "t": base.t(),                      # transposed view
        "slice": base[1:4, ::3],            # strided slice
        "row": base[2],                     # view with storage offset
        "base": base,
        "tied_a": emb, "tied_b": emb,       # the same tensor twice (tied weights)
        "expanded": torch.ones(3, 1).expand(3, 4),
        "conj": torch.randn(3, dtype=torch.complex64).conj(),
    }
    uri = join(uri_base, "views.safetensors")
    s3direct.save(state, uri)
    back = s3direct.load(uri)
    for k, v in state.items():
        assert torch.equal(back[k], v.resolve_conj()), k
        assert back[k].is_contiguous()
    # Ties are stored once and restored: both names share one tensor again.
    assert back["tied_a"].data_ptr() == back["tied_b"].data_ptr()


def test_plain_flat_dict_names_are_keys(uri_base):
    state = {"w": torch.randn(4, 4), "b": torch.zeros(4, dtype=torch.bfloat16)}
    uri = join(uri_base, "flat.safetensors")
    s3direct.save(state, uri, metadata={"framework": "pt"})
    with s3direct.safe_open(uri) as f:
        assert f.keys() == ["b", "w"]
        assert f.metadata()["framework"] == "pt"


def test_sharded(uri_base):
    state = {f"layer{i}": torch.full((256,), float(i)) for i in range(6)}
    uri = join(uri_base, "model.safetensors.index.json")
    s3direct.save(state, uri, shard_size=2048)
    from s3direct._reader import CheckpointReader

    with CheckpointReader(uri) as r:
        shards = r.shards()
    assert len(shards) >= 3
    assert all("-of-" in u for u, _, _ in shards)
    assert_same(state, s3direct.load(uri))
    with pytest.raises(s3direct.InvalidArgument, match="index.json"):
        s3direct.save(state, join(uri_base, "x.safetensors"), shard_size=2048)


def test_progress_callback(uri_base):
    state = {"a": torch.randn(1000), "b": torch.randn(3000)}
    uri = join(uri_base, "progress.safetensors")
    calls = []
    s3direct.save(state, uri, progress=lambda done, total: calls.append((done, total)))
    assert calls and calls[-1][0] == calls[-1][1] > 0
    calls.clear()
    s3direct.load(uri, progress=lambda done, total: calls.append((done, total)))
    assert calls and calls[-1][0] == calls[-1][1] > 0
    s3direct.save(state, uri, progress=True)  # tqdm bar: must not fail


def test_module_and_optimizer_saved_directly(uri_base):
    model, opt, _ = train_state(seed=2, steps=1)
    uri = join(uri_base, "direct.safetensors")
    s3direct.save({"model": model, "optim": opt}, uri)
    back = s3direct.load(uri)
    assert_same(model.state_dict(), back["model"])
    assert_same(opt.state_dict(), back["optim"])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_round_trip(uri_base):
    state = {"w": torch.randn(1024, 257, device="cuda").t(), "s": torch.tensor(3, device="cuda"),
             "h": torch.randn(10, dtype=torch.bfloat16)}
    uri = join(uri_base, "cuda.safetensors")
    s3direct.save(state, uri)
    back = s3direct.load(uri, device="cuda")
    for k, v in state.items():
        assert back[k].is_cuda and torch.equal(back[k].cpu(), v.cpu()), k
    dst = {k: torch.empty_like(v, device="cuda").contiguous() for k, v in state.items()}
    s3direct.load_into(dst, uri)
    for k, v in state.items():
        assert torch.equal(dst[k].cpu(), v.cpu()), k


def test_local_file_written_atomically(tmp_path, lib_path):
    uri = os.path.join(tmp_path, "atomic.safetensors")
    s3direct.save({"a": torch.ones(3)}, uri)
    with pytest.raises(s3direct.InvalidArgument):
        s3direct.save({"a": torch.ones(3), "bad": object()}, uri)
    # The failed save (refused before any byte was written) left the old file intact.
    assert torch.equal(s3direct.load(uri)["a"], torch.ones(3))
    assert sorted(os.listdir(tmp_path)) == ["atomic.safetensors"]
