"""File-like objects over S3 objects, for torch.save / torch.load and anything else that takes a
file (as s3torchconnector's S3Checkpoint does).

reader(uri): seekable, read-only. Reads are served from a read-ahead buffer that is refilled
by ranged GETs (s3d_download_to_buffer); a read at least as large as the buffer goes straight
into the caller's memory.
writer(uri): write-only, not seekable; use it as a context manager (``with s3direct.writer(uri)
as f: torch.save(obj, f)``): torch.save does not close the file it is given, so a writer
handed to torch.save outside a ``with`` block (``torch.save(obj, s3direct.writer(uri))``,
which would save nothing) is refused at its first write with InvalidArgument, a ValueError.
Bytes go to the C upload stream (s3d_upload_stream_*), which uploads parts in the background
with memory bounded by concurrency x part_size. The object appears only when close()
succeeds; leaving a ``with`` block by an exception, or abort(), discards the upload. A writer
garbage-collected unclosed discards its upload too and emits a ResourceWarning naming the URI.
A writer may be shared by threads: close() or abort()
waits for a write() running on another thread, and writes after it raise ValueError. It keeps
its client's C object alive, so it stays usable after the Client is closed.

Local paths work too: reader gives the builtin binary file; writer writes a temporary file in
the same folder and renames it on close (the file appears only when complete), through the C
library's s3d_file_stream_* (the one temporary-file commit of the library).
"""

from __future__ import annotations

import ctypes
import io
import logging
import os
import sys
import warnings
from types import FrameType, TracebackType
from typing import TYPE_CHECKING, BinaryIO, Optional, TypeVar, cast

from . import _capi, _uri, errors
from ._capi import enc
from ._uri import PathLike
from ._uri import split_s3 as split_s3  # its home until 0.1; callers import it from here
from .client import Client, Handle, buffer_pointer, resolve

if TYPE_CHECKING:
    from typing_extensions import Buffer

DEFAULT_READ_AHEAD = 8 << 20


def is_s3(uri: object) -> bool:
    return isinstance(uri, str) and uri.startswith("s3://")


class S3Reader(io.RawIOBase):
    """What reader() returns for an s3:// URI: a seekable, read-only binary file over one
    version of the object (its ETag at open).

    Args:
        uri: "s3://bucket/key".
        client: the Client to use (None: the default client).
        read_ahead: bytes fetched per ranged GET for small reads.

    Raises:
        NoSuchKey, NoSuchBucket, AccessDenied: from the HEAD at open.
        TransferError: a read failed, or the object changed (S3D_ECHANGED) since open.
    """

    def __init__(
        self, uri: str, *, client: Client | None = None, read_ahead: int = DEFAULT_READ_AHEAD
    ) -> None:
        super().__init__()
        self.uri = uri
        self._client = resolve(client)
        self._bucket, self._key = split_s3(uri)
        info = self._client.head(self._bucket, self._key)
        self._size: int = info.size
        # Every read asks for this version: a replaced object fails (S3D_ECHANGED) rather
        # than mixing the bytes of two versions in one stream.
        self._etag: str = info.etag.decode("utf-8", "replace")
        self._pos = 0
        self._ra = max(int(read_ahead), 1)
        self._buf = bytearray()
        self._buf_start = 0

    @property
    def size(self) -> int:
        """The object's size in bytes (from the HEAD at open)."""
        return self._size

    def readable(self) -> bool:
        """True."""
        return True

    def seekable(self) -> bool:
        """True."""
        return True

    def tell(self) -> int:
        """The current position."""
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        """Moves the position; nothing is read until the next read.

        Args:
            offset: bytes relative to whence.
            whence: io.SEEK_SET, io.SEEK_CUR or io.SEEK_END.

        Returns:
            The new position (past the end is allowed; reads there return nothing).

        Raises:
            ValueError: an unknown whence or a negative position.
        """
        if whence == io.SEEK_SET:
            pos = offset
        elif whence == io.SEEK_CUR:
            pos = self._pos + offset
        elif whence == io.SEEK_END:
            pos = self._size + offset
        else:
            raise ValueError(f"invalid whence {whence}")
        if pos < 0:
            raise ValueError(f"negative seek position {pos}")
        self._pos = pos
        return pos

    def _fetch(self, offset: int, dst: memoryview | bytearray) -> None:
        want = len(dst)
        got = self._client.download_into(
            self._bucket, self._key, offset, dst, want, if_match=self._etag
        )
        if got != want:
            raise errors.TransferError(
                errors._CODES["EPROTO"],
                f"{self.uri}: ranged read at {offset} returned {got} of {want} bytes",
            )

    def readinto(self, b: Buffer) -> int:
        """Reads up to len(b) bytes at the position into b.

        Args:
            b: a writable bytes-like object.

        Returns:
            The number of bytes read (0 at the end).

        Raises:
            TransferError: the read failed or the object changed since open.
        """
        mv = memoryview(b).cast("B")
        n = min(len(mv), max(self._size - self._pos, 0))
        done = 0
        while done < n:
            pos = self._pos
            bstart, bend = self._buf_start, self._buf_start + len(self._buf)
            if bstart <= pos < bend:
                k = min(n - done, bend - pos)
                mv[done : done + k] = self._buf[pos - bstart : pos - bstart + k]
            elif n - done >= self._ra:
                k = n - done
                self._fetch(pos, mv[done : done + k])
            else:
                fill = min(self._ra, self._size - pos)
                buf = bytearray(fill)
                self._fetch(pos, buf)
                self._buf, self._buf_start = buf, pos
                continue
            done += k
            self._pos += k
        return done

    def read(self, size: int | None = -1) -> bytes:
        """Reads up to size bytes at the position.

        Args:
            size: bytes to read; None or negative reads to the end.

        Returns:
            The bytes read (empty at the end).

        Raises:
            TransferError: the read failed or the object changed since open.
        """
        if size is None or size < 0:
            size = max(self._size - self._pos, 0)
        buf = bytearray(min(size, max(self._size - self._pos, 0)))
        n = self.readinto(buf)
        return bytes(buf) if n == len(buf) else bytes(buf[:n])

    def readall(self) -> bytes:
        """Reads from the position to the end (read(-1))."""
        return self.read(-1)


