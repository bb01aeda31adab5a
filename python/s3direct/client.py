"""Client: one s3d_client (connections, credentials, staging pool) per process.

A C client must not cross fork(): libcurl connections and CUDA contexts do not survive it. The
pid is checked on every use: in a forked child (a DataLoader worker under Linux's default
``fork`` context, whose Dataset made a Client in ``__init__``) the first call makes the
child's own C client from the same arguments, and the parent's is neither used nor freed
there. The default client (used when no ``client=`` is passed) is made anew in a child the
same way.

Threads: every C call that uses a handle (the client's, a reader's, an upload stream's) runs
inside Handle.use(), which counts it; close() marks the handle closed (calls that start later
raise) and waits, with the GIL released, for the calls running on other threads before it
frees the C object. A pending save_async holds its client the same way (Handle.hold), so
close() waits for it. Readers and upload streams keep the C client alive themselves (see
s3d_client_free), so a client may be closed while they are still open.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading
import warnings
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, NamedTuple

from . import _capi, _uri, errors
from ._capi import enc
from ._uri import PathLike, split_s3

if TYPE_CHECKING:
    from typing_extensions import Buffer

_ADDRESSING = {None: 0, "auto": 0, "path": 1, "virtual": 2}
_SIGNING = {None: 0, "auto": 0, "signed": 1, "unsigned": 2}


def _certifi_bundle() -> str | None:
    """certifi's CA file when certifi is importable, else None. The library uses it only when
    no CA bundle is configured (ca_bundle, AWS_CA_BUNDLE, the profile, SSL_CERT_FILE), before
    the system's files: the order botocore follows. A wheel's bundled libcurl needs one of
    them, as its compiled-in path is Debian's (see src/s3/cabundle.h)."""
    try:
        import certifi
    except ImportError:
        return None
    try:
        where: str = certifi.where()
        return where
    except Exception:  # a broken certifi install must not stop the client
        return None


class Handle:
    """A C handle shared by threads: the calls running on it are counted, and close() waits
    for them instead of freeing the object under another thread.

    Args:
        h: the C pointer.
        closed: makes the exception a call raises once close() has begun (say "closed").
    """

    __slots__ = ("_h", "_closing", "_closed", "_cond", "_calls", "_holds")

    def __init__(self, h: ctypes.c_void_p, closed: Callable[[], Exception]) -> None:
        self._h: ctypes.c_void_p | None = h  # until freed
        self._closing = False
        self._closed = closed
        self._cond = threading.Condition(threading.Lock())
        self._calls: dict[int, int] = {}  # thread ident -> calls running on that thread
        self._holds = 0  # users not tied to a thread (a pending save_async)

    @property
    def is_open(self) -> bool:
        """False once close() has begun."""
        return not self._closing

    @contextlib.contextmanager
    def use(self, held: bool = False) -> Iterator[ctypes.c_void_p]:
        """The handle, counted as in use until the block ends.

        Args:
            held: the caller has a hold() (a pending save_async): its calls still run after
                close() has begun, which waits for them.

        Returns:
            A context manager giving the pointer.

        Raises:
            What closed() makes, when close() has begun (and held is False).
        """
        me = threading.get_ident()
        with self._cond:
            h = self._h
            if h is None or (self._closing and not held):
                raise self._closed()
            self._calls[me] = self._calls.get(me, 0) + 1
        try:
            yield h
        finally:
            with self._cond:
                left = self._calls[me] - 1
                if left:
                    self._calls[me] = left
                else:
                    del self._calls[me]
                    if not self._calls and not self._holds:
                        self._cond.notify_all()

    def hold(self) -> None:
        """Counts one user that is not a running call (release() ends it).

        Raises:
            What closed() makes, when close() has begun.
        """
        with self._cond:
            if self._closing:
                raise self._closed()
            self._holds += 1

    def release(self) -> None:
        """Ends a hold()."""
        with self._cond:
            self._holds -= 1
            if not self._calls and not self._holds:
                self._cond.notify_all()

    def close(self, free: Callable[[ctypes.c_void_p], object], *, wait: bool = True) -> None:
        """Refuses new calls, waits for the running ones and the holds, then free(handle).
        Idempotent; a second close() running beside the first waits as well.

        Args:
            free: frees the C object (called once, outside the lock).
            wait: False (a finalizer): when anything still uses the handle, leak it rather
                than wait or free it under the user.

        Raises:
            RuntimeError: called from inside a call on the same handle (a progress callback),
                which would wait for itself.
        """
        me = threading.get_ident()
        with self._cond:
            if self._calls.get(me):
                raise RuntimeError(
                    "close() called from inside a call on the same object "
                    "(a progress callback?); close it after the call returns"
                )
            self._closing = True
            if not wait and (self._calls or self._holds):
                return  # leaked: never freed under a user
            while self._calls or self._holds:
                self._cond.wait()
            h, self._h = self._h, None
        if h is not None:
            free(h)


