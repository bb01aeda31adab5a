"""The incremental-save benchmark (issue 33): `s3direct.save(state, uri, base=previous)` next to
a full save of the same state and next to s3torchconnector's writer, on loopback and on a
simulated distant path. `make bench` runs it as its `incremental` part
(BENCH_ONLY=incremental make bench); alone:

    . /tmp/s3direct-rgw/env   # or any S3 server: AWS_ENDPOINT_URL and keys
    PYTHONPATH=python S3D_BUILD_DIR=build bench/.venv-peers/bin/python bench/incremental/run.py \
        [--size 2G] [--dtype bf16|fp32] [--rounds 3] [--paths 12M:15,loopback]
        [--cases 0%,1%,10%,50%,100%,lora] [--tools incremental,full,s3torch]
        [--pathsim build/bench/s3d-pathsim] [--out docs/bench]

States (bench/incremental/state.py): a llama-shaped state_dict of --size bytes, saved once as
the base, and cases with 0, 1, 10, 50 or 100 % of its tensors changed (by count, whole
tensors, a seeded choice); and "lora": the same frozen model with rank-16 adapters after every
projection and their Adam state (exp_avg, exp_avg_sq, step), saved once as its own base, then
one step later with every adapter and optimizer tensor changed. Each case is saved three ways,
each measurement a fresh process (worker.py): "incremental" (base = the saved base), "full"
(no base) and "s3torch" (torch.save into S3Checkpoint's writer). Rounds are interleaved
(every case and tool once per round, the tools' order rotated); each saved object is deleted
and the server's garbage collected before the next measurement; medians are reported.

Paths: "loopback" = the server at AWS_ENDPOINT_URL itself; "RATE:DELAY_MS" = s3d-pathsim
(bench/pathsim.c) in front of it, each connection capped at RATE bytes/s each way and each
request held DELAY ms, as bench/path/run.py runs it. Counted per measurement: the client's
bytes sent (SaveStats.bytes_sent for s3direct, the object's size for s3torch), the bytes the
relay carried from the client to the server (simulated paths: bodies and HTTP headers), the
requests the server served (RGW's perf counter rgw.req, read from its admin socket beside
CEPH_CONF; counts every client of the server, so the machine must be quiet), the
connections opened (relay), the client's CPU seconds and the load average at the start.
Every incremental save (and the full save in round 1) is loaded back afterwards, straight
from the server and outside the timing, and compared bit for bit with the state.

Output in --out (default docs/bench): table-incremental.md, rows-incremental.json,
incremental.png; rewritten after every round.
"""

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "peers"))
import state as S  # noqa: E402
from measure import log, pyplot  # noqa: E402

COMMAND = "BENCH_ONLY=incremental make bench"
TOOLS = ["incremental", "full", "s3torch"]
ABOUT = {
    "incremental": "`s3direct.save(state, uri, base=BASE)`: unchanged tensors copied by the "
                   "server (UploadPartCopy of the base)",
    "full": "`s3direct.save(state, uri)`: every byte sent",
    "s3torch": "s3torchconnector 1.5 `S3Checkpoint(region, endpoint).writer(uri)` + "
               "`torch.save` (as bench/peers uses it)",
}
GB = 1e9


def parse_size(s):
    """64M, 2G, 1.5GiB, 2147483648 -> bytes (K, M, G, T: powers of 1024)."""
    import re

    m = re.fullmatch(r"\s*([0-9.]+)\s*([KMGT]?)(?:i?B)?\s*", s, re.I)
    if not m:
        raise SystemExit(f"incremental: --size {s}: a number of bytes (64M, 2G, ...)")
    return int(float(m.group(1)) * (1 << (10 * " KMGT".index(m.group(2).upper() or " "))))