def _warn_unclosed(uri: str, nbytes: int, source: object) -> None:
    msg = (
        f"s3direct writer for {uri} was garbage-collected without close(): its {nbytes} "
        f"bytes were discarded and nothing was written. Use `with s3direct.writer(uri) as "
        f"f: torch.save(obj, f)` (torch.save does not close the file it is given)"
    )
    warnings.warn(msg, ResourceWarning, stacklevel=2, source=source)
    # ResourceWarning is hidden by default; lost data is not: the log says it too.
    logging.getLogger("s3direct").warning("%s", msg)


def _in_torch_save() -> bool:
    """Whether torch.save is on the stack above the writer's write() (a few frames up)."""
    f: Optional[FrameType] = sys._getframe(2)
    for _ in range(16):
        if f is None:
            return False
        if f.f_code.co_name == "save" and f.f_globals.get("__name__") == "torch.serialization":
            return True
        f = f.f_back
    return False


_W = TypeVar("_W", bound="_AbortOnError")


class _AbortOnError:
    """The writers' ``with`` rule: an exception in the block aborts (nothing is published),
    a normal exit closes (the object or file appears). And the torch.save rule: torch.save
    never closes the file it is given, so a writer it gets outside a ``with`` block would
    publish nothing; the first write() refuses it at once (_vet) instead of a warning when the
    writer is garbage-collected. A writer closed explicitly after torch.save (no ``with``) is
    refused too: the message says to use the ``with`` block, where an exception discards."""

    uri = ""
    _in_with = False  # __enter__ ran
    _vetted = False  # the first write() checked for torch.save
    _refused = False  # refused: writes and flushes are dropped while torch unwinds

    if TYPE_CHECKING:  # provided by each writer; no stub at run time, where it would come
        # before io's close() in the method order
        def abort(self) -> None: ...

        def close(self) -> None: ...

    def __enter__(self: _W) -> _W:
        if getattr(self, "closed", False):
            raise ValueError("I/O operation on closed file.")
        self._in_with = True
        return self

    def _vet(self) -> bool:
        """Called by write(): False when the write is to be dropped (a refused writer);
        raises InvalidArgument on the first write from torch.save outside a ``with`` block."""
        if self._refused:
            return False
        if not self._vetted:
            self._vetted = True
            if not self._in_with and _in_torch_save():
                self._refused = True
                self.abort()
                raise errors.InvalidArgument(
                    errors.S3D_EINVAL,
                    f"s3direct.writer({self.uri!r}) was given to torch.save outside a with "
                    f"block: torch.save does not close its file, so nothing would be saved. "
                    f"Write `with s3direct.writer(uri) as f: torch.save(obj, f)`; the object "
                    f"appears when the block ends (an exception in it discards the upload)",
                )
        return True

    def flush(self) -> None:
        """Nothing to flush: bytes are handed to the C stream as they are written."""
        if not self._refused and getattr(self, "closed", False):
            raise ValueError("I/O operation on closed file.")

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is not None:
            self.abort()
        else:
            self.close()


