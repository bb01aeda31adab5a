"""s3direct.safe_open against safetensors.safe_open: same keys, metadata, tensors and slices,
over local files, S3 objects, index URIs and folders; slices fetch only the bytes they need."""

from __future__ import annotations

import pytest
import torch

import s3direct

safetensors = pytest.importorskip("safetensors")
from safetensors import safe_open as st_safe_open  # noqa: E402
from safetensors.torch import save_file  # noqa: E402


@pytest.fixture(params=["local", "s3"])
def base(request, tmp_path, lib_path):
    if request.param == "local":
        return str(tmp_path)
    request.getfixturevalue("s3_env")
    return f"s3://{request.getfixturevalue('bucket')}"


def tensors():
    g = torch.Generator().manual_seed(1)
    return {
        "w": torch.randn(12, 10, generator=g),
        "b16": torch.randn(6, 5, 4, generator=g).to(torch.bfloat16),
        "i": torch.arange(7, dtype=torch.int32),
        "s": torch.tensor(3.5),
    }


INDICES = [
    (slice(2, 5),), (slice(None), slice(3, 7)), (Ellipsis, 1), (3,), (slice(1, 11, 3),),
    (slice(None), slice(0, 10, 4)), (-1, slice(2, 4)), (slice(5, 5),), (Ellipsis,),
    # torch's indexing, which safetensors follows (issue 24.3: each was a TypeError here):
    None, (None,), (0, None), (Ellipsis, None), (None, Ellipsis, None), True, False,
    [0, 2], [[1, 0]], (slice(None), [3, 1, 3]), ([4, 0], slice(1, 3)), ([1, 2], [0, -1]),
    (slice(None), None, [0, 2]), [], [-1], (Ellipsis, [1]),
]


def _index_tensor_forms():
    """Index tensors and arrays: integer and boolean."""
    import numpy as np

    mask = torch.zeros(12, dtype=torch.bool)
    mask[[1, 5, 6]] = True
    return [torch.tensor([3, 1]), (slice(None), torch.tensor([[0, 1], [2, 3]])),
            np.array([2, 0]), mask, (mask, slice(2, 4))]


def test_matches_safetensors(tmp_path, base):
    ref = tensors()
    local = str(tmp_path / "ref.safetensors")
    save_file(ref, local, metadata={"format": "pt", "who": "test"})
    uri = local
    if base.startswith("s3://"):
        uri = f"{base}/ref.safetensors"
        with s3direct.writer(uri) as f, open(local, "rb") as src:
            f.write(src.read())
    with st_safe_open(local, framework="pt") as want, \
            s3direct.safe_open(uri, framework="pt", device="cpu") as got:
        assert got.keys() == want.keys()
        assert got.metadata() == want.metadata()
        for k in want.keys():
            assert torch.equal(got.get_tensor(k), want.get_tensor(k)), k
        for k in ("w", "b16"):
            sw, sg = want.get_slice(k), got.get_slice(k)
            assert sg.get_shape() == sw.get_shape() and sg.get_dtype() == sw.get_dtype()
            for idx in INDICES:
                if k == "w" and isinstance(idx, tuple) and len(idx) > 2:
                    continue
                a, b = sw[idx], sg[idx]
                assert a.shape == b.shape and torch.equal(a, b), (k, idx)
        for idx in _index_tensor_forms():
            a, b = want.get_slice("w")[idx], got.get_slice("w")[idx]
            assert a.shape == b.shape and torch.equal(a, b), idx
        with pytest.raises(IndexError):
            got.get_slice("w")[[0, 12]]
        with pytest.raises(IndexError):
            got.get_slice("w")[torch.zeros(5, dtype=torch.bool)]
        assert got.get_slice("b16")[1:3, :, 2:3].shape == (2, 5, 1)
        with pytest.raises(KeyError):
            got.get_tensor("nope")


def test_slice_fetches_only_its_rows(tmp_path, lib_path, monkeypatch):
    uri = str(tmp_path / "big.safetensors")
    s3direct.save({"m": torch.arange(1000 * 64, dtype=torch.float32).reshape(1000, 64)}, uri)
    from s3direct import _reader

    seen = []
    orig = _reader.CheckpointReader.read

    def spy(self, dests, **kw):
        seen.extend((off, length) for _, _, off, length in dests)
        return orig(self, dests, **kw)

    monkeypatch.setattr(_reader.CheckpointReader, "read", spy)
    with s3direct.safe_open(uri) as f:
        rows = f.get_slice("m")[100:102]
        assert seen == [(100 * 64 * 4, 2 * 64 * 4)]
        seen.clear()
        cols = f.get_slice("m")[10:13, 5:9]
        assert seen == [((r * 64 + 5) * 4, 16) for r in range(10, 13)]
    full = torch.arange(1000 * 64, dtype=torch.float32).reshape(1000, 64)
    assert torch.equal(rows, full[100:102]) and torch.equal(cols, full[10:13, 5:9])


def test_index_and_folder(base, tmp_path):
    w = tensors()
    folder = f"{base}/hf/"
    if not base.startswith("s3://"):
        (tmp_path / "hf").mkdir()
    s3direct.save(w, folder, shard_size=200, metadata={"format": "pt"})
    for uri in (folder, folder + "model.safetensors.index.json"):
        with s3direct.safe_open(uri, framework="pt", device="cpu") as f:
            assert f.keys() == sorted(w)
            for k, v in w.items():
                assert torch.equal(f.get_tensor(k), v)
            assert torch.equal(f.get_slice("w")[3:5], w["w"][3:5])


def test_closed_and_framework(tmp_path, lib_path):
    uri = str(tmp_path / "x.safetensors")
    s3direct.save({"a": torch.ones(2)}, uri)
    f = s3direct.safe_open(uri, framework="pt")
    f.close()
    with pytest.raises(ValueError, match="closed"):
        f.keys()
    with pytest.raises(s3direct.NotSupported, match="framework"):
        s3direct.safe_open(uri, framework="np")
