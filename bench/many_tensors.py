"""Host memory of load() for a checkpoint of many small tensors (issue 35, item 9).

    python3 bench/many_tensors.py save /tmp/m200k.safetensors 200000
    python3 bench/many_tensors.py load /tmp/m200k.safetensors trace   # tracemalloc peak
    python3 bench/many_tensors.py load /tmp/m200k.safetensors         # ru_maxrss growth

Each measurement in its own process (ru_maxrss is a high-water mark; tracemalloc slows the
load); S3D_LIBRARY or S3D_BUILD_DIR names the library as for the tests.
"""

import gc
import os
import resource
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

import torch  # noqa: E402

import s3direct  # noqa: E402
import s3direct._checkpoint  # noqa: E402,F401  (s3direct imports lazily: not in the numbers)

mode, path = sys.argv[1], sys.argv[2]
if mode == "save":
    n = int(sys.argv[3])
    s3direct.save({f"layers.{i // 8}.block.{i % 8}.weight": torch.zeros(4, dtype=torch.float16)
                   for i in range(n)}, path)
    sys.exit()
trace = sys.argv[3:] == ["trace"]
import tracemalloc  # noqa: E402

gc.collect()
rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
if trace:
    tracemalloc.start()
t0 = time.perf_counter()
out = s3direct.load(path)
dt = time.perf_counter() - t0
rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
n = len(out)
if trace:
    cur, peak = tracemalloc.get_traced_memory()
    print(f"{n} tensors: tracemalloc peak {peak / n:.0f} B a tensor, kept {cur / n:.0f}")
else:
    print(f"{n} tensors: ru_maxrss grew {(rss1 - rss0) * 1024 / n:.0f} B a tensor "
          f"({(rss1 - rss0) >> 10} MiB), {dt:.2f} s")
