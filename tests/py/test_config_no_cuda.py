"""Client.config() never initialises CUDA (issue 39, "spurious failures"): it opened the device
layer (dlopen libcuda, cuInit) to fill gpu_available, and a process that forks after cuInit
has children that cannot use CUDA (DataLoader workers of a Dataset that looked at its
client's config). The library runs here against the stand-in libcuda.so.1 of the build
(tests/unit/fake_cuda.c), which refuses cuInit in a child of a process that called it, as the
driver does."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

CHILD = r"""
import ctypes, os, sys
import s3direct

def loaded():
    try:
        ctypes.CDLL("libcuda.so.1", mode=os.RTLD_NOW | os.RTLD_NOLOAD)
        return True
    except OSError:
        return False

assert not loaded(), "libcuda loaded before the client"
c = s3direct.Client(endpoint_url="http://127.0.0.1:9")
cfg = c.config()
assert not loaded(), "Client.config() loaded libcuda"
assert cfg["gpu_available"] is None, cfg["gpu_available"]  # not known before a GPU transfer
pid = os.fork()
if pid == 0:  # the child can still initialise CUDA (the fake refuses when the parent did)
    cu = ctypes.CDLL("libcuda.so.1")
    os._exit(0 if cu.cuInit(0) == 0 else 7)
_, st = os.waitpid(pid, 0)
assert os.waitstatus_to_exitcode(st) == 0, "cuInit failed in the forked child"
c.close()
host = s3direct.Client(endpoint_url="http://127.0.0.1:9", device=-1)
assert host.config()["gpu_available"] is False  # a host-only client knows: no GPU
print("ok")
"""


def test_config_does_not_initialise_cuda(lib_path):
    fake = os.path.join(os.path.dirname(lib_path), "tests", "fakecuda")
    if not os.path.exists(os.path.join(fake, "libcuda.so.1")):
        pytest.skip("the stand-in libcuda is not built")
    env = dict(os.environ, S3D_LIBRARY=lib_path,
               LD_LIBRARY_PATH=fake + os.pathsep + os.environ.get("LD_LIBRARY_PATH", ""))
    env.pop("S3D_DEVICE_EMULATE", None)
    env.pop("FAKE_CUDA_FORK_OK", None)
    r = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout + r.stderr
