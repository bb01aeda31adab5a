"""save_async's fence (python/s3direct/_fence.py) end to end against the stand-in libcuda.so.1
of the build (tests/unit/fake_cuda.c), which defers each stream's work until something orders
it, as a GPU may run it late. The caller's stream has the snapshot copy queued; save_async
records an event after it (through torch.cuda.Event, here a stand-in over the fake's
cuEventRecord) and hands the event to the library (s3d_write_options.cuda_events), whose own
stream waits for it on the GPU; then the caller queues more work that overwrites the tensor.
The saved bytes must be the snapshot's: a save that waits for nothing saves the stale bytes
from before it, one that waits for the caller's whole stream saves the later work's. The
events stay alive until the write is done. This torch has no CUDA: the device tensor is fake
device memory, and the context torch's runtime would make current is made current through the
fake."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

CHILD = r"""
import contextlib, ctypes, sys, threading
import torch
import s3direct
from s3direct import _fence, _save

N = (1 << 20) + 3
cu = ctypes.CDLL("libcuda.so.1")
vp, u64 = ctypes.c_void_p, ctypes.c_ulonglong
cu.cuMemcpyHtoDAsync_v2.argtypes = [u64, vp, ctypes.c_size_t, vp]
assert cu.cuInit(0) == 0
ctx = vp()
assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
assert cu.cuCtxSetCurrent(ctx) == 0  # what torch's runtime does on its first CUDA call
caller = vp()
assert cu.cuStreamCreate(ctypes.byref(caller), 1) == 0  # the caller's current stream
dptr = u64()
assert cu.cuMemAlloc_v2(ctypes.byref(dptr), N) == 0
ctypes.memset(dptr.value, 0x11, N)  # stale until the snapshot copy runs
snap = ctypes.create_string_buffer(b"\x5a" * N, N)
later = ctypes.create_string_buffer(b"\xee" * N, N)
alive, destroyed = [], []

class Current:
    cuda_stream = caller.value

class Event:
    def record(self, stream):
        e = vp()
        assert cu.cuEventCreate(ctypes.byref(e), 2) == 0
        assert cu.cuEventRecord(e, vp(stream.cuda_stream)) == 0
        self.cuda_event = e.value
        alive.append(e.value)

    def __del__(self):
        destroyed.append(self.cuda_event)
        cu.cuEventDestroy_v2(vp(self.cuda_event))

class DevTensor:  # the snapshot: N bytes of fake device memory on cuda:0
    shape = (N,)
    def dim(self): return 1
    def data_ptr(self): return dptr.value
    def numel(self): return N
    def element_size(self): return 1

def prepare(t, name, path):
    s = real_prepare(t, name, path)
    return _save._Src(s.name, DevTensor(), s.dtype, 0)

def snapshot(s):  # the device-side copy, queued on the caller's current stream
    assert cu.cuMemcpyHtoDAsync_v2(dptr.value, snap, N, caller) == 0
    return s

def write(*a, **kw):
    assert kw["cuda_events"] == alive and not destroyed, (kw["cuda_events"], alive, destroyed)
    return real_write(*a, **kw)

real_prepare, real_write = _save._prepare, _save._write
torch.cuda.Event = Event
torch.cuda.current_stream = lambda d=None: Current()
torch.cuda.device = lambda d: contextlib.nullcontext()
_save._prepare, _save._snapshot, _save._write = prepare, snapshot, write
assert _fence.fence([-1])[0] == []

gate = threading.Event()
blocker = _save._get_executor().submit(gate.wait, 60)  # the write starts after we return
fut = s3direct.save_async({"w": torch.zeros(N, dtype=torch.uint8)}, sys.argv[1])
# The next step's work, queued after save_async returned: not part of the save.
assert cu.cuMemcpyHtoDAsync_v2(dptr.value, later, N, caller) == 0
gate.set()
blocker.result(timeout=60)
fut.result(timeout=120)
assert cu.cuStreamSynchronize(caller) == 0
back = s3direct.load(sys.argv[1])["w"]
got = bytes(back.numpy().tobytes())
assert got == snap.raw[:N], "saved 0x%02x..0x%02x, want the snapshot's 0x5a" % (got[0], got[-1])
print("ok")
"""


def test_save_async_waits_for_the_fence_event(lib_path, tmp_path):
    fake = os.path.join(os.path.dirname(lib_path), "tests", "fakecuda")
    if not os.path.exists(os.path.join(fake, "libcuda.so.1")):
        pytest.skip("the stand-in libcuda is not built")
    env = dict(os.environ, S3D_LIBRARY=lib_path,
               LD_LIBRARY_PATH=fake + os.pathsep + os.environ.get("LD_LIBRARY_PATH", ""))
    env.pop("S3D_DEVICE_EMULATE", None)
    r = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "f.safetensors")], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout + r.stderr
