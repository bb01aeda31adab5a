"""Side-by-side benchmark of s3direct and its peers (issue 13): `make bench` runs it through
bench/peers/run.sh, which installs the peers into bench/.venv-peers first.

    python run.py --cli BUILD/tools/s3direct --out DIR [--gib 2] [--rounds 3]
                  [--tools a,b | --dcp] [--workloads a,b] [--label http]

Against the S3 server of the environment (AWS_ENDPOINT_URL and keys). Writes one checkpoint in
three source formats (safetensors, torch.save, tensorizer) with the same tensors, reads each
object once untimed (warms the server), then runs ROUNDS interleaved, rotated rounds: each
measurement is a fresh child process (bench/peers/worker.py). In the first round every child
also checks the bytes it loaded or saved, after its timing stops (outside the timed window and
its CPU count); a tool with wrong bytes is marked so and not timed again. Output in
DIR: rows.json (every raw row), table.md (medians and ratios to s3direct) and charts
(throughput, client CPU-s/GB, peak RSS growth per tool and workload).
"""

import argparse
import datetime
import io
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import ckpt  # noqa: E402
from measure import log, proc_kib, pyplot  # noqa: E402

TOOLS = ["s3direct", "s3direct-cp", "curl8", "boto3", "boto3-tuned", "s3torch", "s3torch-st",
         "runai", "runai-tuned", "tensorizer", "s3fs"]
# torch.distributed.checkpoint storages, a run of their own (run.sh: LABEL-dcp): their source
# checkpoints are two more 2 GB sets, which with the four above would not fit in this machine's
# RAM next to the RAM-backed server
DCP_TOOLS = ["s3direct-dcp", "s3torch-dcp"]
WORKLOADS = ["load", "load_into", "subset", "save", "save_async"]
ABOUT = {
    "s3direct": "s3direct.load / load_into / save / save_async (safetensors object)",
    "s3direct-cp": "`s3direct cp s3://... -` to /dev/null: the library's raw GET rate",
    "curl8": "8 parallel `curl -r` into /dev/null: the raw byte ceiling",
    "boto3": "boto3 download_fileobj / upload_fileobj, default TransferConfig, + safetensors",
    "boto3-tuned": "boto3 with TransferConfig(max_concurrency=16, 16 MiB parts), + safetensors",
    "s3torch": "s3torchconnector S3Checkpoint reader/writer + torch.load/torch.save",
    "s3torch-st": "s3torchconnector S3Checkpoint reader/writer + safetensors bytes",
    "runai": "runai-model-streamer SafetensorsStreamer, default settings",
    "runai-tuned": "runai-model-streamer, RUNAI_STREAMER_CONCURRENCY=32, no memory limit",
    "tensorizer": "tensorizer TensorDeserializer/TensorSerializer over its S3 stream",
    "s3fs": "s3fs cat_file / pipe_file + safetensors (subset: file-like ranged reads)",
    "s3direct-dcp": "torch.distributed.checkpoint load / save / async_save with "
                    "s3direct.dcp.S3DirectStorageReader / S3DirectStorageWriter",
    "s3torch-dcp": "torch.distributed.checkpoint load / save / async_save with "
                   "s3torchconnector.dcp.S3StorageReader / S3StorageWriter",
}


COMMAND = "BENCH_ONLY=peers make bench"


def tensorizer_blob(state):
    from tensorizer import TensorSerializer

    class Keep(io.BytesIO):
        def close(self):
            if not self.closed:  # the serializer's __del__ closes it a second time
                self.data = self.getvalue()
            super().close()
    buf = Keep()
    ser = TensorSerializer(buf)
    ser.write_state_dict(state)
    ser.close()
    return buf.data


def setup(args):
    """Writes the source objects in a child process and returns (spec, s3 client): the child's
    2+ GB of tensors and serialized copies go back to the OS when it exits. Freed in this
    process they would not (glibc keeps small-tensor heap pages), and every GB held here is a
    GB the RAM-backed server cannot use; the 2026-12-03 runs lost RGW's OSD to the OOM
    killer."""
    import concurrent.futures
    import multiprocessing

    import boto3

    with concurrent.futures.ProcessPoolExecutor(
            1, mp_context=multiprocessing.get_context("spawn")) as ex:
        formats = sorted({ckpt.SOURCE.get(t, "st") for t in args.tools.split(",")})
        spec = ex.submit(_setup_child, args.gib, args.cli, formats).result()
    return spec, boto3.client("s3", endpoint_url=spec["endpoint"])


