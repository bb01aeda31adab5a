"""The path benchmark (issue 19): s3direct at its defaults and at fixed concurrencies next to
its peers at their defaults, on simulated paths to the S3 server and on loopback.

    python run.py --cli BUILD/tools/s3direct --pathsim BUILD/bench/s3d-pathsim --out DIR
                  [--gib 0.5] [--rounds 3] [--paths 12M:15,40M:5,loopback] [--tools a,b]
                  [--workloads load,load_into,save,sharded]

Each simulated path is bench/pathsim.c (s3d-pathsim) in front of the S3 server of the
environment: every connection capped at RATE bytes/s in each direction, every request held
DELAY ms. "loopback" is the server itself, no proxy. The source checkpoint (llama-shaped,
--gib) is written once straight to the server as one safetensors object and as a 32-shard
checkpoint (index + shards), then each measurement is a fresh child process
(bench/peers/worker.py, the same worker as the peers benchmark) against the path's endpoint;
rounds are interleaved and rotated, bytes are checked after the timing in round 1. Before each
measurement the proxy's counters are reset (SIGUSR1); after it the row records how many
connections the tool opened and how many were open at once at most.

Ceilings: curl64 (64 parallel ranged GETs of the object, one curl each) for loads and
curlput64 (64 parallel PUTs of 1/64 of the size each) for saves: what the path carries with
more requests in flight than any tool here opens by default.

Output in DIR: rows-path.json, table-path.md and charts (GB/s per tool, each path).
"""

import argparse
import datetime
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PEERS = os.path.join(os.path.dirname(HERE), "peers")
sys.path.insert(0, PEERS)
import ckpt  # noqa: E402
import run as peers  # noqa: E402
from measure import log, pyplot  # noqa: E402

COMMAND = "BENCH_ONLY=path make bench"
TOOLS = ["curl64", "curlput64", "s3direct", "s3direct-c8", "s3direct-c64", "s3direct-unsigned",
         "s3direct-cp", "s3direct-cp-file", "s3torch", "runai", "boto3"]
WORKLOADS = ["load", "load_into", "save", "sharded"]
# Who runs which workload (the rest would only repeat a number: runai has no save, the
# ceilings move raw bytes, the sharded checkpoint is s3direct's index format).
PLAN = {
    "load": ["curl64", "s3direct", "s3direct-c8", "s3direct-c64", "s3direct-cp", "s3direct-cp-file",
             "s3torch", "runai", "boto3"],
    "load_into": ["s3direct", "s3direct-c8", "s3torch", "runai", "boto3"],
    "save": ["curlput64", "s3direct", "s3direct-c8", "s3direct-c64", "s3direct-unsigned",
             "s3direct-cp", "s3torch", "boto3"],
    "sharded": ["s3direct", "s3direct-c8"],
}
CEILING = {"load": "curl64", "load_into": "curl64", "sharded": "curl64", "save": "curlput64"}
ABOUT = dict(peers.ABOUT, **{
    "curl64": "64 parallel `curl -r` ranged GETs into /dev/null: the path's GET ceiling",
    "curlput64": "64 parallel `curl -T` PUTs of 1/64 of the size each: the path's PUT ceiling",
    "s3direct": "s3direct at its defaults (adaptive concurrency, up to 512 requests)",
    "s3direct-c8": "s3direct with the concurrency fixed at 8 (the old default)",
    "s3direct-c64": "s3direct with the concurrency fixed at 64",
    "s3direct-cp": "the CLI at its defaults: loads `s3direct cp s3://... -` to /dev/null, saves "
                   "`s3direct cp FILE s3://...` from the state's safetensors file on /dev/shm "
                   "(issue 34: the same bytes as the library's, on the same budget)",
    "s3direct-cp-file": "the CLI at its defaults, `s3direct cp s3://... /dev/shm/FILE` (a "
                        "download to a file)",
    "s3direct-unsigned": "s3direct at its defaults but payload_signing=\"unsigned\" (no SHA-256 "
                         "of the bytes over http, as s3torchconnector's CRT sends)",
})


