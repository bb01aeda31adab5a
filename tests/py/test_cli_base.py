"""`s3direct cp --base URI SOURCE DEST` (issue 33): a safetensors file written by another tool
(here the `safetensors` library) saved as an incremental checkpoint, the tensors unchanged in
an earlier checkpoint copied from it (UploadPartCopy on S3, copy_file_range in a folder)
instead of sent.

Each result is checked by independent readers: the object fetched with boto3 and parsed by
`safetensors.torch.load`, bit for bit against the tensors written, its header's
__metadata__ and tensor order against SOURCE's; and by s3direct itself (`s3direct.load`, and
`s3direct verify`, which checks every stored CRC-32C). The summary line's numbers are read
back and must show bytes copied from the base. The command-line errors need no server."""

from __future__ import annotations

import json
import os
import re
import struct

import pytest

from test_cli import MiB, cli, one_error_line, run  # noqa: F401  (cli is a fixture)

torch = pytest.importorskip("torch")
st_torch = pytest.importorskip("safetensors.torch")

UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}
SIZE = r"([\d.]+ (?:B|KiB|MiB|GiB|TiB))"


def _bytes(s):
    v, u = s.split()
    return float(v) * UNITS[u]


def _tensors(seed=0):
    """Four tensors of 6 to 8 MiB (S3 parts are at least 5 MiB), of three dtypes, and small
    ones between them."""
    g = torch.Generator().manual_seed(seed)
    return {
        "embed.weight": torch.randn(1024, 1600, generator=g),  # 6.25 MiB f32
        "layers.0.bias": torch.arange(7, dtype=torch.int64),
        "layers.0.weight": torch.randn(2048, 1664, generator=g).to(torch.bfloat16),  # 6.5 MiB
        "layers.1.weight": torch.randn(2 * MiB, generator=g),  # 8 MiB f32
        "lm_head.weight": torch.randn(2, 1024, 1536, generator=g).to(torch.float16),  # 6 MiB
        "scale": torch.tensor(0.5),
    }


def _write(path, tensors, note):
    st_torch.save_file(tensors, str(path), metadata={"format": "pt", "note": note})
    return path


def _versions(tmp_path):
    """v1, and v2 with one large tensor changed: written by the safetensors library."""
    t1 = _tensors()
    t2 = dict(t1)
    t2["layers.1.weight"] = t1["layers.1.weight"] + 1
    return (_write(tmp_path / "v1.safetensors", t1, "v1"), t1,
            _write(tmp_path / "v2.safetensors", t2, "v2"), t2)


def _header(blob):
    n = struct.unpack("<Q", blob[:8])[0]
    return json.loads(blob[8:8 + n])


def _order(blob):
    h = _header(blob)
    return [k for k, v in sorted(((k, v) for k, v in h.items() if k != "__metadata__"),
                                 key=lambda kv: kv[1]["data_offsets"][0])]


def _same(got, want):
    assert set(got) == set(want)
    for k, w in want.items():
        g = got[k]
        assert g.dtype == w.dtype and g.shape == w.shape, k
        assert torch.equal(g.reshape(-1).view(torch.uint8), w.reshape(-1).view(torch.uint8)), k


def _check_blob(blob, source_path, want):
    """DEST's bytes: the same tensors, bit for bit (the unchanged ones laid out after the
    changed ones, in the base's order: no reader depends on the order), the same __metadata__
    plus s3direct's per-tensor CRCs; not SOURCE's bytes."""
    src = source_path.read_bytes()
    _same(st_torch.load(blob), want)
    assert sorted(_order(blob)) == sorted(_order(src))
    meta, smeta = _header(blob)["__metadata__"], _header(src)["__metadata__"]
    assert {k: v for k, v in meta.items() if not k.startswith("s3direct.")} == smeta
    assert set(json.loads(meta["s3direct.crc32c"])) == set(want)
    assert blob != src


def _summary(r, verb, src, dst, base):
    """The one stdout line of a cp --base that used its base: (total, copied, sent) bytes."""
    out = r.stdout.decode().splitlines()
    assert len(out) == 1, out
    m = re.fullmatch(rf"{verb}: {re.escape(src)} to {re.escape(dst)} \({SIZE}, {SIZE} copied "
                     rf"from {re.escape(base)}, {SIZE} sent\)", out[0])
    assert m, out[0]
    return tuple(_bytes(x) for x in m.groups())


def _not_used(r, verb, src, dst, base):
    """The line of a cp --base that sent everything: the reason it gives."""
    out = r.stdout.decode().splitlines()
    assert len(out) == 1, out
    m = re.fullmatch(rf"{verb}: {re.escape(src)} to {re.escape(dst)} \({SIZE}, all sent: the "
                     rf"base {re.escape(base)} was not used: (.+)\)", out[0])
    assert m, out[0]
    return m.group(2)


# ---- on S3 ---------------------------------------------------------------------------------

