"""save / load / load_into / save_async: describe tensors, call the C checkpoint API.

Python never touches tensor bytes here: it hands the C writer (data_ptr, device, dtype, shape)
of each tensor and the C reader (data_ptr, capacity) of each freshly allocated or existing
destination. See docs/python.md for the user-facing contract.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import ctypes
import gc
import os
import threading
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Dict,
    Iterable,
    Iterator,
    Optional,
    Sequence,
    Tuple,
    Union,
    cast,
)

import torch

from . import _capi, _dtypes, _fence, _interrupt, _log, _ranks, _tree, _uri, errors
from ._bulkload import Dests, load_all
from ._bulkload import dest_device as _dest_device
from ._capi import enc
from ._progress import Progress, ProgressArg
from ._stats import SaveStats, from_c
from ._types import Dest, TensorEntry
from ._uri import PathLike
from .client import Client, Handle, resolve

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup

DeviceArg = Union[str, int, torch.device, None]
# A destination for CheckpointReader.read: (entry, tensor, src_offset, length); length 0: all.

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
        raise errors.InvalidArgument(errors.S3D_EINVAL,
                                     f"tensor at {where} has layout {t.layout}; only dense "
                                     f"(strided) tensors are stored")
    if t.is_quantized:
        raise errors.InvalidArgument(errors.S3D_EINVAL,
                                     f"tensor at {where} is quantized; not storable as "
                                     f"safetensors")
    if t.device.type == "meta":
        raise errors.InvalidArgument(errors.S3D_EINVAL, f"tensor at {where} is on the meta "
                                     f"device (it has no data)")
    code = _dtypes.to_s3d(t.dtype)
    if code is None:
        raise errors.InvalidArgument(errors.S3D_EINVAL,
                                     f"tensor at {where} has dtype {t.dtype}, which safetensors "
                                     f"cannot store")
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


def _cuda_streams(devices: Iterable[int]) -> list[int]:
    """The current CUDA stream handle of every device in devices (ordinals; -1 ignored), as a
    list indexed by ordinal (0 where no tensor lives). The C layer orders its copies after the
    work queued on each device's own stream."""
    used = sorted({d for d in devices if d >= 0})
    if not used:
        return []
    out = [0] * (used[-1] + 1)
    for d in used:
        out[d] = torch.cuda.current_stream(d).cuda_stream
    return out


def _cuda_stream(srcs: Iterable[_Src]) -> list[int]:
    return _cuda_streams(s.device for s in srcs)


def _set_streams(o: Union[_capi.ReadOptions, _capi.WriteOptions],
                 streams: Optional[Iterable[int]], keep: list[object]) -> None:
    """Fills cuda_stream / cuda_streams / n_cuda_streams of a Read/WriteOptions."""
    streams = list(streams or [])
    if not streams:
        return
    arr = (ctypes.c_uint64 * len(streams))(*streams)
    keep.append(arr)
    o.cuda_stream = streams[0]
    o.cuda_streams = ctypes.cast(arr, ctypes.POINTER(ctypes.c_uint64))
    o.n_cuda_streams = len(streams)


def _metadata_entries(
        metadata: Optional[Dict[str, str]],
        tree_json: Optional[str]) -> tuple[ctypes.Array[_capi.MetadataEntry], int, list[object]]:
    entries: list[tuple[str, str]] = []
    for k, v in (metadata or {}).items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise errors.InvalidArgument(errors.S3D_EINVAL,
                                         f"metadata must map str to str: {k!r}: {v!r:.40}")
        if k.startswith(_RESERVED_PREFIX) or k == _tree.TREE_KEY:
            raise errors.InvalidArgument(errors.S3D_EINVAL,
                                         f"metadata key {k!r} is reserved for s3direct")
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


