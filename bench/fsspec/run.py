"""The fsspec benchmark (issue 37): s3direct.fs next to s3fs on the same objects, each
operation as fsspec users call it, every measurement a fresh process (bench/fsspec/worker.py),
rounds interleaved and the order of the two rotated, medians. `make bench` runs it as its
`fsspec` part (BENCH_ONLY=fsspec make bench); alone:

    . /tmp/s3direct-rgw/env
    PYTHONPATH=python S3D_BUILD_DIR=build python3 bench/fsspec/run.py --out /tmp/fsspec \
        [--mib 512] [--rounds 3] [--ops cat,read,get,put,write,parquet]

s3fs comes from tests/.lightning-s3fs (scripts/deps.sh puts it there with its own botocore),
put first on the worker's PYTHONPATH. Operations (worker.py): cat = fs.cat_file of the object,
read = fs.open(...).read in 8 MiB chunks, get = fs.get_file to /dev/shm, put = fs.put_file
from /dev/shm, write = fs.open(..., "wb") written in 8 MiB chunks, parquet =
pandas.read_parquet of a table of about the same size. Bytes are checked: every read's sha256
against the source, every upload downloaded once (round 1) and compared.

Output in --out: rows-fsspec.json and table-fsspec.md (rewritten after every round).
"""

import argparse
import datetime
import hashlib
import json
import os
import statistics
import subprocess
import sys
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
S3FS_DIR = os.path.join(ROOT, "tests", ".lightning-s3fs")
IMPLS = ("s3direct", "s3fs")
COMMAND = "BENCH_ONLY=fsspec make bench"


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def sha_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(8 << 20), b""):
            h.update(b)
    return h.hexdigest()


def worker(impl, op, bucket, key, local):
    env = dict(os.environ)
    py = [os.path.join(ROOT, "python"), env.get("PYTHONPATH", "")]
    if impl == "s3fs":
        py.insert(0, S3FS_DIR)
    env["PYTHONPATH"] = os.pathsep.join(p for p in py if p)
    r = subprocess.run([sys.executable, os.path.join(HERE, "worker.py"), impl, op, bucket, key,
                        local], capture_output=True, text=True, env=env, timeout=1800)
    if r.returncode != 0:
        raise RuntimeError(f"{impl} {op}: {r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def setup(s3, bucket, mib, shm):
    import numpy as np
    import pandas as pd

    src = os.path.join(shm, "fsspec-src.bin")
    with open(src, "wb") as f:
        f.write(os.urandom(mib << 20))
    s3.upload_file(src, bucket, "obj")
    rows = (mib << 20) // 64  # 8 float64 columns
    rng = np.random.default_rng(1)
    df = pd.DataFrame({f"c{i}": rng.standard_normal(rows) for i in range(8)})
    table = os.path.join(shm, "fsspec-table.parquet")
    df.to_parquet(table, compression=None)
    s3.upload_file(table, bucket, "table.parquet")
    want_csv = hashlib.sha256(df.to_csv(index=False).encode()).hexdigest()
    return src, sha_file(src), want_csv


def table(rows, ops, load, mib, rounds):
    out = [f"# s3direct.fs and s3fs ({COMMAND})", "",
           f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, {mib} MiB object "
           f"(parquet: a table of about that size), {rounds} rounds, medians (min-max); load "
           f"average before the run: {load}. GB = 10^9 bytes; CPU: the worker process's "
           "user + system seconds over the timed window, per GB.", "",
           "| operation | s3direct.fs GB/s | s3fs GB/s | s3direct ÷ s3fs "
           "| CPU-s/GB s3direct / s3fs |",
           "|---|---|---|---|---|"]
    for op in ops:
        cell, med, cpu = {}, {}, {}
        for impl in IMPLS:
            r = [x for x in rows if x["op"] == op and x["impl"] == impl]
            if not r:
                cell[impl], med[impl], cpu[impl] = "-", None, None
                continue
            rates = [x["bytes"] / x["seconds"] / 1e9 for x in r]
            med[impl] = statistics.median(rates)
            cpu[impl] = statistics.median(x["cpu"] / (x["bytes"] / 1e9) for x in r)
            cell[impl] = f"{med[impl]:.3f} ({min(rates):.3f}-{max(rates):.3f})"
        ratio = (f"**{med['s3direct'] / med['s3fs']:.2f}×**"
                 if med["s3direct"] and med["s3fs"] else "-")
        cpus = " / ".join(f"{cpu[i]:.2f}" if cpu[i] is not None else "-" for i in IMPLS)
        out.append(f"| {op} | {cell['s3direct']} | {cell['s3fs']} | {ratio} | {cpus} |")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--mib", type=int, default=512)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--ops", default="cat,read,get,put,write,parquet")
    a = ap.parse_args()
    import boto3

    if not os.path.isdir(os.path.join(S3FS_DIR, "s3fs")):
        raise SystemExit(f"fsspec bench: s3fs is not in {S3FS_DIR} (scripts/deps.sh)")
    os.makedirs(a.out, exist_ok=True)
    ops = a.ops.split(",")
    load = " ".join(open("/proc/loadavg").read().split()[:3])
    log(f"fsspec bench: load average {load}")
    s3 = boto3.client("s3")
    bucket = "bench-fsspec-" + uuid.uuid4().hex[:8]
    s3.create_bucket(Bucket=bucket)
    shm = "/dev/shm"
    rows = []
    try:
        src, want, want_csv = setup(s3, bucket, a.mib, shm)
        dl = os.path.join(shm, "fsspec-dl.bin")
        for rnd in range(a.rounds):
            for op in ops:
                order = IMPLS if (rnd + ops.index(op)) % 2 == 0 else IMPLS[::-1]
                for impl in order:
                    key = "table.parquet" if op == "parquet" else (
                        f"up-{impl}" if op in ("put", "write") else "obj")
                    local = src if op in ("put", "write") else dl
                    r = worker(impl, op, bucket, key, local)
                    if op in ("cat", "read", "get") and r["sha256"] != want:
                        raise RuntimeError(f"{impl} {op}: wrong bytes")
                    if op == "parquet" and r["sha256"] != want_csv:
                        raise RuntimeError(f"{impl} parquet: another table")
                    if op in ("put", "write") and rnd == 0:
                        s3.download_file(bucket, key, dl)
                        if sha_file(dl) != want:
                            raise RuntimeError(f"{impl} {op}: the object is not the file")
                    if os.path.exists(dl) and op == "get":
                        os.unlink(dl)
                    r.update(impl=impl, op=op, round=rnd)
                    rows.append(r)
                    log(f"round {rnd + 1} {op:8s} {impl:9s} {r['bytes'] / r['seconds'] / 1e9:.3f} "
                        f"GB/s  cpu {r['cpu']:.2f}s")
            with open(os.path.join(a.out, "rows-fsspec.json"), "w") as f:
                json.dump(rows, f, indent=1)
            with open(os.path.join(a.out, "table-fsspec.md"), "w") as f:
                f.write(table(rows, ops, load, a.mib, rnd + 1))
        print(table(rows, ops, load, a.mib, a.rounds))
    finally:
        for name in ("fsspec-src.bin", "fsspec-table.parquet", "fsspec-dl.bin"):
            p = os.path.join(shm, name)
            if os.path.exists(p):
                os.unlink(p)
        b = boto3.resource("s3").Bucket(bucket)
        b.objects.all().delete()
        b.delete()


if __name__ == "__main__":
    main()