def test_cp_base_upload(cli, s3_env, bucket, boto3_client, tmp_path):
    v1, t1, v2, t2 = _versions(tmp_path)
    u1, u2 = f"s3://{bucket}/m/v1.safetensors", f"s3://{bucket}/m/v2.safetensors"

    # The first of a series: its base does not exist yet, everything is sent, the line says so.
    r = run(cli, "cp", "--base", u1, str(v1), u1, check=0)
    assert "NoSuchKey" in _not_used(r, "upload", str(v1), u1, u1)
    _check_blob(boto3_client.get_object(Bucket=bucket, Key="m/v1.safetensors")["Body"].read(),
                v1, t1)

    # One tensor changed: the others are copied by the server.
    r = run(cli, "cp", str(v2), f"s3://{bucket}/m/", "--base", u1, check=0)
    total, copied, sent = _summary(r, "upload", str(v2), u2, u1)
    assert copied > 0 and sent < total
    assert copied >= 12 * MiB  # of 18.75 MiB unchanged, in parts of 5 MiB at least
    blob = boto3_client.get_object(Bucket=bucket, Key="m/v2.safetensors")["Body"].read()
    assert abs(len(blob) - total) < 0.1 * MiB
    _check_blob(blob, v2, t2)
    import s3direct

    _same(s3direct.load(u2), t2)
    run(cli, "verify", u2, check=0)

    # --quiet: nothing on stdout; the same object again.
    r = run(cli, "cp", "--base", u2, str(v2), f"s3://{bucket}/m/v2q.safetensors", "-q", check=0)
    assert r.stdout == b"" and r.stderr == b""
    assert boto3_client.get_object(Bucket=bucket, Key="m/v2q.safetensors")["Body"].read() == blob
    for k in ("m/v1.safetensors", "m/v2.safetensors", "m/v2q.safetensors"):
        boto3_client.delete_object(Bucket=bucket, Key=k)


def test_cp_base_from_s3_and_in_place(cli, s3_env, bucket, boto3_client, tmp_path):
    """An s3:// SOURCE (uploaded by a plain cp: safetensors' own bytes) is read into memory;
    DEST as its own base updates it in place."""
    v1, t1, v2, t2 = _versions(tmp_path)
    u1, raw2, dst = (f"s3://{bucket}/v1.safetensors", f"s3://{bucket}/raw/v2.safetensors",
                     f"s3://{bucket}/ck.safetensors")
    run(cli, "cp", "--base", u1, str(v1), u1, check=0)
    run(cli, "cp", str(v2), raw2, check=0)
    assert boto3_client.get_object(Bucket=bucket, Key="raw/v2.safetensors")["Body"].read() == \
        v2.read_bytes()

    # A plain cp's object stores no CRC: as a base it serves nothing, and the line says why.
    r = run(cli, "cp", "--base", raw2, str(v2), dst, check=0)
    assert "no CRC-32C" in _not_used(r, "upload", str(v2), dst, raw2)

    r = run(cli, "cp", "--base", u1, raw2, dst, check=0)
    total, copied, sent = _summary(r, "copy", raw2, dst, u1)
    assert copied > 0 and sent < total
    _check_blob(boto3_client.get_object(Bucket=bucket, Key="ck.safetensors")["Body"].read(),
                v2, t2)

    # In place: DEST is the base; v1 over it, then v2 again.
    r = run(cli, "cp", "--base", dst, str(v1), dst, check=0)
    assert _summary(r, "upload", str(v1), dst, dst)[1] > 0
    _check_blob(boto3_client.get_object(Bucket=bucket, Key="ck.safetensors")["Body"].read(),
                v1, t1)

    # To a local file, with a local base; an S3 base for a local DEST is not used.
    local, l1 = tmp_path / "out" / "v2.safetensors", str(tmp_path / "l1.safetensors")
    run(cli, "cp", "--base", l1, str(v1), l1, check=0)
    # A DEST ending in '/' is a folder, created if missing.
    r = run(cli, "cp", "--base", l1, raw2, str(tmp_path / "out") + "/", check=0)
    assert _summary(r, "download", raw2, str(local), l1)[1] > 0
    _check_blob(local.read_bytes(), v2, t2)
    r = run(cli, "cp", "--base", u1, raw2, str(local), check=0)
    assert "on S3" in _not_used(r, "download", raw2, str(local), u1)

    # Not safetensors: exit status 1, one line.
    boto3_client.put_object(Bucket=bucket, Key="text.safetensors", Body=b"hello, world\n" * 10)
    r = run(cli, "cp", "--base", u1, f"s3://{bucket}/text.safetensors", dst)
    assert r.returncode == 1
    assert "is not a valid safetensors file" in one_error_line(r)
    r = run(cli, "cp", "--base", u1, f"s3://{bucket}/nothing.safetensors", dst)
    assert r.returncode == 1 and "NoSuchKey" in one_error_line(r)
    for k in ("v1.safetensors", "raw/v2.safetensors", "ck.safetensors", "text.safetensors"):
        boto3_client.delete_object(Bucket=bucket, Key=k)