def _write(client: Client, uri: str, srcs: Sequence[_Src], metadata: Optional[Dict[str, str]],
           tree_json: Optional[str], *, shard_size: Optional[int], checksum: bool,
           progress: ProgressArg, cuda_stream: Optional[Iterable[int]],
           held: bool = False, base: Optional[str] = None) -> SaveStats:
    """One s3d_checkpoint_write. base: an incremental save's previous checkpoint, resolved
    (_uri.for_base); the library falls back to a full save when it cannot use it."""
    lib = _capi.lib()
    if shard_size and not uri.endswith(INDEX_SUFFIX):
        raise errors.InvalidArgument(
            errors.S3D_EINVAL,
            f"shard_size needs a URI ending in {INDEX_SUFFIX} (the shards go beside it): {uri}")
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
        def write() -> None:
            # Counted as a call on the client in the thread that makes it: close() waits.
            # held: save_async's hold, which close() waits for, lets it run once close began.
            with client.call(held) as h:
                lib.check(lib.s3d_checkpoint_write(h, enc(uri), arr.arr, arr.n, marr, nmeta,
                                                   ctypes.byref(o)))

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
    return (str(t.device), ptr, t.storage_offset(), tuple(t.shape), tuple(t.stride()),
            t.dtype, t.is_conj(), t.is_neg())


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


def _with_aliases(metadata: Optional[Dict[str, str]],
                  aliases: dict[str, str]) -> Optional[Dict[str, str]]:
    if not aliases:
        return metadata
    out = dict(metadata or {})
    _metadata_entries(out, None)  # the user's entries are checked as always
    for removed, kept_name in aliases.items():
        out.setdefault(removed, kept_name)
    return out


def _resolve_base(base: Optional[PathLike], client: Client) -> Optional[str]:
    return None if base is None else _uri.for_base(base, client)


def save(obj: Any, uri: PathLike, *, shard_size: Optional[int] = None,
         metadata: Optional[Dict[str, str]] = None, checksum: bool = True,
         progress: ProgressArg = False, client: Optional[Client] = None,
         allow_pickle: bool = False, base: Optional[PathLike] = None) -> SaveStats:
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
    return _write(c, uri, srcs, metadata, flat.to_json(), shard_size=shard_size,
                  checksum=checksum, progress=progress, cuda_stream=_cuda_stream(srcs), base=b)


# ---- save_async ------------------------------------------------------------------------------
_executor: Optional[concurrent.futures.ThreadPoolExecutor] = None
_executor_pid: Optional[int] = None
_executor_lock = threading.Lock()


def _get_executor() -> concurrent.futures.ThreadPoolExecutor:
    global _executor, _executor_pid
    with _executor_lock:
        if _executor is None or _executor_pid != os.getpid():
            _executor = concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="s3direct-save")
            _executor_pid = os.getpid()
        return _executor


def _snapshot(s: _Src) -> _Src:
    t = s.tensor
    if s.device >= 0:
        # Device-side copy queued on the current stream; save_async fences it (_fence.fence)
        # and the writer waits on the fence.
        c = torch.empty_like(t, memory_format=torch.contiguous_format)
        c.copy_(t)
    else:
        # Plain host memory: the C writer sends host tensors from their own memory (no GPU
        # copy ever reads them), and pinning would initialise CUDA in a host-only process.
        c = torch.empty(t.shape, dtype=t.dtype)
        c.copy_(t)
    return _Src(s.name, c, s.dtype, s.device)


def save_async(obj: Any, uri: PathLike, *, shard_size: Optional[int] = None,
               metadata: Optional[Dict[str, str]] = None, checksum: bool = True,
               progress: ProgressArg = False, client: Optional[Client] = None,
               allow_pickle: bool = False,
               base: Optional[PathLike] = None) -> "concurrent.futures.Future[SaveStats]":
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
    return _submit(obj, uri, shard_size=shard_size, metadata=metadata, checksum=checksum,
                   progress=progress, client=c, allow_pickle=allow_pickle, base=lambda: b)


