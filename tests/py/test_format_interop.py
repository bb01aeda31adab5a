"""Interop of s3direct's safetensors format module with the reference `safetensors` package.

Driven through tests/unit/st_tool (built into $S3D_BUILD_DIR/tests/bin): files our builder
writes load in safetensors (numpy and torch, bf16, float8, sub-byte types) with identical
values; files safetensors writes parse identically in ours; both refuse the malformed corpus
(tests/data/malformed) except where ours is deliberately stricter; a sharded checkpoint with
Hugging Face naming parses through the index.
"""
import json
import os
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

safetensors = pytest.importorskip("safetensors")
import safetensors.numpy as stnp  # noqa: E402

HERE = Path(__file__).resolve().parent
CORPUS = HERE.parent / "data" / "malformed"


@pytest.fixture(scope="module")
def st_tool():
    build = os.environ.get("S3D_BUILD_DIR")
    if not build:
        pytest.skip("S3D_BUILD_DIR not set")
    tool = Path(build) / "tests" / "bin" / "st_tool"
    if not tool.exists():
        pytest.skip(f"{tool} not built")
    return str(tool)


def run(tool, *args, check=True):
    p = subprocess.run([tool, *map(str, args)], capture_output=True, text=True, timeout=60)
    if check and p.returncode != 0:
        raise AssertionError(f"st_tool {args} exited {p.returncode}: {p.stderr}")
    return p


def ours_parse(tool, path, verify=True):
    """(header dict, [tensor dicts in offset order]) as our parser sees the file."""
    p = run(tool, "parse", path, *(["--verify"] if verify else []))
    lines = [json.loads(x) for x in p.stdout.splitlines()]
    return lines[0], lines[1:]


def ours_write(tool, tmp_path, name, tensors, metadata=None, crc=True):
    """tensors: [(name, dtype, shape, raw bytes)], laid out in this order."""
    data = tmp_path / f"{name}.data"
    data.write_bytes(b"".join(t[3] for t in tensors))
    spec = {
        "tensors": [{"name": n, "dtype": d, "shape": list(s)} for n, d, s, _ in tensors],
        "metadata": metadata or {},
        "data_file": str(data),
        "crc": crc,
    }
    spec_path = tmp_path / f"{name}.json"
    spec_path.write_text(json.dumps(spec))
    out = tmp_path / f"{name}.safetensors"
    run(tool, "write", out, spec_path)
    return out


def ref_header(path):
    """The reference file's header, read independently of both libraries."""
    raw = Path(path).read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    return n, json.loads(raw[8 : 8 + n]), raw


NP_DTYPES = {
    "F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64,
    "U64": np.uint64, "I32": np.int32, "U32": np.uint32, "I16": np.int16,
    "U16": np.uint16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_, "C64": np.complex64,
}


def sample(rng, dtype, shape):
    if dtype == np.bool_:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)
    if dtype == np.complex64:
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def test_ours_loads_in_safetensors_numpy(st_tool, tmp_path):
    rng = np.random.default_rng(1)
    arrays, tensors = {}, []
    for i, (name, dt) in enumerate(NP_DTYPES.items()):
        a = sample(rng, dt, (3, i + 1))
        arrays[f"t.{name}"] = a
        tensors.append((f"t.{name}", name, a.shape, a.tobytes()))
    for name, dt, shape in [("scalar", "F32", ()), ("empty", "I64", (4, 0)), ("ünï \"q\"", "U8", (5,))]:
        a = sample(rng, NP_DTYPES[dt], shape)
        arrays[name] = a
        tensors.append((name, dt, shape, a.tobytes()))
    meta = {"framework": "np", "note": "café"}
    path = ours_write(st_tool, tmp_path, "np", tensors, meta)

    loaded = stnp.load_file(str(path))
    assert set(loaded) == set(arrays)
    for k, a in arrays.items():
        assert loaded[k].dtype == a.dtype and loaded[k].shape == a.shape, k
        assert np.array_equal(loaded[k], a), k
    with safetensors.safe_open(str(path), framework="np") as f:
        md = f.metadata()
    assert md["framework"] == "np" and md["note"] == "café"
    assert md["s3direct.format"] == "1"
    crcs = json.loads(md["s3direct.crc32c"])
    assert set(crcs) == set(arrays)
    # Our own reader agrees and the CRCs match the data (st_tool --verify).
    hdr, ts = ours_parse(st_tool, path)
    assert hdr["data_start"] % 8 == 0
    assert [t["name"] for t in ts] == [t[0] for t in tensors]
    assert all(t["crc32c"] == crcs[t["name"]] for t in ts)


