"""save_async's fence: per device, a CUDA stream of its own that waits for an event recorded on
the caller's current stream right after the snapshot copies, and for nothing queued later.

The background writer orders its device-to-host copies after the stream it is given (the C
write records an event on it at its first copy, which may be long after save_async returned).
torch.cuda.Stream() cannot be that stream: it hands out one of a small pool of reused streams
(shared with NCCL, user side streams, possibly the caller's current stream itself), so the
fence could also hold work the caller queued after save_async returned, and the save would
wait for it. torch has no call that makes a stream of one's own, so this one is made with the
driver API (libcuda.so.1, which torch has loaded): non-blocking, so it does not wait for the
legacy default stream either. The library's own device layer is not public API; this is the
one place the Python package calls the driver, and only for these three functions.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any, Callable, Iterable, Optional, Tuple

import torch

from . import errors

_CU_STREAM_NON_BLOCKING = 1
_driver_lock = threading.Lock()
_driver_dll: Optional[Any] = None


def _driver() -> Any:
    """libcuda.so.1 with the three functions declared (tests replace this function)."""
    global _driver_dll
    with _driver_lock:
        if _driver_dll is None:
            try:
                dll = ctypes.CDLL("libcuda.so.1")
            except OSError as e:
                raise errors.DeviceError(
                    errors._CODES["ECUDA"], f"save_async: cannot load libcuda.so.1: {e}"
                ) from e
            vp = ctypes.c_void_p
            dll.cuStreamCreate.argtypes = [ctypes.POINTER(vp), ctypes.c_uint]
            dll.cuStreamWaitEvent.argtypes = [vp, vp, ctypes.c_uint]
            dll.cuStreamDestroy_v2.argtypes = [vp]
            for f in (dll.cuStreamCreate, dll.cuStreamWaitEvent, dll.cuStreamDestroy_v2):
                f.restype = ctypes.c_int
            _driver_dll = dll
        return _driver_dll


def _check(r: int, what: str, device: int) -> None:
    if r != 0:
        raise errors.DeviceError(
            errors._CODES["ECUDA"], f"save_async: {what} on cuda:{device} failed: CUresult {r}"
        )


def fence(devices: Iterable[int]) -> Tuple[list[int], Callable[[], None]]:
    """For each device ordinal in devices (-1 ignored): an event recorded on its current stream
    now, and a new non-blocking stream that waits for it. Returns the stream handles as a list
    indexed by ordinal (0 where no tensor lives), for the write's cuda_streams, and a function
    that destroys the streams once the write is done (the driver frees a stream's resources
    when its work completes)."""
    used = sorted({d for d in devices if d >= 0})
    if not used:
        return [], lambda: None
    cu = _driver()
    out = [0] * (used[-1] + 1)
    made: list[Tuple[int, int]] = []
    events: list[object] = []

    def release() -> None:
        while made:
            d, h = made.pop()
            with torch.cuda.device(d):
                cu.cuStreamDestroy_v2(ctypes.c_void_p(h))
        events.clear()

    try:
        for d in used:
            with torch.cuda.device(d):
                ev = torch.cuda.Event()  # type: ignore[no-untyped-call]
                ev.record(torch.cuda.current_stream(d))
                events.append(ev)
                s = ctypes.c_void_p()
                _check(
                    cu.cuStreamCreate(ctypes.byref(s), _CU_STREAM_NON_BLOCKING), "cuStreamCreate", d
                )
                made.append((d, int(s.value or 0)))
                _check(
                    cu.cuStreamWaitEvent(s, ctypes.c_void_p(ev.cuda_event), 0),
                    "cuStreamWaitEvent",
                    d,
                )
                out[d] = int(s.value or 0)
    except BaseException:
        release()
        raise
    return out, release
