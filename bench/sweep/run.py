"""The shape of s3direct's cost (issue 13, section 3): `make bench` runs it through
bench/sweep/run.sh (`BENCH_ONLY=sweep make bench` for only it).

    python run.py --out DIR [--reps 2] [--size-reps 1] [--dims size,tensors,...]
                  [--sizes 64M,256M,1G,2G,4G] [--tensor-bytes 256M] [--knob-bytes 1G]

Against the S3 server of the environment. Four sweeps, each point a fresh child process
(bench/sweep/worker.py: wall time, client CPU, peak RSS growth, page faults):
  size         checkpoint size 64 MiB -> 4 GiB (llama-shaped, 264 tensors): save, then load
  tensors      10 -> 100,000 equal tensors at a fixed size (--tensor-bytes): save, then load
  concurrency  max_concurrency 1 -> 32 at --knob-bytes: load of one object, and save
  part_size    part size 5 -> 64 MiB at --knob-bytes: load of one object, and save
Repetitions are interleaved (every point once, then again); medians are reported. The size and
tensor-count sweeps run --size-reps times (default 1: their shape is the point, and the 4 GiB
points are the longest), the knob sweeps --reps times (default 2: defaults are chosen from
them). Output in
DIR: sweep-rows.json (every raw row), sweep-table.md and one chart per sweep
(sweep-<dim>.png: GB/s, client CPU-s/GB and peak RSS growth against the swept value, the
library's default marked)."""

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "peers"))
from measure import log, pyplot  # noqa: E402

MiB, GiB = 1 << 20, 1 << 30
DEFAULTS = {"concurrency": 8, "part_size": 8 * MiB}  # src/engine/client_impl.h, pool.h
DIMS = ["size", "tensors", "concurrency", "part_size"]
LABEL = {"size": "checkpoint size", "tensors": "tensors (same total size)",
         "concurrency": "max_concurrency", "part_size": "part size"}


def parse_bytes(s):
    s = s.strip().upper()
    mult = {"K": 1 << 10, "M": MiB, "G": GiB}.get(s[-1:], 1)
    return int(float(s[:-1] if s[-1:] in "KMG" else s) * mult)


def fmt_x(dim, x):
    if dim in ("size", "part_size"):
        return f"{x / GiB:g} GiB" if x >= GiB else f"{x / MiB:g} MiB"
    return f"{x:,}"