def test_ours_loads_in_torch(st_tool, tmp_path):
    torch = pytest.importorskip("torch")
    import safetensors.torch as stt

    g = torch.Generator().manual_seed(2)
    src = {
        "bf16": torch.randn(4, 5, generator=g).to(torch.bfloat16),
        "f16": torch.randn(3, generator=g).to(torch.float16),
        "e4m3": torch.randn(2, 8, generator=g).to(torch.float8_e4m3fn),
        "e5m2": torch.randn(7, generator=g).to(torch.float8_e5m2),
        "e4m3fnuz": torch.randn(6, generator=g).to(torch.float8_e4m3fnuz),
        "e5m2fnuz": torch.randn(6, generator=g).to(torch.float8_e5m2fnuz),
        "u16": torch.arange(60000, 60009, dtype=torch.int32).to(torch.uint16),
        "empty_bf16": torch.empty(0, 3, dtype=torch.bfloat16),
    }
    names = {torch.bfloat16: "BF16", torch.float16: "F16", torch.float8_e4m3fn: "F8_E4M3",
             torch.float8_e5m2: "F8_E5M2", torch.float8_e4m3fnuz: "F8_E4M3FNUZ",
             torch.float8_e5m2fnuz: "F8_E5M2FNUZ", torch.uint16: "U16"}
    if hasattr(torch, "float8_e8m0fnu"):
        src["e8m0"] = torch.tensor([0.5, 1.0, 4.0, 1024.0]).to(torch.float8_e8m0fnu)
        names[torch.float8_e8m0fnu] = "F8_E8M0"
    tensors = [(k, names[v.dtype], tuple(v.shape), v.contiguous().view(torch.uint8).numpy().tobytes()
                if v.numel() else b"") for k, v in src.items()]
    path = ours_write(st_tool, tmp_path, "pt", tensors, {"format": "pt"})
    loaded = stt.load_file(str(path))
    for k, v in src.items():
        assert loaded[k].dtype == v.dtype and loaded[k].shape == v.shape, k
        assert torch.equal(loaded[k].view(torch.uint8), v.view(torch.uint8)), k


def test_ours_sub_byte_in_reference(st_tool, tmp_path):
    """F4 and F6 tensors: the reference reads dtype, shape and bytes exactly; torch maps F4."""
    tensors = [
        ("f4", "F4", (2, 4), bytes([0x12, 0x34, 0x56, 0x78])),
        ("f6a", "F6_E2M3", (4,), bytes([1, 2, 3])),
        ("f6b", "F6_E3M2", (2, 4), bytes(range(6))),
        ("e8m0", "F8_E8M0", (2,), bytes([0x7F, 0x81])),
    ]
    path = ours_write(st_tool, tmp_path, "sub", tensors)
    got = dict(safetensors.deserialize(path.read_bytes()))
    for name, dt, shape, raw in tensors:
        assert got[name]["dtype"] == dt and got[name]["shape"] == list(shape), name
        assert bytes(got[name]["data"]) == raw, name
    torch = pytest.importorskip("torch")
    if hasattr(torch, "float4_e2m1fn_x2"):
        with safetensors.safe_open(str(path), framework="pt") as f:
            t = f.get_tensor("f4")
        assert t.dtype == torch.float4_e2m1fn_x2
        assert t.view(torch.uint8).flatten().tolist() == [0x12, 0x34, 0x56, 0x78]


def test_odd_f4_refused_by_builder(st_tool, tmp_path):
    data = tmp_path / "odd.data"
    data.write_bytes(b"\x00\x00")
    spec = tmp_path / "odd.json"
    spec.write_text(json.dumps({"tensors": [{"name": "bad", "dtype": "F4", "shape": [3]}],
                                "data_file": str(data), "crc": False}))
    p = run(st_tool, "write", tmp_path / "odd.st", spec, check=False)
    assert p.returncode == 2 and "S3D_EINVAL" in p.stderr and "bad" in p.stderr


