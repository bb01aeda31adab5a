"""The ranks benchmark (issue 22): W processes of one gloo group load the same checkpoint from
S3, either each on its own (W plain loads) or once for the group (``load(..., group=pg)``:
each rank fetches a share, torch.distributed completes every rank).

    python run.py --pathsim BUILD/bench/s3d-pathsim --out DIR [--gib 1] [--worlds 1,2,4,8]
                  [--rounds 2]

The ranks reach the server through s3d-pathsim with no cap and no delay: a counting relay,
whose stats say how many bytes the server served and how many connections were opened. Each
measurement starts W fresh processes that join a group, pass a barrier, load, and pass a
barrier again; the time is rank 0's from the first barrier to the second (every rank holds
every tensor then). In round 1 every rank's tensors are checked against the source's CRC32C
per tensor after the timing. On this 2-core machine the processes share the cores with the
server, so wall times are bound by the CPU; the bytes served are the headline.

Output in DIR: rows-ranks.json, table-ranks.md, ranks.png.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import time
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "peers"))
from measure import log, pyplot  # noqa: E402

COMMAND = "BENCH_ONLY=ranks make bench"
BUCKET = "s3d-bench-ranks"
KEY = "ranks/model.safetensors"
MODES = ("independent", "shared", "exchange")


def tensors(gib: float):
    """A llama-shaped bf16 state of about gib GiB (deterministic)."""
    import torch

    g = torch.Generator().manual_seed(22)
    hidden, layers = 2048, 0
    out = {}
    target = int(gib * (1 << 30))
    total = 0
    out["embed.weight"] = torch.randn(32000, hidden, generator=g).to(torch.bfloat16)
    total += out["embed.weight"].nbytes
    while total < target:
        for name, shape in ((f"layers.{layers}.attn.qkv", (3 * hidden, hidden)),
                            (f"layers.{layers}.attn.o", (hidden, hidden)),
                            (f"layers.{layers}.mlp.up", (5632, hidden)),
                            (f"layers.{layers}.mlp.down", (hidden, 5632)),
                            (f"layers.{layers}.norm", (hidden,))):
            t = torch.randn(*shape, generator=g).to(torch.bfloat16)
            out[name] = t
            total += t.nbytes
        layers += 1
    return out


def crcs(state) -> dict:
    import torch

    return {k: zlib.crc32(v.contiguous().view(torch.uint8).numpy()) for k, v in state.items()}


def write_source(gib: float, endpoint: str, spec_path: str) -> int:
    """Writes the checkpoint in a child process (its tensors go back to the OS when it
    exits); returns the object's size. The per-tensor zlib CRCs go to spec_path."""
    code = (
        "import sys, json; sys.path.insert(0, %r); import run, s3direct\n"
        "c = s3direct.Client(endpoint_url=sys.argv[1])\n"
        "try:\n    c.create_bucket(%r)\nexcept Exception:\n    pass\n"
        "st = run.tensors(float(sys.argv[2]))\n"
        "s3direct.save(st, 's3://%s/%s', client=c)\n"
        "json.dump({'crc': run.crcs(st), 'size': c.head(%r, %r).size}, open(sys.argv[3], 'w'))\n"
    ) % (HERE, BUCKET, BUCKET, KEY, BUCKET, KEY)
    subprocess.run([sys.executable, "-c", code, endpoint, str(gib), spec_path], check=True)
    with open(spec_path) as f:
        return int(json.load(f)["size"])


