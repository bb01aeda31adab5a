"""gpu_check.py - the PyTorch half of the GPU proof (scripts/gpu-check.sh runs it from the
bundle on a lent GPU machine): byte-exact saves and loads between cuda:0 and S3 / files, the
stream-ordering rules with real side streams, fork after host-only work, expandable segments,
and the rates for a large checkpoint. Results go to a JSON file; the exit status is non-zero
if any check failed.

    python3 gpu_check.py --endpoint URL --scratch DIR --json OUT.json [--gib 4] [--emulate]

--endpoint: an S3 origin (tests/gpu/s3origin.py); --scratch: a folder on a real disk (not
tmpfs) for the file checks. --emulate: no GPU (CPU validation of the bundle): the checks that
need CUDA are reported as skipped and the rest run on host tensors. --deadline: a Unix time;
a check or rate that would start within --margin seconds of it is recorded as "cut" instead.

Order: the S3 -> GPU and S3 -> host rates first (the read client warmed and its pool pinned
before the clock starts), then the checks, then the other rates. The JSON file is rewritten
after every result, so a run that is killed leaves what it measured.
"""

import argparse
import json
import os
import struct
import subprocess
import sys
import time
import traceback
import urllib.request

import torch

import s3direct

RESULTS = []
OUT = {"path": None, "torch": torch.__version__, "emulate": False}
DEADLINE = {"at": None, "margin": 20.0}


def dump():
    """The JSON file as it stands: written after every result (a kill keeps the rest)."""
    if OUT["path"] is None:
        return
    tmp = OUT["path"] + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"torch": OUT["torch"], "emulate": OUT["emulate"], "results": RESULTS}, f,
                  indent=1)
    os.replace(tmp, OUT["path"])


def record(name, status, detail="", **extra):
    RESULTS.append(dict(name=name, status=status, detail=detail, **extra))
    print(f"{status.upper():5s} {name}" + (f": {detail}" if detail else ""), flush=True)
    dump()


def out_of_time():
    return DEADLINE["at"] is not None and time.time() > DEADLINE["at"] - DEADLINE["margin"]


def check(name, needs_gpu=False):
    def deco(fn):
        def run(ctx):
            if needs_gpu and ctx.emulate:
                return record(name, "skip", "needs a GPU (emulated run)")
            if out_of_time():
                return record(name, "cut", "the deadline (GPU_CHECK_DEADLINE_S) is too near")
            t = time.perf_counter()
            try:
                detail = fn(ctx) or ""
                record(name, "ok", detail, seconds=round(time.perf_counter() - t, 3))
            except Exception as e:  # a failed check is reported, the others still run
                traceback.print_exc()
                record(name, "fail", f"{type(e).__name__}: {e}")
        run.__name__ = name
        run.key = fn.__name__  # what --only and --skip name
        return run
    return deco


class Ctx:
    def __init__(self, a):
        self.emulate = a.emulate
        self.dev = torch.device("cpu" if a.emulate else "cuda:0")
        self.endpoint = a.endpoint
        self.scratch = a.scratch
        self.gib = a.gib
        self.client = s3direct.Client(endpoint_url=a.endpoint)
        # the S3 -> host/GPU rates read from the C origin on the same objects when given
        self.read_client = (s3direct.Client(endpoint_url=a.read_endpoint) if a.read_endpoint
                            else self.client)
        self.bucket = "gpucheck"
        req = urllib.request.Request(f"{a.endpoint}/{self.bucket}", method="PUT")
        urllib.request.urlopen(req).read()

    def uri(self, key):
        return f"s3://{self.bucket}/{key}"

    def fetch(self, key):
        """The object's bytes through plain HTTP (an independent reader)."""
        return urllib.request.urlopen(f"{self.endpoint}/{self.bucket}/{key}").read()

    def sync(self):
        if self.dev.type == "cuda":
            torch.cuda.synchronize(self.dev)


DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16,
          "BF16": torch.bfloat16, "I64": torch.int64, "I32": torch.int32, "I16": torch.int16,
          "I8": torch.int8, "U8": torch.uint8, "BOOL": torch.bool}


def st_load(b):
    """A minimal safetensors reader (the format is a u64 length, a JSON header, then the bytes):
    an independent check of what s3direct wrote, with nothing to install on the GPU machine."""
    n = struct.unpack("<Q", b[:8])[0]
    hdr = json.loads(b[8:8 + n])
    base = 8 + n
    out = {}
    for k, m in hdr.items():
        if k == "__metadata__":
            continue
        s, e = m["data_offsets"]
        dt = DTYPES[m["dtype"]]
        t = torch.frombuffer(bytearray(b[base + s:base + e]), dtype=dt) if e > s else \
            torch.empty(0, dtype=dt)
        out[k] = t.reshape(m["shape"])
    return out


def sample(dev, scale=1):
    g = torch.Generator().manual_seed(1234)
    cpu = {
        "f32": torch.randn((1 << 20) * scale, generator=g),
        "bf16": torch.randn(3, 1000, 77, generator=g).to(torch.bfloat16),
        "i64": torch.randint(-(1 << 40), 1 << 40, (12345,), generator=g),
        "u8": torch.randint(0, 255, (7,), dtype=torch.uint8, generator=g),
        "f16_odd": torch.randn(1, 3, 5, generator=g).half(),
        "empty": torch.empty(0, 4),
    }
    return cpu, {k: v.to(dev, copy=True) for k, v in cpu.items()}


def same(got, want):
    if set(got) != set(want):
        raise AssertionError(f"names differ: {sorted(set(got) ^ set(want))}")
    for k, w in want.items():
        g = got[k]
        if g.dtype != w.dtype or tuple(g.shape) != tuple(w.shape):
            raise AssertionError(f"{k}: {g.dtype}{tuple(g.shape)} != {w.dtype}{tuple(w.shape)}")
        if not torch.equal(g.cpu(), w.cpu()):
            raise AssertionError(f"{k}: bytes differ")


@check("save GPU tensors to s3:// (read back over plain HTTP by an independent parser)")
def save_s3(ctx):
    cpu, dev = sample(ctx.dev)
    s3direct.save(dev, ctx.uri("exact.safetensors"), client=ctx.client)
    same(st_load(ctx.fetch("exact.safetensors")), cpu)


@check("save GPU tensors to a file (read back by an independent parser)")
def save_file(ctx):
    cpu, dev = sample(ctx.dev)
    p = os.path.join(ctx.scratch, "exact.safetensors")
    s3direct.save(dev, p)
    with open(p, "rb") as f:
        same(st_load(f.read()), cpu)


@check("load from s3:// into new GPU tensors")
def load_s3(ctx):
    cpu, _ = sample(ctx.dev)
    got = s3direct.load(ctx.uri("exact.safetensors"), device=str(ctx.dev), client=ctx.client)
    for k, v in got.items():
        if v.device != ctx.dev:
            raise AssertionError(f"{k} on {v.device}")
    same(got, cpu)


@check("load from a file into new GPU tensors")
def load_file(ctx):
    cpu, _ = sample(ctx.dev)
    got = s3direct.load(os.path.join(ctx.scratch, "exact.safetensors"), device=str(ctx.dev))
    same(got, cpu)


@check("load_into preallocated GPU tensors")
def load_into(ctx):
    cpu, _ = sample(ctx.dev)
    dest = {k: torch.full_like(v, 3).to(ctx.dev) if v.numel() else v.to(ctx.dev)
            for k, v in cpu.items()}
    s3direct.load_into(dest, ctx.uri("exact.safetensors"), client=ctx.client)
    ctx.sync()
    same(dest, cpu)