def parse_path(p):
    """"12M:15" -> ("12 MB/s + 15 ms", "12M", "15"); "loopback" -> ("loopback", None, None)."""
    if p == "loopback":
        return "loopback (no proxy)", None, None
    rate, delay = p.split(":")
    return f"{rate}B/s per connection + {delay} ms", rate, delay


class Path:
    """One s3d-pathsim in front of the server (None for loopback)."""

    def __init__(self, pathsim, upstream, rate, delay, stats):
        from urllib.parse import urlsplit

        u = urlsplit(upstream)
        self.stats = stats
        self.proc = subprocess.Popen(
            [pathsim, "--listen", "127.0.0.1:0", "--upstream", f"{u.hostname}:{u.port or 80}",
             "--rate", rate, "--delay-ms", delay, "--stats", stats],
            stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline().strip()
        if not line.startswith("pathsim: listening on "):
            raise RuntimeError(f"pathsim did not start: {line!r}")
        self.endpoint = "http://" + line.rsplit(" ", 1)[1]

    def reset(self):
        self.proc.send_signal(signal.SIGUSR1)
        time.sleep(0.2)

    def read(self):
        time.sleep(0.25)  # the stats file is rewritten at most every 100 ms
        with open(self.stats) as f:
            return json.load(f)

    def close(self):
        self.proc.terminate()
        self.proc.wait()


def write_sharded(spec, gib):
    """The same tensors as a 32-shard s3direct checkpoint, written straight to the server in a
    child process (its tensors go back to the OS when it exits)."""
    key = "peers/sharded/model.safetensors.index.json"
    code = (
        "import sys, json; sys.path.insert(0, %r); import ckpt, s3direct\n"
        "spec = json.load(open(sys.argv[1]))\n"
        "state = ckpt.read_raw(spec['tensors'], spec['state_path'])\n"
        "total = ckpt.nbytes(spec['tensors'])\n"
        "s3direct.save(state, f\"s3://{spec['bucket']}/%s\", shard_size=total // 32 + 1,\n"
        "              client=s3direct.Client(endpoint_url=spec['endpoint']))\n") % (PEERS, key)
    tmp = spec["state_path"] + ".spec.json"
    json.dump(spec, open(tmp, "w"))
    subprocess.run([sys.executable, "-c", code, tmp], check=True)
    os.unlink(tmp)
    return key


def summarize(rows, paths, workloads):
    lines = []
    notes = []
    out = {}
    for label in paths:
        lines += [f"### {label}", "",
                  "| workload | tool | GB/s (median, min–max) | ÷ path ceiling | s3direct ÷ tool |"
                  " connections opened (peak open) | client CPU-s/GB | bytes checked |",
                  "|---|---|---|---|---|---|---|---|"]
        for w in workloads:
            med = {}
            for t in PLAN[w]:
                rs = [r for r in rows if r["path"] == label and r["tool"] == t
                      and r["workload"] == w and "round" in r]
                ok = [r for r in rs if "error" not in r]
                wrong = any(r.get("verified") is False for r in rs)
                s = {"n": len(ok), "gbps": statistics.median([r["gbps"] for r in ok])
                     if ok and not wrong else None,
                     "min": min((r["gbps"] for r in ok), default=0),
                     "max": max((r["gbps"] for r in ok), default=0),
                     "cpu": statistics.median([r["cpu_s_per_gb"] for r in ok]) if ok else None,
                     "conns": statistics.median([r["conns"] for r in ok if "conns" in r])
                     if any("conns" in r for r in ok) else None,
                     "peak": statistics.median([r["peak_conns"] for r in ok if "peak_conns" in r])
                     if any("peak_conns" in r for r in ok) else None,
                     "note": next((r["note"] for r in ok if r.get("note")), None),
                     "verified": next((r.get("verified") for r in rs if r.get("verify")), None),
                     "error": "WRONG BYTES" if wrong else next((r["error"] for r in rs
                                                               if "error" in r), None)}
                med[t] = s
                out[(label, t, w)] = s
            ceil = med.get(CEILING[w], {}).get("gbps")
            ref = med.get("s3direct", {}).get("gbps")
            for t in PLAN[w]:
                s = med[t]
                if s["gbps"] is None:
                    lines.append(f"| {w} | {t} | — | — | — | — | — | {s['error'] or 'no run'} |")
                    continue
                c = "—" if s["conns"] is None else f"{s['conns']:.0f} ({s['peak']:.0f})"
                ver = {True: "yes", False: "**MISMATCH**", None: "n/a"}[s["verified"]]
                of_ceil = f"{s['gbps'] / ceil:.2f}×" if ceil else "—"
                vs = f"{ref / s['gbps']:.2f}×" if ref else "—"
                if s["note"]:
                    notes.append(f"{w} / {t}: {s['note']}")
                lines.append(f"| {w} | {t}{'¹' if s['note'] else ''} | "
                             f"{s['gbps']:.3f} ({s['min']:.3f}–{s['max']:.3f}) | "
                             f"{of_ceil} | {vs} | {c} | {s['cpu']:.2f} | {ver} |")
        lines.append("")
    lines += [f"¹ {n}" for n in sorted(set(notes))] + ([""] if notes else [])
    lines += ["Tools:"] + [f"- {t}: {ABOUT.get(t, t)}" for t in TOOLS]
    return out, "\n".join(lines) + "\n"


def charts(summary, paths, workloads, out_dir, title, footer):
    plt = pyplot("path")
    files = []
    if plt is None:
        return files
    fig, axes = plt.subplots(1, len(paths), figsize=(5.5 * len(paths), 4.8), squeeze=False)
    for ax, label in zip(axes[0], paths):
        tools = [t for t in TOOLS if any(t in PLAN[w] for w in workloads)]
        width = 0.8 / len(workloads)
        for i, w in enumerate(workloads):
            xs, ys = [], []
            for j, t in enumerate(tools):
                s = summary.get((label, t, w))
                if s and s["gbps"]:
                    xs.append(j + i * width)
                    ys.append(s["gbps"])
            ax.bar(xs, ys, width, label=w)
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(tools))])
        ax.set_xticklabels(tools, rotation=45, ha="right", fontsize=8)
        ax.set_title(label, fontsize=10)
        ax.set_ylabel("GB/s (median)")
        ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.text(0.01, 0.005, footer, fontsize=6)
    fig.tight_layout(rect=(0, 0.03, 1, 0.95))
    p = os.path.join(out_dir, "path-gbps.png")
    fig.savefig(p, dpi=110)
    files.append(p)
    return files


