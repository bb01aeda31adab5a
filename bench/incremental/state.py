"""The incremental benchmark's states, cases and counters, shared by run.py and worker.py.

Two groups of states, each saved once as the base of its cases:

- "llama": a llama-shaped state_dict (bench/peers/ckpt.py's llama_spec: embed_tokens, 29
  layers of q/k/v/o/gate/up/down projections and two norms, model.norm, lm_head) of --size
  bytes in bf16 or fp32, random bits. Cases "0%" ... "100%": that share of the tensors (by
  count, at least one when the share is above 0) chosen by a seeded sample, whole tensors.
- "lora": the same frozen model with LoRA adapters (lora_A [16, in] and lora_B [out, 16] per
  projection, fp32) right after each projection's weight, as a PEFT model's state_dict()
  orders them, then Adam's state for every adapter (optimizer.state.NAME.exp_avg,
  .exp_avg_sq, fp32, and the 0-d .step). Case "lora": one training step later, every adapter
  and every optimizer tensor changed, the frozen weights not.

A changed tensor has the lowest bit of every element flipped (XOR 1 on its integer view): every
value moves by one unit in the last place, so every tensor chosen differs from the base's in
content and CRC, and nothing else does.
"""

import glob
import json
import os
import random
import socket
import struct
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "peers"))
import ckpt  # noqa: E402

MiB = 1 << 20
PART_MIN = 5 * MiB  # S3's smallest part (every part but the last)
LORA_RANK = 16
PCT_CASES = ["0%", "1%", "10%", "50%", "100%"]
CASES = PCT_CASES + ["lora"]
ITEMSIZE = {"bfloat16": 2, "float16": 2, "float32": 4}
INT_VIEW = {2: "int16", 4: "int32"}


def group_of(case):
    return "lora" if case == "lora" else "llama"


def tensor_bytes(t):
    return ITEMSIZE[t["dtype"]] * int(np.prod(t["shape"], dtype=np.int64))


def nbytes(spec, names=None):
    return sum(tensor_bytes(t) for t in spec if names is None or t["name"] in names)