def rank_main(mode: str, rank: int, world: int, port: int, endpoint: str, spec: str,
              verify: bool, out: str) -> None:
    """One rank: join the group, time the load between two barriers, check its bytes."""
    import torch.distributed as dist

    import s3direct

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=600))
    client = s3direct.Client(endpoint_url=endpoint)
    uri = f"s3://{BUCKET}/{KEY}"
    dist.barrier()
    t0 = time.monotonic()
    if mode == "shared":
        state = s3direct.load(uri, client=client, group=dist.group.WORLD)
    elif mode == "exchange":
        # No S3: only the exchange a shared load ends with (each rank broadcasts its share
        # of the checkpoint's bytes to the others), the floor gloo sets on this machine.
        import torch

        with open(spec) as f:
            size = int(json.load(f)["size"])
        buf = torch.empty(size, dtype=torch.uint8)
        dist.barrier()
        t0 = time.monotonic()
        share = -(-size // world)
        for src in range(world):
            part = buf[src * share:min(size, (src + 1) * share)]
            if part.numel():
                dist.broadcast(part, src=src)
        state = None
    else:
        state = s3direct.load(uri, client=client)
    dist.barrier()
    secs = time.monotonic() - t0
    ok = None
    if verify and state is not None:
        with open(spec) as f:
            want = json.load(f)["crc"]
        ok = crcs(state) == want
    res = [None] * world if rank == 0 else None
    dist.gather_object({"rank": rank, "ok": ok}, res, dst=0)
    if rank == 0:
        with open(out, "w") as f:
            json.dump({"secs": secs, "verified": None if not verify else
                       all(r["ok"] for r in res)}, f)
    dist.destroy_process_group()
    client.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Relay:
    def __init__(self, pathsim: str, upstream: str, stats: str) -> None:
        from urllib.parse import urlsplit

        u = urlsplit(upstream)
        self.stats = stats
        self.proc = subprocess.Popen([pathsim, "--listen", "127.0.0.1:0", "--upstream",
                                      f"{u.hostname}:{u.port or 80}", "--stats", stats],
                                     stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline().strip()
        if not line.startswith("pathsim: listening on "):
            raise RuntimeError(f"pathsim did not start: {line!r}")
        self.endpoint = "http://" + line.rsplit(" ", 1)[1]
        self.base = {"bytes_s2c": 0, "accepted": 0}

    def read(self) -> dict:
        time.sleep(0.25)  # rewritten at most every 100 ms
        with open(self.stats) as f:
            return json.load(f)

    def reset(self) -> None:
        self.base = self.read()

    def since(self) -> dict:
        now = self.read()
        return {"bytes": now["bytes_s2c"] - self.base["bytes_s2c"],
                "conns": now["accepted"] - self.base.get("accepted", 0)}

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait()


def measure(mode: str, world: int, relay: Relay, spec: str, verify: bool, tmp: str) -> dict:
    port = free_port()
    out = os.path.join(tmp, "rank0.json")
    if os.path.exists(out):
        os.unlink(out)
    relay.reset()
    procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--rank", mode,
                               str(r), str(world), str(port), relay.endpoint, spec,
                               "1" if verify else "0", out],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(world)]
    fails = []
    for r, p in enumerate(procs):
        o, _ = p.communicate(timeout=1800)
        if p.returncode != 0:
            fails.append((r, o[-2000:]))
    if fails:
        return {"error": f"rank {fails[0][0]} failed: {fails[0][1]}"}
    served = relay.since()
    with open(out) as f:
        r0 = json.load(f)
    return {"secs": r0["secs"], "verified": r0["verified"], "served": served["bytes"],
            "conns": served["conns"], "loadavg": os.getloadavg()[0]}


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--rank":
        a = sys.argv[2:]
        rank_main(a[0], int(a[1]), int(a[2]), int(a[3]), a[4], a[5], a[6] == "1", a[7])
        return 0
    ap = argparse.ArgumentParser()
    ap.add_argument("--pathsim", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--gib", type=float, default=1.0)
    ap.add_argument("--worlds", default="1,2,4,8")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    upstream = os.environ["AWS_ENDPOINT_URL"]
    spec = os.path.join(args.out, "source.json")
    size = write_source(args.gib, upstream, spec)
    log(f"ranks: source written: {size / 1e9:.2f} GB")
    relay = Relay(args.pathsim, upstream, os.path.join(args.out, "pathsim.json"))
    worlds = [int(w) for w in args.worlds.split(",")]
    rows = []
    started = datetime.datetime.now(datetime.timezone.utc)
    try:
        for rnd in range(args.rounds):
            order = [(w, m) for w in worlds for m in MODES]
            order = order[rnd % len(order):] + order[:rnd % len(order)]  # rotated
            for w, m in order:
                if w == 1 and m != "independent":
                    continue  # one rank: the same as a plain load
                r = measure(m, w, relay, spec, rnd == 0 and m != "exchange", args.out)
                r.update(world=w, mode=m, round=rnd + 1)
                rows.append(r)
                log(f"ranks: round {rnd + 1} world {w} {m}: {r}")
                with open(os.path.join(args.out, "rows-ranks.json"), "w") as f:
                    json.dump({"command": COMMAND, "size": size, "rows": rows}, f, indent=1)
    finally:
        relay.close()
    loads = [r["loadavg"] for r in rows if "loadavg" in r]
    head = (f"{size / 1e9:.2f} GB, {args.rounds} rounds, {started:%Y-%m-%d %H:%M} UTC; "
            f"{platform.machine()}, {os.cpu_count()} CPUs; load average "
            f"{min(loads, default=0):.2f}-{max(loads, default=0):.2f} during the run\n"
            f"command: {COMMAND} (bench/ranks/run.py --gib {args.gib} --worlds {args.worlds} "
            f"--rounds {args.rounds})\n")
    lines = [head, "| world | mode | wall s, every rank holding every tensor (median, min–max) "
             "| bytes served ÷ checkpoint | connections opened | bytes checked |",
             "|---|---|---|---|---|---|"]
    summary = {}
    for w in worlds:
        for m in MODES:
            rs = [r for r in rows if r["world"] == w and r["mode"] == m and "secs" in r]
            if not rs:
                continue
            secs = [r["secs"] for r in rs]
            served = statistics.median(r["served"] for r in rs) / size
            conns = statistics.median(r["conns"] for r in rs)
            ver = next((r["verified"] for r in rs if r["verified"] is not None), None)
            summary[(w, m)] = (statistics.median(secs), served)
            lines.append(f"| {w} | {m if w > 1 else 'one rank'} | {statistics.median(secs):.2f} "
                         f"({min(secs):.2f}–{max(secs):.2f}) | {served:.3f}× | {conns:.0f} | "
                         f"{ {True: 'yes', False: '**MISMATCH**', None: 'n/a'}[ver] } |")
    lines += ["", "exchange: no S3, each rank broadcasts 1/W of the checkpoint's bytes to the "
              "others over gloo (what a shared load ends with): the floor this machine's cores "
              "set under the shared rows."]
    errs = [r for r in rows if "error" in r]
    if errs:
        lines += ["", "Failed measurements:"] + [f"- world {r['world']} {r['mode']} round "
                                                  f"{r['round']}: {r['error'][:300]}"
                                                  for r in errs]
    text = "\n".join(lines) + "\n"
    with open(os.path.join(args.out, "table-ranks.md"), "w") as f:
        f.write(text)
    print(text)
    plt = pyplot("ranks")
    if plt is not None:
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
        for m, mark in (("independent", "o-"), ("shared", "s-"), ("exchange", "^:")):
            ws = [w for w in worlds if (w, m) in summary or (w == 1 and m != "exchange" and
                                                               (1, "independent") in summary)]
            key = [(w, m if w > 1 else "independent") for w in ws]
            if m != "exchange":  # it reads nothing from S3
                a1.plot(ws, [summary[k][1] for k in key], mark, label=m)
            a2.plot(ws, [summary[k][0] for k in key], mark, label=m)
        a1.set_xlabel("ranks")
        a1.set_ylabel("bytes served ÷ checkpoint")
        a2.set_xlabel("ranks")
        a2.set_ylabel("wall s until every rank holds every tensor")
        a1.legend()
        a2.legend()
        fig.suptitle(head.splitlines()[0], fontsize=8)
        fig.text(0.01, 0.005, head.splitlines()[1], fontsize=6)
        fig.tight_layout(rect=(0, 0.03, 1, 0.95))
        fig.savefig(os.path.join(args.out, "ranks.png"), dpi=110)
    return 1 if errs or any(r.get("verified") is False for r in rows) else 0


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.exit(main())
