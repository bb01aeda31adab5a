"""save / save_async: describe tensors, call the C checkpoint writer.

Python never touches tensor bytes here: it hands the C writer (data_ptr, device, dtype, shape)
of each tensor. The reader is in _reader.py, load in _checkpoint.py. See docs/python.md for
the user-facing contract.
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import os
import threading
from typing import Any, Callable, Dict, Iterable, Optional, Sequence

import torch

from . import _capi, _dtypes, _fence, _interrupt, _tree, _uri, errors
from ._capi import enc
from ._progress import Progress, ProgressArg
from ._reader import _cuda_streams, _set_streams
from ._stats import SaveStats, from_c
from ._uri import PathLike
from .client import Client, resolve

INDEX_SUFFIX = ".safetensors.index.json"
_RESERVED_PREFIX = "s3direct."


# ---- tensor description ---------------------------------------------------------------------
class _Src:
    """A tensor ready for the C writer: contiguous, dense, on the CPU or a CUDA device."""

    __slots__ = ("name", "tensor", "dtype", "device")

    def __init__(self, name: str, tensor: torch.Tensor, dtype: int, device: int) -> None:
        self.name, self.tensor, self.dtype, self.device = name, tensor, dtype, device


def _prepare(t: torch.Tensor, name: str, path: _tree.Path) -> _Src:
    where = _tree.path_str(path)
    if t.layout != torch.strided:
        raise errors.InvalidArgument(
            errors.S3D_EINVAL,
            f"tensor at {where} has layout {t.layout}; only dense (strided) tensors are stored",
        )
    if t.is_quantized:
        raise errors.InvalidArgument(
            errors.S3D_EINVAL, f"tensor at {where} is quantized; not storable as safetensors"
        )
    if t.device.type == "meta":
        raise errors.InvalidArgument(
            errors.S3D_EINVAL, f"tensor at {where} is on the meta device (it has no data)"
        )
    code = _dtypes.to_s3d(t.dtype)
    if code is None:
        raise errors.InvalidArgument(
            errors.S3D_EINVAL,
            f"tensor at {where} has dtype {t.dtype}, which safetensors cannot store",
        )
    t = t.detach()
    if t.is_conj():
        t = t.resolve_conj()
    if t.is_neg():
        t = t.resolve_neg()
    if t.device.type not in ("cpu", "cuda"):
        t = t.cpu()  # other accelerators: no device path in the C layer
    if not t.is_contiguous():
        t = t.contiguous()  # on its own device: never a host copy of a CUDA tensor
    dev = -1 if t.device.type == "cpu" else t.device.index
    return _Src(name, t, code, dev)


class _SrcArray:
    """The struct s3d_tensor_src array plus everything its pointers point into."""

    def __init__(self, srcs: Sequence[_Src]) -> None:
        n = len(srcs)
        self.arr = (_capi.TensorSrc * max(n, 1))()
        self._keep: list[object] = []
        for i, s in enumerate(srcs):
            t = s.tensor
            shape = (ctypes.c_int64 * max(t.dim(), 1))(*t.shape)
            name = enc(s.name)
            self._keep += [shape, name, t]
            e = self.arr[i]
            e.name = name
            e.dtype = s.dtype
            e.ndim = t.dim()
            e.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
            e.ptr = t.data_ptr() or None
            e.device = s.device
            e.nbytes = t.numel() * t.element_size()
        self.n = n


def _cuda_stream(srcs: Iterable[_Src]) -> list[int]:
    return _cuda_streams(s.device for s in srcs)


def _metadata_entries(
    metadata: Optional[Dict[str, str]], tree_json: Optional[str]
) -> tuple[ctypes.Array[_capi.MetadataEntry], int, list[object]]:
    entries: list[tuple[str, str]] = []
    for k, v in (metadata or {}).items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise errors.InvalidArgument(
                errors.S3D_EINVAL, f"metadata must map str to str: {k!r}: {v!r:.40}"
            )
        if k.startswith(_RESERVED_PREFIX) or k == _tree.TREE_KEY:
            raise errors.InvalidArgument(
                errors.S3D_EINVAL, f"metadata key {k!r} is reserved for s3direct"
            )
        entries.append((k, v))
    if tree_json is not None:
        entries.append((_tree.TREE_KEY, tree_json))
    arr = (_capi.MetadataEntry * max(len(entries), 1))()
    keep: list[object] = []
    for i, (k, v) in enumerate(entries):
        kb, vb = enc(k), enc(v)
        keep += [kb, vb]
        arr[i].key, arr[i].value = kb, vb
    return arr, len(entries), keep


def _write(
    client: Client,
    uri: str,
    srcs: Sequence[_Src],
    metadata: Optional[Dict[str, str]],
    tree_json: Optional[str],
    *,
    shard_size: Optional[int],
    checksum: bool,
    progress: ProgressArg,
    cuda_stream: Optional[Iterable[int]],
    held: bool = False,
    base: Optional[str] = None,
    cuda_events: Optional[Sequence[int]] = None,
) -> SaveStats:
    """One s3d_checkpoint_write. base: an incremental save's previous checkpoint, resolved
    (_uri.for_base); the library falls back to a full save when it cannot use it.
    cuda_events: CUevent handles by device ordinal (save_async's fence, _fence.fence), waited
    for instead of cuda_stream on the devices where one is given (non-zero); they must stay
    alive and unrecorded until this returns."""
    lib = _capi.lib()
    if shard_size and not uri.endswith(INDEX_SUFFIX):
        raise errors.InvalidArgument(
            errors.S3D_EINVAL,
            f"shard_size needs a URI ending in {INDEX_SUFFIX} (the shards go beside it): {uri}",
        )
    arr = _SrcArray(srcs)
    marr, nmeta, keep = _metadata_entries(metadata, tree_json)
    with Progress(progress, f"save {os.path.basename(uri)}") as prog:
        o = _capi.WriteOptions()
        o.struct_size = ctypes.sizeof(o)
        if prog.fn is not None:
            o.progress = prog.fn
        o.max_shard_size = int(shard_size or 0)
        o.no_checksum = 0 if checksum else 1
        stats = _capi.WriteStats()
        o.stats = ctypes.pointer(stats)
        if base is not None:
            b = enc(base)
            keep.append(b)
            o.base = b
        _set_streams(o, cuda_stream, keep)
        if cuda_events:
            ev = (ctypes.c_uint64 * len(cuda_events))(*cuda_events)
            keep.append(ev)
            o.cuda_events = ctypes.cast(ev, ctypes.POINTER(ctypes.c_uint64))
            o.n_cuda_events = len(cuda_events)

        def write() -> None:
            # Counted as a call on the client in the thread that makes it: close() waits.
            # held: save_async's hold, which close() waits for, lets it run once close began.
            with client.call(held) as h:
                lib.check(
                    lib.s3d_checkpoint_write(
                        h, enc(uri), arr.arr, arr.n, marr, nmeta, ctypes.byref(o)
                    )
                )

        with _interrupt.Cancel() as cancel:
            o.cancel = cancel.handle
            _interrupt.call(write, cancel=cancel)
    del keep
    return from_c(stats)


def _tie_key(t: torch.Tensor) -> Optional[tuple[Any, ...]]:
    """Equal for two tensors that are the same view of the same memory (tied weights)."""
    if t.device.type == "meta" or t.layout != torch.strided or t.is_quantized:
        return None
    try:
        ptr = t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return None
    if ptr == 0 or t.numel() == 0:
        return None
    return (
        str(t.device),
        ptr,
        t.storage_offset(),
        tuple(t.shape),
        tuple(t.stride()),
        t.dtype,
        t.is_conj(),
        t.is_neg(),
    )


def _untie(flat: _tree.Flattened) -> dict[str, str]:
    """Tied tensors (the same view of the same memory under several names) are stored once,
    as safetensors.torch.save_model does: the first name in tree order keeps the bytes, the
    others point to it in the tree (so load ties them again) and are listed in __metadata__
    as {removed: kept}. Returns that alias map; drops the removed names from flat.tensors."""
    kept: dict[tuple[Any, ...], str] = {}
    aliases: dict[str, str] = {}
    tensors = []
    for name, path, t in flat.tensors:
        key = _tie_key(t)
        if key is not None and key in kept:
            aliases[name] = kept[key]
            continue
        if key is not None:
            kept[key] = name
        tensors.append((name, path, t))
    if aliases:
        flat.tensors = tensors
        for _, tag, node in _tree.walk(flat.tree):
            if tag == "t" and node["t"] in aliases:
                node["t"] = aliases[node["t"]]
    return aliases


def _with_aliases(
    metadata: Optional[Dict[str, str]], aliases: dict[str, str]
) -> Optional[Dict[str, str]]:
    if not aliases:
        return metadata
    out = dict(metadata or {})
    _metadata_entries(out, None)  # the user's entries are checked as always
    for removed, kept_name in aliases.items():
        out.setdefault(removed, kept_name)
    return out


def _resolve_base(base: Optional[PathLike], client: Client) -> Optional[str]:
    return None if base is None else _uri.for_base(base, client)


def save(
    obj: Any,
    uri: PathLike,
    *,
    shard_size: Optional[int] = None,
    metadata: Optional[Dict[str, str]] = None,
    checksum: bool = True,
    progress: ProgressArg = False,
    client: Optional[Client] = None,
    allow_pickle: bool = False,
    base: Optional[PathLike] = None,
) -> SaveStats:
    """Saves obj as one safetensors object, or as a sharded checkpoint with an index.

    With base (incremental), the tensors whose name, dtype, shape and CRC-32C equal the
    base's are not sent again: on S3 they are copied from the base by the server
    (UploadPartCopy, each copied part proved), in a folder with copy_file_range. The result
    is an ordinary, complete checkpoint that does not refer to the base, which may be
    deleted afterwards. A base that is missing or unusable gives a full save, never an error.

    Args:
        obj: a tensor, a dict of tensors, or nested training state (dicts, lists, tuples, JSON
            leaves; modules and optimizers as their state_dict()).
        uri: "s3://bucket/key", a local path, file:// URI or folder (see docs/python.md).
        shard_size: bytes per shard; the URI then ends in .safetensors.index.json.
        metadata: extra str -> str entries for __metadata__.
        checksum: store a CRC32C per tensor.
        progress: True (bar or summary line) or a callable(done_bytes, total_bytes).
        client: the Client to use (default: the process's default client).
        allow_pickle: pickle leaves JSON cannot hold (unsafe to load from untrusted sources).
        base: the previous checkpoint, in the forms uri takes (a folder: the model file in
            it; for a sharded checkpoint its index); on the same storage as uri. Needs
            checksum (the default) here and in the base.

    Returns:
        A SaveStats: bytes written, sent and copied from the base, tensors reused.

    Raises:
        InvalidArgument: a leaf or argument that cannot be stored (its path named).
        ConfigError: uri or base is not a location s3direct serves.
        NoSuchBucket, NoSuchFile, AccessDenied, TransferError: from the storage.
    """
    uri = _uri.for_save(uri, bool(shard_size))
    c = resolve(client)
    b = _resolve_base(base, c)
    flat = _tree.flatten(obj, allow_pickle=allow_pickle)
    metadata = _with_aliases(metadata, _untie(flat))
    srcs = [_prepare(t, name, path) for name, path, t in flat.tensors]
    return _write(
        c,
        uri,
        srcs,
        metadata,
        flat.to_json(),
        shard_size=shard_size,
        checksum=checksum,
        progress=progress,
        cuda_stream=_cuda_stream(srcs),
        base=b,
    )


# ---- save_async ------------------------------------------------------------------------------
_executor: Optional[concurrent.futures.ThreadPoolExecutor] = None
_executor_pid: Optional[int] = None
_executor_lock = threading.Lock()


def _get_executor() -> concurrent.futures.ThreadPoolExecutor:
    global _executor, _executor_pid
    with _executor_lock:
        if _executor is None or _executor_pid != os.getpid():
            _executor = concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="s3direct-save"
            )
            _executor_pid = os.getpid()
        return _executor


def _snapshot(s: _Src) -> _Src:
    t = s.tensor
    if s.device >= 0:
        # Device-side copy queued on the current stream; save_async records an event after
        # it (_fence.fence) and the writer waits for that event.
        c = torch.empty_like(t, memory_format=torch.contiguous_format)
        c.copy_(t)
    else:
        # Plain host memory: the C writer sends host tensors from their own memory (no GPU
        # copy ever reads them), and pinning would initialise CUDA in a host-only process.
        c = torch.empty(t.shape, dtype=t.dtype)
        c.copy_(t)
    return _Src(s.name, c, s.dtype, s.device)


def save_async(
    obj: Any,
    uri: PathLike,
    *,
    shard_size: Optional[int] = None,
    metadata: Optional[Dict[str, str]] = None,
    checksum: bool = True,
    progress: ProgressArg = False,
    client: Optional[Client] = None,
    allow_pickle: bool = False,
    base: Optional[PathLike] = None,
) -> "concurrent.futures.Future[SaveStats]":
    """Snapshots the tensors, then saves in a background thread. Snapshot: CPU tensors are
    copied into new (pageable) host memory, so a host-only save never initialises CUDA; CUDA
    tensors into new device memory on the current stream, fenced before this returns: the
    save waits for those copies, not for work queued after it. The caller may modify its
    tensors as soon as this returns.
    Saves run one at a time, in submission order (so a base saved by an earlier save_async is
    complete when this save starts). The client is held until the save is done: its close()
    waits for it.

    Args:
        obj, uri, shard_size, metadata, checksum, progress, client, allow_pickle, base: as for
            save().

    Returns:
        A Future whose result() is the save's SaveStats once it is complete, or raises its
        exception.

    Raises:
        InvalidArgument: a leaf, tensor or metadata entry that cannot be stored, raised here
        before anything is submitted. Storage errors come from the Future.
    """
    uri = _uri.for_save(uri, bool(shard_size))
    c = resolve(client)
    b = _resolve_base(base, c)
    return _submit(
        obj,
        uri,
        shard_size=shard_size,
        metadata=metadata,
        checksum=checksum,
        progress=progress,
        client=c,
        allow_pickle=allow_pickle,
        base=lambda: b,
    )


def _submit(
    obj: Any,
    uri: str,
    *,
    shard_size: Optional[int],
    metadata: Optional[Dict[str, str]],
    checksum: bool,
    progress: ProgressArg,
    client: Client,
    allow_pickle: bool,
    base: Callable[[], Optional[str]],
    after: Optional[Callable[[SaveStats], None]] = None,
) -> "concurrent.futures.Future[SaveStats]":
    """save_async's work, for a resolved uri: snapshot here, then in the save thread the
    base (base(), called when the save starts: the saves before it are done), the write and
    after(stats) (CheckpointManager's pruning), all before the Future resolves."""
    flat = _tree.flatten(obj, allow_pickle=allow_pickle)
    metadata = _with_aliases(metadata, _untie(flat))
    srcs = [_snapshot(_prepare(t, name, path)) for name, path, t in flat.tensors]
    tree_json = flat.to_json()
    meta = dict(metadata or {})
    _metadata_entries(meta, None)  # validate now, not in the background
    # An event on each device's current stream now, after the snapshot copies: the writer's
    # copies wait for it on the GPU (cuda_events), never for work queued later.
    events, unfence = _fence.fence(s.device for s in srcs)
    try:
        release = client.hold()  # Client.close() waits for this save, pending or running
    except BaseException:
        unfence()
        raise

    def job() -> SaveStats:
        stats = _write(
            client,
            uri,
            srcs,
            meta,
            tree_json,
            shard_size=shard_size,
            checksum=checksum,
            progress=progress,
            cuda_stream=None,
            cuda_events=events,
            held=True,
            base=base(),
        )
        if after is not None:
            after(stats)
        return stats

    try:
        fut = _get_executor().submit(job)
    except BaseException:
        unfence()
        release()
        raise

    def done(_: "concurrent.futures.Future[SaveStats]") -> None:
        unfence()  # the fence events live as long as the save
        release()

    fut.add_done_callback(done)
    return fut
