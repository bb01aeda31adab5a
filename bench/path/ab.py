"""A/B of two builds (or settings) of s3direct on one path, side by side in one run.

    python bench/path/ab.py --endpoint URL --workload save|load|sharded --rounds N \
        --build old=/path/to/old/build --build new=build \
        --variant 'old=old' --variant 'new=new' \
        --variant 'c24=new:{"min_concurrency": 24, "max_concurrency": 24}'

Each variant is a build (a folder holding libs3direct.so, as S3D_BUILD_DIR takes it) and the
keyword arguments of its s3direct.Client. Each measurement is a fresh Python process that
imports torch and s3direct first and times only the save or load, as an application's first
call does (the client's concurrency level starts from nothing). Variants run in rotated order
each round; a saved object is deleted and the server's garbage collected (radosgw-admin gc,
when CEPH_CONF is set) before the next, so that no round pays for an earlier one.

The checkpoint is the benchmark's llama-shaped state dict (bench/peers/ckpt.py) of --gib GiB:
saves write it; loads read it from s3://BUCKET/ab/one.safetensors and the 32-shard
s3://BUCKET/ab/sh/model.safetensors.index.json, written once by --setup through the endpoint
given. Prints one line per measurement and the median, min and max of each variant, with the
load average beside each line: run it alone, nothing else on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

CHILD = r'''
import json, os, sys, time
sys.path.insert(0, os.path.join(sys.argv[1], "bench", "peers"))
import ckpt, s3direct, torch
ep, bucket, what, key, gib = sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], float(sys.argv[6])
c = s3direct.Client(endpoint_url=ep, **json.loads(os.environ["AB_KW"]))
if what in ("save", "setup"):
    spec = ckpt.llama_spec(int(gib * (1 << 30)))
    t = ckpt.make_tensors(spec, 1)
    total = ckpt.nbytes(spec)
    if what == "setup":
        s3direct.save(t, f"s3://{bucket}/ab/one.safetensors", client=c)
        s3direct.save(t, f"s3://{bucket}/ab/sh/model.safetensors.index.json",
                      shard_size=total // 32 + 1, client=c)
        sys.exit(0)
    t0 = time.perf_counter()
    s3direct.save(t, f"s3://{bucket}/{key}", client=c)
    dt = time.perf_counter() - t0
else:
    uri = {"load": f"s3://{bucket}/ab/one.safetensors",
           "sharded": f"s3://{bucket}/ab/sh/model.safetensors.index.json"}[what]
    t0 = time.perf_counter()
    r = s3direct.load(uri, client=c)
    dt = time.perf_counter() - t0
    total = sum(v.numel() * v.element_size() for v in r.values())
print(total / dt / 1e9)
'''


def run_child(build, kw, endpoint, bucket, what, key, gib):
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"), S3D_BUILD_DIR=build,
               AB_KW=json.dumps(kw))
    out = subprocess.run([sys.executable, "-c", CHILD, ROOT, endpoint, bucket, what, key,
                          str(gib)], env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"ab: {what} failed:\n{out.stderr[-3000:]}")
    return float(out.stdout.strip().splitlines()[-1]) if what != "setup" else 0.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--bucket", default="ab-bench")
    ap.add_argument("--workload", choices=["save", "load", "sharded"], required=True)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--gib", type=float, default=0.5)
    ap.add_argument("--build", action="append", required=True, help="NAME=DIR")
    ap.add_argument("--variant", action="append", required=True, help="NAME=BUILD[:KWARGS]")
    ap.add_argument("--setup", metavar="URL", help="write the load objects through URL first")
    args = ap.parse_args()
    builds = dict(b.split("=", 1) for b in args.build)
    variants = {}
    for v in args.variant:
        name, rest = v.split("=", 1)
        b, _, kw = rest.partition(":")
        if b not in builds:
            raise SystemExit(f"ab: variant {name}: no build named {b}")
        variants[name] = (os.path.abspath(builds[b]), json.loads(kw) if kw else {})
    import boto3  # noqa: PLC0415 (only the driver needs it)
    s3 = boto3.client("s3", endpoint_url=args.setup or args.endpoint)
    try:
        s3.create_bucket(Bucket=args.bucket)
    except s3.exceptions.BucketAlreadyOwnedByYou:
        pass
    if args.setup:
        first = next(iter(variants.values()))
        run_child(first[0], {}, args.setup, args.bucket, "setup", "", args.gib)
    conf = os.environ.get("CEPH_CONF")
    res = {n: [] for n in variants}
    names = list(variants)
    for rnd in range(args.rounds):
        k = rnd % len(names)
        for n in names[k:] + names[:k]:
            key = f"ab/save-{n}-{rnd}.safetensors"
            g = run_child(*variants[n], args.endpoint, args.bucket, args.workload, key, args.gib)
            res[n].append(g)
            print(f"round {rnd + 1} {n:12s} {g:.3f} GB/s  load1 {os.getloadavg()[0]:.2f}",
                  flush=True)
            if args.workload == "save":
                s3.delete_object(Bucket=args.bucket, Key=key)
                if conf:
                    subprocess.run(["radosgw-admin", "-c", conf, "gc", "process",
                                    "--include-all"], capture_output=True)
    for n, v in res.items():
        print(f"{args.workload} {n:12s} median {statistics.median(v):.3f} GB/s "
              f"(min {min(v):.3f}, max {max(v):.3f}, n {len(v)})")


if __name__ == "__main__":
    main()