def llama(size, dtype):
    """The frozen model: llama_spec's names and shapes at size bytes of dtype."""
    spec = ckpt.llama_spec(int(size * 2 // ITEMSIZE[dtype]))
    for t in spec:
        t["dtype"] = dtype
    return spec


def lora(size, dtype):
    """The frozen model with LoRA adapters after each projection (PEFT's state_dict order) and
    Adam's state of the adapters after the model."""
    out, adapters = [], []
    for t in llama(size, dtype):
        out.append(t)
        n = t["name"]
        if n.endswith("_proj.weight") and ".layers." in n:
            stem = n[: -len(".weight")]
            rows, cols = t["shape"]  # [out, in]
            for a, shape in ((f"{stem}.lora_A.weight", [LORA_RANK, cols]),
                             (f"{stem}.lora_B.weight", [rows, LORA_RANK])):
                out.append({"name": a, "shape": shape, "dtype": "float32"})
                adapters.append((a, shape))
    for a, shape in adapters:
        for k in ("exp_avg", "exp_avg_sq"):
            out.append({"name": f"optimizer.state.{a}.{k}", "shape": shape, "dtype": "float32"})
        out.append({"name": f"optimizer.state.{a}.step", "shape": [], "dtype": "float32"})
    return out


def spec_of(group, size, dtype):
    return lora(size, dtype) if group == "lora" else llama(size, dtype)


def changed_names(case, spec):
    """The tensors a case changes, in the spec's order."""
    names = [t["name"] for t in spec]
    if case == "lora":
        return [n for n in names if ".lora_" in n or n.startswith("optimizer.")]
    pct = float(case.rstrip("%"))
    k = round(len(names) * pct / 100)
    if pct > 0:
        k = max(1, k)
    pick = set(random.Random(int(pct * 1000) + 7).sample(range(len(names)), k))
    return [n for i, n in enumerate(names) if i in pick]


def make_base(spec, seed):
    """The base state's tensors: random bits (a NaN here and there does not matter, the
    benchmark compares bytes)."""
    import torch

    out = {}
    for i, t in enumerate(spec):
        n = int(np.prod(t["shape"], dtype=np.int64))
        size = ITEMSIZE[t["dtype"]]
        bits = np.random.default_rng(seed + i).integers(0, 1 << 16, size=n * size // 2,
                                                        dtype=np.uint16)
        out[t["name"]] = (torch.from_numpy(bits).view(getattr(torch, t["dtype"]))
                          .reshape(t["shape"]))
    return out


def apply_case(state, names):
    """Flips the lowest bit of every element of the tensors named (in place)."""
    import torch

    for n in names:
        t = state[n]
        v = t.reshape(-1).view(getattr(torch, INT_VIEW[t.element_size()]))
        v.bitwise_xor_(1)


def floor_bytes(header_len, layout, changed):
    """What an incremental save has to send at least, by S3's part rule: the header (and the
    8-byte length before it), the changed tensors, and the gaps the 5 MiB minimum part size
    forces (a run of unchanged bytes shorter than 5 MiB between changed ones cannot be a
    copied part and is sent; a sent run shorter than 5 MiB is filled up from a neighbouring
    unchanged run). layout: [(name, begin, end)] data offsets from the safetensors header.
    A model of the minimum, not of any implementation; the last part may be small."""
    data0 = 8 + header_len
    runs = [[True, data0]]  # [send?, length]
    pos = 0
    for name, b, e in sorted(layout, key=lambda x: x[1]):
        runs[-1][1] += max(0, b - pos)  # alignment padding goes with the run before it
        send = name in changed
        if runs[-1][0] == send:
            runs[-1][1] += e - b
        else:
            runs.append([send, e - b])
        pos = max(pos, e)
    runs = [r for r in runs if r[1] > 0]

    def merge(rs):
        out = []
        for r in rs:
            if out and out[-1][0] == r[0]:
                out[-1][1] += r[1]
            else:
                out.append(list(r))
        return out
    # copied runs under 5 MiB (but the last) cannot be parts: sent
    runs = merge([[True, r[1]] if not r[0] and r[1] < PART_MIN and i < len(runs) - 1 else r
                  for i, r in enumerate(runs)])
    changed_any = True
    while changed_any:
        changed_any = False
        for i, r in enumerate(runs):
            if not r[0] or r[1] >= PART_MIN or i == len(runs) - 1:
                continue
            need = PART_MIN - r[1]
            for j in (i + 1, i - 1):  # take from the next unchanged run, else the previous
                if 0 <= j < len(runs) and not runs[j][0] and (
                        runs[j][1] - need >= PART_MIN or j == len(runs) - 1):
                    runs[j][1] -= need
                    r[1] += need
                    break
            else:  # no neighbour can give: the smaller neighbour is sent whole
                nb = [j for j in (i - 1, i + 1) if 0 <= j < len(runs)]
                if not nb:
                    continue
                j = min(nb, key=lambda k: runs[k][1])
                runs[j][0] = True
            runs = merge([x for x in runs if x[1] > 0])
            changed_any = True
            break
    return sum(r[1] for r in runs if r[0])


def read_layout(s3, bucket, key):
    """(header length, [(name, begin, end)]) of a safetensors object, from two ranged GETs."""
    head = s3.get_object(Bucket=bucket, Key=key, Range="bytes=0-7")["Body"].read()
    n = struct.unpack("<Q", head)[0]
    hdr = json.loads(s3.get_object(Bucket=bucket, Key=key, Range=f"bytes=8-{7 + n}")["Body"]
                     .read())
    return n, [(k, v["data_offsets"][0], v["data_offsets"][1]) for k, v in hdr.items()
               if k != "__metadata__"]


def rgw_asok():
    """The RGW's admin socket beside CEPH_CONF (scripts/start-rgw.sh's layout), or None."""
    conf = os.environ.get("CEPH_CONF")
    if not conf:
        return None
    found = glob.glob(os.path.join(os.path.dirname(conf), "run", "ceph-client.rgw.*.asok"))
    return found[0] if found else None


def rgw_requests(asok):
    """The server's count of requests served (perf counter rgw.req), or None: read from its
    admin socket (a JSON command, then a 4-byte length and the JSON answer)."""
    if not asok:
        return None
    try:
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(10)
            s.connect(asok)
            s.sendall(json.dumps({"prefix": "perf dump"}).encode() + b"\0")
            head = b""
            while len(head) < 4:
                d = s.recv(4 - len(head))
                if not d:
                    return None
                head += d
            n = struct.unpack(">I", head)[0]
            buf = bytearray()
            while len(buf) < n:
                d = s.recv(min(1 << 20, n - len(buf)))
                if not d:
                    return None
                buf += d
        return int(json.loads(bytes(buf))["rgw"]["req"])
    except (OSError, ValueError, KeyError):
        return None
