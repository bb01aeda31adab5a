"""What Python hands to the C reader is checked first: a destination the C layer cannot write
as numel() contiguous bytes (a strided view) or whose data_ptr is neither host memory nor a
CUdeviceptr (mps, xpu, meta) is refused with a clear error, and nothing is written."""

from __future__ import annotations

import types

import pytest
import torch

import s3direct
from s3direct import _reader
from s3direct._reader import CheckpointReader


@pytest.fixture
def ckpt(tmp_path):
    path = str(tmp_path / "m.safetensors")
    s3direct.save({"w": torch.arange(32, dtype=torch.float32)}, path)
    return path


def test_non_contiguous_destination_refused(ckpt):
    big = torch.full((8, 8), -1.0)
    view = big[:, :4]  # 32 elements, not contiguous
    assert view.numel() == 32 and not view.is_contiguous()
    with CheckpointReader(ckpt) as r:
        e = r.by_name["w"]
        with pytest.raises(s3direct.InvalidArgument, match="not contiguous"):
            r.read([(e, view, 0, 0)])
    assert torch.equal(big, torch.full((8, 8), -1.0))  # nothing written past the view


def test_contiguous_destination_still_works(ckpt):
    out = torch.empty(32)
    with CheckpointReader(ckpt) as r:
        r.read([(r.by_name["w"], out, 0, 0)])
    assert torch.equal(out, torch.arange(32, dtype=torch.float32))


@pytest.mark.parametrize("dev", ["mps", "xpu:0", "meta"])
def test_other_devices_refused(ckpt, dev):
    if dev == "meta":
        t = torch.empty(32, device="meta")
    else:  # no such hardware here: a stand-in with the attributes read() looks at
        t = types.SimpleNamespace(device=torch.device(dev), layout=torch.strided,
                                  is_contiguous=lambda: True, stride=lambda: (1,),
                                  shape=(32,), numel=lambda: 32, element_size=lambda: 4,
                                  data_ptr=lambda: 4096)
    with CheckpointReader(ckpt) as r:
        with pytest.raises(s3direct.InvalidArgument, match="CPU or CUDA memory only"):
            r.read([(r.by_name["w"], t, 0, 0)])


def test_cuda_ordinals_up_to_63_accepted(ckpt):
    fake = types.SimpleNamespace(device=torch.device("cuda", 40), layout=torch.strided,
                                 is_contiguous=lambda: True, stride=lambda: (1,), shape=(32,))
    assert _reader._dest_device(fake) == 40
    fake.device = torch.device("cuda", 64)
    with pytest.raises(s3direct.InvalidArgument, match="0..63"):
        _reader._dest_device(fake)


def test_streams_per_device(monkeypatch):
    """Every device involved gets its own current stream, indexed by ordinal."""
    seen = []

    class FakeStream:
        def __init__(self, d):
            self.cuda_stream = 0x1000 + d

    def current_stream(d):
        seen.append(d)
        return FakeStream(d)

    monkeypatch.setattr(torch.cuda, "current_stream", current_stream)
    assert _reader._cuda_streams([-1, 2, 0, 2]) == [0x1000, 0, 0x1002]
    assert sorted(seen) == [0, 2]
    assert _reader._cuda_streams([-1, -1]) == []
