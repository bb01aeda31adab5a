"""The stream benchmark (issue 36, item 4): `s3direct.stream()` handing tensors over as they
arrive, against `s3direct.load()` then a pass over every tensor, next to runai-model-streamer's
SafetensorsStreamer and safetensors' safe_open iteration, on loopback and on a simulated path.
`make bench` runs it as its `stream` part (BENCH_ONLY=stream make bench); alone:

    . /tmp/s3direct-rgw/env   # or any S3 server: AWS_ENDPOINT_URL and keys
    PYTHONPATH=python S3D_BUILD_DIR=build bench/.venv-peers/bin/python bench/stream/run.py \
        --cli build/tools/s3direct --pathsim build/bench/s3d-pathsim --out /tmp/stream \
        [--gib 2] [--rounds 3] [--paths 12M:15,loopback] [--tools a,b]

The checkpoint is bench/peers/ckpt.py's llama-shaped bf16 state dict (--gib), written once to
the server as one safetensors object (bench/peers/run.py's setup). The pass ("float") is a
dtype conversion done on every tensor, t.float() (bf16 -> float32), on one thread. Rows (each
a fresh child process, bench/stream/worker.py):

    s3direct-load   + float / none   load(uri), then the pass over every tensor
    s3direct-stream + float / none   for name, t in stream(uri): the pass on t as it arrives
    runai           + float / none   SafetensorsStreamer: stream_file(uri), get_tensors()
    safetensors     + float          boto3 download_file to /dev/shm, then safe_open(path,
                                     "pt") iterating get_tensor (timed from the download)
    work-alone      + float          the pass over the tensors already in memory

Each row: time to the first tensor in the consumer's hand, to the last, and the total (the
pass included); client CPU-seconds over that window (user + system of the worker, all threads
and children; the row also keeps the whole child process's from RUSAGE_CHILDREN). Paths:
"loopback" (the server itself) or "RATE:DELAY_MS" (bench/pathsim.c in front of it, as
bench/path/run.py runs it). Rounds are interleaved (every row once per round) and rotated; in
round 1 every row's tensors are checked after the timing (bench/stream/worker.py). The table
shows medians with min-max and the issue's targets as PASS/MISS (never asserted).

Output in --out: rows-stream.json and table-stream.md (rewritten after every round) and
stream.png.
"""

import argparse
import datetime
import hashlib
import importlib.util
import json
import os
import platform
import resource
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.dirname(HERE)
ROOT = os.path.dirname(BENCH)
sys.path.insert(0, os.path.join(BENCH, "peers"))
import ckpt  # noqa: E402
import run as peers  # noqa: E402
from measure import log, pyplot  # noqa: E402

_spec = importlib.util.spec_from_file_location("s3d_bench_path", os.path.join(BENCH, "path",
                                                                                "run.py"))
pathrun = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(pathrun)  # Path (s3d-pathsim in front of the server), parse_path

COMMAND = "BENCH_ONLY=stream make bench"
TOOLS = ["work-alone", "s3direct-load", "s3direct-stream", "runai", "safetensors",
         "s3direct-stream-min64"]
# (tool, work) rows, in the order of the first round (rotated after)
PLAN = [("work-alone", "float"), ("s3direct-load", "float"), ("s3direct-stream", "float"),
        ("runai", "float"), ("safetensors", "float"), ("s3direct-load", "none"),
        ("s3direct-stream", "none"), ("runai", "none"), ("s3direct-stream-min64", "none")]
ABOUT = {
    "work-alone": "the pass (t.float() on every tensor) over tensors already in memory",
    "s3direct-load": "`s3direct.load(uri)`, then the pass over every tensor",
    "s3direct-stream": "`for name, t in s3direct.stream(uri)`: the pass on each tensor as it "
                       "arrives",
    "s3direct-stream-min64": "the stream on a `Client(min_concurrency=64)`: 64 requests in "
                             "flight from the first one instead of the controller's start of "
                             "24 (the first tensor's bound on a capped path)",
    "runai": "runai-model-streamer `SafetensorsStreamer`: `stream_file(uri)`, `get_tensors()`, "
             "the pass on each (a view into its buffer) as it arrives; default settings",
    "safetensors": "boto3 `download_file` (default TransferConfig) to /dev/shm, then "
                   "`safetensors.safe_open(path, \"pt\")` iterating `get_tensor` with the pass "
                   "on each; times count from the start of the download",
}
# The targets (2 GiB, the simulated 12 MB/s + 15 ms path for the first one)
T_FIRST, T_OVERLAP, T_LOAD, T_RUNAI = 0.05, 1.05, 0.97, 1.5


