"""Blocking calls into the C library that Ctrl-C can stop.

Python runs signal handlers only in the main thread and only between bytecodes, so while the
main thread sits in a long ctypes call (a save or load that takes minutes, or waits on a
stalled server), KeyboardInterrupt waits for the call to return. call() runs the C call in a
helper thread instead and lets the main thread wait in short slices: Ctrl-C then raises at
once in the main thread, which requests the call's cancel token (the C engine checks it
every 100 ms, then aborts a multipart upload or removes a temporary file, so the previous
object or file stays as it was) and waits for the call to return before re-raising. A call
that returns success all the same (the cancel came after its commit point) is not reported
as failed: it returns, with a warning.

The library's last-error detail is thread-local, so the helper thread checks the return code
itself (fn raises) and the exception is re-raised in the caller's thread.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any, Callable, Iterable, TypeVar, cast

from . import _capi, _log

_T = TypeVar("_T")

_SLICE_S = 0.05  # how often the waiting main thread lets a pending signal handler run


class Cancel:
    """An s3d_cancel token; .handle goes into an options struct's cancel field."""

    def __init__(self) -> None:
        self._lib = _capi.lib()
        h = ctypes.c_void_p()
        self._lib.check(self._lib.s3d_cancel_new(ctypes.byref(h)))
        self.handle: ctypes.c_void_p | None = h

    def request(self) -> None:
        self._lib.s3d_cancel_request(self.handle)

    def close(self) -> None:
        h, self.handle = self.handle, None
        if h:
            self._lib.s3d_cancel_free(h)

    def __enter__(self) -> Cancel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _wait(done: threading.Event) -> None:
    while not done.wait(_SLICE_S):
        pass


def _immortal(obj: object) -> None:
    """One more reference that is never dropped: obj (a Client an abandoned call is still
    using) is then never freed, not even while the interpreter shuts down."""
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(obj))


def call(
    fn: Callable[[], _T],
    *,
    cancel: Cancel | None = None,
    abandon: Callable[[_T], object] | None = None,
    uses: Iterable[object] = (),
) -> _T:
    """Returns fn() (a blocking call into the library that raises on failure).

    Outside the main thread (save_async's worker, a user's thread) fn simply runs: signals
    never reach those threads. In the main thread a KeyboardInterrupt (or any exception a
    signal handler raises, such as SystemExit) while fn runs:
      - with cancel: requests it, waits for fn to return (further Ctrl-C presses are ignored
        meanwhile: the cleanup must finish), then raises KeyboardInterrupt; but when fn
        returned (the cancel came after its commit point: a sharded save's index was in
        place), a KeyboardInterrupt is answered with a warning and fn's result, as the call
        succeeded (a SystemExit is raised all the same: the process is leaving);
      - without (a call that has no cancel token, such as opening a reader): raises at once;
        when fn returns later, abandon(its result) is run in the helper thread to free it.
        The objects in uses (the Client whose C handle fn is using) are then kept alive for
        good, so that no finalizer frees a handle under the running call.
    """
    if threading.current_thread() is not threading.main_thread():
        return fn()
    box: dict[str, Any] = {}
    done = threading.Event()
    lock = threading.Lock()
    abandoned = [False]

    def work() -> None:
        try:
            box["value"] = fn()
        except BaseException as e:  # re-raised in the caller's thread
            box["error"] = e
        with lock:
            done.set()
            orphan = abandoned[0] and "value" in box
        if orphan and abandon is not None:
            try:
                abandon(box["value"])
            except Exception:
                pass

    t = threading.Thread(target=work, name="s3direct-call", daemon=True)
    t.start()
    try:
        _wait(done)
    except BaseException as e:  # KeyboardInterrupt, or SystemExit from a SIGTERM handler
        if cancel is not None:
            cancel.request()
            while True:
                try:
                    _wait(done)
                    break
                except KeyboardInterrupt:
                    continue
            if isinstance(e, KeyboardInterrupt) and "error" not in box:
                # The cancel came after the call's commit point (a save's index or object in
                # place): it did all its work, so it returns, and raising would report a
                # save that happened as failed.
                _log.logger.warning(
                    "Ctrl-C came after the call had committed its result; it completed"
                )
                t.join()
                return cast(_T, box.get("value"))
        else:
            for obj in uses:
                _immortal(obj)
            with lock:
                abandoned[0] = True
                finished = done.is_set() and "value" in box
            if finished and abandon is not None:
                abandon(box["value"])
        raise
    t.join()
    if "error" in box:
        raise box["error"]
    return cast(_T, box.get("value"))
