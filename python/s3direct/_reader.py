"""CheckpointReader: an open checkpoint (the C reader), its tensors and metadata, and reads
into destinations; with the CUDA-stream plumbing of the C read and write options, which
_save.py shares.

Python never touches tensor bytes here: it hands the C reader (data_ptr, capacity) of each
destination. load is in _checkpoint.py, save in _save.py.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from typing import Any, Callable, Iterable, Optional, Sequence, Tuple, Union, cast

import torch

from . import _capi, _interrupt, _log, _tree, _uri, errors
from ._bulkload import Dests
from ._bulkload import dest_device as _dest_device
from ._capi import enc
from ._progress import Progress, ProgressArg
from ._types import Dest, TensorEntry
from ._uri import PathLike
from .client import Client, Handle, resolve


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


def _set_streams(
    o: Union[_capi.ReadOptions, _capi.WriteOptions],
    streams: Optional[Iterable[int]],
    keep: list[object],
) -> None:
    """Fills cuda_stream / cuda_streams / n_cuda_streams of a Read/WriteOptions."""
    streams = list(streams or [])
    if not streams:
        return
    arr = (ctypes.c_uint64 * len(streams))(*streams)
    keep.append(arr)
    o.cuda_stream = streams[0]
    o.cuda_streams = ctypes.cast(arr, ctypes.POINTER(ctypes.c_uint64))
    o.n_cuda_streams = len(streams)


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
            f"s3direct.save(torch.load(...), uri)",
        ) from err


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
                h = _interrupt.call(
                    opener(self.uri),
                    abandon=lambda h: lib.s3d_reader_close(h),
                    uses=(self._client,),
                )
            except errors.NoSuchKey:
                # s3://b/model where model/ is a folder: load the model in it, as
                # from_pretrained would (no request is spent on this unless the key is absent).
                folder = _uri.folder_for_missing(self.uri, self._client)
                if folder is None:
                    raise
                _log.logger.info("%s is a folder: loading %s", self.uri, folder)
                self.uri = folder
                h = _interrupt.call(
                    opener(self.uri),
                    abandon=lambda h: lib.s3d_reader_close(h),
                    uses=(self._client,),
                )
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
                shape = tuple(info.shape[: info.ndim])
                nbytes = info.nbytes
                e = TensorEntry(
                    i,
                    name,
                    info.dtype,
                    shapes.setdefault(shape, shape),
                    sizes.setdefault(nbytes, nbytes),
                    bool(info.has_crc32c),
                )
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
                self._lib.check(
                    self._lib.s3d_reader_metadata(h, i, ctypes.byref(k), ctypes.byref(v))
                )
                # The C API never gives a NULL key.
                out[cast(bytes, k.value).decode("utf-8")] = (v.value or b"").decode("utf-8")
        return out

    def shards(self) -> list[tuple[str, int, int]]:
        """[(uri, header_bytes, object_bytes)] of each shard (one entry for a single file)."""
        out: list[tuple[str, int, int]] = []
        u, hb, ob = ctypes.c_char_p(), ctypes.c_uint64(), ctypes.c_uint64()
        with self._use() as h:
            for i in range(self._lib.s3d_reader_num_shards(h)):
                self._lib.check(
                    self._lib.s3d_reader_shard(
                        h, i, ctypes.byref(u), ctypes.byref(hb), ctypes.byref(ob)
                    )
                )
                # The C API never gives a NULL shard URI.
                out.append((cast(bytes, u.value).decode("utf-8"), hb.value, ob.value))
        return out

    def versions(self) -> list[str]:
        """The version of each shard this reader opened and reads from (s3d_reader_shard_version:
        an object's ETag; a local file's inode number, size and modification time)."""
        with self._use() as h:
            return [
                (self._lib.s3d_reader_shard_version(h, i) or b"").decode("utf-8")
                for i in range(self._lib.s3d_reader_num_shards(h))
            ]

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
                    if (
                        name != kept
                        and name not in self.by_name
                        and kept in self.by_name
                        and md.get(name) == kept
                    ):
                        tied[name] = kept
            self._tied = tied
        return self._tied

    def metadata_get(self, key: str) -> Optional[str]:
        with self._use() as h:
            v: Optional[bytes] = self._lib.s3d_reader_metadata_get(h, enc(key))
        return None if v is None else v.decode("utf-8")

    def read(
        self, dests: Sequence[Dest], *, progress: ProgressArg = False, verify: bool = True
    ) -> None:
        """dests: list of (TensorEntry, tensor, src_offset, length); each tensor contiguous on
        the CPU or a CUDA device with room for the bytes. One planned transfer for all."""
        d = Dests(len(dests))
        for e, t, off, length in dests:
            d.add(e.index, t, _dest_device(t), off, length)
        self.read_dests(d, progress=progress, verify=verify)

    def read_dests(self, d: Dests, *, progress: ProgressArg = False, verify: bool = True) -> None:
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
