"""One measurement of the stream benchmark, in its own process (run by bench/stream/run.py).

    python worker.py SPEC.json TOOL WORK OUT.json [--verify]

TOOL: s3direct-load, s3direct-stream, runai, safetensors, or work-alone (the pass over tensors
already in memory, read from the source's raw copy before the timing). WORK: "float" (the
CPU pass, a bf16 -> float32 conversion, t.float(), per tensor) or "none" (nothing done with
the tensors). The worker prepares what is not part of the work (imports, clients), then times
the operation from its start: the moment the first tensor is in the consumer's hand, the
moment the last one is, and the end (every tensor in hand and, with WORK=float, converted);
client CPU (user + system of this process, all threads, and of its waited-for children) over
the same window. With --verify the pass's outputs (or, with WORK=none, the tensors yielded,
where the tool does not reuse their memory) are kept and compared with the source after the
timing: each tensor's bf16 bits (for a float32 output, the upper half of each float, which
the conversion keeps exactly) hashed and checked against the source's per-tensor digest. A
tool that cannot run writes {"error": "..."} with one line.
"""

import hashlib
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "peers"))
import ckpt  # noqa: E402
from measure import usage  # noqa: E402

SPEC = json.load(open(sys.argv[1]))
TOOL, WORK, OUT = sys.argv[2], sys.argv[3], sys.argv[4]
VERIFY = "--verify" in sys.argv[5:]
EP = SPEC["endpoint"]
BUCKET = SPEC["bucket"]
KEY = SPEC["keys"]["st"]
URI = f"s3://{BUCKET}/{KEY}"
REGION = SPEC.get("region", "us-east-1")


def tensor_digest(t):
    """blake2b of one tensor's bf16 bits: a bf16 tensor's raw bytes, or the upper 16 bits of
    each float32 of the pass's output (bf16 -> float32 is that shift, NaN payloads kept; a
    conversion back through .bfloat16() would quiet NaNs, and random bits hold many)."""
    import numpy as np
    import torch

    t = t.detach().contiguous().reshape(-1)
    if t.dtype == torch.float32:
        raw = (t.numpy().view(np.uint32) >> 16).astype("<u2").tobytes()
    else:
        raw = t.view(torch.uint8).numpy().tobytes() if t.numel() else b""
    return hashlib.blake2b(raw, digest_size=16).hexdigest()


class Consumer:
    """What the caller does with each tensor as it gets it: notes the time of the first and of
    the last, does the pass (WORK), and with --verify keeps what it can compare later."""

    def __init__(self, t0, keep_yielded):
        self.t0 = t0
        self.first = None
        self.last = None
        self.n = 0
        self.kept = {} if VERIFY else None
        self.keep_yielded = keep_yielded

    def __call__(self, name, t):
        now = time.perf_counter()
        if self.first is None:
            self.first = now - self.t0
        self.last = now - self.t0
        self.n += 1
        if WORK == "float":
            out = t.float()
            if self.kept is not None:
                self.kept[name] = out
        elif self.kept is not None and self.keep_yielded:
            self.kept[name] = t


def prepare(tool):
    """A callable run(consume) doing the tool's work, calling consume(name, tensor) for every
    tensor as the tool hands it over. Returns (run, keep_yielded): keep_yielded is False where
    a yielded tensor's memory is the tool's to reuse (nothing to keep with WORK=none)."""
    if tool in ("s3direct-load", "s3direct-stream", "s3direct-stream-min64"):
        import s3direct

        c = s3direct.Client(endpoint_url=EP, **({"min_concurrency": 64}
                                                if tool.endswith("-min64") else {}))
        if tool == "s3direct-load":
            def run(consume):
                for n, t in s3direct.load(URI, client=c).items():
                    consume(n, t)
        else:
            def run(consume):
                for n, t in s3direct.stream(URI, client=c):
                    consume(n, t)
        return run, True
    if tool == "runai":
        # as bench/peers/worker.py drives it: the server through AWS_ENDPOINT_URL, path-style
        os.environ["AWS_ENDPOINT_URL"] = EP
        os.environ["RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING"] = "0"
        from runai_model_streamer import SafetensorsStreamer

        def run(consume):
            with SafetensorsStreamer() as s:
                s.stream_file(URI)
                for n, t in s.get_tensors():
                    consume(n, t)  # a view into the streamer's buffer, valid until the next
        return run, False
    if tool == "safetensors":
        # what its users do with an S3 object: download it to a local file (/dev/shm), then
        # iterate safe_open; the time counts from the start of the download
        import boto3
        from safetensors import safe_open

        s3 = boto3.client("s3", endpoint_url=EP, region_name=REGION)
        path = os.path.join("/dev/shm", f"s3d-stream-{os.getpid()}.safetensors")

        def run(consume):
            try:
                s3.download_file(BUCKET, KEY, path)
                with safe_open(path, "pt") as f:
                    for n in f.keys():
                        consume(n, f.get_tensor(n))
            finally:
                if os.path.exists(path):
                    os.unlink(path)
        return run, True
    if tool == "work-alone":
        state = ckpt.read_raw(SPEC["tensors"], SPEC["state_path"])  # in memory, as loaded

        def run(consume):
            for n, t in state.items():
                consume(n, t)
        return run, True
    raise ValueError(f"unknown tool {tool}")


def main():
    row = {"tool": TOOL, "work": WORK}
    try:
        import torch

        torch.set_num_threads(1)  # the pass on one thread, as in the other parts
        if WORK not in ("float", "none"):
            raise ValueError(f"unknown work {WORK}")
        run, keep_yielded = prepare(TOOL)
        import gc

        gc.collect()
        cpu0 = usage()[0]
        t0 = time.perf_counter()
        consume = Consumer(t0, keep_yielded)
        run(consume)
        wall = time.perf_counter() - t0
        cpu = usage()[0] - cpu0
        nbytes = SPEC["sizes"]["tensors"]
        row.update(first_s=consume.first, last_s=consume.last, total_s=wall, cpu_s=cpu,
                   tensors=consume.n, bytes=nbytes, gbps=nbytes / wall / 1e9)
        if consume.n != len(SPEC["tensors"]):
            row["error"] = f"{consume.n} tensors handed over, {len(SPEC['tensors'])} stored"
        elif VERIFY:
            if WORK == "none" and not keep_yielded:
                row["verified"] = None  # views into the tool's buffer: checked in its float row
            else:
                want = SPEC["tensor_digests"]
                bad = [n for n in want if n not in consume.kept
                       or tensor_digest(consume.kept[n]) != want[n]]
                row["verified"] = not bad
                if bad:
                    row["mismatch"] = bad[:5]
    except BaseException as e:
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:200]
    with open(OUT, "w") as f:
        json.dump(row, f)


if __name__ == "__main__":
    main()