def _setup_child(gib, cli, formats):
    import boto3

    from ckpt import digest_tensors

    endpoint = os.environ["AWS_ENDPOINT_URL"]
    bucket = f"s3d-peers-{os.getpid()}-{int(time.time())}"
    spec_t = ckpt.llama_spec(int(gib * (1 << 30)))
    seed = 1234
    log(f"peers: writing a {ckpt.nbytes(spec_t) / 1e9:.2f} GB checkpoint ({len(spec_t)} tensors)"
        f" in these formats: {', '.join(formats)}")
    import safetensors.torch as st
    import torch

    s3 = boto3.client("s3", endpoint_url=endpoint)
    s3.create_bucket(Bucket=bucket)
    state = ckpt.make_tensors(spec_t, seed)
    keys, sizes = {}, {}

    def put(fmt, key, blob):
        keys[fmt], sizes[fmt] = key, len(blob)
        s3.upload_fileobj(io.BytesIO(blob), bucket, key)
    if "st" in formats:
        put("st", "peers/ckpt.safetensors", st.save(state))
    if "pt" in formats:
        b = io.BytesIO()
        torch.save(state, b)
        put("pt", "peers/ckpt.pt", b.getvalue())
        del b
    if "tz" in formats:
        try:
            put("tz", "peers/ckpt.tensors", tensorizer_blob(state))
        except Exception as e:  # the tensorizer rows say why
            log(f"peers: tensorizer could not write its format: {type(e).__name__}: {e}")
            keys["tz"] = "peers/missing.tensors"
    if "dcp-s3d" in formats:
        import s3direct
        import torch.distributed.checkpoint as dcp
        from s3direct.dcp import S3DirectStorageWriter

        keys["dcp-s3d"] = "peers/dcp-s3d"
        dcp.save(state, storage_writer=S3DirectStorageWriter(
            f"s3://{bucket}/{keys['dcp-s3d']}", client=s3direct.Client(endpoint_url=endpoint)))
    if "dcp-fs" in formats:
        # torch's own FileSystemWriter layout (what S3StorageWriter writes), uploaded file by
        # file: S3StorageWriter itself cannot complete a multipart upload on RGW 16
        import torch.distributed.checkpoint as dcp

        keys["dcp-fs"] = "peers/dcp-fs"
        with tempfile.TemporaryDirectory() as d:
            dcp.save(state, storage_writer=dcp.FileSystemWriter(d))
            for f in os.listdir(d):
                s3.upload_file(os.path.join(d, f), bucket, f"{keys['dcp-fs']}/{f}")
    names = [t["name"] for t in spec_t]
    subset = names[::10]
    # The save workers read the source tensors from here (a copy) instead of generating 2 GB
    # of random bits each time (seconds per process). On disk, not /dev/shm: tmpfs pages are
    # memory that cannot be reclaimed, and with RGW's in-memory store on the same machine a
    # 2 GB copy there helped the OOM killer stop the server mid-run (2026-12-03).
    state_path = os.path.join(tempfile.gettempdir(), f"s3d-peers-state-{os.getpid()}.bin")
    ckpt.write_raw(state, spec_t, state_path)
    spec = {
        "endpoint": endpoint, "bucket": bucket, "region": os.environ.get("AWS_REGION",
                                                                          "us-east-1"),
        "keys": keys, "tensors": spec_t, "seed": seed, "cli": cli,
        "state_path": state_path,
        "s3fs_path": os.path.abspath(os.path.join(HERE, "..", ".peers-s3fs")),
        "sizes": dict(sizes, tensors=ckpt.nbytes(spec_t), subset=ckpt.nbytes(spec_t, subset)),
        "digest": digest_tensors(state, names), "subset_digest": digest_tensors(state, subset),
    }
    return spec