def tensor_digests(spec):
    """name -> blake2b of the tensor's raw bytes, read from the source's raw copy (the same
    hash as worker.tensor_digest)."""
    out = {}
    with open(spec["state_path"], "rb") as f:
        for t in spec["tensors"]:
            out[t["name"]] = hashlib.blake2b(f.read(ckpt.nbytes([t])),
                                             digest_size=16).hexdigest()
    return out


def measure(spec_path, tool, work, out_dir, verify, timeout):
    out = os.path.join(out_dir, f"row-{tool}-{work}.json")
    cmd = [sys.executable, os.path.join(HERE, "worker.py"), spec_path, tool, work, out]
    if verify:
        cmd.append("--verify")
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        p = subprocess.run(cmd, timeout=timeout, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
        if os.path.exists(out):
            row = json.load(open(out))
            os.unlink(out)
        else:
            tail = (p.stderr.strip().splitlines() or ["no output"])[-1]
            row = {"tool": tool, "work": work, "error": f"exit {p.returncode}: {tail}"}
    except subprocess.TimeoutExpired:
        row = {"tool": tool, "work": work, "error": f"timed out after {timeout}s"}
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    # the whole child process (interpreter start, imports, the check in round 1 included)
    row["proc_cpu_s"] = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return row


def stats(rows, label, tool, work):
    rs = [r for r in rows if r["path"] == label and r["tool"] == tool and r["work"] == work
          and "round" in r]
    wrong = any(r.get("verified") is False for r in rs)
    ok = [] if wrong else [r for r in rs if "error" not in r]
    s = {"n": len(ok), "verified": next((r.get("verified") for r in rs if r.get("verify")),
                                        None),
         "error": "WRONG BYTES" if wrong else next((r["error"] for r in rs if "error" in r),
                                                   None)}
    for f in ("first_s", "last_s", "total_s", "gbps", "cpu_s", "conns", "peak_conns"):
        v = [r[f] for r in ok if r.get(f) is not None]
        s[f] = statistics.median(v) if v else None
        s[f + "_range"] = (min(v), max(v)) if v else None
    return s


def fmt_s(s, f):
    if s[f] is None:
        return "—"
    lo, hi = s[f + "_range"]
    return f"{s[f]:.3f} ({lo:.3f}–{hi:.3f})" if s["n"] > 1 else f"{s[f]:.3f}"


def target_lines(m, simulated, gib):
    """The ratios and the issue's targets, PASS/MISS, for one path. m: (tool, work) -> stats."""
    def t(tool, work, f="total_s"):
        return m.get((tool, work), {}).get(f)

    def line(what, num, den, goal, le, applies=True, note=""):
        if not num or not den:
            return f"- {what}: — (a row is missing)"
        v = num / den
        if not applies:
            verdict = f"no target here{note}"
        else:
            ok = v <= goal if le else v >= goal
            verdict = f"target {'≤' if le else '≥'} {goal}×: **{'PASS' if ok else 'MISS'}**{note}"
        return f"- {what}: {v:.3f}× ({verdict})"
    load, work = t("s3direct-load", "none"), t("work-alone", "float")
    size_note = "" if abs(gib - 2) < 1e-9 else f"; the target is set at 2 GiB, this run is {gib:g}"
    out = [
        line("time to the first tensor (stream, no pass) ÷ the full load's time (load, no pass)",
             t("s3direct-stream", "none", "first_s"), load, T_FIRST, True, simulated,
             size_note if simulated else ": it is set on the simulated path"),
        line("stream + pass ÷ max(load, pass alone)", t("s3direct-stream", "float"),
             max(load or 0, work or 0) or None, T_OVERLAP, True),
        line("load then pass ÷ max(load, pass alone) (for comparison)",
             t("s3direct-load", "float"), max(load or 0, work or 0) or None, T_OVERLAP, True,
             False),
        line("stream's throughput ÷ load's, no pass (load time ÷ stream time)", load,
             t("s3direct-stream", "none"), T_LOAD, False),
        line("s3direct stream ÷ runai, no pass (runai time ÷ stream time)",
             t("runai", "none"), t("s3direct-stream", "none"), T_RUNAI, False),
        line("s3direct stream ÷ runai, with the pass (runai time ÷ stream time)",
             t("runai", "float"), t("s3direct-stream", "float"), T_RUNAI, False, False),
        line("s3direct stream ÷ safetensors, with the pass (safetensors time ÷ stream time)",
             t("safetensors", "float"), t("s3direct-stream", "float"), 1, False, False),
    ]
    return out


def summarize(rows, labels, plan, gib):
    lines, out = [], {}
    for label in labels:
        simulated = not label.startswith("loopback")
        lines += [f"### {label}", "",
                  "| tool | pass per tensor | first tensor, s (median, min–max) | last tensor, s |"
                  " total, s | GB/s | client CPU-s | connections opened (peak open) |"
                  " bytes checked |",
                  "|---|---|---|---|---|---|---|---|---|"]
        m = {}
        for tool, work in plan:
            s = m[(tool, work)] = out[(label, tool, work)] = stats(rows, label, tool, work)
            pass_ = "t.float()" if work == "float" else "none"
            if s["total_s"] is None:
                lines.append(f"| {tool} | {pass_} | — | — | — | — | — | — | "
                             f"{s['error'] or 'no run'} |")
                continue
            first_last = ("—", "—") if tool == "work-alone" else (fmt_s(s, "first_s"),
                                                                   fmt_s(s, "last_s"))
            c = "—" if s["conns"] is None else f"{s['conns']:.0f} ({s['peak_conns']:.0f})"
            ver = {True: "yes", False: "**MISMATCH**",
                   None: "n/a (views into its buffer; see its t.float() row)"}[s["verified"]]
            lines.append(f"| {tool} | {pass_} | {first_last[0]} | {first_last[1]} | "
                         f"{fmt_s(s, 'total_s')} | {s['gbps']:.3f} | {s['cpu_s']:.2f} | {c} | "
                         f"{ver} |")
        lines += ["", "Ratios of the medians (times; a ratio of times of the same bytes is the "
                  "inverse ratio of throughputs):", ""]
        lines += target_lines(m, simulated, gib) + [""]
    lines += ["Rows:"] + [f"- {t}: {ABOUT[t]}" for t in TOOLS if any(t == x for x, _ in plan)]
    lines += ["", "first tensor / last tensor: seconds from the start until the first / last "
              "tensor is in the consumer's hand (for load: when load() returns); total: until "
              "the last pass is done. Client CPU-s: user + system of the worker (all threads) "
              "over the same window."]
    return out, "\n".join(lines) + "\n"


def chart(summary, labels, plan, out_dir, title, footer):
    plt = pyplot("stream")
    if plt is None:
        return []
    fig, axes = plt.subplots(1, len(labels), figsize=(6.5 * len(labels), 4.2), squeeze=False)
    for ax, label in zip(axes[0], labels):
        names = [f"{t} + {'float' if w == 'float' else 'nothing'}" for t, w in plan]
        for i, (t, w) in enumerate(plan):
            s = summary.get((label, t, w))
            if not s or s["total_s"] is None:
                continue
            ax.barh(i, s["total_s"], color="0.75")
            if s["last_s"] is not None and t != "work-alone":
                ax.barh(i, s["last_s"], color="tab:blue", height=0.5)
                ax.plot([s["first_s"]], [i], "v", color="tab:red")
        ax.set_yticks(range(len(plan)))
        ax.set_yticklabels(names, fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel("seconds (red: first tensor, blue: last tensor, grey: total)")
        ax.set_title(label, fontsize=10)
    fig.suptitle(title, fontsize=10)
    fig.text(0.01, 0.005, footer, fontsize=6)
    fig.tight_layout(rect=(0, 0.03, 1, 0.95))
    p = os.path.join(out_dir, "stream.png")
    fig.savefig(p, dpi=100)
    plt.close(fig)
    return [p]


def commit():
    try:
        return subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def write_results(args, spec, rows, labels, plan, rounds_done, load_before, final=False):
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    machine = f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.node()}"
    size = (f"{spec['sizes']['tensors'] / 1e9:.2f} GB ({args.gib:g} GiB requested), "
            f"{len(spec['tensors'])} bf16 tensors")
    command = (f"{COMMAND} (bench/stream/run.py --gib {args.gib:g} --rounds {args.rounds} "
               f"--paths {args.paths})")
    load = " ".join(f"{x:.2f}" for x in load_before)
    head = (f"{when}; commit {commit()}; {machine}; load average before the run {load}; "
            f"{size}; {rounds_done} of {args.rounds} rounds\ncommand: {command}\n\n")
    summary, table = summarize(rows, labels, plan, args.gib)
    with open(os.path.join(args.out, "rows-stream.json"), "w") as f:
        json.dump({"when": when, "machine": machine, "command": command, "commit": commit(),
                   "load_before": load_before, "sizes": spec["sizes"], "rows": rows}, f,
                  indent=1)
    with open(os.path.join(args.out, "table-stream.md"), "w") as f:
        f.write(head + table)
    files = chart(summary, labels, plan, args.out, f"{size}, {rounds_done} rounds, {when}",
                  f"{machine}; commit {commit()}; {command}") if final else []
    return head + table, files


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("--pathsim", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--gib", type=float, default=2.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--paths", default="12M:15,loopback")
    ap.add_argument("--tools", default=",".join(TOOLS))
    ap.add_argument("--timeout", type=int, default=600)
    args = ap.parse_args()
    load_before = list(os.getloadavg())
    tools = args.tools.split(",")
    unknown = [t for t in tools if t not in TOOLS]
    if unknown:
        ap.error(f"unknown tools {unknown} (known: {', '.join(TOOLS)})")
    plan = [(t, w) for t, w in PLAN if t in tools]
    os.makedirs(args.out, exist_ok=True)
    spec, s3 = peers.setup(argparse.Namespace(gib=args.gib, cli=args.cli, tools="s3direct"))
    upstream = spec["endpoint"]
    rows = []
    labels = [pathrun.parse_path(p)[0] for p in args.paths.split(",")]
    try:
        spec["tensor_digests"] = tensor_digests(spec)
        log(f"stream: source object written to {upstream}: {spec['sizes']['tensors'] / 1e9:.2f}"
            f" GB, {len(spec['tensors'])} tensors")
        peers.warm(spec)
        for p in args.paths.split(","):
            label, rate, delay = pathrun.parse_path(p)
            proxy = None
            if rate is not None:
                proxy = pathrun.Path(args.pathsim, upstream, rate, delay,
                                     os.path.join(args.out, "pathsim-stats.json"))
            ep = proxy.endpoint if proxy else upstream
            spec_path = os.path.join(args.out, f"spec-stream-{p.replace(':', '_')}.json")
            json.dump(dict(spec, endpoint=ep), open(spec_path, "w"))
            log(f"stream: {label} at {ep}")
            runnable = set(plan)
            try:
                for rnd in range(args.rounds):
                    verify = rnd == 0
                    log(f"stream: {label}: round {rnd + 1}/{args.rounds}"
                        + (" (bytes checked after each timing)" if verify else ""))
                    ts = [x for x in plan if x in runnable]
                    k = rnd % max(1, len(ts))
                    for tool, work in ts[k:] + ts[:k]:  # rotated: no row always runs first
                        if proxy:
                            proxy.reset()
                        r = measure(spec_path, tool, work, args.out, verify, args.timeout)
                        if proxy:
                            st = proxy.read()
                            r["conns"], r["peak_conns"] = st["accepted"], st["peak_open"]
                        r.update(path=label, load1=os.getloadavg()[0], round=rnd)
                        if verify:
                            r["verify"] = True
                        rows.append(r)
                        if "error" in r or r.get("verified") is False:
                            runnable.discard((tool, work))  # not timed again
                        if "error" in r:
                            log(f"  {tool:15s} {work:5s} {r['error']}")
                            continue
                        first = "" if r["first_s"] is None else f"first {r['first_s']:.3f} s "
                        log(f"  {tool:15s} {work:5s} {first}last {r['last_s']:.3f} s total "
                            f"{r['total_s']:.3f} s {r['cpu_s']:.2f} CPU-s"
                            + {True: " bytes ok", False: " WRONG BYTES",
                               None: ""}[r.get("verified")])
                    write_results(args, spec, rows, labels, plan, rnd + 1, load_before)
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
            log(f"stream: cleanup: {e}")
        peers.gc_server()
    table, files = write_results(args, spec, rows, labels, plan, args.rounds, load_before,
                                 final=True)
    print(table)
    for f in files:
        log(f"stream: chart {f}")
    bad = [r for r in rows if r.get("verified") is False]
    if bad:
        log("stream: WRONG BYTES from " + ", ".join(f"{r['tool']}/{r['work']}" for r in bad))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