@check("save_async snapshots: tensors changed right after it returns do not leak into the save")
def save_async(ctx):
    cpu, dev = sample(ctx.dev)
    fut = s3direct.save_async(dev, ctx.uri("async.safetensors"), client=ctx.client)
    for v in dev.values():
        if v.numel():
            v.add_(1) if v.dtype != torch.uint8 else v.bitwise_not_()
    fut.result()
    same(s3direct.load(ctx.uri("async.safetensors"), client=ctx.client), cpu)


def _long_chain(dev, seconds):
    """Queues about `seconds` of matrix products on the current stream (calibrated on a short
    chain first) and returns how many were queued."""
    a = torch.randn(4096, 4096, device=dev)
    torch.cuda.synchronize(dev)
    t = time.perf_counter()
    for _ in range(10):
        a = a @ a
        a = a / a.norm()
    torch.cuda.synchronize(dev)
    n = max(10, min(20000, int(seconds / max(time.perf_counter() - t, 1e-4) * 10)))
    for _ in range(n):
        a = a @ a
        a = a / a.norm()
    return n


@check("save_async: a long kernel queued right after it returns does not delay the future",
       needs_gpu=True)
def save_async_fence(ctx):
    cpu, dev = sample(ctx.dev)
    torch.cuda.synchronize(ctx.dev)
    finished = {}
    fut = s3direct.save_async(dev, ctx.uri("fence.safetensors"), client=ctx.client)
    fut.add_done_callback(lambda _: finished.setdefault("t", time.perf_counter()))
    n = _long_chain(ctx.dev, 6.0)  # on the current stream, the one the snapshot was taken on
    for v in dev.values():  # and changes after it: must not reach the object
        if v.numel():
            v.add_(1) if v.dtype != torch.uint8 else v.bitwise_not_()
    fut.result(timeout=120)
    torch.cuda.synchronize(ctx.dev)
    kernels_done = time.perf_counter()
    same(s3direct.load(ctx.uri("fence.safetensors"), client=ctx.client), cpu)
    ahead = kernels_done - finished.get("t", kernels_done)  # callback not run yet: waited
    if ahead < 1.0:
        raise AssertionError(f"the save finished {ahead:.2f} s before the {n} products queued "
                             "after save_async: it waited for them")
    return f"the save finished {ahead:.2f} s before the {n} products queued after it"


def _slow_fill(t, value, stream):
    """Queues work on `stream` that takes a while, then fills t with value."""
    with torch.cuda.stream(stream):
        a = torch.randn(4096, 4096, device=t.device)
        for _ in range(40):
            a = a @ a
            a = a / a.norm()
        t.fill_(value)
    return a


@check("load_into waits for kernels queued on the current (side) stream", needs_gpu=True)
def order_load_into(ctx):
    cpu, _ = sample(ctx.dev)
    s = torch.cuda.Stream(ctx.dev)
    dest = {k: torch.empty_like(v, device=ctx.dev) for k, v in cpu.items()}
    torch.cuda.synchronize()
    with torch.cuda.stream(s):
        for v in dest.values():
            if v.numel():
                _slow_fill(v, 5, s)
        s3direct.load_into(dest, ctx.uri("exact.safetensors"), client=ctx.client)
    s.synchronize()
    same(dest, cpu)


@check("a load on a side stream is visible to kernels queued after it on that stream",
       needs_gpu=True)
def order_consumer(ctx):
    cpu, _ = sample(ctx.dev)
    s = torch.cuda.Stream(ctx.dev)
    with torch.cuda.stream(s):
        got = s3direct.load(ctx.uri("exact.safetensors"), device=str(ctx.dev),
                            client=ctx.client)
        doubled = got["f32"] * 2
    s.synchronize()
    if not torch.equal(doubled.cpu(), cpu["f32"] * 2):
        raise AssertionError("kernel after the load saw other bytes")


@check("a save waits for kernels that produce the tensors on the current stream",
       needs_gpu=True)