def _client_closed() -> Exception:
    return errors.ConfigError(errors._CODES["ECONFIG"], "s3direct.Client is closed")


def _rate(target_throughput: str | int | None, throughput_target_gbps: float | None) -> str | None:
    """Client's target rate as the library parses it (bytes per second, or "10Gb/s"...)."""
    if target_throughput is not None and throughput_target_gbps is not None:
        raise ValueError("give target_throughput or throughput_target_gbps, not both")
    if throughput_target_gbps is not None:
        if not throughput_target_gbps > 0:
            raise ValueError(f"throughput_target_gbps must be > 0: {throughput_target_gbps!r}")
        return str(int(throughput_target_gbps * 1e9 / 8))  # bytes per second
    if target_throughput is not None:
        if isinstance(target_throughput, bool) or not isinstance(target_throughput, (str, int)):
            raise TypeError(f"target_throughput must be a str or int: {target_throughput!r}")
        return str(target_throughput)  # the library parses it (and says what is wrong)
    return None


def _client_options(kw: dict[str, Any], rate: str | None) -> tuple[Any, list[bytes | None]]:
    """The ClientOptions of Client's arguments kw, and the encoded strings it points to
    (which must stay alive until s3d_client_new has copied them)."""
    o = _capi.ClientOptions()
    o.struct_size = ctypes.sizeof(_capi.ClientOptions)
    strings = [
        enc(kw["endpoint_url"]),
        enc(kw["region"]),
        enc(kw["profile"]),
        enc(kw["access_key_id"]),
        enc(kw["secret_access_key"]),
        enc(kw["session_token"]),
        enc(kw["ca_bundle"]),
        enc(_certifi_bundle()),
        enc(rate),
    ]
    (
        o.endpoint_url,
        o.region,
        o.profile,
        o.access_key_id,
        o.secret_access_key,
        o.session_token,
        o.ca_bundle,
        o.default_ca_bundle,
        o.target_throughput,
    ) = strings
    o.addressing = _ADDRESSING[kw["addressing"]]
    o.anonymous = 1 if kw["anonymous"] else 0
    o.no_verify_ssl = 0 if kw["verify_ssl"] else 1
    o.payload_signing = _SIGNING[kw["payload_signing"]]
    for name in (
        "max_concurrency",
        "min_concurrency",
        "part_size",
        "multipart_threshold",
        "staging_bytes",
        "max_attempts",
        "deadline_ms",
        "connect_timeout_ms",
        "low_speed_time_s",
        "low_speed_limit",
    ):
        _capi.set_unsigned(o, name, kw[name])
    o.device = 0 if kw["device"] is None else int(kw["device"])
    return o, strings