class Sweep:
    def __init__(self, args):
        import boto3

        self.args = args
        self.s3 = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"])
        self.bucket = f"s3d-sweep-{os.getpid()}-{int(time.time())}"
        self.s3.create_bucket(Bucket=self.bucket)
        self.rows = []

    def point(self, dim, x, rep, op, key, **p):
        params = {"op": op, "uri": f"s3://{self.bucket}/{key}", "shape": "llama",
                  "bytes": 0, "tensors": 0, "concurrency": 0, "part_size": 0}
        params.update(p)
        out = os.path.join(self.args.out, "sweep-point.json")
        try:
            subprocess.run([sys.executable, os.path.join(HERE, "worker.py"), json.dumps(params),
                            out], timeout=self.args.timeout, check=False)
            row = json.load(open(out))
            os.unlink(out)
        except (subprocess.TimeoutExpired, OSError, ValueError) as e:
            row = dict(params, error=f"{type(e).__name__}: {e}"[:200])
        row.update(dim=dim, x=x, rep=rep)
        self.rows.append(row)
        if "error" in row:
            log(f"  {dim:11s} {fmt_x(dim, x):>10s} {op:4s} {row['error']}")
        else:
            log(f"  {dim:11s} {fmt_x(dim, x):>10s} {op:4s} {row['gbps']:.3f} GB/s "
                f"{row['cpu_s_per_gb']:.2f} CPU-s/GB {row['rss_growth_mib']:.0f} MiB")
        return row

    def drop(self, key):
        """Deletes an object and lets the RAM-backed server collect it."""
        self.s3.delete_object(Bucket=self.bucket, Key=key)
        conf = os.environ.get("CEPH_CONF")
        if conf:
            subprocess.run(["timeout", "120", "radosgw-admin", "-c", conf, "gc", "process",
                            "--include-all"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)

    def size_like(self, dim, xs, shape):
        """size / tensors: each point saves its own checkpoint, loads it, deletes it."""
        for rep in range(self.args.size_reps):
            for x in xs:
                p = ({"bytes": x, "shape": "llama"} if dim == "size" else
                     {"bytes": self.args.tensor_bytes, "tensors": x, "shape": "flat"})
                key = f"sweep/{dim}-{x}.safetensors"
                if "error" not in self.point(dim, x, rep, "save", key, **p):
                    self.point(dim, x, rep, "load", key, **p)
                self.drop(key)

    def knob(self, dim, xs):
        """concurrency / part_size: loads of one object written with the defaults, and saves."""
        base = {"bytes": self.args.knob_bytes, "shape": "llama"}
        key = f"sweep/{dim}-base.safetensors"
        if "error" in self.point(dim, 0, -1, "save", key, **base):
            return
        self.rows.pop()  # the object the loads read, not a point of the sweep
        for rep in range(self.args.reps):
            for x in xs:
                self.point(dim, x, rep, "load", key, **dict(base, **{dim: x}))
                self.point(dim, x, rep, "save", f"sweep/{dim}-save.safetensors",
                           **dict(base, **{dim: x}))
                self.drop(f"sweep/{dim}-save.safetensors")
        self.drop(key)

    def close(self):
        try:
            for o in self.s3.list_objects_v2(Bucket=self.bucket).get("Contents", []):
                self.drop(o["Key"])
            self.s3.delete_bucket(Bucket=self.bucket)
        except Exception as e:
            log(f"sweep: cleanup: {e}")


def summarize(rows):
    """{(dim, x, op): medians} over the repetitions without error."""
    out = {}
    for r in rows:
        if "error" in r:
            continue
        out.setdefault((r["dim"], r["x"], r["op"]), []).append(r)
    med = {}
    for k, rs in out.items():
        med[k] = {f: statistics.median(r[f] for r in rs)
                  for f in ("gbps", "cpu_s_per_gb", "rss_growth_mib", "minor_faults", "bytes",
                            "n_tensors")}
        med[k]["n"] = len(rs)
    return med


def best(med, dim, op):
    """The swept value with the highest median GB/s; among those within 5 % of it, the one
    with the least client CPU per GB (on two cores, CPU is taken from the server)."""
    pts = [(x, v) for (d, x, o), v in med.items() if d == dim and o == op]
    if not pts:
        return None
    top = max(v["gbps"] for _, v in pts)
    near = [(v["cpu_s_per_gb"], x) for x, v in pts if v["gbps"] >= 0.95 * top]
    return min(near)[1]


def table(med, dims, head):
    lines = [head, ""]
    for dim in dims:
        xs = sorted({x for (d, x, _) in med if d == dim})
        if not xs:
            continue
        lines += [f"### {LABEL[dim]}", "",
                  f"| {LABEL[dim]} | tensors | load GB/s | load CPU-s/GB | load RSS MiB | "
                  "save GB/s | save CPU-s/GB | save RSS MiB |", "|---|---|---|---|---|---|---|---|"]
        for x in xs:
            cells = [fmt_x(dim, x)]
            lo, sv = med.get((dim, x, "load")), med.get((dim, x, "save"))
            cells.append(f"{int((lo or sv)['n_tensors']):,}")
            for m in (lo, sv):
                cells += ([f"{m['gbps']:.3f}", f"{m['cpu_s_per_gb']:.2f}",
                           f"{m['rss_growth_mib']:.0f}"] if m else ["—"] * 3)
            lines.append("| " + " | ".join(cells) + " |")
        if dim in DEFAULTS:
            bl, bs = best(med, dim, "load"), best(med, dim, "save")
            lines += ["", f"Default {fmt_x(dim, DEFAULTS[dim])}; best here (highest GB/s, then "
                      f"least CPU within 5 %): load {fmt_x(dim, bl) if bl else '—'}, save "
                      f"{fmt_x(dim, bs) if bs else '—'}."]
        lines.append("")
    return "\n".join(lines)


def charts(med, dims, out_dir, title):
    plt = pyplot("sweep")
    if plt is None:
        return []
    files = []
    for dim in dims:
        xs = sorted({x for (d, x, _) in med if d == dim})
        if not xs:
            continue
        fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
        scale = MiB if dim in ("size", "part_size") else 1
        for ax, (field, ylabel) in zip(axes, (("gbps", "GB/s"), ("cpu_s_per_gb",
                                                                  "client CPU-s per GB"),
                                              ("rss_growth_mib", "peak RSS growth, MiB"))):
            for op, mark in (("load", "o-"), ("save", "s--")):
                pts = [(x / scale, med[(dim, x, op)][field]) for x in xs
                       if (dim, x, op) in med]
                if pts:
                    ax.plot(*zip(*pts), mark, label=op)
            if dim in DEFAULTS:
                ax.axvline(DEFAULTS[dim] / scale, color="grey", ls=":",
                           label=f"default {fmt_x(dim, DEFAULTS[dim])}")
            ax.set_xscale("log", base=2)
            ax.set_xlabel(LABEL[dim] + (" (MiB)" if scale == MiB else ""))
            ax.set_ylabel(ylabel)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
        note = ""
        if dim in DEFAULTS:
            bl, bs = best(med, dim, "load"), best(med, dim, "save")
            note = (f"\ndefault {fmt_x(dim, DEFAULTS[dim])}; best here: load "
                    f"{fmt_x(dim, bl) if bl else '—'}, save {fmt_x(dim, bs) if bs else '—'}")
        fig.suptitle(f"s3direct sweep: {LABEL[dim]} — {title}{note}", fontsize=8)
        fig.tight_layout()
        path = os.path.join(out_dir, f"sweep-{dim.replace('_', '-')}.png")
        fig.savefig(path, dpi=90)
        plt.close(fig)
        files.append(path)
    return files


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--size-reps", type=int, default=1)
    ap.add_argument("--dims", default=",".join(DIMS))
    ap.add_argument("--sizes", default="64M,256M,1G,2G,4G")
    ap.add_argument("--tensor-counts", default="10,100,1000,10000,100000")
    ap.add_argument("--tensor-bytes", default="256M")
    ap.add_argument("--concurrency", default="1,2,4,8,16,32")
    ap.add_argument("--part-sizes", default="5M,8M,16M,32M,64M")
    ap.add_argument("--knob-bytes", default="1G")
    ap.add_argument("--timeout", type=int, default=600)
    ap.add_argument("--replot", help="charts and table again from a sweep-rows.json")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    dims = [d for d in args.dims.split(",") if d]
    if args.replot:
        doc = json.load(open(args.replot))
        med = summarize(doc["rows"])
        charts(med, dims, args.out, doc["title"])
        print(table(med, dims, doc["head"]))
        return 0
    args.tensor_bytes = parse_bytes(args.tensor_bytes)
    args.knob_bytes = parse_bytes(args.knob_bytes)
    t_start = time.time()
    sw = Sweep(args)
    try:
        for dim in dims:
            log(f"sweep: {LABEL[dim]}")
            if dim == "size":
                sw.size_like(dim, [parse_bytes(s) for s in args.sizes.split(",")], "llama")
            elif dim == "tensors":
                sw.size_like(dim, [int(s) for s in args.tensor_counts.split(",")], "flat")
            elif dim == "concurrency":
                sw.knob(dim, [int(s) for s in args.concurrency.split(",")])
            elif dim == "part_size":
                sw.knob(dim, [parse_bytes(s) for s in args.part_sizes.split(",")])
    finally:
        sw.close()
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    machine = f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.node()}"
    cmd = "make bench (BENCH_ONLY=sweep: bench/sweep/run.sh)"
    title = f"{when}; {machine}; {cmd}"
    head = (f"{when}; {machine}; load average {os.getloadavg()[0]:.2f}; "
            f"{(time.time() - t_start) / 60:.1f} min\ncommand: {cmd} with " +
            " ".join(sys.argv[1:]) + f"\nmedians of {args.size_reps} (size, tensors) and "
            f"{args.reps} (concurrency, part size) interleaved repetitions, each point a fresh "
            "process; load = s3direct.load into new CPU tensors (CRC32C checked), "
            "save = s3direct.save; knob sweeps at "
            f"{args.knob_bytes / GiB:g} GiB, tensor counts at {args.tensor_bytes / MiB:g} MiB")
    med = summarize(sw.rows)
    with open(os.path.join(args.out, "sweep-rows.json"), "w") as f:
        json.dump({"when": when, "machine": machine, "title": title, "head": head,
                   "rows": sw.rows}, f, indent=1)
    text = table(med, dims, head)
    with open(os.path.join(args.out, "sweep-table.md"), "w") as f:
        f.write(text)
    print(text)
    for p in charts(med, dims, args.out, title):
        log(f"sweep: chart {p}")
    return 1 if any("error" in r for r in sw.rows) else 0


if __name__ == "__main__":
    sys.exit(main())