class S3Writer(_AbortOnError, io.RawIOBase):
    """What writer() returns for an s3:// URI: a write-only binary file whose bytes are
    uploaded in the background (s3d_upload_stream_*); the object appears on close().

    Args:
        uri: "s3://bucket/key".
        client: the Client to use (None: the default client).
        part_size: bytes per uploaded part (None: the client's).
        max_concurrency: parts in flight (None: the client's).
        content_type: the object's Content-Type (None: the library's default).

    Raises:
        InvalidArgument: max_concurrency over 1024 or part_size over 5 GiB.
        NoSuchBucket, AccessDenied, TransferError: from write() or close() as the upload
            runs.
    """

    def __init__(
        self,
        uri: str,
        *,
        client: Client | None = None,
        part_size: int | None = None,
        max_concurrency: int | None = None,
        content_type: str | None = None,
    ) -> None:
        super().__init__()
        self.uri = uri
        self._lib = _capi.lib()
        self._client = resolve(client)
        bucket, key = split_s3(uri)
        o = _capi.TransferOptions()
        o.struct_size = ctypes.sizeof(o)
        _capi.set_unsigned(o, "part_size", part_size)
        _capi.set_unsigned(o, "max_concurrency", max_concurrency)
        ct = enc(content_type)
        o.content_type = ct
        h = ctypes.c_void_p()
        with self._client.call() as ch:
            self._lib.check(
                self._lib.s3d_upload_stream_new(
                    ch, enc(bucket), enc(key), ctypes.byref(o), ctypes.byref(h)
                )
            )
        # The stream keeps the C client alive; its own calls are counted so that close() or
        # abort() in another thread waits for a write() running here.
        self._h: Handle | None = Handle(h, self._closed)
        self._written = 0
        self._done = False

    @staticmethod
    def _closed() -> Exception:
        return ValueError("write to a closed s3direct writer")

    def writable(self) -> bool:
        """True."""
        return True

    def tell(self) -> int:
        """The number of bytes written so far."""
        return self._written

    def write(self, b: Buffer) -> int:
        """Appends b to the upload (parts go out in the background).

        Args:
            b: a bytes-like object.

        Returns:
            len(b) in bytes: every byte is taken.

        Raises:
            ValueError: the writer is closed.
            TransferError, AccessDenied, NoSuchBucket: an upload of an earlier part failed.
        """
        if not self._vet():
            return memoryview(b).nbytes
        hd = self._h
        if hd is None:
            raise self._closed()
        ptr, n, keep = buffer_pointer(b)
        with hd.use() as h:
            if n:
                self._lib.check(self._lib.s3d_upload_stream_write(h, ptr, n))
            self._written += n
        del keep
        return n

    def abort(self) -> None:
        """Discards the upload: nothing appears at the key. A write() running on another
        thread is waited for first."""
        self._abort(wait=True)

    def _abort(self, *, wait: bool) -> None:
        h, self._h = self._h, None
        if h is not None:
            h.close(self._lib.s3d_upload_stream_free, wait=wait)
        super().close()

    def close(self) -> None:
        """Completes the upload; the object is visible when this returns. A write() running
        on another thread is waited for first; the object holds every byte a write() that
        returned took. Idempotent.

        Raises:
            TransferError, AccessDenied, NoSuchBucket: the upload failed (nothing appears).
        """
        h, self._h = self._h, None
        if h is None:
            super().close()
            return
        box: list[BaseException] = []

        def finish(sh: ctypes.c_void_p) -> None:
            # Runs once the writes in flight have returned, before the stream is freed.
            try:
                self._lib.check(self._lib.s3d_upload_stream_finish(sh))
            except BaseException as e:
                box.append(e)
            finally:
                self._lib.s3d_upload_stream_free(sh)

        try:
            h.close(finish)
        finally:
            super().close()
        if box:
            raise box[0]

    def __del__(self) -> None:
        # Never complete an upload from the garbage collector: abort it, and say so, as an
        # unclosed builtin file does (torch.save(obj, writer(uri)) never closes its file).
        try:
            if getattr(self, "_h", None) is not None:
                _warn_unclosed(self.uri, self._written, self)
                self._abort(wait=False)
        except Exception:
            pass