class Client:
    """One s3d_client: connections, credentials and the staging pool, shared by the calls
    given ``client=``. Configuration not given here is resolved as the AWS CLI does
    (environment, then the profile in ~/.aws/credentials and ~/.aws/config, then defaults);
    see client.h. Use as a context manager or call close().

    A client is shared by threads. close() waits for the calls running on it in other
    threads, and for the save_async saves submitted with it, then frees it; calls that start
    after close() began raise ConfigError ("s3direct.Client is closed"). Readers and writers
    opened with it stay usable until they are closed.

    Args:
        endpoint_url, region, profile: strings (None = resolved).
        max_concurrency: the most requests in flight over every transfer of the client; the
            number itself adapts to the path below it (default: the profile's s3
            max_concurrent_requests, else 512).
        min_concurrency: the fewest requests the adaptive level keeps in flight (default 1);
            equal to max_concurrency, the level is fixed.
        target_throughput: what the network allows, as the AWS CLI's s3 target_bandwidth:
            "10Gb/s", "1.5GB/s" (prefixes powers of 1024, b bits, B bytes) or an int of bytes
            per second; the level starts at target / 50 MB/s and stops growing once reached
            (default: the profile's target_bandwidth, else none).
        throughput_target_gbps: the same in Gbit/s (10**9 bits), as s3torchconnector's
            S3ClientConfig names it; not together with target_throughput.
        part_size: bytes per ranged GET / uploaded part (default: the profile's s3
            multipart_chunksize, else 8 MiB).
        staging_bytes: size of the pinned staging pool that bounds host memory for GPU
            transfers (default 256 MiB).
        access_key_id, secret_access_key, session_token: explicit credentials (override all
            else).
        ca_bundle, addressing ("auto", "path", "virtual"), anonymous, verify_ssl,
            payload_signing ("auto", "signed", "unsigned"), multipart_threshold, max_attempts,
            deadline_ms, connect_timeout_ms, low_speed_time_s, low_speed_limit: see client.h.
            verify_ssl=False warns with InsecureConnectionWarning.
        device: -1 never uses a GPU; None (or 0) finds one at run time. It does not choose a
            device or a context: the staging pool is pinned in the primary context of the device
            the first device tensor of a transfer is on, and each copy runs in its tensor's
            device's context. Other values are reserved (InvalidArgument).

    Raises:
        ValueError: addressing or payload_signing is not one of the names above.
        ConfigError: an unreadable config file, a malformed endpoint URL. Missing credentials
            are not an error here: the first signed request raises NoCredentials.
    """

    def __init__(
        self,
        endpoint_url: str | None = None,
        region: str | None = None,
        profile: str | None = None,
        max_concurrency: int | None = None,
        part_size: int | None = None,
        staging_bytes: int | None = None,
        *,
        access_key_id: str | None = None,
        secret_access_key: str | None = None,
        session_token: str | None = None,
        ca_bundle: PathLike | None = None,
        addressing: str | None = None,
        anonymous: bool = False,
        verify_ssl: bool = True,
        payload_signing: str | None = None,
        multipart_threshold: int | None = None,
        max_attempts: int | None = None,
        deadline_ms: int | None = None,
        connect_timeout_ms: int | None = None,
        low_speed_time_s: int | None = None,
        low_speed_limit: int | None = None,
        device: int | None = None,
        min_concurrency: int | None = None,
        target_throughput: str | int | None = None,
        throughput_target_gbps: float | None = None,
    ) -> None:
        # What pickling carries to another process, where __setstate__ builds a new C client:
        # every argument (taken before any other local exists).
        kwargs = {k: v for k, v in locals().items() if k != "self"}
        self._lib = _capi.lib()
        self._h: Handle | None = None
        self._pid = os.getpid()
        self._kwargs = kwargs
        if addressing not in _ADDRESSING:
            raise ValueError(f"addressing must be one of auto, path, virtual: {addressing!r}")
        if payload_signing not in _SIGNING:
            raise ValueError(
                f"payload_signing must be auto, signed or unsigned: {payload_signing!r}"
            )
        rate = _rate(target_throughput, throughput_target_gbps)
        # The encoded strings stay alive (self._strings) until s3d_client_new has copied them.
        self._strings: list[bytes | None] | None = None
        o, self._strings = _client_options(kwargs, rate)
        if not verify_ssl:
            # Python's default filter shows it once per calling line (as urllib3's
            # InsecureRequestWarning); the CLI prints its own on every run.
            warnings.warn(
                "s3direct.Client(verify_ssl=False): TLS certificates are not verified; "
                "anyone on the path can read and change the data",
                errors.InsecureConnectionWarning,
                stacklevel=2,
            )
        h = ctypes.c_void_p()
        self._lib.check(self._lib.s3d_client_new(ctypes.byref(o), ctypes.byref(h)))
        self._strings = None
        self._h = Handle(h, _client_closed)

    def _check_pid(self) -> Handle:
        h = self._h
        if h is None:
            raise _client_closed()
        if self._pid != os.getpid():
            h = self._in_new_process(h)
        return h

    def _in_new_process(self, parent: Handle) -> Handle:
        """First use in a forked child (a DataLoader worker of a Dataset that made the
        client): a C client of the child's own, made from the same arguments. The parent's
        connections, credentials cache and pool stay the parent's: never used here, never
        freed here."""
        with _fork_lock:
            if self._pid == os.getpid():  # another thread of the child made it meanwhile
                h = self._h
                if h is None:
                    raise _client_closed()
                return h
            if not parent.is_open:
                raise _client_closed()
            fresh = Client(**self._kwargs)
            h, fresh._h = fresh._h, None  # fresh's finalizer then frees nothing
            assert h is not None
            self._h, self._pid = h, os.getpid()
            return h

    @property
    def is_open(self) -> bool:
        """False once close() has begun. In a forked child, what it was in the parent: the
        first call there makes the child's own C client."""
        h = self._h
        return h is not None and h.is_open

    @property
    def handle(self) -> ctypes.c_void_p:
        """The s3d_client pointer, not counted as in use: a C call made with it may have the
        client freed under it by a close() in another thread. The package uses call().

        Raises:
            ConfigError: after close() or in a forked child.
        """
        with self.call() as h:
            return h

    @contextlib.contextmanager
    def call(self, held: bool = False) -> Iterator[ctypes.c_void_p]:
        """The s3d_client pointer for C calls made inside the block, which close() waits for.

        Args:
            held: the caller has a hold(), so the call runs even once close() has begun.

        Returns:
            A context manager giving the pointer.

        Raises:
            ConfigError: close() has begun (and held is False), or in a forked child.
        """
        with self._check_pid().use(held) as h:
            yield h

    def hold(self) -> Callable[[], None]:
        """Keeps the client open (close() waits) until the returned function is called once;
        the holder's calls pass held=True to call().

        Raises:
            ConfigError: close() has begun, or in a forked child.
        """
        h = self._check_pid()
        h.hold()
        done = [False]

        def release() -> None:
            if not done[0]:
                done[0] = True
                h.release()

        return release

    def config(self) -> dict[str, Any]:
        """What the client resolved.

        Returns:
            A dict with endpoint_url, region, access_key_id, credential_source, addressing,
            max_concurrency, part_size, multipart_threshold, staging_bytes, gpu_available,
            min_concurrency, concurrency (the adaptive level now), target_throughput (bytes
            per second, 0 = none). gpu_available is None until the client's first GPU
            transfer: config() never initialises CUDA (a process may fork after it), and
            the client opens the driver only when it moves GPU memory.

        Raises:
            ConfigError: the client is closed or was made in another process.
        """
        cfg = _capi.ClientConfig()
        with self.call() as h:
            self._lib.check(self._lib.s3d_client_get_config(h, ctypes.byref(cfg)))
        out: dict[str, Any] = {}
        for name, *_ in _capi.ClientConfig._fields_:
            if name == "struct_size":
                continue
            v = getattr(cfg, name)
            out[name] = v.decode("utf-8", "replace") if isinstance(v, bytes) else v
        out["addressing"] = {1: "path", 2: "virtual"}.get(out["addressing"], "auto")
        out["gpu_available"] = None if out["gpu_available"] < 0 else bool(out["gpu_available"])
        return out

    def close(self) -> None:
        """Frees the client. Calls running on it in other threads are waited for (and
        save_async saves submitted with it, pending or running); calls that start after
        close() began raise ConfigError. Readers and writers opened with it stay usable
        until they are closed (they keep the C client alive). Idempotent.

        Raises:
            RuntimeError: called from inside a call on this client (a progress callback).
        """
        self._close(wait=True)

    def _close(self, *, wait: bool) -> None:
        h = getattr(self, "_h", None)
        if h is None:
            return
        if self._pid != os.getpid():
            # A forked child: the C client is the parent's (and the lock may have been held
            # at fork); drop it without freeing.
            self._h = None
            return
        h.close(self._lib.s3d_client_free, wait=wait)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        # Nothing can be using the client here: a running call and a pending save_async hold
        # a reference to it. Never wait in a finalizer all the same.
        try:
            self._close(wait=False)
        except Exception:
            pass

    # ---- pickling: the configuration travels, the C client is made again ----------------------
    def __getstate__(self) -> dict[str, Any]:
        """The arguments the client was made with (explicit credentials included, so pickle
        it only to places you would give them); not its connections."""
        return dict(self._kwargs)

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state)  # type: ignore[misc]  # unpickling makes the C client again

    def __repr__(self) -> str:
        given = {
            k: v
            for k, v in self._kwargs.items()
            if v not in (None, False)
            and k not in ("secret_access_key", "session_token")
            and not (k == "verify_ssl" and v is True)
        }
        return f"s3direct.Client({', '.join(f'{k}={v!r}' for k, v in given.items())})"

    # ---- listing and deleting (pruning old checkpoints without boto3) -------------------------
    def list(
        self, prefix: str, *, delimiter: "str | None" = None, limit: "int | None" = None
    ) -> "list[ListedObject]":
        """Objects whose URI starts with prefix ("s3://bucket/run1/"), over all pages, in key
        order, as ``ListObjectsV2`` returns them.

        Args:
            prefix: "s3://bucket" or "s3://bucket/key-prefix".
            delimiter: None lists recursively; "/" lists one level, the sub-folders coming back
                as entries with ``is_prefix`` True.
            limit: stop after this many entries (None: all); ``limit=1`` asks whether a
                prefix holds anything without reading a whole listing.

        Returns:
            A list of ListedObject (uri, key, size, last_modified, etag, is_prefix).

        Raises:
            NoSuchBucket, AccessDenied, ConfigError (not an s3:// URI).
        """
        bucket, key = split_s3(_uri_of(prefix))
        out: "list[ListedObject]" = []

        def cb(user: Any, e: Any) -> int:
            try:
                ent = e.contents
                k = ent.key.decode("utf-8", "surrogateescape")
                out.append(
                    ListedObject(
                        f"s3://{bucket}/{k}",
                        k,
                        int(ent.size),
                        int(ent.last_modified),
                        (ent.etag or b"").decode("utf-8", "replace"),
                        bool(ent.is_prefix),
                    )
                )
                return 1 if limit is not None and len(out) >= limit else 0
            except Exception:
                return 1

        if limit is not None and limit < 1:
            raise ValueError(f"limit must be at least 1: {limit!r}")
        fn = _capi.LIST_FN(cb)
        with self.call() as h:
            self._lib.check(
                self._lib.s3d_list_objects(h, enc(bucket), enc(key), enc(delimiter), fn, None)
            )
        return out

    def delete(self, uris: PathLike | Iterable[PathLike]) -> None:
        """Deletes objects (DeleteObjects, 1000 keys per request). Missing keys are not an
        error, as on S3.

        Args:
            uris: one "s3://bucket/key" URI or an iterable of them.

        Raises:
            InvalidArgument: a URI names a bucket, not an object.
            AccessDenied and the like, naming the first key the server refused; ConfigError for
            a URI that is not s3://.
        """
        if isinstance(uris, (str, os.PathLike)):
            uris = [uris]
        by_bucket: "dict[str, list[str]]" = {}
        for u in uris:
            b, k = split_s3(_uri_of(u))
            if not k:
                raise errors.InvalidArgument(
                    errors.S3D_EINVAL, f"delete: {u} names a bucket, not an object"
                )
            by_bucket.setdefault(b, []).append(k)
        for b, keys in by_bucket.items():
            arr = (ctypes.c_char_p * len(keys))(*[enc(k) for k in keys])
            with self.call() as h:
                self._lib.check(self._lib.s3d_delete_objects(h, enc(b), arr, len(keys)))

    # ---- small S3 operations, used by the file-like objects, DCP and tests -------------------
    def head(self, bucket: PathLike, key: "str | None" = None) -> _capi.ObjectInfo:
        """HEAD of one object: ``head("s3://bucket/key")``, as list() and delete() take a
        URI, or ``head(bucket, key)``.

        Args:
            bucket: the object's "s3://bucket/key" URI when key is None, else the bucket name.
            key: the key in bucket (None: bucket is a URI).

        Returns:
            Its ObjectInfo (size, last_modified, etag, content_type, checksum_crc32c).

        Raises:
            NoSuchKey, NoSuchBucket, AccessDenied, TransferError; InvalidArgument: the URI
            names a bucket, not an object; ConfigError: not an s3:// URI.
        """
        if key is None:
            uri = _uri_of(bucket)
            bucket, key = split_s3(uri)
            if not key:
                raise errors.InvalidArgument(
                    errors.S3D_EINVAL, f"head: {uri} names a bucket, not an object"
                )
        elif not isinstance(bucket, str):
            raise TypeError(f"head(bucket, key): bucket must be a str: {bucket!r}")
        info = _capi.ObjectInfo()
        with self.call() as h:
            self._lib.check(self._lib.s3d_head_object(h, enc(bucket), enc(key), ctypes.byref(info)))
        return info

    def create_bucket(self, bucket: str) -> None:
        """Creates a bucket.

        Args:
            bucket: its name.

        Raises:
            BucketAlreadyExists, AccessDenied, TransferError.
        """
        with self.call() as h:
            self._lib.check(self._lib.s3d_create_bucket(h, enc(bucket)))

    def delete_bucket(self, bucket: str) -> None:
        """Deletes an empty bucket.

        Args:
            bucket: its name.

        Raises:
            NoSuchBucket, AccessDenied; InvalidArgument (a ValueError): the bucket is not
            empty (S3's BucketNotEmpty).
        """
        with self.call() as h:
            self._lib.check(self._lib.s3d_delete_bucket(h, enc(bucket)))

    def delete_object(self, bucket: str, key: str) -> None:
        """Deletes one object; a missing key is not an error, as on S3.

        Args:
            bucket, key: the object.

        Raises:
            NoSuchBucket, AccessDenied, TransferError.
        """
        with self.call() as h:
            self._lib.check(self._lib.s3d_delete_object(h, enc(bucket), enc(key)))

    def upload_bytes(self, bucket: str, key: str, data: Buffer) -> None:
        """Uploads a bytes-like object as one object (multipart when large).

        Args:
            bucket, key: the object to write.
            data: any bytes-like object, read in place (a read-only buffer other than bytes
                is copied first when numpy is absent).

        Raises:
            NoSuchBucket, AccessDenied, TransferError.
        """
        ptr, n, keep = buffer_pointer(data)
        with self.call() as h:
            self._lib.check(
                self._lib.s3d_upload_from_buffer(h, enc(bucket), enc(key), ptr, n, None)
            )
        del keep

    def upload_file(self, bucket: str, key: str, path: PathLike) -> None:
        """Uploads a local file as one object (multipart when large, parts read in parallel).

        Args:
            bucket, key: the object to write; it appears only when complete.
            path: the local file (a path named "-" is the file of that name, not stdin).

        Raises:
            NoSuchFile (the file), NoSuchBucket, AccessDenied, TransferError.
        """
        with self.call() as h:
            self._lib.check(
                self._lib.s3d_upload_from_file(h, enc(bucket), enc(key), enc(_local(path)), None)
            )

    def download_file(self, bucket: str, key: str, path: PathLike) -> None:
        """Downloads an object into a local file with parallel ranged GETs; the file appears at
        its name only when complete (written under a temporary name, then renamed).

        Args:
            bucket, key: the object.
            path: the local file (a path named "-" is the file of that name, not stdout).

        Raises:
            NoSuchKey, NoSuchBucket, AccessDenied, TransferError; NoSuchFile (the folder).
        """
        with self.call() as h:
            self._lib.check(
                self._lib.s3d_download_to_file(h, enc(bucket), enc(key), enc(_local(path)), None)
            )

    def copy_object(self, src_bucket: str, src_key: str, dst_bucket: str, dst_key: str) -> None:
        """Copies an object (s3d_copy_object): from the multipart threshold on the server
        copies it (UploadPartCopy), proved by the source's MD5 ETag; else, or where the server
        cannot, the bytes stream through this client (at most concurrency x part_size of them
        in memory, checked against the source's CRC32C when it has one). The copy appears only
        when complete and proved.

        Args:
            src_bucket, src_key: the object to copy.
            dst_bucket, dst_key: where the copy goes (replaced if it exists).

        Raises:
            NoSuchKey, NoSuchBucket, AccessDenied, ChecksumMismatch, TransferError.
        """
        with self.call() as h:
            self._lib.check(
                self._lib.s3d_copy_object(
                    h, enc(src_bucket), enc(src_key), enc(dst_bucket), enc(dst_key), None
                )
            )

    def download_into(
        self,
        bucket: str,
        key: str,
        offset: int,
        dst: Buffer,
        length: int | None = None,
        if_match: str | None = None,
    ) -> int:
        """Downloads a byte range of an object into a buffer.

        Args:
            bucket, key: the object.
            offset: the first byte.
            dst: a writable bytes-like object.
            length: bytes to read; None reads to the end, which must fit in dst.
            if_match: the ETag the object must still have.

        Returns:
            The number of bytes written into dst.

        Raises:
            NoSuchKey, NoSuchBucket, AccessDenied; TransferError (S3D_ECHANGED when the ETag
            differs from if_match); TypeError when dst is read-only.
        """
        ptr, cap, keep = buffer_pointer(dst, writable=True)
        n = ctypes.c_uint64()
        want = (1 << 64) - 1 if length is None else length
        o: Any = None
        if if_match:
            o = _capi.TransferOptions()
            o.struct_size = ctypes.sizeof(o)
            o.if_match = enc(if_match)
            o = ctypes.byref(o)
        with self.call() as h:
            self._lib.check(
                self._lib.s3d_download_to_buffer(
                    h, enc(bucket), enc(key), offset, want, ptr, cap, ctypes.byref(n), o
                )
            )
        del keep
        got: int = n.value
        return got

    def download_bytes(self, bucket: str, key: str) -> bytes:
        """The whole object, read as one version (the ETag from its HEAD).

        Args:
            bucket, key: the object.

        Returns:
            Its bytes.

        Raises:
            NoSuchKey, NoSuchBucket, AccessDenied, TransferError.
        """
        info = self.head(bucket, key)
        size: int = info.size
        buf = bytearray(size)
        if size:
            got = self.download_into(bucket, key, 0, buf, size, if_match=info.etag.decode())
            if got != size:
                raise errors.TransferError(
                    errors._CODES["EPROTO"],
                    f"s3://{bucket}/{key}: got {got} bytes, expected {size}",
                )
        return bytes(buf)