def _bench_path():
    """bench/path/run.py, whose path labels and s3d-pathsim runner this part shares."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "s3d_bench_path", os.path.join(os.path.dirname(HERE), "path", "run.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_PATH = _bench_path()
parse_path = _PATH.parse_path
Relay = _PATH.Path  # s3d-pathsim in front of the server: endpoint, stats, reset(), close()


def gc_server():
    conf = os.environ.get("CEPH_CONF")
    if conf and shutil.which("radosgw-admin"):
        subprocess.run(["timeout", "120", "radosgw-admin", "-c", conf, "gc", "process",
                        "--include-all"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def child(args, timeout):
    cmd = [sys.executable, os.path.join(HERE, "worker.py")] + args
    return subprocess.run(cmd, timeout=timeout, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True)


def measure(spec_path, case, tool, key, work, verify, timeout):
    out = os.path.join(work, f"row-{os.getpid()}.json")
    try:
        p = child(["measure", spec_path, case, tool, key, out] + (["--verify"] if verify else []),
                  timeout)
        if os.path.exists(out):
            row = json.load(open(out))
            os.unlink(out)
        else:
            tail = (p.stderr.strip().splitlines() or ["no output"])[-1]
            row = {"case": case, "tool": tool, "error": f"exit {p.returncode}: {tail}"}
    except subprocess.TimeoutExpired:
        row = {"case": case, "tool": tool, "error": f"timed out after {timeout}s"}
    return row


# ---- results ------------------------------------------------------------------------------

def med(rows, f):
    v = [r[f] for r in rows if r.get(f) is not None]
    return statistics.median(v) if v else None


def summarize(rows, paths, cases, tools):
    out = {}
    for p in paths:
        for c in cases:
            for t in tools:
                rs = [r for r in rows if (r["path"], r["case"], r["tool"]) == (p, c, t)]
                ok = [r for r in rs if "error" not in r]
                wrong = [r for r in rs if r.get("verified") is False]
                st = [r["stats"] for r in ok if r.get("stats")]
                out[(p, c, t)] = {
                    "n": len(ok),
                    "wall": med(ok, "wall_s"), "min": min((r["wall_s"] for r in ok), default=0),
                    "max": max((r["wall_s"] for r in ok), default=0),
                    "cpu": med(ok, "cpu_s"), "sent": med(ok, "bytes_sent"),
                    "relay": med(ok, "relay_c2s"), "requests": med(ok, "requests"),
                    "conns": med(ok, "conns"), "floor": med(ok, "floor_bytes"),
                    "load": [r["load1_start"] for r in ok if "load1_start" in r],
                    "changed": next((r["changed"] for r in rs if "changed" in r), None),
                    "tensors": next((r["tensors"] for r in rs if "tensors" in r), None),
                    "changed_bytes": next((r["changed_bytes"] for r in rs
                                           if "changed_bytes" in r), None),
                    "state_bytes": next((r["state_bytes"] for r in rs if "state_bytes" in r),
                                        None),
                    "verified": (False if wrong else True if any(r.get("verified") for r in ok)
                                 else None),
                    "reused": med(st, "tensors_reused") if st else None,
                    "parts_copied": med(st, "parts_copied") if st else None,
                    "refused": max((s["copies_refused"] for s in st), default=0),
                    "base_unused": any(not s["base_used"] for s in st) if t == "incremental"
                    else False,
                    "note": next((r["note"] for r in ok if r.get("note")), None),
                    "stats_empty": any(r.get("stats_empty") for r in ok),
                    "error": next((r["error"] for r in rs if "error" in r), None),
                }
    return out


def fmt_gb(b):
    return "—" if b is None else f"{b / GB:.3f}"


def ratio(a, b):
    return None if a is None or not b else a / b


def targets(summary, paths, cases):
    """The issue's targets, PASS / MISS / n/a lines."""
    lines = []

    def get(p, c, t, f):
        s = summary.get((p, c, t))
        return s[f] if s and s["n"] else None

    def line(ok, text):
        lines.append(f"- {'n/a ' if ok is None else 'PASS' if ok else 'MISS'} {text}")
    slow = [p for p in paths if p.startswith("12MB/s")]
    for p in slow:
        for c, limit in (("10%", 0.25), ("0%", 0.10)):
            if c not in cases:
                continue
            r = ratio(get(p, c, "incremental", "wall"), get(p, c, "full", "wall"))
            line(None if r is None else r <= limit,
                 f"{p}, {c} changed: incremental ÷ full wall time "
                 f"{'—' if r is None else f'{r:.3f}'} (target ≤ {limit}×)")
        if "10%" in cases:
            sent, floor = get(p, "10%", "incremental", "sent"), get(p, "10%", "incremental",
                                                                   "floor")
            r = ratio(sent, floor)
            line(None if r is None else r <= 1.2,
                 f"{p}, 10% changed: client bytes {fmt_gb(sent)} GB ÷ floor {fmt_gb(floor)} GB "
                 f"(changed tensors + header part + 5 MiB-rule gaps) = "
                 f"{'—' if r is None else f'{r:.3f}'} (target ≤ 1.2×)")
        if "100%" in cases:
            r = ratio(get(p, "100%", "incremental", "wall"), get(p, "100%", "full", "wall"))
            line(None if r is None else r <= 1.03,
                 f"{p}, 100% changed: incremental ÷ full wall time "
                 f"{'—' if r is None else f'{r:.3f}'} (target ≤ 1.03×, within 3 %)")
    if not slow:
        lines.append("- n/a  the 12 MB/s targets: no 12M path in --paths")
    for p in paths:
        if not p.startswith("loopback"):
            continue
        rs = {c: ratio(get(p, c, "incremental", "wall"), get(p, c, "full", "wall"))
              for c in cases}
        known = {c: r for c, r in rs.items() if r is not None}
        line(None if not known else all(r <= 1.0 for r in known.values()),
             f"{p}: incremental never slower than full: "
             + ", ".join(f"{c} {r:.3f}×" for c, r in known.items()) + " (target ≤ 1.0× each)")
    return lines