def _proxy_main(port_out, counter, host, port):
    """A TCP relay that counts the bytes coming from the server (run in its own process)."""
    import asyncio

    async def pipe(r, w, count):
        try:
            while True:
                d = await r.read(1 << 20)
                if not d:
                    break
                if count:
                    with counter.get_lock():
                        counter.value += len(d)
                w.write(d)
                await w.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            w.close()

    async def handle(cr, cw):
        try:
            ur, uw = await asyncio.open_connection(host, port)
        except OSError:
            cw.close()
            return
        await asyncio.gather(pipe(cr, uw, False), pipe(ur, cw, True))

    async def main():
        srv = await asyncio.start_server(handle, "127.0.0.1", 0)
        port_out.value = srv.sockets[0].getsockname()[1]
        async with srv:
            await srv.serve_forever()
    asyncio.run(main())


class ByteCounter:
    """Bytes the client received for one measurement, through a relay in front of the server
    (used for the subset workload: bytes fetched against the subset's size)."""

    def __init__(self, endpoint):
        import multiprocessing as mp
        from urllib.parse import urlsplit

        u = urlsplit(endpoint)
        self.scheme = u.scheme
        self.count = mp.Value("q", 0)
        port = mp.Value("i", 0)
        self.proc = mp.Process(target=_proxy_main, args=(port, self.count, u.hostname,
                                                         u.port or (443 if u.scheme == "https"
                                                                    else 80)), daemon=True)
        self.proc.start()
        for _ in range(100):
            if port.value:
                break
            time.sleep(0.05)
        self.endpoint = f"{u.scheme}://127.0.0.1:{port.value}"

    def reset(self):
        with self.count.get_lock():
            self.count.value = 0

    def read(self):
        return self.count.value

    def close(self):
        self.proc.terminate()
        self.proc.join()


def rss_mib():
    return proc_kib("VmRSS:") / 1024


def mem_available_mib():
    """MemAvailable after a measurement (kept in each row: the server's RAM-backed store and the
    client share this machine's memory)."""
    return proc_kib("MemAvailable:", "/proc/meminfo") / 1024


