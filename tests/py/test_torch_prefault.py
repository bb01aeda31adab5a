"""Loads into fresh host memory go through the prefault advice (src/common/prefault.c: the
whole pages inside each large destination are mapped before its bytes arrive): the bytes must
still be exact for tensors of every size around the thresholds (256 KiB advice, 1 MiB direct
fetch, 8 MiB jobs), at unaligned object offsets and unaligned destination addresses, and the
bytes just outside each destination must stay untouched."""

from __future__ import annotations

import torch

import s3direct

KiB, MiB = 1 << 10, 1 << 20
# uint8 tensors of odd lengths: every data offset in the object after the first is unaligned.
SIZES = [1, 3, 4095, 4097, 256 * KiB - 1, 256 * KiB + 3, MiB - 1, MiB + 1, 3 * MiB + 5,
         8 * MiB + 7, 17 * MiB + 4093]


def tensors():
    g = torch.Generator().manual_seed(13)
    out = {f"t{i:02d}": torch.randint(0, 256, (n,), dtype=torch.uint8, generator=g)
           for i, n in enumerate(SIZES)}
    out["bf16"] = torch.randn(1000, 777, generator=g).to(torch.bfloat16)  # 1.55 MB
    out["scalar"] = torch.tensor(2.5, dtype=torch.float64)
    return out


def test_load_into_new_tensors_exact(s3_env, bucket, lib_path):
    src = tensors()
    uri = f"s3://{bucket}/prefault.safetensors"
    s3direct.save(src, uri)
    got = s3direct.load(uri)
    assert set(got) == set(src)
    for k, t in src.items():
        assert got[k].dtype == t.dtype and got[k].shape == t.shape, k
        assert torch.equal(got[k].view(-1).view(torch.uint8), t.view(-1).view(torch.uint8)), k


def test_load_into_unaligned_fresh_destinations_exact(s3_env, bucket, lib_path):
    """Destinations at odd addresses inside one big fresh buffer (pages not yet mapped), with
    guard bytes between them: the advice covers only whole pages inside each destination."""
    src = {k: v for k, v in tensors().items() if v.dtype == torch.uint8}
    uri = f"s3://{bucket}/prefault-into.safetensors"
    s3direct.save(src, uri)
    guard = 4 * KiB + 1
    total = sum(t.numel() + guard for t in src.values()) + guard
    buf = torch.empty(total, dtype=torch.uint8)  # large: fresh pages from the kernel
    dests, spans, off = {}, [], 1  # odd start: unaligned
    for k, t in src.items():
        buf[off - 1:off] = 0x5A
        buf[off + t.numel():off + t.numel() + guard] = 0x5A
        dests[k] = buf[off:off + t.numel()]
        spans.append((off, off + t.numel()))
        off += t.numel() + guard
    s3direct.load_into(dests, uri)
    for k, t in src.items():
        assert torch.equal(dests[k], t), k
    assert int(buf[0]) == 0x5A
    for (_, end), (nxt, _) in zip(spans, spans[1:] + [(off, 0)]):
        assert bool((buf[end:nxt] == 0x5A).all()), f"guard after byte {end} changed"