def test_reference_files_parse_in_ours(st_tool, tmp_path):
    rng = np.random.default_rng(3)
    arrays = {f"w{i}.{k}": sample(rng, dt, (2, i + 2)) for i, (k, dt) in enumerate(NP_DTYPES.items())}
    arrays["scalar"] = np.array(3.5, dtype=np.float64)
    arrays["empty"] = np.zeros((0, 7), dtype=np.float32)
    arrays["long name/with.slashes and spaces"] = np.arange(5, dtype=np.int16)
    path = tmp_path / "ref.safetensors"
    stnp.save_file(arrays, str(path), metadata={"format": "np", "k": "v"})

    n, header, raw = ref_header(path)
    hdr, ts = ours_parse(st_tool, path)
    assert hdr["data_start"] == 8 + n
    assert hdr["data_len"] == len(raw) - 8 - n
    assert sorted(map(tuple, hdr["metadata"])) == [("format", "np"), ("k", "v")]
    assert len(ts) == len(arrays)
    begins = [t["begin"] for t in ts]
    assert begins == sorted(begins)
    for t in ts:
        ref = header[t["name"]]
        assert t["dtype"] == ref["dtype"] and t["shape"] == ref["shape"]
        assert [t["begin"], t["end"]] == ref["data_offsets"]
        assert t["crc32c"] is None
        body = raw[hdr["data_start"] + t["begin"] : hdr["data_start"] + t["end"]]
        assert body == arrays[t["name"]].tobytes()


def test_reference_torch_and_sub_byte_files_parse_in_ours(st_tool, tmp_path):
    torch = pytest.importorskip("torch")
    import safetensors.torch as stt

    src = {"bf16": torch.randn(3, 3).to(torch.bfloat16),
           "e4m3": torch.randn(4).to(torch.float8_e4m3fn),
           "empty": torch.empty(2, 0, dtype=torch.bfloat16)}
    if hasattr(torch, "float4_e2m1fn_x2"):
        src["f4"] = torch.tensor([[0x12, 0x34], [0x56, 0x78]], dtype=torch.uint8).view(
            torch.float4_e2m1fn_x2)
    if hasattr(torch, "float8_e8m0fnu"):
        src["e8m0"] = torch.tensor([1.0, 2.0]).to(torch.float8_e8m0fnu)
    path = tmp_path / "pt.safetensors"
    stt.save_file(src, str(path), metadata={"format": "pt"})
    n, header, raw = ref_header(path)
    hdr, ts = ours_parse(st_tool, path)
    assert {t["name"] for t in ts} == set(src)
    for t in ts:
        assert t["dtype"] == header[t["name"]]["dtype"]
        assert t["shape"] == header[t["name"]]["shape"]  # F4: logical shape [2, 4]
        body = raw[8 + n + t["begin"] : 8 + n + t["end"]]
        assert body == src[t["name"]].contiguous().view(torch.uint8).numpy().tobytes()


def test_builder_bytes_equal_reference(st_tool, tmp_path):
    """Same tensors, same order, one metadata key, no CRC: the header is byte for byte what
    the reference writes."""
    rng = np.random.default_rng(4)
    arrays = {"a.weight": sample(rng, np.float32, (3, 4)), "b": sample(rng, np.int64, (2,)),
              "c\"q": sample(rng, np.uint8, (5,)), "s": np.array(1, dtype=np.int16),
              "é": np.zeros((0,), dtype=np.float16)}
    ref = tmp_path / "ref.safetensors"
    stnp.save_file(arrays, str(ref), metadata={"format": "np"})
    n, header, raw = ref_header(ref)
    order = sorted((k for k in header if k != "__metadata__"),
                   key=lambda k: header[k]["data_offsets"])
    tensors = [(k, header[k]["dtype"], header[k]["shape"], arrays[k].tobytes()) for k in order]
    ours = ours_write(st_tool, tmp_path, "same", tensors, {"format": "np"}, crc=False)
    assert ours.read_bytes() == raw


