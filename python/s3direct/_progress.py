"""Progress reporting through the C progress callback (s3d_progress_fn).

progress=True shows a tqdm bar when tqdm is installed (silently nothing otherwise); a callable
is called as progress(done_bytes, total_bytes). The ctypes callback object must stay referenced
for as long as the C call runs: Progress keeps it, and callers keep the Progress.
"""

from __future__ import annotations

from ._capi import PROGRESS_FN


class Progress:
    def __init__(self, progress, desc: str):
        self._bar = None
        self._user = None
        self._done = 0
        self.fn = None  # the PROGRESS_FN to put in the options struct, or None
        if progress is None or progress is False:
            return
        if callable(progress):
            self._user = progress
        else:
            try:
                from tqdm.auto import tqdm
            except ImportError:
                return
            self._bar = tqdm(total=None, desc=desc, unit="B", unit_scale=True,
                             unit_divisor=1024, leave=False)
        self.fn = PROGRESS_FN(self._cb)

    def _cb(self, user, done, total):
        # Runs on the thread that called into C; an exception here must not unwind into C.
        try:
            if self._bar is not None:
                if total and self._bar.total != total:
                    self._bar.total = total
                if done > self._done:
                    self._bar.update(done - self._done)
            elif self._user is not None:
                self._user(int(done), int(total))
            self._done = max(self._done, done)
        except Exception:
            pass
        return 0

    def close(self):
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
