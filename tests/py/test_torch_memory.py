"""Host memory: load_into of a 1 GiB checkpoint into preallocated tensors raises peak RSS by at
most the staging pool + 64 MiB (the C reader writes straight into the destination)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

GIB = 1 << 30

PROBE = r"""
import resource, sys, torch, s3direct
uri, n, staging = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
client = s3direct.Client(staging_bytes=staging)
# Target tensors preallocated and touched before the baseline.
dst = {f"t{i}": torch.zeros(n // 4 // 8, dtype=torch.int32) for i in range(8)}
import gc; gc.collect()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
s3direct.load_into(dst, uri, client=client)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
for i in range(8):
    t = dst[f"t{i}"]
    assert t[0].item() == i and t[-1].item() == i + t.numel() - 1, i
print(before, after)
"""


# Local file only: the development S3 server keeps objects in RAM, and a 1 GiB object there
# has taken it down; the host-memory path (C reader -> destination) is the same for both.
def test_load_into_peak_rss(tmp_path, lib_path):
    where = str(tmp_path)
    import torch

    import s3direct

    staging = 64 << 20
    n = GIB
    per = n // 4 // 8
    state = {f"t{i}": torch.arange(per, dtype=torch.int32) + i for i in range(8)}
    uri = f"{where}/big.safetensors"
    s3direct.save(state, uri, checksum=False)
    del state
    try:
        out = subprocess.run([sys.executable, "-c", PROBE, uri, str(n), str(staging)],
                             capture_output=True, text=True, timeout=300,
                             env=dict(os.environ))
        assert out.returncode == 0, out.stderr[-3000:]
        before, after = map(int, out.stdout.split()[-2:])
        grew = after - before
        assert grew <= staging + (64 << 20), f"peak RSS grew {grew >> 20} MiB"
    finally:
        os.unlink(os.path.join(where, "big.safetensors"))


def test_reader_entries_share_repeated_shapes_and_sizes(tmp_path, lib_path):
    """A header of many tensors (issue 35, item 9: 1.66 M tensors took 2 GB of Python memory
    to load) costs one shape tuple and one size int per distinct shape, not per tensor: the
    entries of 2,000 same-shaped tensors share them (before, each had its own: 96 of the
    about 300 bytes a tensor the reader's entries took, measured with tracemalloc)."""
    import torch

    import s3direct
    from s3direct._reader import CheckpointReader

    path = str(tmp_path / "many.safetensors")
    sd = {f"layers.{i}.w": torch.zeros(600, dtype=torch.float16) for i in range(2000)}
    sd["other"] = torch.zeros(2, 3)
    s3direct.save(sd, path)
    with CheckpointReader(path) as r:
        same = [e for e in r.tensors if e.name != "other"]
        assert len(same) == 2000
        assert len({id(e.shape) for e in same}) == 1 and same[0].shape == (600,)
        assert len({id(e.nbytes) for e in same}) == 1 and same[0].nbytes == 1200
        assert r.by_name["other"].shape == (2, 3) and r.by_name["other"].nbytes == 24


MANY_PROBE = r"""
import gc, sys, tracemalloc, torch, s3direct
import s3direct._checkpoint  # imported (with torch) before the measurement: s3direct is lazy
path, n = sys.argv[1], int(sys.argv[2])
gc.collect()
tracemalloc.start()
out = s3direct.load(path)
peak = tracemalloc.get_traced_memory()[1]
tracemalloc.stop()
assert len(out) == n, len(out)
assert out["layers.7.block.3.weight"].tolist() == [7 * 8 + 3] * 4
print(peak)
"""


def test_load_many_tensors_python_peak(tmp_path, lib_path):
    """Issue 35, item 9: a header of 1.66 M small tensors took 2 GB of Python memory to load.
    load() of 100,000 tensors peaks at 1,135 Python bytes a tensor before the bulk path
    (_bulkload: no TensorEntry, no dests list, the dest array filled in place, tensor leaves
    of the tree as TLeaf); about 370 after (tracemalloc, docs/internals/performance.md)."""
    import torch

    import s3direct

    n = 100_000
    path = str(tmp_path / "many.safetensors")
    sd = {f"layers.{i // 8}.block.{i % 8}.weight": torch.full((4,), i, dtype=torch.int32)
          for i in range(n)}
    s3direct.save(sd, path)
    del sd
    out = subprocess.run([sys.executable, "-c", MANY_PROBE, path, str(n)], capture_output=True,
                         text=True, timeout=300, env=dict(os.environ))
    assert out.returncode == 0, out.stderr[-3000:]
    per = int(out.stdout.split()[-1]) / n
    assert per <= 600, f"load peaked at {per:.0f} Python bytes a tensor"
