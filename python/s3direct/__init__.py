"""s3direct: PyTorch tensors between GPU or host memory and S3 or local files, as safetensors.

All byte moving happens in the C library (libs3direct.so, found through S3D_LIBRARY, the
package's _lib/, $S3D_BUILD_DIR or build/); this package describes tensors and calls it.

    s3direct.save(state, "s3://bucket/ckpt.safetensors")
    state = s3direct.load("s3://bucket/ckpt.safetensors", device="cuda")
    s3direct.load_into({"model": model, "optim": optimizer}, uri)
    fut = s3direct.save_async(state, uri); ...; fut.result()
    stats = s3direct.save(state, uri2, base=uri)   (incremental: unchanged tensors copied)
    mgr = s3direct.CheckpointManager("s3://bucket/run1", keep=3); mgr.save(step, state)
    torch.save(obj, s3direct.writer(uri)); torch.load(s3direct.reader(uri))
    s3direct.dcp.S3DirectStorageWriter / S3DirectStorageReader  (torch.distributed.checkpoint)
    s3direct.lightning.S3DirectCheckpointIO  (a Lightning Trainer's CheckpointIO plugin)

See docs/python.md.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .client import Client, default_client
from .errors import (
    AccessDenied,
    BucketAlreadyExists,
    Cancelled,
    ChecksumMismatch,
    ConfigError,
    DeviceError,
    FormatError,
    InsecureConnectionWarning,
    InvalidAccessKeyId,
    InvalidArgument,
    NoCredentials,
    NoSuchBucket,
    NoSuchFile,
    NoSuchKey,
    NotSupported,
    PickleRefused,
    S3DirectError,
    SignatureDoesNotMatch,
    StateMismatch,
    Timeout,
    TransferError,
)
from ._stats import SaveStats
from .streams import reader, writer


def _source_version() -> str:
    """The version of a source checkout: the numbers in include/s3direct/version.h, the one
    place the version is written (an installed package has _version.py, generated from it)."""
    import os
    import re

    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        with open(os.path.join(repo, "include", "s3direct", "version.h"), encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return "0+unknown"
    parts = [re.search(rf"^#define S3D_VERSION_{p} (\d+)$", text, re.M) for p in
             ("MAJOR", "MINOR", "PATCH")]
    return ".".join(m.group(1) for m in parts if m) if all(parts) else "0+unknown"


def _package_version() -> str:
    """_version.py, made by the build (absent in a source checkout, present after pip
    install); else the source checkout's. Imported by name, so that type checkers see the
    same module with and without the file."""
    try:
        v = importlib.import_module("._version", __name__).__version__
    except ImportError:
        return _source_version()
    return str(v)


__version__: str = _package_version()


def library_version() -> str:
    """The version of the C library in use.

    Returns:
        The version string of the loaded libs3direct.so ("0.1.0").

    Raises:
        ImportError: the library cannot be found or is too old for this package.
    """
    from . import _capi

    v: bytes = _capi.lib().s3d_version_string()
    return v.decode()


if TYPE_CHECKING:  # the lazily imported tensor API, as type checkers should see it
    from ._checkpoint import load, load_into, save, save_async
    from ._safe_open import safe_open
    from ._stream import TensorStream, stream
    from .manager import CheckpointManager

_TORCH_API = {"save": "._checkpoint", "load": "._checkpoint", "load_into": "._checkpoint",
              "save_async": "._checkpoint", "safe_open": "._safe_open", "stream": "._stream",
              "TensorStream": "._stream",
              "CheckpointManager": ".manager"}
# Private since safe_open took their place; still reachable, with a DeprecationWarning.
_DEPRECATED = {"open_checkpoint": "safe_open", "CheckpointReader": "safe_open"}


def __getattr__(name: str) -> Any:
    # torch is imported on first use of the tensor API, so the CLI entry point and the plain
    # byte API work without it; torch.distributed.checkpoint only when s3direct.dcp is used,
    # lightning only when s3direct.lightning is.
    import importlib

    if name in _TORCH_API:
        mod = importlib.import_module(_TORCH_API[name], __name__)
        value = getattr(mod, name)
        globals()[name] = value
        return value
    if name in _DEPRECATED:
        import warnings

        warnings.warn(f"s3direct.{name} is private; use s3direct.{_DEPRECATED[name]}",
                      DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module("._checkpoint", __name__), name)
    if name in ("dcp", "lightning"):
        return importlib.import_module("." + name, __name__)
    raise AttributeError(f"module 's3direct' has no attribute {name!r}")


__all__ = [
    "__version__", "save", "load", "load_into", "save_async", "safe_open", "stream",
    "TensorStream", "SaveStats",
    "CheckpointManager", "Client", "default_client", "reader", "writer", "library_version",
    "S3DirectError", "NoSuchKey", "NoSuchFile", "NoSuchBucket", "AccessDenied", "SignatureDoesNotMatch",
    "InvalidAccessKeyId", "ChecksumMismatch", "FormatError", "TransferError", "Timeout", "ConfigError",
    "NoCredentials", "DeviceError", "Cancelled", "NotSupported", "BucketAlreadyExists",
    "InvalidArgument", "StateMismatch", "PickleRefused", "InsecureConnectionWarning",
]
