"""The C library's log lines, forwarded to ``logging.getLogger("s3direct")``.

The library stays the source of its lines (src/common/log.c); s3d_log_set_callback hands each
one to _forward, which logs it at the matching level. The C side formats a line only when its
level is enabled, so the callback level follows the logger's effective level: sync() (called
whenever the package reaches the library) tells the library when it changed.

S3D_LOG keeps working: when it is set, the logger's level is at least that detail and, if
nothing else would show the lines (no handler on the logger or the root), a stderr handler
prints them as the library does, stamped in ISO 8601 UTC with milliseconds
("[s3direct 2026-12-07T14:03:11.042Z INFO] ...", as src/common/log.c stamps its own).
"""

from __future__ import annotations

import atexit
import ctypes
import logging
import os
import time
from typing import Any, Optional

# The C library's log callback: (user, level, message, length).
LOG_FN = ctypes.CFUNCTYPE(
    None, ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_char), ctypes.c_size_t
)

logger = logging.getLogger("s3direct")

# enum s3d_log_level
_OFF, _ERROR, _WARN, _INFO, _DEBUG = 0, 1, 2, 3, 4
_TO_PY = {_ERROR: logging.ERROR, _WARN: logging.WARNING, _INFO: logging.INFO, _DEBUG: logging.DEBUG}
_ENV = {
    "error": logging.ERROR,
    "warn": logging.WARNING,
    "info": logging.INFO,
    "debug": logging.DEBUG,
}

_state: dict[str, Any] = {"level": None, "fn": None, "lib": None, "env_done": False}


def _c_level(py_level: int) -> int:
    if py_level <= logging.DEBUG:
        return _DEBUG
    if py_level <= logging.INFO:
        return _INFO
    if py_level <= logging.WARNING:
        return _WARN
    if py_level <= logging.ERROR:
        return _ERROR
    return _OFF


def _forward(user: Any, level: int, line: Any, n: int) -> None:
    # Runs on whatever thread logged (ctypes takes the GIL); never raise into C.
    try:
        text = ctypes.string_at(line, n).decode("utf-8", "replace")
        logger.log(_TO_PY.get(level, logging.DEBUG), "%s", text)
    except Exception:
        pass


class UTCFormatter(logging.Formatter):
    """%(asctime)s as ISO 8601 in UTC with milliseconds: 2026-12-07T14:03:11.042Z."""

    def formatTime(self, record: logging.LogRecord, datefmt: Optional[str] = None) -> str:
        t = time.strftime(datefmt or "%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        return f"{t}.{int(record.msecs):03d}Z"


def _apply_env() -> None:
    v = os.environ.get("S3D_LOG", "")
    if not v:
        return
    want = _ENV.get(v, logging.WARNING)
    if logger.getEffectiveLevel() > want:
        logger.setLevel(want)
    if not logger.handlers and not logging.getLogger().handlers:
        h = logging.StreamHandler()
        h.setFormatter(UTCFormatter("[s3direct %(asctime)s %(levelname)s] %(message)s"))
        logger.addHandler(h)


def sync(lib: Any) -> None:
    """Registers the forwarding callback (first call) and keeps the library's level equal to
    the logger's effective level."""
    if not _state["env_done"]:
        _state["env_done"] = True
        _apply_env()
    fn = getattr(lib, "s3d_log_set_callback", None)
    if fn is None or not callable(fn):
        return
    level = _c_level(logger.getEffectiveLevel())
    if _state["lib"] is lib and _state["level"] == level:
        return
    if _state["fn"] is None:
        _state["fn"] = LOG_FN(_forward)  # kept for the life of the process
    try:
        fn(_state["fn"], None, level)
    except Exception:  # an older library without the symbol (_Missing raises)
        return
    _state["lib"], _state["level"] = lib, level


def _detach() -> None:
    # At interpreter exit, library threads must not call into a finalizing Python.
    lib: Optional[Any] = _state["lib"]
    if lib is not None:
        try:
            # A NULL function pointer; typeshed's ctypes.cast does not accept None (ctypes does).
            null_fn = ctypes.cast(None, type(_state["fn"]))  # type: ignore[arg-type]
            lib.s3d_log_set_callback(null_fn, None, 0)
        except Exception:
            pass


atexit.register(_detach)