def table(summary, paths, cases, tools):
    lines, notes = [], []

    def foot(text):
        if text not in notes:
            notes.append(text)
        return "¹²³⁴⁵⁶⁷⁸⁹"[notes.index(text)] if notes.index(text) < 9 else "*"
    for p in paths:
        lines += [f"### {p}", "",
                  "| case | changed tensors | tool | wall s, median (min–max) | ÷ full | "
                  "client bytes sent, GB | ÷ full | floor, GB | at the relay, GB | requests "
                  "| conns | CPU s | load avg at start | tensors reused | checked |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for c in cases:
            full = summary.get((p, c, "full"), {})
            for t in tools:
                s = summary[(p, c, t)]
                ch = ("—" if s["changed"] is None else
                      f"{s['changed']} of {s['tensors']} ({s['changed_bytes'] / GB:.3f} of "
                      f"{s['state_bytes'] / GB:.3f} GB)")
                if not s["n"]:
                    why = s["error"] or "no run"
                    if s["verified"] is False:
                        why = "WRONG BYTES"
                    lines.append(f"| {c} | {ch} | {t} | {why} | | | | | | | | | | | |")
                    continue
                mark = ""
                if s["note"]:
                    mark += foot(s["note"])
                if s["base_unused"] and s["changed"] != s["tensors"]:
                    mark += foot("the save did not use the base though it shares tensors "
                                 "(SaveStats.base_used false in at least one round): a full "
                                 "save; the rows' \"log\" in rows-incremental.json say why")
                if s["refused"]:
                    mark += foot("copies refused by the server or not proved, sent instead "
                                 "(SaveStats.copies_refused > 0)")
                if t == "s3torch":
                    mark += foot("client bytes = the object's size (the tool counts none)")
                if s["stats_empty"]:
                    mark += foot("SaveStats came back empty (a library that does not fill "
                                 "them in): client bytes = the object's size")
                wr = ratio(s["wall"], full.get("wall") if full.get("n") else None)
                br = ratio(s["sent"], full.get("sent") if full.get("n") else None)
                cells = [
                    c, ch, t + mark, f"{s['wall']:.2f} ({s['min']:.2f}–{s['max']:.2f})",
                    "—" if wr is None or t == "full" else f"{wr:.3f}×",
                    fmt_gb(s["sent"]),
                    "—" if br is None or t == "full" else f"{br:.3f}×",
                    fmt_gb(s["floor"]) if t == "incremental" else "—",
                    fmt_gb(s["relay"]),
                    "—" if s["requests"] is None else f"{s['requests']:.0f}",
                    "—" if s["conns"] is None else f"{s['conns']:.0f}",
                    f"{s['cpu']:.2f}",
                    f"{min(s['load']):.2f}–{max(s['load']):.2f}" if s["load"] else "—",
                    "—" if s["reused"] is None or t != "incremental" else
                    f"{s['reused']:.0f} ({s['parts_copied']:.0f} parts copied)",
                    {True: "yes", False: "**MISMATCH**", None: "—"}[s["verified"]],
                ]
                lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    lines += [f"{'¹²³⁴⁵⁶⁷⁸⁹'[i] if i < 9 else '*'} {n}" for i, n in enumerate(notes)]
    if notes:
        lines.append("")
    lines += [
        "Columns: wall time of the save alone (a fresh process, imports and the state made "
        "beforehand); ÷ full = this row ÷ the full save of the same case on the same path "
        "(medians); client bytes sent = SaveStats.bytes_sent for s3direct; floor = what an "
        "incremental save must send at least under S3's 5 MiB minimum part size (header part, "
        "changed tensors, gaps too short to copy), from the saved object's layout; at the "
        "relay = bytes s3d-pathsim carried from client to server (bodies and HTTP headers); "
        "requests = requests the server served during the save (RGW perf counter rgw.req); "
        "conns = connections opened through the relay; CPU s = user + system of the client "
        "process; load avg at start = 1-minute load average when the save began (min–max over "
        "rounds); checked = loaded back and compared bit for bit with the state.", "",
        "Tools:"] + [f"- {t}: {ABOUT[t]}" for t in tools]
    return "\n".join(lines) + "\n"


def chart(summary, paths, cases, tools, path_png, title, footer):
    plt = pyplot("incremental")
    if plt is None:
        return None
    fig, axes = plt.subplots(2, len(paths), figsize=(6 * len(paths), 8), squeeze=False)
    width = 0.8 / len(tools)
    for col, p in enumerate(paths):
        for row, (field, ylabel) in enumerate((("wall", "save wall time, s (median)"),
                                               ("sent", "client bytes sent, GB"))):
            ax = axes[row][col]
            for i, t in enumerate(tools):
                xs, ys = [], []
                for j, c in enumerate(cases):
                    s = summary.get((p, c, t))
                    if s and s["n"] and s[field] is not None:
                        xs.append(j + i * width)
                        ys.append(s[field] / (GB if field == "sent" else 1))
                ax.bar(xs, ys, width, label=t)
            if field == "sent":
                fx, fy = [], []
                for j, c in enumerate(cases):
                    s = summary.get((p, c, "incremental"))
                    if s and s["n"] and s["floor"] is not None:
                        fx.append(j + tools.index("incremental") * width
                                  if "incremental" in tools else j)
                        fy.append(s["floor"] / GB)
                if fx:
                    ax.scatter(fx, fy, marker="_", s=300, color="black", zorder=3,
                               label="floor (5 MiB rule)")
            ax.set_xticks([j + 0.4 - width / 2 for j in range(len(cases))])
            ax.set_xticklabels([c + " changed" if c.endswith("%") else c for c in cases],
                               fontsize=8)
            ax.set_ylabel(ylabel, fontsize=8)
            ax.set_title(p, fontsize=10)
            ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.text(0.01, 0.005, footer, fontsize=6)
    fig.tight_layout(rect=(0, 0.03, 1, 0.95))
    fig.savefig(path_png, dpi=110)
    plt.close(fig)
    return path_png


def write_results(args, meta, rows, paths, cases, tools, rounds_done):
    when = meta["when"]
    machine = f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.node()}"
    loads = [r["load1_start"] for r in rows if "load1_start" in r]
    sizes = ", ".join(f"{g}: {b / GB:.2f} GB, {n} tensors" for g, (b, n) in meta["sizes"].items())
    title = (f"Incremental saves: {sizes}; {args.dtype}; {rounds_done} of {args.rounds} rounds; "
             f"started {when}")
    command = (f"{COMMAND} (bench/incremental/run.py --size {args.size} --dtype {args.dtype} "
               f"--rounds {args.rounds} --paths {args.paths} --cases {','.join(cases)} "
               f"--tools {','.join(tools)})")
    summary = summarize(rows, paths, cases, tools)
    head = (f"{title}\n\n{machine}; load average at the start of the measurements "
            f"{min(loads, default=0):.2f}–{max(loads, default=0):.2f}; commit {meta['commit']}"
            f"\n\ncommand: `{command}`\n\n")
    tgt = ["Targets (issue 33):"] + targets(summary, paths, cases)
    if parse_size(args.size) < 1 << 30:
        tgt.append(f"- (at --size {args.size} a save is a few requests long and the machine's "
                   "noise decides the ratios: the targets are meant for the default 2G)")
    tgt.append("")
    text = head + table(summary, paths, cases, tools) + "\n" + "\n".join(tgt)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "rows-incremental.json"), "w") as f:
        json.dump({"when": when, "machine": machine, "command": command,
                   "commit": meta["commit"], "sizes": meta["sizes"], "rows": rows}, f, indent=1)
    with open(os.path.join(args.out, "table-incremental.md"), "w") as f:
        f.write(text)
    png = chart(summary, paths, cases, tools, os.path.join(args.out, "incremental.png"), title,
                f"{machine}; {command}")
    return text, png


