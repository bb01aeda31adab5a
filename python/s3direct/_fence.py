"""save_async's fence: per device, a CUDA event recorded on the caller's current stream right
after the snapshot copies. The C write waits for it on the GPU (s3d_write_options.cuda_events:
the library's own stream of that device waits for the event with cuStreamWaitEvent before its
first copy), so the background writer waits for the snapshot copies and for nothing the
caller queues after save_async returned (the next step's kernels, a second save's snapshot).

A stream handed to the write instead would not do: the C write records an event on a stream it
is given at its first copy, which may be long after save_async returned, and every stream torch
hands out is shared (torch.cuda.Stream() gives one of a small pool of reused streams, maybe
the caller's current stream itself). An event recorded now captures exactly the work queued
so far. The Python package calls no CUDA driver function itself: torch records the events,
the library waits for them.

The library only waits for the events; it never records, queries or destroys them. Each
event must stay alive and must not be recorded again until the write returns: fence() makes
new ones, and its release() drops them once the save is done.
"""

from __future__ import annotations

from typing import Callable, Iterable, Tuple

import torch

from . import errors


def fence(devices: Iterable[int]) -> Tuple[list[int], Callable[[], None]]:
    """For each device ordinal in devices (-1 ignored): a new event recorded on its current
    stream now. Returns the events' CUevent handles as a list indexed by ordinal (0 where no
    tensor lives), for the write's cuda_events, and a function that drops the events once the
    write is done (the handles are valid only while they live)."""
    used = sorted({d for d in devices if d >= 0})
    if not used:
        return [], lambda: None
    out = [0] * (used[-1] + 1)
    events: list[object] = []
    for d in used:
        with torch.cuda.device(d):
            ev = torch.cuda.Event()  # type: ignore[no-untyped-call]
            ev.record(torch.cuda.current_stream(d))
        handle = int(ev.cuda_event or 0)
        if handle == 0:  # torch makes the event at its first record: never 0 after one
            raise errors.DeviceError(
                errors._CODES["ECUDA"], f"save_async: torch.cuda.Event on cuda:{d} has no handle"
            )
        events.append(ev)
        out[d] = handle

    def release() -> None:
        events.clear()

    return out, release
