"""Incremental saves never keep a copied byte they cannot prove (issue 33).

A base whose header claims the CRC-32C of the new bytes while it holds other bytes (what a
base replaced after it was opened looks like to a server that ignores
x-amz-copy-source-if-match, as Ceph RGW 16 does) makes the planner copy ranges whose bytes
are wrong: each copied part is checked against the MD5 ETag the server answers and sent
instead. Copy answers damaged on the wire, and bases that cannot serve, give a full save.
Every result loads bit-exact in s3direct and in the safetensors library."""

from __future__ import annotations

import json
import os
import struct

import pytest

torch = pytest.importorskip("torch")
st_torch = pytest.importorskip("safetensors.torch")

from _flipproxy import FlipProxy  # noqa: E402

MiB = 1 << 20


def _states():
    g = torch.Generator().manual_seed(7)
    new = {n: torch.randn(6 * MiB // 4, generator=g) for n in ("a", "b", "c", "d")}
    old = dict(new)
    old["b"] = torch.randn(6 * MiB // 4, generator=g)  # other bytes under the same name
    return new, old


def _lying_base(new, old, tmp_path):
    """safetensors bytes holding old's data, with new's CRCs in s3direct.crc32c."""
    import s3direct

    honest = str(tmp_path / "honest.safetensors")
    s3direct.save(new, honest)
    with open(honest, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        crcs = json.loads(f.read(n))["__metadata__"]["s3direct.crc32c"]
    header = {"__metadata__": {"s3direct.crc32c": crcs}}
    data = b""
    for n in sorted(old):
        b = old[n].numpy().tobytes()
        header[n] = {"dtype": "F32", "shape": list(old[n].shape),
                     "data_offsets": [len(data), len(data) + len(b)]}
        data += b
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def _check(uri, state, boto3_client=None, bucket=None, key=None):
    import s3direct

    back = s3direct.load(uri)
    assert set(back) == set(state)
    for n in state:
        assert torch.equal(back[n], state[n]), n
    if boto3_client is not None:
        raw = boto3_client.get_object(Bucket=bucket, Key=key)["Body"].read()
    else:
        with open(uri, "rb") as f:
            raw = f.read()
    other = st_torch.load(raw)
    for n in state:
        assert torch.equal(other[n], state[n]), n


def test_lying_base_s3(s3_env, boto3_client, bucket, tmp_path):
    import s3direct

    new, old = _states()
    boto3_client.put_object(Bucket=bucket, Key="base.safetensors",
                            Body=_lying_base(new, old, tmp_path))
    stats = s3direct.save(new, f"s3://{bucket}/new.safetensors",
                          base=f"s3://{bucket}/base.safetensors")
    # The header's CRCs matched every tensor; the part holding b's bytes is not them.
    assert stats.tensors_reused == 4
    assert stats.copies_refused >= 1
    assert stats.bytes_sent >= 6 * MiB
    _check(f"s3://{bucket}/new.safetensors", new, boto3_client, bucket, "new.safetensors")


def test_lying_base_local(lib_path, tmp_path):
    import s3direct

    new, old = _states()
    base = tmp_path / "base.safetensors"
    base.write_bytes(_lying_base(new, old, tmp_path))
    out = str(tmp_path / "new.safetensors")
    stats = s3direct.save(new, out, base=str(base))
    assert stats.tensors_reused == 4
    assert stats.copies_refused >= 1
    _check(out, new)


def test_copy_answers_damaged(s3_env, boto3_client, bucket):
    """Every UploadPartCopy answer arrives with its root element damaged: no copy is kept,
    every part is sent, the object is whole."""
    import s3direct

    new, _ = _states()
    s3direct.save(new, f"s3://{bucket}/base.safetensors")
    new["c"] = new["c"] + 1
    host, port = s3_env["AWS_ENDPOINT_URL"].split("//")[1].rsplit(":", 1)
    with FlipProxy(host, int(port), marker=b"<CopyPartResult") as p:
        c = s3direct.Client(endpoint_url=p.url)
        stats = s3direct.save(new, f"s3://{bucket}/new.safetensors",
                              base=f"s3://{bucket}/base.safetensors", client=c)
        c.close()
        assert p.flips >= 1
    assert stats.bytes_copied == 0 and stats.parts_copied == 0
    assert stats.copies_refused >= 1
    assert stats.bytes_sent == stats.bytes_total
    _check(f"s3://{bucket}/new.safetensors", new, boto3_client, bucket, "new.safetensors")


def test_unusable_bases_give_full_saves(s3_env, boto3_client, bucket, tmp_path):
    import s3direct

    new, _ = _states()
    uri = f"s3://{bucket}/new.safetensors"
    local = str(tmp_path / "local.safetensors")
    s3direct.save(new, local)
    for base in (f"s3://{bucket}/missing.safetensors", local):
        stats = s3direct.save(new, uri, base=base)
        assert not stats.base_used and stats.bytes_copied == 0
        assert stats.bytes_sent == stats.bytes_total
        _check(uri, new, boto3_client, bucket, "new.safetensors")
    # A base saved without checksums cannot tell unchanged tensors.
    s3direct.save(new, f"s3://{bucket}/nocrc.safetensors", checksum=False)
    stats = s3direct.save(new, uri, base=f"s3://{bucket}/nocrc.safetensors")
    assert not stats.base_used and stats.tensors_reused == 0
    # Nor can a save without checksums use a base.
    s3direct.save(new, f"s3://{bucket}/withcrc.safetensors")
    stats = s3direct.save(new, uri, base=f"s3://{bucket}/withcrc.safetensors", checksum=False)
    assert not stats.base_used
    _check(uri, new, boto3_client, bucket, "new.safetensors")


def test_sharded_s3(s3_env, boto3_client, bucket):
    """A sharded save against a sharded base: each shard copies from the base shard holding
    its tensors."""
    import s3direct

    new, _ = _states()
    idx = f"s3://{bucket}/m.safetensors.index.json"
    s3direct.save(new, idx, shard_size=12 * MiB)
    new["a"] = new["a"] * 2
    stats = s3direct.save(new, f"s3://{bucket}/m2.safetensors.index.json",
                          shard_size=12 * MiB, base=idx)
    assert stats.base_used and stats.tensors_reused == 3
    assert stats.bytes_copied >= 2 * 6 * MiB
    back = s3direct.load(f"s3://{bucket}/m2.safetensors.index.json")
    for n in new:
        assert torch.equal(back[n], new[n]), n