def test_cp_base_too_small_to_copy(cli, s3_env, bucket, tmp_path):
    """Unchanged tensors smaller than an S3 part are sent; the line says why."""
    t = {"a": torch.ones(1000), "b": torch.zeros(1000)}
    s1 = _write(tmp_path / "s1.safetensors", t, "s1")
    t["b"] = t["b"] + 1
    s2 = _write(tmp_path / "s2.safetensors", t, "s2")
    u1, u2 = f"s3://{bucket}/s1.safetensors", f"s3://{bucket}/s2.safetensors"
    run(cli, "cp", "--base", u1, str(s1), u1, check=0)
    r = run(cli, "cp", "--base", u1, str(s2), u2, check=0)
    assert "too small" in _not_used(r, "upload", str(s2), u2, u1)


# ---- local files (no server) ---------------------------------------------------------------

def test_cp_base_local(cli, tmp_path):
    v1, t1, v2, t2 = _versions(tmp_path)
    c1, c2 = tmp_path / "ck1.safetensors", tmp_path / "ck2.safetensors"
    r = run(cli, "cp", "--base", str(c1), str(v1), str(c1), check=0)
    assert "No such file" in _not_used(r, "copy", str(v1), str(c1), str(c1))
    r = run(cli, "cp", "--base", str(c1), str(v2), str(c2), check=0)
    total, copied, sent = _summary(r, "copy", str(v2), str(c2), str(c1))
    # Files have no part sizes: every unchanged tensor is copied.
    assert copied >= sum(t.numel() * t.element_size() for k, t in t2.items()
                         if k != "layers.1.weight") - 1024
    assert sent < 9 * MiB
    _check_blob(c2.read_bytes(), v2, t2)
    _same(st_torch.load_file(str(c2)), t2)
    import s3direct

    _same(s3direct.load(str(c2)), t2)
    run(cli, "verify", str(c2), check=0)

    # --dryrun: the line, nothing written.
    r = run(cli, "cp", "--base", str(c1), str(v2), str(tmp_path / "dry.safetensors"), "--dryrun",
            check=0)
    assert r.stdout.decode() == (f"(dryrun) copy: {v2} to {tmp_path / 'dry.safetensors'} "
                                 f"(base {c1})\n")
    assert not (tmp_path / "dry.safetensors").exists()


@pytest.mark.parametrize("args,needle", [
    (["-r", "SRC", "s3://b/k/"], "not with --recursive"),
    (["-", "s3://b/k.safetensors"], "not - (standard input or output)"),
    (["SRC", "-"], "not - (standard input or output)"),
    (["SRC", "s3://b/k.safetensors", "--content-type", "x/y"], "--content-type"),
    (["m.safetensors.index.json", "s3://b/k/"], "sharded checkpoint's index"),
    (["SRC", "s3://b/m.safetensors.index.json"], "names a sharded index"),
    (["SRC", "s3://b/k", "--exclude", "*.bin"], "need --recursive"),
])
def test_cp_base_usage_errors(cli, tmp_path, args, needle):
    src = str(tmp_path / "src.safetensors")
    st_torch.save_file({"x": torch.zeros(4)}, src)
    args = [src if a == "SRC" else a for a in args]
    r = run(cli, "cp", "--base", "s3://b/base.safetensors", *args)
    assert r.returncode == 2, r
    assert needle in r.stderr.decode(), r.stderr
    assert r.stdout == b""


def test_cp_base_errors(cli, tmp_path):
    base = str(tmp_path / "base.safetensors")
    r = run(cli, "cp", "--base=", "a.safetensors", base)
    assert r.returncode == 2 and b"--base needs a checkpoint URI" in r.stderr
    r = run(cli, "mv", "--base", base, "a.safetensors", "s3://b/k")
    assert r.returncode == 2 and b"unknown option --base" in r.stderr
    assert "--base URI" in run(cli, "cp", "--help", check=0).stdout.decode()

    # Exit status 1, one line: not safetensors, truncated, missing, a folder.
    text = tmp_path / "notes.txt"
    text.write_bytes(b"not a checkpoint\n")
    good = _write(tmp_path / "g.safetensors", {"w": torch.randn(1 << 16)}, "g")
    cut = tmp_path / "cut.safetensors"
    cut.write_bytes(good.read_bytes()[:100000])
    dst = tmp_path / "dst.safetensors"
    for src, needle in ((text, "is not a valid safetensors file"),
                        (cut, "is not a valid safetensors file"),
                        (tmp_path / "missing.safetensors", "No such file"),
                        (tmp_path, "is a folder")):
        r = run(cli, "cp", "--base", base, str(src), str(dst))
        assert r.returncode == 1, (src, r)
        assert needle in one_error_line(r), src
        assert r.stdout == b"" and not dst.exists()