class _LocalWriter(_AbortOnError, io.FileIO):
    """A local file written whole or not at all by the C library's file stream
    (s3d_file_stream_*, include/s3direct/transfer.h): bytes go to .NAME.s3d-tmp-PID-RAND beside
    path, which close() syncs and renames over path (then syncs the folder), as the library's
    downloads and local saves commit theirs; abort() or an unclosed writer removes it. A new
    file gets 0666 less the umask; an existing one keeps its mode. Writes go through the
    temporary file's descriptor, which the C stream owns and closes."""

    def __init__(self, path: PathLike) -> None:
        self._final = self.uri = os.fspath(path)
        self._lib = _capi.lib()
        h = ctypes.c_void_p()
        self._lib.check(self._lib.s3d_file_stream_new(enc(self._final), ctypes.byref(h)))
        self._s: Optional[ctypes.c_void_p] = h
        try:
            super().__init__(self._lib.s3d_file_stream_fd(h), "wb", closefd=False)
        except BaseException:
            self._s = None
            self._lib.s3d_file_stream_free(h)
            raise

    def write(self, b: Buffer, /) -> int:
        """io.FileIO.write into the temporary file, once the torch.save check passed."""
        if not self._vet():
            return memoryview(b).nbytes
        return super().write(b)

    def abort(self) -> None:
        if not self.closed:
            super().close()
        s, self._s = getattr(self, "_s", None), None
        if s is not None:
            self._lib.s3d_file_stream_free(s)

    def close(self) -> None:
        if self.closed:
            return
        s, self._s = self._s, None
        try:
            super().close()  # the descriptor stays open: the stream syncs and closes it
            if s is not None:
                self._lib.check(self._lib.s3d_file_stream_finish(s))
        finally:
            if s is not None:
                self._lib.s3d_file_stream_free(s)

    def __del__(self) -> None:
        # A writer dropped without close() leaves no file behind, and says so.
        try:
            if not self.closed:
                _warn_unclosed(self._final, self.tell(), self)
            self.abort()
        except Exception:
            pass


def reader(
    uri: PathLike, *, client: Optional[Client] = None, read_ahead: int = DEFAULT_READ_AHEAD
) -> BinaryIO:
    """A seekable binary file over an object or a local file (for torch.load and the like).

    Args:
        uri: "s3://bucket/key", a local path or a file:// URI.
        client: the Client to use (default: the process's default client).
        read_ahead: bytes fetched per ranged GET for small reads (S3 only).

    Returns:
        An S3Reader for s3:// URIs, the builtin binary file otherwise.

    Raises:
        NoSuchKey, NoSuchBucket, AccessDenied (S3); FileNotFoundError and the like (local);
        ConfigError: a URI s3direct cannot use.
    """
    uri = _uri.normalize(uri)
    if is_s3(uri):
        return cast(BinaryIO, S3Reader(uri, client=client, read_ahead=read_ahead))
    return open(uri, "rb")


def writer(
    uri: PathLike,
    *,
    client: Optional[Client] = None,
    part_size: Optional[int] = None,
    max_concurrency: Optional[int] = None,
    content_type: Optional[str] = None,
) -> BinaryIO:
    """A write-only binary file whose bytes become the object (or file) at uri on close().
    Use it in a ``with`` block: an exception inside it, or abort(), discards what was written.

    Args:
        uri: "s3://bucket/key", a local path or a file:// URI.
        client: the Client to use (default: the process's default client).
        part_size: bytes per uploaded part (S3; None: the client's).
        max_concurrency: parts uploaded at once (S3; None: the client's).
        content_type: the object's Content-Type (S3).

    Returns:
        An S3Writer for s3:// URIs; for a local path a file that is written beside it and
        renamed to it on close.

    Raises:
        InvalidArgument: max_concurrency over 1024 or part_size over 5 GiB (S3).
        NoSuchBucket, AccessDenied, TransferError: from write() or close() (S3).
        NoSuchFile (a FileNotFoundError): the local path's folder does not exist;
        AccessDenied (a PermissionError) and the like from the C library: the local temporary
        file cannot be made, or (from close()) not synced or renamed. ConfigError: a URI
        s3direct cannot use.
    """
    uri = _uri.normalize(uri)
    if is_s3(uri):
        return cast(
            BinaryIO,
            S3Writer(
                uri,
                client=client,
                part_size=part_size,
                max_concurrency=max_concurrency,
                content_type=content_type,
            ),
        )
    return cast(BinaryIO, _LocalWriter(uri))
