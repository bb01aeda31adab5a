"""What s3direct writes is plain safetensors, and plain safetensors loads through s3direct."""

from __future__ import annotations

import os

import pytest
import torch

import s3direct

st = pytest.importorskip("safetensors.torch")


def _state():
    g = torch.Generator().manual_seed(7)
    return {
        "emb.weight": torch.randn(64, 16, generator=g).to(torch.bfloat16),
        "ln.weight": torch.randn(16, generator=g),
        "ln.bias": torch.zeros(16, dtype=torch.float16),
        "ids": torch.arange(10, dtype=torch.int64),
        "mask": torch.tensor([True, False, True]),
        "scalar": torch.tensor(2.5, dtype=torch.float64),
        "f8": torch.randn(8, generator=g).to(torch.float8_e4m3fn),
    }


def _equal(a, b):
    assert set(a) == set(b)
    for k in a:
        assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape, k
        assert torch.equal(a[k].reshape(-1).view(torch.uint8),
                           b[k].reshape(-1).view(torch.uint8)), k


def test_saved_file_loads_with_safetensors(tmp_path, lib_path):
    state = _state()
    path = os.path.join(tmp_path, "m.safetensors")
    s3direct.save(state, path)
    _equal(state, st.load_file(path))


def test_saved_object_loads_with_safetensors(bucket, boto3_client):
    state = _state()
    s3direct.save(state, f"s3://{bucket}/m.safetensors")
    body = boto3_client.get_object(Bucket=bucket, Key="m.safetensors")["Body"].read()
    _equal(state, st.load(body))


def test_safetensors_file_loads_locally(tmp_path, lib_path):
    state = _state()
    path = os.path.join(tmp_path, "ref.safetensors")
    st.save_file(state, path, metadata={"format": "pt"})
    back = s3direct.load(path)
    assert type(back) is dict
    _equal(state, back)
    # load_into a matching dict of preallocated tensors
    dst = {k: torch.empty_like(v) for k, v in state.items()}
    s3direct.load_into(dst, path)
    _equal(state, dst)


def test_safetensors_object_loads_from_s3(bucket, boto3_client):
    state = _state()
    boto3_client.put_object(Bucket=bucket, Key="ref.safetensors", Body=st.save(state))
    _equal(state, s3direct.load(f"s3://{bucket}/ref.safetensors"))
    part = s3direct.load(f"s3://{bucket}/ref.safetensors", keys=["ln.weight", "ids"])
    _equal({k: state[k] for k in ("ln.weight", "ids")}, part)
