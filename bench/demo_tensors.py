#!/usr/bin/env python3
"""demo_tensors.py BUILD_DIR - the tensor demo.

Builds ~1 GiB of tensors shaped like a small transformer (bf16 weights, fp32 norms and an fp32
copy of the embedding), saves them to the S3 server in the environment (AWS_ENDPOINT_URL, e.g.
the local RGW) at s3://s3direct-demo/..., loads them back (onto the GPU when there is one,
else into host memory), checks every byte, and does the same save and load with torch.save +
boto3 upload and boto3 download + torch.load for comparison. Deletes its objects at the end.

    scripts/with-rgw.sh python3 bench/demo_tensors.py build
"""

from __future__ import annotations

import io
import os
import sys
import time
import uuid

BUCKET = "s3direct-demo"


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    build = os.path.abspath(sys.argv[1])
    os.environ.setdefault("S3D_BUILD_DIR", build)
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sys.path.insert(0, os.path.join(repo, "python"))
    if not os.environ.get("AWS_ENDPOINT_URL"):
        print("demo_tensors: set AWS_ENDPOINT_URL (run under scripts/with-rgw.sh)",
              file=sys.stderr)
        return 2

    import boto3
    import torch
    from botocore.config import Config

    import s3direct

    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    s3 = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"],
                      config=Config(s3={"addressing_style": "path"}))
    made_bucket = False
    try:
        s3.create_bucket(Bucket=BUCKET)
        made_bucket = True
    except s3.exceptions.BucketAlreadyOwnedByYou:
        pass
    except s3.exceptions.BucketAlreadyExists:
        pass
    prefix = f"demo-{uuid.uuid4().hex[:8]}"
    keys = []

    # ---- a small transformer's worth of tensors ---------------------------------------------
    t0 = time.perf_counter()
    vocab, d, ff, layers = 32000, 2048, 5632, 6
    bf16, f32 = torch.bfloat16, torch.float32
    state = {"model.embed_tokens.weight": torch.randn(vocab, d, dtype=bf16)}
    for i in range(layers):
        p = f"model.layers.{i}."
        state[p + "self_attn.qkv_proj.weight"] = torch.randn(3 * d, d, dtype=bf16)
        state[p + "self_attn.o_proj.weight"] = torch.randn(d, d, dtype=bf16)
        state[p + "mlp.gate_up_proj.weight"] = torch.randn(2 * ff, d, dtype=bf16)
        state[p + "mlp.down_proj.weight"] = torch.randn(d, ff, dtype=bf16)
        state[p + "input_layernorm.weight"] = torch.ones(d, dtype=f32)
        state[p + "post_attention_layernorm.weight"] = torch.ones(d, dtype=f32)
    state["model.norm.weight"] = torch.ones(d, dtype=f32)
    state["lm_head.weight"] = torch.randn(vocab, d, dtype=bf16)
    state["ema.embed_tokens.weight"] = torch.randn(vocab, d, dtype=f32)
    if device == "cuda":
        state = {k: v.to(device) for k, v in state.items()}
    total = sum(t.numel() * t.element_size() for t in state.values())
    mib = total / (1 << 20)
    print(f"{len(state)} tensors, {mib:.0f} MiB (bf16 + fp32) on {device}; built in "
          f"{time.perf_counter() - t0:.1f}s")
    print(f"library {s3direct.library_version()}, endpoint {os.environ['AWS_ENDPOINT_URL']}")

    rows = []

    def timed(label, fn):
        t = time.perf_counter()
        out = fn()
        if device == "cuda":
            torch.cuda.synchronize()
        dt = time.perf_counter() - t
        rows.append((label, dt, mib / dt))
        print(f"  {label:<42} {dt:7.2f} s  {mib / dt:8.0f} MiB/s", flush=True)
        return out

    def check(got, what):
        bad = [k for k, v in state.items()
               if got[k].dtype != v.dtype or got[k].shape != v.shape
               or not torch.equal(got[k].reshape(-1).view(torch.uint8),
                                  v.reshape(-1).view(torch.uint8))]
        if bad:
            raise SystemExit(f"demo_tensors: {what}: {len(bad)} tensors differ, e.g. {bad[0]}")
        print(f"  {what}: all {len(state)} tensors byte-identical")

    try:
        uri = f"s3://{BUCKET}/{prefix}/model.safetensors"
        keys.append(f"{prefix}/model.safetensors")
        print("s3direct:")
        timed("save  (C writer, CRC32C per tensor)", lambda: s3direct.save(state, uri))
        got = timed(f"load  -> new tensors on {device}", lambda: s3direct.load(uri, device=device))
        check(got, "s3direct.load")
        dst = {k: torch.empty_like(v) for k, v in state.items()}
        timed(f"load_into preallocated tensors on {device}", lambda: s3direct.load_into(dst, uri))
        check(dst, "s3direct.load_into")
        del got, dst

        print("torch.save + boto3 / boto3 + torch.load:")
        key = f"{prefix}/model.pt"
        keys.append(key)

        def torch_save_upload():
            buf = io.BytesIO()
            torch.save(state, buf)
            buf.seek(0)
            s3.upload_fileobj(buf, BUCKET, key)

        def download_torch_load():
            buf = io.BytesIO()
            s3.download_fileobj(BUCKET, key, buf)
            buf.seek(0)
            return torch.load(buf, map_location=device, weights_only=True)

        timed("torch.save -> BytesIO -> boto3 upload", torch_save_upload)
        got = timed(f"boto3 download -> torch.load -> {device}", download_torch_load)
        check(got, "torch.load")
        del got
        s, b = rows[0][2], rows[3][2]
        l, bl = rows[1][2], rows[4][2]
        print(f"summary: save {s:.0f} vs {b:.0f} MiB/s ({s / b:.1f}x), "
              f"load {l:.0f} vs {bl:.0f} MiB/s ({l / bl:.1f}x), {mib:.0f} MiB")
    finally:
        for k in keys:
            try:
                s3.delete_object(Bucket=BUCKET, Key=k)
            except Exception as e:  # keep cleaning up
                print(f"demo_tensors: could not delete {k}: {e}", file=sys.stderr)
        if made_bucket:
            try:
                s3.delete_bucket(Bucket=BUCKET)
            except Exception:
                pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