def gc_server():
    conf = os.environ.get("CEPH_CONF")
    if conf:
        subprocess.run(["timeout", "120", "radosgw-admin", "-c", conf, "gc", "process",
                        "--include-all"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def structural(tool, workload):
    """Why a tool has no way to do a workload (None if it has), without starting a process."""
    raw = tool in ("s3direct-cp", "s3direct-cp-file", "curl8")
    # The CLI's cp uploads a file too (saves); the others only read.
    if raw and not (workload == "load" or (workload == "save" and tool == "s3direct-cp")):
        return "raw byte ceiling: whole objects only"
    if workload == "subset" and tool in ("s3torch", "runai", "runai-tuned", "tensorizer"):
        return "no partial read of a checkpoint by tensor name"
    if workload == "save" and tool.startswith("runai"):
        return "no save (a loader only)"
    if workload == "save_async" and tool != "s3direct" and tool not in DCP_TOOLS:
        return "no asynchronous save API"
    return None


def measure(spec_path, tool, workload, out_dir, verify, timeout, counter=None):
    why = structural(tool, workload)
    if why:
        return {"tool": tool, "workload": workload, "error": why, "cannot_run": True}
    if workload == "subset" and counter is not None:
        counter.reset()
        row = measure(spec_path.replace(".json", "-relay.json"), tool, workload, out_dir,
                      verify, timeout)
        if "error" not in row:
            row["fetched_bytes"] = counter.read()
        return row
    out = os.path.join(out_dir, f"row-{tool}-{workload}.json")
    cmd = [sys.executable, os.path.join(HERE, "worker.py"), spec_path, tool, workload, out]
    if verify:
        cmd.append("--verify")
    try:
        p = subprocess.run(cmd, timeout=timeout, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
        if os.path.exists(out):
            row = json.load(open(out))
            os.unlink(out)
        else:
            tail = (p.stderr.strip().splitlines() or ["no output"])[-1]
            row = {"tool": tool, "workload": workload, "error": f"exit {p.returncode}: {tail}"}
    except subprocess.TimeoutExpired:
        row = {"tool": tool, "workload": workload, "error": f"timed out after {timeout}s"}
    if workload.startswith("save"):
        drop_saved(spec_path, tool, workload)
    return row


def drop_saved(spec_path, tool, workload):
    """Deletes a saved object right away and lets the server collect it: the RAM-backed OSD
    would fill with one checkpoint per tool otherwise."""
    import boto3

    spec = json.load(open(spec_path))
    s3 = boto3.client("s3", endpoint_url=spec["endpoint"])
    key = f"peers/saved/{tool}.{workload}"
    s3.delete_object(Bucket=spec["bucket"], Key=key)
    for o in s3.list_objects_v2(Bucket=spec["bucket"], Prefix=key + "/").get("Contents", []):
        s3.delete_object(Bucket=spec["bucket"], Key=o["Key"])  # a DCP checkpoint's objects
    gc_server()


def warm(spec):
    """Reads each source object once, untimed: the first timed reader does not pay for a cold
    server."""
    for fmt, key in spec["keys"].items():
        if fmt in ckpt.DCP_DATA:  # read once untimed to warm the server
            key = f"{key}/{ckpt.DCP_DATA[fmt]}"
        if "missing" not in key:
            subprocess.run([spec["cli"], "cp", f"s3://{spec['bucket']}/{key}", "-"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def median(rows, field):
    v = [r[field] for r in rows if field in r]
    return statistics.median(v) if v else None


def summarize(rows, tools, workloads, label, sizes):
    """Medians per tool and workload, with s3direct's throughput over each tool's. Timed rows
    carry "round"; those of round 0 also carry the byte check ("verify", "verified"). A tool
    whose bytes were wrong gets no numbers, only the failure."""
    out = {}
    for w in workloads:
        for t in tools:
            rs = [r for r in rows if r["tool"] == t and r["workload"] == w and "round" in r]
            vr = [r for r in rows if r["tool"] == t and r["workload"] == w and r.get("verify")]
            wrong = any(r.get("verified") is False for r in vr)
            ok = [] if wrong else [r for r in rs if "error" not in r]
            err = ("WRONG BYTES: failed verification" if wrong else
                   next((r["error"] for r in vr + rs if "error" in r), None))
            out[(t, w)] = {
                "n": len(ok), "gbps": median(ok, "gbps"), "cpu": median(ok, "cpu_s_per_gb"),
                "rss": median(ok, "rss_growth_mib"), "returned_s": median(ok, "returned_s"),
                "fetched": median(ok, "fetched_bytes"),
                "stall": median(ok, "stall_over_memcpy"),
                "min": min((r["gbps"] for r in ok), default=None),
                "max": max((r["gbps"] for r in ok), default=None),
                "verified": vr[0].get("verified") if vr else None,
                "error": None if ok else err,
            }
    ref_tool = "s3direct" if "s3direct" in tools else tools[0]  # the s3direct-dcp group
    lines = [f"### {label}", "",
             f"| workload | tool | GB/s (median, min–max) | {ref_tool} ÷ tool |"
             " client CPU-s/GB | peak RSS growth MiB | bytes checked |",
             "|---|---|---|---|---|---|---|"]
    for w in workloads:
        ref = out.get((ref_tool, w), {}).get("gbps")
        for t in tools:
            s = out[(t, w)]
            if s["gbps"] is None:
                if s["error"]:
                    lines.append(f"| {w} | {t} | — | — | — | — | {s['error']} |")
                continue
            ratio = f"{ref / s['gbps']:.2f}×" if ref else "—"
            extra = (f" (returns in {s['returned_s']:.2f} s = {s['stall']:.2f}× a copy of the "
                     "tensors)") if s["returned_s"] else ""
            if s["fetched"]:
                extra += f" (fetched {s['fetched'] / sizes['subset']:.2f}× the subset)"
            ver = {True: "yes", False: "**MISMATCH**", None: "n/a (bytes not kept)"}[s["verified"]]
            lines.append(f"| {w} | {t} | {s['gbps']:.3f} ({s['min']:.2f}–{s['max']:.2f}){extra}"
                         f" | {ratio} | {s['cpu']:.2f} | {s['rss']:.0f} | {ver} |")
    lines += ["", "Tools:"] + [f"- {t}: {ABOUT.get(t, t)}" for t in tools]
    return out, "\n".join(lines) + "\n"


def charts(summary, tools, workloads, out_dir, label, title, footer=""):
    plt = pyplot("peers")
    if plt is None:
        return []
    files = []
    for field, ylabel, fname in (("gbps", "GB/s (higher is better)", "throughput"),
                                 ("cpu", "client CPU-s per GB (lower is better)", "cpu"),
                                 ("rss", "peak RSS growth, MiB (lower is better)", "rss")):
        fig, ax = plt.subplots(figsize=(11, 4.2))
        width = 0.8 / max(1, len(tools))
        for i, t in enumerate(tools):
            xs, ys = [], []
            for j, w in enumerate(workloads):
                v = summary[(t, w)][field]
                if v is not None:
                    xs.append(j + i * width)
                    ys.append(v)
            if xs:  # tab20: a colour of its own for each of up to 20 tools
                ax.bar(xs, ys, width, label=t, color=plt.cm.tab20(i % 20))
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(workloads))])
        ax.set_xticklabels(workloads)
        ax.set_ylabel(ylabel)
        ax.set_title(f"{title} — {label}", fontsize=9)
        ax.legend(fontsize=7, ncol=4)
        ax.grid(axis="y", alpha=0.3)
        fig.tight_layout(rect=(0, 0.05 if footer else 0, 1, 1))
        if footer:  # the machine and the command, under the chart
            fig.text(0.01, 0.01, footer, fontsize=7, color="0.3")
        path = os.path.join(out_dir, f"peers-{label}-{fname}.png")
        fig.savefig(path, dpi=90)
        plt.close(fig)
        files.append(path)
    return files


def replot(rows_json, out_dir, label):
    """Charts again from a rows-LABEL.json (python run.py --replot ROWS.json --out DIR)."""
    doc = json.load(open(rows_json))
    rows = doc["rows"]
    tools = list(dict.fromkeys(r["tool"] for r in rows))
    workloads = list(dict.fromkeys(r["workload"] for r in rows))
    summary, _ = summarize(rows, tools, workloads, label, doc["spec"]["sizes"])
    n = len(doc["spec"].get("tensors", [])) or 264
    rounds = 1 + max((r.get("round", 0) for r in rows), default=0)
    title = (f"{doc['spec']['sizes']['tensors'] / 1e9:.2f} GB, {n} tensors, {rounds} rounds, "
             f"{doc['when']}")
    footer = f"{doc['machine']}; command: {doc.get('command', COMMAND)}"
    return charts(summary, tools, workloads, out_dir, label, title, footer)


def write_results(args, spec, rows, tools, workloads, rounds_done):
    """rows-LABEL.json, table-LABEL.md and the charts for the rows so far (written after every
    round, so that a run cut short keeps its finished rounds)."""
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    machine = f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.node()}"
    loads = [r["load1"] for r in rows if "load1" in r]
    title = (f"{spec['sizes']['tensors'] / 1e9:.2f} GB, {len(spec['tensors'])} tensors, "
             f"{rounds_done} rounds, {when}")
    summary, table = summarize(rows, tools, workloads, args.label, spec["sizes"])
    command = (f"{COMMAND} (bench/peers/run.py --gib {args.gib} --rounds {args.rounds}"
               + (" --dcp" if args.dcp else "") + ")")
    head = (f"{title}; {machine}; load average {min(loads, default=0):.2f}-"
            f"{max(loads, default=0):.2f} during the run\n"
            f"command: {command}"
            + (f" ({rounds_done} rounds done)" if rounds_done < args.rounds else "") + "\n\n")
    with open(os.path.join(args.out, f"rows-{args.label}.json"), "w") as f:
        json.dump({"when": when, "machine": machine, "command": command,
                   "spec": {k: spec[k] for k in
                   ("sizes", "keys")}, "rows": rows}, f, indent=1)
    with open(os.path.join(args.out, f"table-{args.label}.md"), "w") as f:
        f.write(head + table)
    files = charts(summary, tools, workloads, args.out, args.label, title,
                   f"{machine}; command: {command}")
    return summary, head + table, files


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--replot":
        label = os.path.basename(sys.argv[2]).split("-", 1)[1].rsplit(".", 1)[0]
        for p in replot(sys.argv[2], sys.argv[sys.argv.index("--out") + 1], label):
            log(f"peers: chart {p}")
        return 0
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--gib", type=float, default=2.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tools", default=None, help="comma list (default: every tool of the group)")
    ap.add_argument("--dcp", action="store_true",
                    help="the group of torch.distributed.checkpoint storages (DCP_TOOLS)")
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--label", default="http")
    ap.add_argument("--timeout", type=int, default=600)
    args = ap.parse_args()
    if args.tools is None:
        args.tools = ",".join(DCP_TOOLS if args.dcp else TOOLS)
    tools = args.tools.split(",")
    workloads = args.workloads.split(",")
    os.makedirs(args.out, exist_ok=True)
    spec, s3 = setup(args)
    log(f"peers: source objects written; this process holds {rss_mib():.0f} MiB, the machine has"
        f" {mem_available_mib():.0f} MiB available")
    spec_path = os.path.join(args.out, f"spec-{args.label}.json")
    json.dump(spec, open(spec_path, "w"))
    counter = ByteCounter(spec["endpoint"])
    json.dump(dict(spec, endpoint=counter.endpoint),
              open(spec_path.replace(".json", "-relay.json"), "w"))
    rows = []
    try:
        warm(spec)
        runnable = {(t, w) for w in workloads for t in tools}
        for rnd in range(args.rounds):
            verify = rnd == 0  # bytes checked once per tool, after the timing, in round 1
            log(f"peers: round {rnd + 1}/{args.rounds}" + (" (bytes checked after each timing)"
                                                           if verify else ""))
            for w in workloads:
                ts = [t for t in tools if (t, w) in runnable]
                k = rnd % max(1, len(ts))
                for t in ts[k:] + ts[:k]:  # rotated: no tool always runs first
                    r = measure(spec_path, t, w, args.out, verify, args.timeout, counter)
                    r["load1"] = os.getloadavg()[0]
                    r["mem_available_mib"] = mem_available_mib()
                    if verify:
                        r["verify"] = True
                    if not r.get("cannot_run"):
                        r["round"] = rnd
                    rows.append(r)
                    if "error" in r or r.get("verified") is False:
                        runnable.discard((t, w))  # failed or wrong bytes: not timed again
                    if "error" in r:
                        log(f"  {w:10s} {t:12s} {r['error']}")
                        continue
                    check = {True: "bytes ok", False: "WRONG BYTES",
                             None: "bytes not kept"}[r.get("verified")] if verify else ""
                    log(f"  {w:10s} {t:12s} {r['gbps']:.3f} GB/s {r['cpu_s_per_gb']:.2f} "
                        f"CPU-s/GB {r['rss_growth_mib']:.0f} MiB {check}")
                if w in ("save", "save_async"):
                    gc_server()
            if rnd + 1 < args.rounds:
                write_results(args, spec, rows, tools, workloads, rnd + 1)
    finally:
        counter.close()
        try:
            os.unlink(spec["state_path"])
        except OSError:
            pass
        try:
            objs = s3.list_objects_v2(Bucket=spec["bucket"]).get("Contents", [])
            for o in objs:
                s3.delete_object(Bucket=spec["bucket"], Key=o["Key"])
            s3.delete_bucket(Bucket=spec["bucket"])
        except Exception as e:
            log(f"peers: cleanup: {e}")
        gc_server()
    _, table, files = write_results(args, spec, rows, tools, workloads, args.rounds)
    print(table)
    for p in files:
        log(f"peers: chart {p}")
    bad = [r for r in rows if r.get("verified") is False]
    if bad:
        log("peers: WRONG BYTES from " + ", ".join(f"{r['tool']}/{r['workload']}" for r in bad))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