class ListedObject(NamedTuple):
    """One entry of Client.list."""

    uri: str
    key: str
    size: int
    last_modified: int  # seconds since the epoch, 0 if unknown
    etag: str
    is_prefix: bool  # a "folder" (CommonPrefixes) when listing with a delimiter


def _local(path: PathLike) -> str:
    """A local path for the C calls that read "-" as stdin or stdout: "-" becomes "./-"."""
    p = os.fspath(path)
    return os.path.join(".", p) if p == "-" else p


def _uri_of(u: PathLike) -> str:
    s = _uri.normalize(u)
    if not s.startswith("s3://"):
        raise errors.ConfigError(errors._CODES["EURI"], f"{s!r}: not an s3:// URI")
    return s


def buffer_pointer(data: Buffer, writable: bool = False) -> tuple[int | None, int, object]:
    """(address, length, keep-alive) of a bytes-like object without copying it. Read-only
    buffers other than bytes need numpy (present with torch); otherwise they are copied."""
    if isinstance(data, bytes) and not writable:
        # c_char_p points into the bytes object itself.
        p = ctypes.cast(ctypes.c_char_p(data), ctypes.c_void_p)
        return p.value, len(data), data
    mv = memoryview(data).cast("B")
    n = mv.nbytes
    if n == 0:
        return None, 0, mv
    if not mv.readonly:
        arr = (ctypes.c_char * n).from_buffer(mv)
        return ctypes.addressof(arr), n, (arr, mv)
    if writable:
        raise TypeError("destination buffer is read-only")
    try:
        import numpy as np

        a = np.frombuffer(mv, dtype=np.uint8)
        return a.ctypes.data, n, (a, mv)
    except ImportError:
        b = mv.tobytes()
        return buffer_pointer(b)


_default: Client | None = None
_default_lock = threading.Lock()
# Taken while a forked child makes its own C client for a Client of the parent's.
_fork_lock = threading.Lock()


def default_client() -> Client:
    """The process's default client, created on first use and again after fork().

    Returns:
        The Client that calls without ``client=`` use.

    Raises:
        ConfigError: the default configuration cannot be used (see Client).
    """
    global _default
    c = _default
    if c is not None and c.is_open:
        return c
    with _default_lock:
        c = _default
        if c is None or not c.is_open:
            _default = c = Client()
        return c


def resolve(client: Client | None) -> Client:
    return client if client is not None else default_client()


def _after_fork_in_child() -> None:
    # Drop the parent's default client without freeing it: its connections belong to the
    # parent. Its __del__ sees the pid mismatch and does not call s3d_client_free.
    global _default, _default_lock, _fork_lock
    _default = None
    _default_lock = threading.Lock()
    _fork_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