def write_results(args, spec, rows, paths, workloads, rounds_done):
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    machine = f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.node()}"
    loads = [r["load1"] for r in rows if "load1" in r]
    title = (f"{spec['sizes']['tensors'] / 1e9:.2f} GB, {len(spec['tensors'])} tensors, "
             f"{rounds_done} rounds, {when}")
    command = (f"{COMMAND} (bench/path/run.py --gib {args.gib} --rounds {args.rounds} "
               f"--paths {args.paths})")
    head = (f"{title}; {machine}; load average {min(loads, default=0):.2f}-"
            f"{max(loads, default=0):.2f} during the run\ncommand: {command}\n\n")
    summary, table = summarize(rows, paths, workloads)
    with open(os.path.join(args.out, "rows-path.json"), "w") as f:
        json.dump({"when": when, "machine": machine, "command": command, "rows": rows}, f,
                  indent=1)
    with open(os.path.join(args.out, "table-path.md"), "w") as f:
        f.write(head + table)
    files = charts(summary, paths, workloads, args.out, title, f"{machine}; {command}")
    return head + table, files


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("--pathsim", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--gib", type=float, default=0.5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--paths", default="12M:15,40M:5,loopback")
    ap.add_argument("--tools", default=",".join(TOOLS))
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--timeout", type=int, default=300)
    args = ap.parse_args()
    tools = args.tools.split(",")
    workloads = args.workloads.split(",")
    for w in workloads:
        PLAN[w] = [t for t in PLAN[w] if t in tools]
    os.makedirs(args.out, exist_ok=True)
    setup_args = argparse.Namespace(gib=args.gib, cli=args.cli, tools="s3direct,s3torch")
    spec, s3 = peers.setup(setup_args)
    upstream = spec["endpoint"]
    if "sharded" in workloads:
        spec["keys"]["sharded"] = write_sharded(spec, args.gib)
    log(f"path: source objects written to {upstream}: {spec['sizes']['tensors'] / 1e9:.2f} GB")
    labels = [parse_path(p)[0] for p in args.paths.split(",")]
    rows = []
    try:
        peers.warm(spec)
        for p in args.paths.split(","):
            label, rate, delay = parse_path(p)
            proxy = None
            if rate is not None:
                proxy = Path(args.pathsim, upstream, rate, delay,
                             os.path.join(args.out, "pathsim-stats.json"))
            ep = proxy.endpoint if proxy else upstream
            spec_path = os.path.join(args.out, f"spec-path-{p.replace(':', '_')}.json")
            json.dump(dict(spec, endpoint=ep), open(spec_path, "w"))
            log(f"path: {label} at {ep}")
            runnable = {(t, w) for w in workloads for t in PLAN[w]}
            try:
                for rnd in range(args.rounds):
                    verify = rnd == 0
                    log(f"path: {label}: round {rnd + 1}/{args.rounds}")
                    for w in workloads:
                        ts = [t for t in PLAN[w] if (t, w) in runnable]
                        k = rnd % max(1, len(ts))
                        for t in ts[k:] + ts[:k]:
                            if proxy:
                                proxy.reset()
                            r = peers.measure(spec_path, t, w, args.out, verify, args.timeout)
                            if proxy:
                                st = proxy.read()
                                r["conns"], r["peak_conns"] = st["accepted"], st["peak_open"]
                            r.update(path=label, load1=os.getloadavg()[0])
                            if verify:
                                r["verify"] = True
                            if not r.get("cannot_run"):
                                r["round"] = rnd
                            rows.append(r)
                            if "error" in r or r.get("verified") is False:
                                runnable.discard((t, w))
                            if "error" in r:
                                log(f"  {w:10s} {t:13s} {r['error']}")
                                continue
                            log(f"  {w:10s} {t:13s} {r['gbps']:.3f} GB/s "
                                f"{r.get('conns', '-')} conns (peak {r.get('peak_conns', '-')})"
                                + {True: " bytes ok", False: " WRONG BYTES",
                                   None: ""}[r.get("verified")])
                        if w == "save":
                            peers.gc_server()
                    write_results(args, spec, rows, labels, workloads, rnd + 1)
            finally:
                if proxy:
                    proxy.close()
    finally:
        try:
            os.unlink(spec["state_path"])
        except OSError:
            pass
        try:
            for page in s3.get_paginator("list_objects_v2").paginate(Bucket=spec["bucket"]):
                for o in page.get("Contents", []):
                    s3.delete_object(Bucket=spec["bucket"], Key=o["Key"])
            s3.delete_bucket(Bucket=spec["bucket"])
        except Exception as e:
            log(f"path: cleanup: {e}")
        peers.gc_server()
    table, files = write_results(args, spec, rows, labels, workloads, args.rounds)
    print(table)
    for f in files:
        log(f"path: chart {f}")
    bad = [r for r in rows if r.get("verified") is False]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
