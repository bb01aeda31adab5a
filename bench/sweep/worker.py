"""One point of the sweep (bench/sweep/run.py), in its own process.

    python worker.py '{"op": "load"|"save", "uri": ..., "shape": "llama"|"flat",
                       "bytes": N, "tensors": N, "concurrency": N, "part_size": N}' OUT.json

Creates an s3direct.Client with the given concurrency and part size (0: the library's
defaults), prepares what is not part of the work (for a save: the source tensors), then
measures only s3direct.load(uri) into new CPU tensors or s3direct.save(tensors, uri): wall
time, client CPU (user + system, children included), peak RSS growth (VmHWM reset through
/proc/self/clear_refs just before the operation) and minor page faults. The loaded bytes are
checked by the library itself (the CRC32C of every tensor, on by default)."""

import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "peers"))
import ckpt  # noqa: E402
from measure import proc_kib, usage  # noqa: E402

MiB = 1 << 20


def spec_of(p):
    """Tensor names and shapes: llama-shaped at that size, or N equal flat bf16 tensors."""
    if p["shape"] == "llama":
        return ckpt.llama_spec(p["bytes"])
    n = p["tensors"]
    elems = max(1, p["bytes"] // 2 // n)
    return [{"name": f"t.{i:06d}", "shape": [elems], "dtype": "bfloat16"} for i in range(n)]


def source(spec):
    """Tensors of random bits, made fast: a 64 MiB random block repeated from a different
    offset in each tensor (nothing on the path compresses or deduplicates)."""
    import numpy as np
    import torch

    block = np.random.default_rng(7).integers(0, 1 << 63, size=8 * MiB, dtype=np.int64)
    block = block.view(np.uint8)
    out = {}
    for i, t in enumerate(spec):
        x = torch.empty(t["shape"], dtype=getattr(torch, t["dtype"]))
        b = x.view(-1).view(torch.uint8).numpy()
        off = (i * 4099 * 64) % block.size
        pos = 0
        while pos < b.size:
            n = min(b.size - pos, block.size - off)
            b[pos:pos + n] = block[off:off + n]
            pos += n
            off = 0
        out[t["name"]] = x
    return out


def main():
    p = json.loads(sys.argv[1])
    out = sys.argv[2]
    row = dict(p)
    try:
        import torch

        import s3direct

        torch.set_num_threads(1)
        spec = spec_of(p)
        nbytes = ckpt.nbytes(spec)
        c = s3direct.Client(max_concurrency=p.get("concurrency") or None,
                            part_size=p.get("part_size") or None)
        if p["op"] == "save":
            state = source(spec)

            def run():
                s3direct.save(state, p["uri"], client=c)
        else:
            def run():
                return s3direct.load(p["uri"], client=c)
        import gc

        gc.collect()
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
        except OSError:
            pass
        rss0 = proc_kib("VmRSS:")
        cpu0, flt0 = usage()
        t0 = time.perf_counter()
        result = run()
        wall = time.perf_counter() - t0
        cpu1, flt1 = usage()
        hwm = proc_kib("VmHWM:")
        if p["op"] == "load" and len(result) != len(spec):
            raise RuntimeError(f"loaded {len(result)} tensors, expected {len(spec)}")
        row.update(bytes=nbytes, n_tensors=len(spec), wall_s=wall, cpu_s=cpu1 - cpu0,
                   gbps=nbytes / wall / 1e9, cpu_s_per_gb=(cpu1 - cpu0) / (nbytes / 1e9),
                   rss_growth_mib=(hwm - rss0) / 1024, minor_faults=flt1 - flt0)
    except Exception as e:
        row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:200]
    with open(out, "w") as f:
        json.dump(row, f)


if __name__ == "__main__":
    main()
