"""save_async's fence (python/s3direct/_fence.py) against the stand-in libcuda.so.1 of the build
(tests/unit/fake_cuda.c), which exports only the versioned names cuda.h maps to and checks
contexts as the driver does: the three driver functions bind by the right names, a stream is
made non-blocking and waits for the event in its own context, and release() destroys it. This
torch has no CUDA: the context torch's runtime would make current is made current through the
fake, and torch.cuda.Event / current_stream / device are stand-ins over the fake's event."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

CHILD = r"""
import contextlib, ctypes
import torch
from s3direct import _fence

cu = ctypes.CDLL("libcuda.so.1")
vp = ctypes.c_void_p
assert cu.cuInit(0) == 0
ctx = vp()
assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
assert cu.cuCtxSetCurrent(ctx) == 0  # what torch's runtime does on its first CUDA call

class Current:
    cuda_stream = 0  # the legacy default stream of the current context

class Event:
    def record(self, stream):
        e = vp()
        assert cu.cuEventCreate(ctypes.byref(e), 2) == 0
        assert cu.cuEventRecord(e, vp(stream.cuda_stream)) == 0
        self.cuda_event = e.value

torch.cuda.Event = Event
torch.cuda.current_stream = lambda d=None: Current()
torch.cuda.device = lambda d: contextlib.nullcontext()
streams, release = _fence.fence([-1, 0, 0])
assert len(streams) == 1 and streams[0] not in (0, 1, 2), streams
release()
assert _fence.fence([-1])[0] == []
print("ok")
"""


def test_fence_binds_the_driver_and_waits_in_context(lib_path):
    fake = os.path.join(os.path.dirname(lib_path), "tests", "fakecuda")
    if not os.path.exists(os.path.join(fake, "libcuda.so.1")):
        pytest.skip("the stand-in libcuda is not built")
    env = dict(os.environ, S3D_LIBRARY=lib_path,
               LD_LIBRARY_PATH=fake + os.pathsep + os.environ.get("LD_LIBRARY_PATH", ""))
    env.pop("S3D_DEVICE_EMULATE", None)
    r = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout + r.stderr
