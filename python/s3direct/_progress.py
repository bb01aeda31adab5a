"""Progress reporting through the C progress callback (s3d_progress_fn).

progress=True:
- on a terminal or in a Jupyter notebook, with tqdm installed: a tqdm bar (tqdm.auto: the
  notebook widget where ipywidgets is installed), left on screen when done (its final line
  gives the size, the time and the rate);
- on a terminal or in a notebook without tqdm: a plain line at most once a second, then the
  summary line;
- elsewhere (logs, CI): a plain line every 10 s while the transfer runs, and one summary line
  when it completes, e.g. ``s3direct: load model.safetensors: 1.50 GiB in 2.31 s
  (665.0 MiB/s)``.
Lines go to stderr. A callable is called as progress(done_bytes, total_bytes) instead.
The ctypes callback object must stay referenced for as long as the C call runs: Progress keeps
it, and callers keep the Progress.
"""

from __future__ import annotations

import importlib
import itertools
import sys
import threading
import time
from typing import Any, Callable, Optional, Union

from ._capi import PROGRESS_FN

ProgressArg = Union[bool, None, Callable[[int, int], Any]]


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return f"{n:.2f} TiB"  # pragma: no cover


# Off a terminal (a log file, CI), a line this often while a transfer runs.
OFF_TERMINAL_EVERY_S = 10.0


def _in_notebook() -> bool:
    """True inside a Jupyter kernel (its output is shown live, though it is no terminal)."""
    ipython = sys.modules.get("IPython")
    if ipython is None or "ipykernel" not in sys.modules:
        return False
    try:
        shell = ipython.get_ipython()
    except Exception:
        return False
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


class Progress:
    def __init__(self, progress: ProgressArg, desc: str, stream: Any = None) -> None:
        self._bar: Any = None
        self._user: Optional[Callable[[int, int], Any]] = None
        self._done = 0
        self._total = 0
        self._desc = desc
        self._stream = stream if stream is not None else sys.stderr
        self._plain = False
        self._last_line = 0.0
        self._t0 = time.monotonic()
        self.fn: Any = None  # the PROGRESS_FN to put in the options struct, or None
        if progress is None or progress is False:
            return
        if callable(progress):
            self._user = progress
        else:
            tty = bool(getattr(self._stream, "isatty", lambda: False)()) or _in_notebook()
            tqdm: Any = None
            if tty:
                try:
                    # Imported by name, not by an import statement: type checkers of the
                    # user's code then need no tqdm stubs, present or not.
                    tqdm = importlib.import_module("tqdm.auto").tqdm
                except ImportError:
                    tqdm = None
            if tqdm is not None:
                self._bar = tqdm(
                    total=None,
                    desc=f"s3direct: {desc}",
                    unit="B",
                    unit_scale=True,
                    unit_divisor=1024,
                    leave=True,
                    file=self._stream,
                )
            else:
                self._plain = True
                self._every = 1.0 if tty else OFF_TERMINAL_EVERY_S
                if not tty:
                    self._last_line = self._t0  # the first line after a period, not at once
        self.fn = PROGRESS_FN(self._cb)

    def _cb(self, user: Any, done: int, total: int) -> int:
        # Runs on the thread that called into C; an exception here must not unwind into C.
        try:
            if total:
                self._total = int(total)
            if self._bar is not None:
                if total and self._bar.total != total:
                    self._bar.total = total
                if done > self._done:
                    self._bar.update(done - self._done)
            elif self._user is not None:
                self._user(int(done), int(total))
            elif self._plain and self._every is not None:
                now = time.monotonic()
                if now - self._last_line >= self._every:
                    self._last_line = now
                    pct = f" {100.0 * done / total:5.1f}%" if total else ""
                    print(
                        f"s3direct: {self._desc}:{pct} {human_bytes(done)} of {human_bytes(total)}",
                        file=self._stream,
                        flush=True,
                    )
            self._done = max(self._done, int(done))
        except Exception:
            pass
        return 0

    def summary(self) -> str:
        secs = max(time.monotonic() - self._t0, 1e-9)
        size = self._total or self._done
        return (
            f"s3direct: {self._desc}: {human_bytes(size)} in {secs:.2f} s "
            f"({human_bytes(size / secs)}/s)"
        )

    def close(self, ok: bool = True) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        elif self._plain:
            self._plain = False
            if ok:
                print(self.summary(), file=self._stream, flush=True)

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        self.close(ok=exc_type is None)


class Combined:
    """One progress display over several transfers that run at once (a DCP load reads up to 8
    objects in parallel): part() gives each transfer a progress callable; the display shows
    the sum of their bytes done over the sum of their totals (which grows as transfers
    start). Use as a context manager around all of them."""

    def __init__(self, progress: ProgressArg, desc: str) -> None:
        self._p = Progress(progress, desc)
        self._lock = threading.Lock()
        self._parts: dict[int, tuple[int, int]] = {}
        self._keys = itertools.count()

    def part(self) -> ProgressArg:
        """A progress argument for one transfer (False when progress is off)."""
        if self._p.fn is None:
            return False
        key = next(self._keys)

        def update(done: int, total: int) -> None:
            with self._lock:
                self._parts[key] = (done, total)
                d = sum(v[0] for v in self._parts.values())
                t = sum(v[1] for v in self._parts.values())
                self._p._cb(None, d, t)

        with self._lock:
            self._parts[key] = (0, 0)
        return update

    def __enter__(self) -> "Combined":
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        self._p.close(ok=exc_type is None)
