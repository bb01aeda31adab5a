"""The benchmark's checkpoint: a llama-shaped state dict (29 decoder layers, 265 bf16 tensors)
scaled to a target size, with deterministic contents so that every worker can check bytes."""

import hashlib

import numpy as np
import torch

# The source object each benchmark tool reads (st: safetensors, the default; pt: torch.save;
# tz: tensorizer; dcp-*: a DCP checkpoint in that storage's layout), and for a DCP checkpoint
# the object that holds the bytes (rank 0's file).
SOURCE = {"s3torch": "pt", "tensorizer": "tz", "s3direct-dcp": "dcp-s3d", "s3torch-dcp": "dcp-fs"}
DCP_DATA = {"dcp-s3d": "__0_0.safetensors", "dcp-fs": "__0_0.distcp"}


def llama_spec(target_bytes, layers=29, vocab=32000):
    """Tensor names/shapes of a llama-like model whose bf16 size is close to target_bytes."""
    def total(h):
        i = (h * 11 // 4 + 15) // 16 * 16
        per_layer = 4 * h * h + 3 * h * i + 2 * h
        return 2 * (layers * per_layer + 2 * vocab * h + h), i
    h = 64
    while total(h + 16)[0] <= target_bytes:
        h += 16
    _, inter = total(h)
    t = [("model.embed_tokens.weight", [vocab, h])]
    for n in range(layers):
        p = f"model.layers.{n}."
        t += [(p + "self_attn.q_proj.weight", [h, h]), (p + "self_attn.k_proj.weight", [h, h]),
              (p + "self_attn.v_proj.weight", [h, h]), (p + "self_attn.o_proj.weight", [h, h]),
              (p + "mlp.gate_proj.weight", [inter, h]), (p + "mlp.up_proj.weight", [inter, h]),
              (p + "mlp.down_proj.weight", [h, inter]),
              (p + "input_layernorm.weight", [h]), (p + "post_attention_layernorm.weight", [h])]
    t += [("model.norm.weight", [h]), ("lm_head.weight", [vocab, h])]
    return [{"name": n, "shape": s, "dtype": "bfloat16"} for n, s in t]


def make_tensors(spec, seed):
    """Random bf16 bits (any pattern: the benchmark compares bytes, not values)."""
    out = {}
    for i, t in enumerate(spec):
        n = int(np.prod(t["shape"])) if t["shape"] else 1
        bits = np.random.default_rng(seed + i).integers(0, 1 << 16, size=n, dtype=np.uint16)
        out[t["name"]] = torch.from_numpy(bits).view(torch.bfloat16).reshape(t["shape"])
    return out


def write_raw(tensors, spec, path):
    """The tensors' bytes one after another in the spec's order (read back by read_raw)."""
    with open(path, "wb") as f:
        for t in spec:
            f.write(tensors[t["name"]].contiguous().view(-1).view(torch.uint8).numpy())


def read_raw(spec, path):
    """New CPU tensors of the spec, filled from a write_raw file: the same tensors as
    make_tensors, in a copy instead of seconds of random number generation."""
    out = {}
    with open(path, "rb") as f:
        for t in spec:
            x = torch.empty(t["shape"], dtype=getattr(torch, t["dtype"]))
            buf = x.view(-1).view(torch.uint8).numpy()
            if f.readinto(memoryview(buf)) != buf.nbytes:
                raise RuntimeError(f"{path}: ends before tensor {t['name']}")
            out[t["name"]] = x
    return out


def nbytes(spec, names=None):
    return sum(2 * int(np.prod(t["shape"])) for t in spec if names is None or t["name"] in names)


def digest_tensors(tensors, names):
    """sha256 over name + raw bytes of each tensor, in the spec's order (names)."""
    h = hashlib.sha256()
    for n in names:
        t = tensors[n].detach().contiguous()
        h.update(n.encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()