def order_save(ctx):
    s = torch.cuda.Stream(ctx.dev)
    t = torch.zeros(8 << 20, device=ctx.dev)
    torch.cuda.synchronize()
    with torch.cuda.stream(s):
        _slow_fill(t, 9, s)
        s3direct.save({"t": t}, ctx.uri("order.safetensors"), client=ctx.client)
    got = s3direct.load(ctx.uri("order.safetensors"), client=ctx.client)["t"]
    if not bool((got == 9).all()):
        raise AssertionError("the save read the tensor before the kernel that fills it ran")


def _child(code, env=None):
    e = dict(os.environ, **(env or {}))
    limit = 300 if DEADLINE["at"] is None else max(10, min(300, DEADLINE["at"] - time.time()))
    p = subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True,
                       timeout=limit)
    if p.returncode != 0:
        raise AssertionError(f"child exit {p.returncode}: {(p.stderr or p.stdout)[-800:]}")
    return p.stdout.strip()


@check("host-only load, then fork(): the child can use CUDA", needs_gpu=True)
def fork_after_host(ctx):
    code = f"""
import os, sys, torch, s3direct
c = s3direct.Client(endpoint_url={ctx.endpoint!r})
s3direct.load({ctx.uri("exact.safetensors")!r}, client=c)
s3direct.save({{"x": torch.ones(4)}}, {os.path.join(ctx.scratch, "fork.safetensors")!r})
assert not torch.cuda.is_initialized()
pid = os.fork()
if pid == 0:
    try:
        v = torch.ones(3, device="cuda:0").sum().item()
        os._exit(0 if v == 3 else 3)
    except Exception as e:
        print(e, file=sys.stderr); os._exit(4)
_, st = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(st))
"""
    _child(code)


@check("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: save and load byte-exact",
       needs_gpu=True)
def expandable(ctx):
    code = f"""
import torch, s3direct
c = s3direct.Client(endpoint_url={ctx.endpoint!r})
g = torch.Generator().manual_seed(5)
x = {{"a": torch.randn(9 << 20, generator=g), "b": torch.randn(333, generator=g)}}
s3direct.save({{k: v.cuda() for k, v in x.items()}}, {ctx.uri("exp.safetensors")!r}, client=c)
y = s3direct.load({ctx.uri("exp.safetensors")!r}, device="cuda:0", client=c)
assert all(torch.equal(y[k].cpu(), x[k]) for k in x)
"""
    _child(code, {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})


def rate(ctx, label, nbytes, fn, **extra):
    if out_of_time():
        return record(f"rate: {label}", "cut", "the deadline (GPU_CHECK_DEADLINE_S) is too near")
    ctx.sync()
    t = time.perf_counter()
    fn()
    ctx.sync()
    dt = time.perf_counter() - t
    record(f"rate: {label}", "ok", f"{nbytes / dt / 1e9:.2f} GB/s", gbps=nbytes / dt / 1e9,
           seconds=round(dt, 3), bytes=nbytes, **extra)


class Rates:
    """The tensors of the rates: a checkpoint of --gib GiB in 16 tensors."""

    def __init__(self, ctx):
        n = int(ctx.gib * (1 << 30)) // 4 // 16
        self.host = {f"t{i}": torch.randn(n) for i in range(16)}
        self.nbytes = sum(v.numel() * 4 for v in self.host.values())
        self.devt = {k: v.to(ctx.dev) for k, v in self.host.items()}
        self.key = "rate.safetensors"
        self.path = os.path.join(ctx.scratch, "rate.safetensors")


def rates_s3(ctx, r):
    """S3 -> GPU and S3 -> host first: the figures that matter most. The read client is
    warmed untimed (connections opened, its staging pool pinned: once per client) by loading
    one tensor into GPU memory, so that the timed loads are transfers, not set-up."""
    rate(ctx, "host -> S3 (save)", r.nbytes,
         lambda: s3direct.save(r.host, ctx.uri(r.key), client=ctx.client))
    t = time.perf_counter()
    s3direct.load(ctx.uri(r.key), device=str(ctx.dev), client=ctx.read_client, keys=["t0"])
    record("read client warm-up (untimed in the rates)", "ok",
           f"one tensor into {ctx.dev} in {time.perf_counter() - t:.2f} s")
    if not ctx.emulate:
        rate(ctx, "S3 -> GPU (load, warm client)", r.nbytes,
             lambda: s3direct.load(ctx.uri(r.key), device="cuda:0", client=ctx.read_client))
        rate(ctx, "S3 -> GPU (load_into, warm client)", r.nbytes,
             lambda: s3direct.load_into(r.devt, ctx.uri(r.key), client=ctx.read_client))
    rate(ctx, "S3 -> host (load, warm client)", r.nbytes,
         lambda: s3direct.load(ctx.uri(r.key), client=ctx.read_client))


