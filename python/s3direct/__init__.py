"""s3direct: PyTorch tensors between GPU or host memory and S3 or local files, as safetensors.

All byte moving happens in the C library (libs3direct.so, found through S3D_LIBRARY, the
package's _lib/, $S3D_BUILD_DIR or build/); this package describes tensors and calls it.
torch is imported on first use of the tensor API; the rest works without it.

Functions (uri: "s3://bucket/key", a local path, a file:// URI, or a model folder):

    save(state, uri)                 a state dict or training state -> one safetensors file;
                                     shard_size=: an index and shards; base=: incremental
    load(uri, device="cuda")         the saved structure, tensors allocated on device
    load_into(target, uri)           into existing modules, optimizers and tensors
    save_async(state, uri)           a Future; returns once the tensors are snapshotted
    stream(uri)                      (name, tensor) pairs as their bytes arrive
    safe_open(uri, framework="pt")   safetensors' API: headers only, slices by range
    CheckpointManager(folder, keep=3)  numbered steps: save, latest, restore, pruning
    reader(uri), writer(uri)         binary files for torch.load and torch.save:
                                         with s3direct.writer(uri) as f:
                                             torch.save(obj, f)   # appears when the block ends
                                         obj = torch.load(s3direct.reader(uri))
    Client(endpoint_url=...)         endpoint, credentials, concurrency; objects: list, head,
                                     delete, upload_*/download_*; default_client()
    library_version()                the version of the loaded libs3direct.so

    s3direct.dcp: StorageWriter / StorageReader for torch.distributed.checkpoint
    s3direct.lightning: S3DirectCheckpointIO, a Lightning Trainer's CheckpointIO plugin
    s3direct.fs: S3DirectFileSystem, fsspec's s3direct:// (s3:// too after register_s3())
    The command-line tool: `s3direct` or `python -m s3direct`.

Exceptions (s3direct.errors, all reachable here too), each also the builtin users catch:

    S3DirectError                     base; .code .name .http_status .s3_code .request_id ...
    NoSuchKey, NoSuchFile, NoSuchBucket                      also FileNotFoundError
    AccessDenied, SignatureDoesNotMatch, InvalidAccessKeyId  also PermissionError
    TransferError, Timeout (TimeoutError), ChecksumMismatch  also OSError
    BucketAlreadyExists                                      also FileExistsError
    FormatError, ConfigError, NoCredentials, InvalidArgument,
        StateMismatch, PickleRefused                         also ValueError
    TorchMissing (the tensor API without torch)              also ModuleNotFoundError
    DeviceError, Cancelled, NotSupported
    InsecureConnectionWarning: a Client with verify_ssl=False

See docs/python.md.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._stats import SaveStats
from .client import Client, default_client

# The exceptions are exported ("X as X") but left out of __all__: help(s3direct) documents
# what __all__ names, and 22 exception classes with their inherited builtin methods were 2,000
# of its lines; the module docstring lists them instead, help(s3direct.errors) in full.
from .errors import AccessDenied as AccessDenied
from .errors import BucketAlreadyExists as BucketAlreadyExists
from .errors import Cancelled as Cancelled
from .errors import ChecksumMismatch as ChecksumMismatch
from .errors import ConfigError as ConfigError
from .errors import DeviceError as DeviceError
from .errors import FormatError as FormatError
from .errors import InsecureConnectionWarning as InsecureConnectionWarning
from .errors import InvalidAccessKeyId as InvalidAccessKeyId
from .errors import InvalidArgument as InvalidArgument
from .errors import NoCredentials as NoCredentials
from .errors import NoSuchBucket as NoSuchBucket
from .errors import NoSuchFile as NoSuchFile
from .errors import NoSuchKey as NoSuchKey
from .errors import NotSupported as NotSupported
from .errors import PickleRefused as PickleRefused
from .errors import S3DirectError as S3DirectError
from .errors import SignatureDoesNotMatch as SignatureDoesNotMatch
from .errors import StateMismatch as StateMismatch
from .errors import Timeout as Timeout
from .errors import TorchMissing as TorchMissing
from .errors import TransferError as TransferError
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
    parts = [
        re.search(rf"^#define S3D_VERSION_{p} (\d+)$", text, re.M)
        for p in ("MAJOR", "MINOR", "PATCH")
    ]
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
    from ._checkpoint import load
    from ._into import load_into
    from ._safe_open import safe_open
    from ._save import save, save_async
    from ._stream import LoadHandle, TensorStream, stream
    from .manager import CheckpointManager

_TORCH_API = {
    "save": "._save",
    "load": "._checkpoint",
    "load_into": "._into",
    "save_async": "._save",
    "safe_open": "._safe_open",
    "stream": "._stream",
    "TensorStream": "._stream",
    "LoadHandle": "._stream",
    "CheckpointManager": ".manager",
}


def __getattr__(name: str) -> Any:
    # torch is imported on first use of the tensor API, so the CLI entry point and the plain
    # byte API work without it; torch.distributed.checkpoint only when s3direct.dcp is used,
    # lightning only when s3direct.lightning is, fsspec only when s3direct.fs is.
    import importlib

    if name in _TORCH_API:
        try:
            mod = importlib.import_module(_TORCH_API[name], __name__)
        except ModuleNotFoundError as e:
            if e.name != "torch" and not (e.name or "").startswith("torch."):
                raise
            return _needs_torch(name)
        value = getattr(mod, name)
        globals()[name] = value
        return value
    if name in ("dcp", "lightning", "fs", "hf", "vllm"):
        return importlib.import_module("." + name, __name__)
    raise AttributeError(f"module 's3direct' has no attribute {name!r}")


def _needs_torch(name: str) -> Any:
    """Where torch is not installed: a stand-in for the tensor API's name that raises
    TorchMissing when called, so that `from s3direct import save`, dir() and help() still
    work, and the call says what is missing."""

    def needs_torch(*args: Any, **kwargs: Any) -> Any:
        raise TorchMissing(f"s3direct.{name}")

    needs_torch.__name__ = needs_torch.__qualname__ = name
    needs_torch.__doc__ = f"s3direct.{name}: needs PyTorch, which is not installed here."
    return needs_torch


def __dir__() -> list[str]:
    # The lazily imported names too (help() and tab completion list them); not dcp and
    # lightning, which import their frameworks.
    return sorted(set(globals()) | set(_TORCH_API))


__all__ = [
    "__version__",
    "save",
    "load",
    "load_into",
    "save_async",
    "safe_open",
    "stream",
    "TensorStream",
    "LoadHandle",
    "SaveStats",
    "CheckpointManager",
    "Client",
    "default_client",
    "reader",
    "writer",
    "library_version",
]