# ---- the run ------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", default="2G", help="bytes of the llama state (64M, 2G, ...)")
    ap.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--paths", default="12M:15,loopback")
    ap.add_argument("--cases", default=",".join(S.CASES))
    ap.add_argument("--tools", default=",".join(TOOLS))
    ap.add_argument("--pathsim", default=os.path.join(ROOT, "build", "bench", "s3d-pathsim"))
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "bench"))
    ap.add_argument("--timeout", type=int, default=900, help="seconds per measurement")
    args = ap.parse_args()
    cases = [c for c in args.cases.split(",") if c]
    tools = [t for t in args.tools.split(",") if t]
    for c in cases:
        if c not in S.CASES:
            raise SystemExit(f"incremental: --cases: {c} is not one of {','.join(S.CASES)}")
    for t in tools:
        if t not in TOOLS:
            raise SystemExit(f"incremental: --tools: {t} is not one of {','.join(TOOLS)}")
    upstream = os.environ.get("AWS_ENDPOINT_URL")
    if not upstream:
        raise SystemExit("incremental: no S3 server (AWS_ENDPOINT_URL); `. /tmp/s3direct-rgw/env`")
    size = parse_size(args.size)
    dtype = {"bf16": "bfloat16", "fp32": "float32"}[args.dtype]
    groups = []
    for c in cases:
        if S.group_of(c) not in groups:
            groups.append(S.group_of(c))
    work = tempfile.mkdtemp(prefix="s3d-incr-")  # on disk: the raw states are GBs
    bucket = f"s3d-incr-{os.getpid()}-{int(time.time())}"
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip() or "unknown"
    spec = {
        "upstream": upstream, "endpoint": upstream, "bucket": bucket, "seed": 1234,
        "region": os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        or "us-east-1",
        "tensors": {g: S.spec_of(g, size, dtype) for g in groups},
        "raw": {g: os.path.join(work, f"base-{g}.bin") for g in groups},
        "base_key": {g: f"incr/base-{g}.safetensors" for g in groups},
        "asok": S.rgw_asok(),
    }
    meta = {"when": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "commit": commit,
            "sizes": {g: (S.nbytes(spec["tensors"][g]), len(spec["tensors"][g]))
                      for g in groups}}
    if not spec["asok"]:
        log("incremental: no RGW admin socket beside CEPH_CONF: requests are not counted")
    import boto3

    s3 = boto3.client("s3", endpoint_url=upstream)
    s3.create_bucket(Bucket=bucket)
    labels = [parse_path(p)[0] for p in args.paths.split(",")]
    log(f"incremental: load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} at the "
        f"start; bucket {bucket}; scratch {work}")
    rows = []
    rc = 0
    try:
        for g in groups:
            gcases = [c for c in cases if S.group_of(c) == g]
            spec_path = os.path.join(work, "spec.json")
            json.dump(spec, open(spec_path, "w"))
            log(f"incremental: {g}: writing the base ({meta['sizes'][g][0] / GB:.3f} GB, "
                f"{meta['sizes'][g][1]} tensors) to s3://{bucket}/{spec['base_key'][g]}")
            p = child(["base", spec_path, g], args.timeout)
            if p.returncode != 0:
                raise SystemExit(f"incremental: base of {g} failed:\n{p.stderr[-3000:]}")
            for praw in args.paths.split(","):
                label, rate, delay = parse_path(praw)
                relay = None
                if rate is not None:
                    relay = Relay(args.pathsim, upstream, rate, delay,
                                  os.path.join(work, "pathsim-stats.json"))
                pspec = dict(spec, endpoint=relay.endpoint if relay else upstream,
                             relay_stats=relay.stats if relay else None)
                pspec_path = os.path.join(work, f"spec-{praw.replace(':', '_')}.json")
                json.dump(pspec, open(pspec_path, "w"))
                try:
                    for rnd in range(args.rounds):
                        log(f"incremental: {g}, {label}: round {rnd + 1}/{args.rounds}")
                        for ci, c in enumerate(gcases):
                            k = (rnd + ci) % len(tools)
                            for t in tools[k:] + tools[:k]:
                                key = f"incr/saved/{c.rstrip('%')}-{t}-{rnd}.safetensors"
                                if relay:
                                    relay.reset()
                                verify = t == "incremental" or (t == "full" and rnd == 0)
                                r = measure(pspec_path, c, t, key, work, verify, args.timeout)
                                r.update(path=label, round=rnd, group=g)
                                rows.append(r)
                                s3.delete_object(Bucket=bucket, Key=key)
                                gc_server()
                                if "error" in r:
                                    log(f"  {c:5s} {t:12s} {r['error']}")
                                    if not r.get("cannot_run"):
                                        rc = 1
                                    continue
                                st = r.get("stats") or {}
                                log(f"  {c:5s} {t:12s} {r['wall_s']:7.2f} s  "
                                    f"sent {r['bytes_sent'] / GB:.3f} GB"
                                    + (f" (floor {r['floor_bytes'] / GB:.3f})"
                                       if t == "incremental" else "")
                                    + (f"  relay {r['relay_c2s'] / GB:.3f} GB"
                                       if "relay_c2s" in r else "")
                                    + (f"  {r['requests']} req" if "requests" in r else "")
                                    + f"  cpu {r['cpu_s']:.2f} s  load {r['load1_start']:.2f}"
                                    + (f"  reused {st['tensors_reused']}/{st['tensors_total']}"
                                       f" copied {st['parts_copied']} parts"
                                       f"{'' if st['base_used'] else ' BASE NOT USED'}"
                                       if t == "incremental" and st else "")
                                    + ("  (SaveStats empty)" if r.get("stats_empty") else "")
                                    + {True: "  bytes ok", False: "  WRONG BYTES",
                                       None: ""}[r.get("verified")])
                                if t == "incremental" and st and (
                                        st["copies_refused"] or not st["base_used"]
                                        and r["changed"] < r["tensors"]):
                                    for line in r.get("log", []):
                                        log(f"        s3direct: {line}")
                                if r.get("verified") is False:
                                    rc = 1
                        write_results(args, meta, rows, labels, cases, tools, rnd + 1)
                finally:
                    if relay:
                        relay.close()
            s3.delete_object(Bucket=bucket, Key=spec["base_key"][g])
            os.unlink(spec["raw"][g])
            gc_server()
    finally:
        try:
            for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
                for o in page.get("Contents", []):
                    s3.delete_object(Bucket=bucket, Key=o["Key"])
            s3.delete_bucket(Bucket=bucket)
        except Exception as e:
            log(f"incremental: cleanup: {e}")
        gc_server()
        shutil.rmtree(work, ignore_errors=True)
    text, png = write_results(args, meta, rows, labels, cases, tools, args.rounds)
    print(text)
    log(f"incremental: {os.path.join(args.out, 'table-incremental.md')}, rows-incremental.json"
        + (f", chart {png}" if png else ""))
    return rc


if __name__ == "__main__":
    sys.exit(main())