def rates_rest(ctx, r):
    """GPU -> S3 and the file rates."""
    if not ctx.emulate:
        rate(ctx, "GPU -> S3 (save)", r.nbytes,
             lambda: s3direct.save(r.devt, ctx.uri(r.key), client=ctx.client))
    side = "GPU" if not ctx.emulate else "host"
    rate(ctx, f"{side} -> file (save)", r.nbytes, lambda: s3direct.save(r.devt, r.path))
    fd = os.open(r.path, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
    rate(ctx, f"file -> {side} (load, cold cache)", r.nbytes,
         lambda: s3direct.load(r.path, device=str(ctx.dev)))
    rate(ctx, f"file -> {side} (load, warm cache)", r.nbytes,
         lambda: s3direct.load(r.path, device=str(ctx.dev)))


def guarded(name, fn, *args):
    try:
        return fn(*args)
    except Exception as e:
        traceback.print_exc()
        record(name, "fail", f"{type(e).__name__}: {e}")
        return None


CHECKS = (save_s3, save_file, load_s3, load_file, load_into, save_async, save_async_fence,
          order_load_into, order_consumer, order_save, fork_after_host, expandable)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--read-endpoint", default=None,
                    help="origin for the S3 -> host/GPU rates (s3origin_get, same objects)")
    ap.add_argument("--scratch", required=True)
    ap.add_argument("--json", required=True)
    ap.add_argument("--gib", type=float, default=1.0)
    ap.add_argument("--emulate", action="store_true")
    ap.add_argument("--deadline", type=float, default=None, help="Unix time to stop by")
    ap.add_argument("--margin", type=float, default=20.0,
                    help="seconds before --deadline after which nothing new starts")
    ap.add_argument("--only", default="", help="run only these checks (comma list), no rates")
    ap.add_argument("--skip", default="", help="leave out these checks (comma list)")
    a = ap.parse_args()
    os.makedirs(a.scratch, exist_ok=True)
    OUT.update(path=a.json, emulate=a.emulate)
    DEADLINE.update(at=a.deadline, margin=a.margin)
    dump()
    if not a.emulate and not torch.cuda.is_available():
        record("cuda", "fail", "torch.cuda.is_available() is False")
    else:
        ctx = Ctx(a)
        print(f"torch {torch.__version__}, device {ctx.dev}"
              + (f" ({torch.cuda.get_device_name(0)})" if not a.emulate else "")
              + f", s3direct {s3direct.library_version()}", flush=True)
        only, skip = set(filter(None, a.only.split(","))), set(filter(None, a.skip.split(",")))
        r = None if only else guarded("rates", Rates, ctx)
        if r is not None:
            guarded("rates (S3)", rates_s3, ctx, r)
        for fn in CHECKS:
            if (not only or fn.key in only) and fn.key not in skip:
                fn(ctx)
        if r is not None:
            guarded("rates (files, GPU -> S3)", rates_rest, ctx, r)
    dump()
    failed = [r["name"] for r in RESULTS if r["status"] == "fail"]
    ok = sum(r["status"] == "ok" for r in RESULTS)
    skipped = sum(r["status"] == "skip" for r in RESULTS)
    cut = sum(r["status"] == "cut" for r in RESULTS)
    print(f"gpu_check: {ok} ok, {len(failed)} failed, {skipped} skipped, {cut} cut", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