def test_malformed_corpus_agreement(st_tool):
    """Every malformed object in the corpus is refused by ours; the reference refuses it too,
    except where ours is deliberately stricter (documented in src/format/safetensors.h)."""
    stricter = {"duplicate_metadata_key"} | {p.stem for p in CORPUS.glob("crc_*.st")}
    files = sorted(CORPUS.glob("*.st"))
    assert len(files) >= 20
    for p in files:
        raw = p.read_bytes()
        try:
            safetensors.deserialize(raw)
            ref_ok = True
        except Exception:
            ref_ok = False
        ours = run(st_tool, "parse", p, check=False)
        if p.stem.startswith("valid_"):
            assert ref_ok and ours.returncode == 0, (p.name, ours.stderr)
            continue
        assert ours.returncode == 2 and ours.stderr.startswith("ERROR S3D_E"), p.name
        assert ref_ok == (p.stem in stricter), (p.name, ref_ok)


def test_reference_accepts_we_accept(st_tool, tmp_path):
    """Layouts the reference accepts that a naive parser might not."""
    cases = {  # name: (header JSON, bytes of data)
        "leading_ws": (' {"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', 1),
        "unsorted": ('{"b":{"dtype":"U8","shape":[1],"data_offsets":[1,2]},'
                     '"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', 2),
        "zero_tie": ('{"b":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},'
                     '"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}', 2),
        "meta_null": ('{"__metadata__":null,"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}', 2),
        "extra_field": ('{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2],"x":{}}}', 2),
    }
    for name, (js, ndata) in cases.items():
        b = js.encode()
        raw = struct.pack("<Q", len(b)) + b + bytes(range(ndata))
        safetensors.deserialize(raw)  # the reference accepts it
        p = tmp_path / f"{name}.st"
        p.write_bytes(raw)
        hdr, ts = ours_parse(st_tool, p)
        assert hdr["data_len"] == ndata, name
        assert [t["begin"] for t in ts] == sorted(t["begin"] for t in ts), name


def test_sharded_checkpoint(st_tool, tmp_path):
    """Shards named as huggingface_hub names them, its index format; parse via our index."""
    rng = np.random.default_rng(5)
    shards = {}
    weight_map = {}
    total = 0
    for i in range(1, 4):
        fname = f"model-{i:05d}-of-00003.safetensors"
        arrays = {f"layers.{i}.{j}.weight": sample(rng, np.float32, (4, j + 1)) for j in range(3)}
        stnp.save_file(arrays, str(tmp_path / fname), metadata={"format": "pt"})
        shards[fname] = arrays
        for k, a in arrays.items():
            weight_map[k] = fname
            total += a.nbytes
        out = run(st_tool, "shard-name", tmp_path / "model.safetensors.index.json", i, 3)
        assert out.stdout.strip() == fname
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map},
                                indent=2, sort_keys=True) + "\n")
    lines = [json.loads(x) for x in run(st_tool, "index", index).stdout.splitlines()]
    head, entries = lines[0], lines[1:]
    assert head["total_size"] == total
    assert set(head["shards"]) == set(shards) and len(head["shards"]) == 3
    assert {e["name"]: e["shard"] for e in entries} == weight_map
    seen = set()
    for e in entries:
        assert e["uri"] == str(tmp_path / e["shard"])
        hdr, ts = ours_parse(st_tool, e["uri"])
        by_name = {t["name"]: t for t in ts}
        assert e["name"] in by_name
        a = shards[e["shard"]][e["name"]]
        t = by_name[e["name"]]
        assert t["shape"] == list(a.shape) and t["end"] - t["begin"] == a.nbytes
        seen.add(e["name"])
    assert seen == set(weight_map)

    # An index whose shard escapes the folder is refused, naming the entry.
    bad = tmp_path / "bad.safetensors.index.json"
    bad.write_text(json.dumps({"weight_map": {"w": "../../etc/passwd"}}))
    p = run(st_tool, "index", bad, check=False)
    assert p.returncode == 2 and "S3D_EFMT_SHARD_PATH" in p.stderr and '"w"' in p.stderr


def test_crc_detects_corruption(st_tool, tmp_path):
    a = np.arange(1000, dtype=np.float32)
    path = ours_write(st_tool, tmp_path, "crc", [("a", "F32", a.shape, a.tobytes()),
                                                 ("b", "U8", (3,), b"xyz")])
    ours_parse(st_tool, path)  # verifies
    raw = bytearray(path.read_bytes())
    raw[-10] ^= 0x01  # inside "a"
    path.write_bytes(bytes(raw))
    p = run(st_tool, "parse", path, "--verify", check=False)
    assert p.returncode == 3 and "CRC mismatch for a" in p.stderr