def _submit(obj: Any, uri: str, *, shard_size: Optional[int],
            metadata: Optional[Dict[str, str]], checksum: bool, progress: ProgressArg,
            client: Client, allow_pickle: bool, base: Callable[[], Optional[str]],
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
    # An event on each device's current stream now, after the snapshot copies, and a stream
    # of our own waiting for it: the writer waits for the copies, never for later work.
    stream, unfence = _fence.fence(s.device for s in srcs)
    try:
        release = client.hold()  # Client.close() waits for this save, pending or running
    except BaseException:
        unfence()
        raise

    def job() -> SaveStats:
        stats = _write(client, uri, srcs, meta, tree_json, shard_size=shard_size,
                       checksum=checksum, progress=progress, cuda_stream=stream, held=True,
                       base=base())
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
        unfence()  # the fence streams live as long as the save
        release()

    fut.add_done_callback(done)
    return fut


# ---- reading ---------------------------------------------------------------------------------
@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """The cyclic GC off while millions of acyclic objects (entries, tensors, tree nodes) are
    made: each collection would walk all of them again."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


_ZIP_MAGIC = b"PK\x03\x04"  # torch.save since 1.6 (a zip archive)
_PICKLE_PROTO = b"\x80"  # torch.save(..., _use_new_zipfile_serialization=False), pickle


def _peek(uri: str, client: Client, n: int) -> bytes:
    from .streams import is_s3, split_s3

    if is_s3(uri):
        bucket, key = split_s3(uri)
        buf = bytearray(n)
        got = client.download_into(bucket, key, 0, buf, n)
        return bytes(buf[:got])
    with open(uri, "rb") as f:
        return f.read(n)


def _explain_not_safetensors(uri: str, client: Client, err: errors.S3DirectError) -> None:
    """When a safetensors header is unreadable, looks at the first bytes: a torch.save file
    (zip or pickle) gets an error that says what it is and how to read it."""
    if uri.endswith(".json"):
        return
    try:
        head = _peek(uri, client, 8)
    except Exception:
        return
    if head.startswith(_ZIP_MAGIC) or head.startswith(_PICKLE_PROTO):
        kind = "a zip archive" if head.startswith(_ZIP_MAGIC) else "a pickle"
        raise errors.FormatError(
            err.code,
            f"{uri} is not a safetensors file: it starts like a torch.save file ({kind}); "
            f"read it with torch.load(s3direct.reader({uri!r})), or convert it once with "
            f"s3direct.save(torch.load(...), uri)") from err


class CheckpointReader:
    """An open checkpoint (s3d_reader): its tensors and metadata; read() fills destinations.
    Use as a context manager or call close(). Private: safe_open is the public reader.

    Args:
        uri: as for load().
        client: the Client to use (default: the process's default client).

    Raises:
        NoSuchKey / NoSuchFile, FormatError (a torch.save file says so), ConfigError.
    """

    def __init__(self, uri: PathLike, client: Optional[Client] = None) -> None:
        self._lib = _capi.lib()
        self._client = resolve(client)
        self.uri = _uri.for_load(uri, self._client)
        lib, client = self._lib, self._client

        def opener(u: str) -> Callable[[], ctypes.c_void_p]:
            def open_() -> ctypes.c_void_p:
                h = ctypes.c_void_p()
                with client.call() as ch:
                    lib.check(lib.s3d_reader_open(ch, enc(u), ctypes.byref(h)))
                return h
            return open_

        # Opening has no cancel token: Ctrl-C leaves the helper thread to finish the
        # header reads and close what it opened.
        try:
            try:
                h = _interrupt.call(opener(self.uri), abandon=lambda h: lib.s3d_reader_close(h),
                                    uses=(self._client,))
            except errors.NoSuchKey:
                # s3://b/model where model/ is a folder: load the model in it, as
                # from_pretrained would (no request is spent on this unless the key is absent).
                folder = _uri.folder_for_missing(self.uri, self._client)
                if folder is None:
                    raise
                _log.logger.info("%s is a folder: loading %s", self.uri, folder)
                self.uri = folder
                h = _interrupt.call(opener(self.uri), abandon=lambda h: lib.s3d_reader_close(h),
                                    uses=(self._client,))
        except errors.FormatError as err:
            _explain_not_safetensors(self.uri, self._client, err)
            raise
        # The reader keeps the C client alive (s3d_reader_open); its own calls are counted so
        # that close() in another thread waits for a read running here.
        self._h: Optional[Handle] = Handle(h, self._closed)
        self._entries: Optional[tuple[list[TensorEntry], dict[str, TensorEntry]]] = None
        self._tied: Optional[dict[str, str]] = None

    @property
    def tensors(self) -> list[TensorEntry]:
        """The TensorEntry of each tensor, in the C reader's order (made on first use: a
        plain load() never needs them)."""
        return self._listed()[0]

    @property
    def by_name(self) -> dict[str, TensorEntry]:
        return self._listed()[1]

    def _listed(self) -> tuple[list[TensorEntry], dict[str, TensorEntry]]:
        if self._entries is not None:
            return self._entries
        tensors: list[TensorEntry] = []
        by_name: dict[str, TensorEntry] = {}
        info = _capi.TensorInfo()
        # Shapes and sizes repeat (the layers of a model, the experts of a layer): one tuple
        # and one int object each, shared by the entries, instead of one per tensor (a 1.66 M
        # tensor header spent 96 of its about 300 bytes a tensor on them; issue 35, item 9).
        shapes: dict[Tuple[int, ...], Tuple[int, ...]] = {}
        sizes: dict[int, int] = {}
        with self._use() as h:
            for i in range(self._lib.s3d_reader_num_tensors(h)):
                self._lib.check(self._lib.s3d_reader_tensor(h, i, ctypes.byref(info)))
                name = info.name.decode("utf-8")
                shape = tuple(info.shape[:info.ndim])
                nbytes = info.nbytes
                e = TensorEntry(i, name, info.dtype, shapes.setdefault(shape, shape),
                                sizes.setdefault(nbytes, nbytes), bool(info.has_crc32c))
                tensors.append(e)
                by_name[name] = e
        self._entries = (tensors, by_name)
        return self._entries

    def _closed(self) -> Exception:
        return ValueError(f"s3direct reader for {self.uri} is closed")

    def _use(self) -> contextlib.AbstractContextManager[ctypes.c_void_p]:
        h = self._h
        if h is None:
            raise self._closed()
        return h.use()

    def metadata(self) -> dict[str, str]:
        out: dict[str, str] = {}
        k, v = ctypes.c_char_p(), ctypes.c_char_p()
        with self._use() as h:
            for i in range(self._lib.s3d_reader_num_metadata(h)):
                self._lib.check(self._lib.s3d_reader_metadata(h, i, ctypes.byref(k),
                                                              ctypes.byref(v)))
                # The C API never gives a NULL key.
                out[cast(bytes, k.value).decode("utf-8")] = (v.value or b"").decode("utf-8")
        return out

    def shards(self) -> list[tuple[str, int, int]]:
        """[(uri, header_bytes, object_bytes)] of each shard (one entry for a single file)."""
        out: list[tuple[str, int, int]] = []
        u, hb, ob = ctypes.c_char_p(), ctypes.c_uint64(), ctypes.c_uint64()
        with self._use() as h:
            for i in range(self._lib.s3d_reader_num_shards(h)):
                self._lib.check(self._lib.s3d_reader_shard(h, i, ctypes.byref(u),
                                                           ctypes.byref(hb), ctypes.byref(ob)))
                # The C API never gives a NULL shard URI.
                out.append((cast(bytes, u.value).decode("utf-8"), hb.value, ob.value))
        return out

    def versions(self) -> list[str]:
        """The version of each shard this reader opened and reads from (s3d_reader_shard_version:
        an object's ETag; a local file's inode number, size and modification time)."""
        with self._use() as h:
            return [(self._lib.s3d_reader_shard_version(h, i) or b"").decode("utf-8")
                    for i in range(self._lib.s3d_reader_num_shards(h))]

    def tied_names(self) -> dict[str, str]:
        """{name: stored name} of the tied tensors save() stored once (_untie): names that
        load() returns but the file does not hold. Read from the s3direct tree and confirmed
        by the alias entry in __metadata__; empty for files other tools wrote."""
        if self._tied is None:
            doc = _tree_doc(self)
            tied: dict[str, str] = {}
            if doc is not None:
                md = self.metadata()
                names = _tree.Flattened()
                for path, tag, node in _tree.walk(doc["tree"]):
                    if tag != "t":
                        continue
                    name, kept = names.unique_name(path), node["t"]
                    if (name != kept and name not in self.by_name and kept in self.by_name
                            and md.get(name) == kept):
                        tied[name] = kept
            self._tied = tied
        return self._tied

    def metadata_get(self, key: str) -> Optional[str]:
        with self._use() as h:
            v: Optional[bytes] = self._lib.s3d_reader_metadata_get(h, enc(key))
        return None if v is None else v.decode("utf-8")

    def read(self, dests: Sequence[Dest], *, progress: ProgressArg = False,
             verify: bool = True) -> None:
        """dests: list of (TensorEntry, tensor, src_offset, length); each tensor contiguous on
        the CPU or a CUDA device with room for the bytes. One planned transfer for all."""
        d = Dests(len(dests))
        for e, t, off, length in dests:
            d.add(e.index, t, _dest_device(t), off, length)
        self.read_dests(d, progress=progress, verify=verify)

    def read_dests(self, d: Dests, *, progress: ProgressArg = False,
                   verify: bool = True) -> None:
        """As read(), for destinations already in a struct s3d_tensor_dest array."""
        if d.n == 0:
            return
        arr, n = d.arr, d.n
        with Progress(progress, f"load {os.path.basename(self.uri)}") as prog:
            o = _capi.ReadOptions()
            o.struct_size = ctypes.sizeof(o)
            if prog.fn is not None:
                o.progress = prog.fn
            o.no_verify = 0 if verify else 1
            keep: list[object] = []
            _set_streams(o, _cuda_streams(d.devices), keep)
            lib, use = self._lib, self._use

            def read() -> None:
                # Counted in the thread that makes the call: close() waits for it.
                with use() as h:
                    lib.check(lib.s3d_reader_read(h, arr, n, ctypes.byref(o)))

            with _interrupt.Cancel() as cancel:
                o.cancel = cancel.handle
                _interrupt.call(read, cancel=cancel)

    def close(self) -> None:
        """Closes the reader; a read running on another thread is waited for, reads that
        start later raise ValueError. Idempotent."""
        self._close(wait=True)

    def _close(self, *, wait: bool) -> None:
        h = getattr(self, "_h", None)
        if h is not None:
            h.close(self._lib.s3d_reader_close, wait=wait)

    def __enter__(self) -> CheckpointReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self._close(wait=False)
        except Exception:
            pass


def _tree_doc(r: CheckpointReader) -> Optional[dict[str, Any]]:
    text = r.metadata_get(_tree.TREE_KEY)
    return None if text is None else _tree.parse(text, r.uri)


def _device(device: Union[str, int, torch.device]) -> torch.device:
    d = torch.device(device)
    if d.type == "cuda" and d.index is None:
        d = torch.device("cuda", torch.cuda.current_device())
    return d


def _select(r: CheckpointReader, names: Iterable[str],
            keys: Union[str, Sequence[str], None]) -> list[str]:
    """Names among `names` that keys select: a key selects the tensor of that name and every
    tensor under it (name + "."). Unknown keys -> KeyError listing them."""
    if keys is None:
        return list(names)
    if isinstance(keys, str):
        keys = [keys]
    chosen: list[str] = []
    unknown: list[str] = []
    for k in keys:
        hit = [n for n in names if n == k or n.startswith(k + ".")]
        if not hit:
            unknown.append(k)
        chosen.extend(hit)
    if unknown:
        raise KeyError(f"{r.uri}: no tensor at {', '.join(map(repr, unknown))}")
    return list(dict.fromkeys(chosen))


def _map_location(device: DeviceArg, map_location: Any) -> Any:
    """device, or torch.load's map_location given as its alias (a device or device string)."""
    if map_location is None:
        return device
    if isinstance(map_location, (dict, type(lambda: 0))) or callable(map_location):
        raise errors.InvalidArgument(
            errors.S3D_EINVAL,
            "map_location must be a device (str or torch.device) here: tensors are allocated "
            "on it before the bytes arrive, so a dict or a function cannot remap them")
    if device is not None and torch.device(device) != torch.device(map_location):
        raise errors.InvalidArgument(
            errors.S3D_EINVAL,
            f"device={device!r} and map_location={map_location!r} disagree; give one")
    return map_location


def load(uri: PathLike, *, device: DeviceArg = None,
         keys: Union[str, Sequence[str], None] = None, progress: ProgressArg = False,
         client: Optional[Client] = None, allow_pickle: bool = False, verify: bool = True,
         map_location: DeviceArg = None, group: Optional["ProcessGroup"] = None) -> Any:
    """Loads what save() stored: the same structure, tensors allocated on device.

    Args:
        uri: "s3://bucket/key", a local path, file:// URI, index URI or model folder.
        device: where tensors are allocated ("cpu", "cuda", "cuda:N"); map_location is an
            alias, as torch.load spells it.
        keys: paths (tensor names or prefixes such as "model"): only those tensors are
            fetched, returned as a flat dict name -> tensor.
        progress: True (bar or summary line) or a callable(done_bytes, total_bytes).
        client: the Client to use. allow_pickle: accept pickled leaves. verify: check CRC32C.
        group: a torch.distributed process group whose ranks all call load() with it: each
            rank fetches its share of the bytes (whole tensors, balanced) and the group's
            backend (gloo, NCCL) moves the rest between ranks, so the checkpoint is read from
            storage once per group. keys may differ between ranks: only what some rank asks
            for is read, and sent only to the ranks that asked (see docs/python.md).

    Returns:
        The saved structure; a plain safetensors file (no s3direct tree) gives a dict
        name -> tensor.

    Raises:
        NoSuchKey / NoSuchFile, FormatError (a torch.save file says so), ChecksumMismatch,
        PickleRefused, KeyError (keys not in the checkpoint).
        With group: the error of a rank that failed, on every rank, naming it; Timeout when a
        rank does not report within the group's timeout.
    """
    device = _map_location(device, map_location)
    dev = _device("cpu" if device is None else device)
    alloc_dev = dev if dev.type in ("cpu", "cuda") else torch.device("cpu")
    sess = None if group is None else _ranks.Session(group, f"load {os.fspath(uri)}")
    with _gc_paused():
        return _load(uri, dev, alloc_dev, keys, progress, client, allow_pickle, verify, sess)


@contextlib.contextmanager
def _shared(sess: Optional[_ranks.Session]) -> Iterator[None]:
    """With group=: a failure on this rank is posted for the other ranks before it propagates,
    so that they raise with its text instead of waiting for the group's timeout."""
    try:
        yield
    except BaseException as e:
        if sess is not None:
            sess.fail(e)
        raise


def _read(r: CheckpointReader, dests: Sequence[Dest], sess: Optional[_ranks.Session],
          progress: ProgressArg, verify: bool) -> None:
    if sess is None:
        r.read(dests, progress=progress, verify=verify)
    else:
        sess.read(r, dests, progress=progress, verify=verify)


def _load(uri: PathLike, dev: torch.device, alloc_dev: torch.device,
          keys: Union[str, Sequence[str], None], progress: ProgressArg, client: Optional[Client],
          allow_pickle: bool, verify: bool, sess: Optional[_ranks.Session]) -> Any:
    with _shared(sess), CheckpointReader(uri, client) as r:
        doc = _tree_doc(r)
        if keys is None and sess is None:
            return load_all(r, doc, alloc_dev, dev, allow_pickle, progress, verify)
        if doc is not None:
            tree_names: list[str] = []
            for path, tag, node in _tree.walk(doc["tree"]):
                if tag == "p" and not allow_pickle and keys is None:
                    raise _tree.pickle_refused(r.uri, path)
                if tag == "t":
                    if node["t"] not in r.by_name:
                        raise errors.FormatError(
                            errors.S3D_EFMT_METADATA,
                            f"{r.uri}: the tree names tensor {node['t']!r}, which the file "
                            f"does not hold")
                    tree_names.append(node["t"])
        else:
            tree_names = [e.name for e in r.tensors]
        # By keys, a tied name (stored once under the name it is tied to) is selected as
        # load() returns it, and comes back tied to that tensor.
        tied = r.tied_names() if keys is not None else {}
        chosen = _select(r, tree_names + list(tied), keys)
        out: dict[str, torch.Tensor] = {}
        dests: list[Dest] = []
        stored: dict[str, torch.Tensor] = {}
        for name in chosen:
            sname = tied.get(name, name)
            t = stored.get(sname)
            if t is None:
                e = r.by_name[sname]
                t = torch.empty(e.shape, dtype=e.torch_dtype(r.uri), device=alloc_dev)
                stored[sname] = t
                dests.append((e, t, 0, 0))
            out[name] = t
        _read(r, dests, sess, progress, verify)
    if alloc_dev != dev:
        out = {k: v.to(dev) for k, v in out.items()}
    if doc is None or keys is not None:
        return out
    return _tree.unflatten(doc["tree"], out, allow_pickle=allow_pickle)

