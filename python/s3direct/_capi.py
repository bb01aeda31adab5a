"""ctypes declarations of the public C API (include/s3direct/*.h) and the library loader.

Every struct mirrors its C definition field by field, in order; the headers are the contract.
Nothing here moves bytes: it only finds the library, declares signatures and turns a negative
return code into the matching exception (see errors.py).

ctypes releases the GIL around every call into a CDLL, so transfers run without it; progress
callbacks re-acquire it when the C side calls them (on the thread that made the call).
"""

from __future__ import annotations

import ctypes
import os
import threading
from ctypes import (
    CFUNCTYPE,
    POINTER,
    Structure,
    c_char,
    c_char_p,
    c_int,
    c_int32,
    c_int64,
    c_size_t,
    c_uint,
    c_uint32,
    c_uint64,
    c_void_p,
)
from typing import TYPE_CHECKING, Any, NoReturn

from . import _log, errors

# The library version this package was written for (S3D_VERSION_HEX). The loaded library must
# have the same major version and at least this minor version.
EXPECTED_VERSION = 0x000100

# ---- callbacks -------------------------------------------------------------------------------
PROGRESS_FN = CFUNCTYPE(c_int, c_void_p, c_uint64, c_uint64)
LOG_FN = _log.LOG_FN  # defined beside its Python side (_log does not import this module)
READY_FN = CFUNCTYPE(c_int, c_void_p, c_size_t)


class _OutStruct(Structure):
    """An output struct that can grow (version.h): struct_size first, set to the size this
    package knows, so a newer library writes only the fields declared here."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.struct_size = ctypes.sizeof(self)


class ErrorInfo(_OutStruct):
    _fields_ = [
        ("struct_size", c_uint32),
        ("code", c_int),
        ("http_status", c_int),
        ("message", c_char_p),
        ("operation", c_char_p),
        ("bucket", c_char_p),
        ("key", c_char_p),
        ("s3_code", c_char_p),
        ("s3_message", c_char_p),
        ("request_id", c_char_p),
    ]


class ClientOptions(Structure):
    _fields_ = [
        ("struct_size", c_uint32),
        ("endpoint_url", c_char_p),
        ("region", c_char_p),
        ("profile", c_char_p),
        ("access_key_id", c_char_p),
        ("secret_access_key", c_char_p),
        ("session_token", c_char_p),
        ("ca_bundle", c_char_p),
        ("addressing", c_int32),
        ("anonymous", c_int32),
        ("no_verify_ssl", c_int32),
        ("payload_signing", c_int32),
        ("max_concurrency", c_uint32),
        ("part_size", c_uint64),
        ("multipart_threshold", c_uint64),
        ("staging_bytes", c_uint64),
        ("max_attempts", c_uint32),
        ("deadline_ms", c_uint32),
        ("connect_timeout_ms", c_uint32),
        ("low_speed_time_s", c_uint32),
        ("low_speed_limit", c_uint32),
        ("device", c_int32),
        ("default_ca_bundle", c_char_p),
        ("min_concurrency", c_uint32),
        ("target_throughput", c_char_p),
    ]


class ClientConfig(_OutStruct):
    _fields_ = [
        ("struct_size", c_uint32),
        ("endpoint_url", c_char_p),
        ("region", c_char_p),
        ("access_key_id", c_char_p),
        ("credential_source", c_char_p),
        ("addressing", c_int32),
        ("max_concurrency", c_uint32),
        ("part_size", c_uint64),
        ("multipart_threshold", c_uint64),
        ("staging_bytes", c_uint64),
        ("gpu_available", c_int32),
        ("min_concurrency", c_uint32),
        ("concurrency", c_uint32),
        ("target_throughput", c_uint64),
    ]


class ObjectInfo(_OutStruct):
    _fields_ = [
        ("struct_size", c_uint32),
        ("size", c_uint64),
        ("last_modified", c_int64),
        ("etag", c_char * 80),
        ("content_type", c_char * 128),
        ("checksum_crc32c", c_char * 16),
    ]


class ListEntry(Structure):
    """Owned by the library, which sets struct_size to the size it filled."""

    _fields_ = [
        ("struct_size", c_uint32),
        ("key", c_char_p),
        ("size", c_uint64),
        ("last_modified", c_int64),
        ("etag", c_char_p),
        ("is_prefix", c_int32),
    ]


LIST_FN = CFUNCTYPE(c_int, c_void_p, POINTER(ListEntry))


class TransferOptions(Structure):
    _fields_ = [
        ("struct_size", c_uint32),
        ("progress", PROGRESS_FN),
        ("progress_user", c_void_p),
        ("cancel", c_void_p),
        ("max_concurrency", c_uint32),
        ("part_size", c_uint64),
        ("content_type", c_char_p),
        ("if_match", c_char_p),
    ]


class TensorInfo(_OutStruct):
    _fields_ = [
        ("struct_size", c_uint32),
        ("name", c_char_p),
        ("dtype", c_int32),
        ("ndim", c_int32),
        ("shape", POINTER(c_int64)),
        ("nbytes", c_uint64),
        ("shard", c_uint32),
        ("offset", c_uint64),
        ("has_crc32c", c_int32),
        ("crc32c", c_uint32),
    ]


class TensorDest(Structure):
    _fields_ = [
        ("index", c_size_t),
        ("ptr", c_void_p),
        ("device", c_int32),
        ("capacity", c_uint64),
        ("src_offset", c_uint64),
        ("length", c_uint64),
    ]


class ReadStats(_OutStruct):
    """What a read did (s3d_read_options.stats): tensor bytes of local files by path."""

    _fields_ = [
        ("struct_size", c_uint32),
        ("bytes_cufile", c_uint64),
        ("bytes_direct", c_uint64),
        ("bytes_buffered", c_uint64),
    ]


class ReadOptions(Structure):
    _fields_ = [
        ("struct_size", c_uint32),
        ("progress", PROGRESS_FN),
        ("progress_user", c_void_p),
        ("cancel", c_void_p),
        ("no_verify", c_int32),
        ("file_io", c_int32),
        ("cuda_stream", c_uint64),
        ("cuda_streams", POINTER(c_uint64)),
        ("n_cuda_streams", c_uint32),
        ("on_ready", READY_FN),
        ("ready_user", c_void_p),
        ("stats", POINTER(ReadStats)),
    ]


class TensorSrc(Structure):
    _fields_ = [
        ("name", c_char_p),
        ("dtype", c_int32),
        ("ndim", c_int32),
        ("shape", POINTER(c_int64)),
        ("ptr", c_void_p),
        ("device", c_int32),
        ("nbytes", c_uint64),
    ]


class MetadataEntry(Structure):
    _fields_ = [("key", c_char_p), ("value", c_char_p)]


class WriteStats(_OutStruct):
    """What a save did (s3d_write_options.stats); filled by the library on success."""

    _fields_ = [
        ("struct_size", c_uint32),
        ("bytes_total", c_uint64),
        ("bytes_sent", c_uint64),
        ("bytes_copied", c_uint64),
        ("tensors_total", c_uint64),
        ("tensors_reused", c_uint64),
        ("parts_copied", c_uint32),
        ("copies_refused", c_uint32),
        ("base_used", c_int32),
        ("bytes_cufile", c_uint64),
        ("bytes_direct", c_uint64),
        ("bytes_buffered", c_uint64),
    ]


class WriteOptions(Structure):
    _fields_ = [
        ("struct_size", c_uint32),
        ("progress", PROGRESS_FN),
        ("progress_user", c_void_p),
        ("cancel", c_void_p),
        ("max_shard_size", c_uint64),
        ("no_checksum", c_int32),
        ("file_io", c_int32),
        ("cuda_stream", c_uint64),
        ("cuda_streams", POINTER(c_uint64)),
        ("n_cuda_streams", c_uint32),
        ("base", c_char_p),
        ("stats", POINTER(WriteStats)),
        ("cuda_events", POINTER(c_uint64)),
        ("n_cuda_events", c_uint32),
    ]


# enum s3d_dtype (checkpoint.h); values are ABI.
DTYPE_NAMES = [
    "INVALID",
    "BOOL",
    "U8",
    "I8",
    "I16",
    "U16",
    "F16",
    "BF16",
    "I32",
    "U32",
    "F32",
    "F64",
    "I64",
    "U64",
    "C64",
    "F8_E4M3",
    "F8_E5M2",
    "F8_E8M0",
    "F8_E4M3FNUZ",
    "F8_E5M2FNUZ",
    "F4",
    "F6_E2M3",
    "F6_E3M2",
]
DTYPE = {name: i for i, name in enumerate(DTYPE_NAMES)}

_P = c_void_p  # opaque handles
_S = c_char_p
_SIGNATURES = {
    "s3d_log_set_callback": (None, [LOG_FN, c_void_p, c_int]),
    "s3d_log_env_level": (c_int, []),
    # version.h
    "s3d_version": (c_uint, []),
    "s3d_version_string": (_S, []),
    # errors.h
    "s3d_err_name": (_S, [c_int]),
    "s3d_strerror": (_S, [c_int]),
    "s3d_last_error": (None, [POINTER(ErrorInfo)]),
    "s3d_last_error_message": (_S, []),
    # client.h
    "s3d_client_new": (c_int, [POINTER(ClientOptions), POINTER(_P)]),
    "s3d_client_free": (None, [_P]),
    "s3d_client_get_config": (c_int, [_P, POINTER(ClientConfig)]),
    "s3d_cancel_new": (c_int, [POINTER(_P)]),
    "s3d_cancel_request": (None, [_P]),
    "s3d_cancel_requested": (c_int, [_P]),
    "s3d_cancel_free": (None, [_P]),
    # object.h
    "s3d_uri_parse": (c_int, [_S, c_char_p, c_size_t, c_char_p, c_size_t]),
    "s3d_head_object": (c_int, [_P, _S, _S, POINTER(ObjectInfo)]),
    "s3d_create_bucket": (c_int, [_P, _S]),
    "s3d_delete_bucket": (c_int, [_P, _S]),
    "s3d_delete_object": (c_int, [_P, _S, _S]),
    "s3d_delete_objects": (c_int, [_P, _S, POINTER(c_char_p), c_size_t]),
    "s3d_list_objects": (c_int, [_P, _S, _S, _S, LIST_FN, c_void_p]),
    "s3d_abort_multipart_upload": (c_int, [_P, _S, _S, _S]),
    "s3d_presign": (c_int, [_P, _S, _S, _S, c_uint32, c_char_p, c_size_t]),
    # transfer.h
    "s3d_download_to_buffer": (
        c_int,
        [
            _P,
            _S,
            _S,
            c_uint64,
            c_uint64,
            c_void_p,
            c_uint64,
            POINTER(c_uint64),
            POINTER(TransferOptions),
        ],
    ),
    "s3d_download_to_file": (c_int, [_P, _S, _S, _S, POINTER(TransferOptions)]),
    "s3d_upload_from_buffer": (c_int, [_P, _S, _S, c_void_p, c_uint64, POINTER(TransferOptions)]),
    "s3d_upload_from_file": (c_int, [_P, _S, _S, _S, POINTER(TransferOptions)]),
    "s3d_copy_object": (c_int, [_P, _S, _S, _S, _S, POINTER(TransferOptions)]),
    "s3d_upload_stream_new": (c_int, [_P, _S, _S, POINTER(TransferOptions), POINTER(_P)]),
    "s3d_upload_stream_write": (c_int, [_P, c_void_p, c_size_t]),
    "s3d_upload_stream_finish": (c_int, [_P]),
    "s3d_upload_stream_free": (None, [_P]),
    "s3d_file_stream_new": (c_int, [_S, POINTER(_P)]),
    "s3d_file_stream_fd": (c_int, [_P]),
    "s3d_file_stream_finish": (c_int, [_P]),
    "s3d_file_stream_free": (None, [_P]),
    # checkpoint.h
    "s3d_dtype_name": (_S, [c_int]),
    "s3d_dtype_from_name": (c_int, [_S, c_size_t]),
    "s3d_dtype_bits": (c_int, [c_int]),
    "s3d_dtype_nbytes": (c_int, [c_int, POINTER(c_int64), c_int32, POINTER(c_uint64)]),
    "s3d_reader_open": (c_int, [_P, _S, POINTER(_P)]),
    "s3d_reader_close": (None, [_P]),
    "s3d_reader_num_tensors": (c_size_t, [_P]),
    "s3d_reader_tensor": (c_int, [_P, c_size_t, POINTER(TensorInfo)]),
    "s3d_reader_find": (c_int, [_P, _S, POINTER(c_size_t)]),
    "s3d_reader_num_metadata": (c_size_t, [_P]),
    "s3d_reader_metadata": (c_int, [_P, c_size_t, POINTER(c_char_p), POINTER(c_char_p)]),
    "s3d_reader_metadata_get": (_S, [_P, _S]),
    "s3d_reader_num_shards": (c_size_t, [_P]),
    "s3d_reader_shard": (
        c_int,
        [_P, c_size_t, POINTER(c_char_p), POINTER(c_uint64), POINTER(c_uint64)],
    ),
    "s3d_reader_shard_version": (_S, [_P, c_size_t]),
    "s3d_reader_read": (c_int, [_P, POINTER(TensorDest), c_size_t, POINTER(ReadOptions)]),
    "s3d_checkpoint_write": (
        c_int,
        [
            _P,
            _S,
            POINTER(TensorSrc),
            c_size_t,
            POINTER(MetadataEntry),
            c_size_t,
            POINTER(WriteOptions),
        ],
    ),
}


class _Missing:
    """Stands in for a symbol the loaded library does not export (an older build)."""

    def __init__(self, name: str, path: str) -> None:
        self._name, self._path = name, path

    def __call__(self, *args: Any) -> NoReturn:
        raise errors.NotSupported(
            errors.S3D_ENOTSUP,
            f"{self._name} is not exported by {self._path} (library too old or incomplete)",
        )


class Lib:
    """The loaded library with every known function declared as an attribute."""

    if TYPE_CHECKING:
        # The s3d_* functions are set from _SIGNATURES in __init__; ctypes calls are untyped.
        def __getattr__(self, name: str) -> Any: ...

    def __init__(self, path: str) -> None:
        self.path = path
        self.dll = ctypes.CDLL(path)
        for name, (restype, argtypes) in _SIGNATURES.items():
            try:
                fn = getattr(self.dll, name)
            except AttributeError:
                setattr(self, name, _Missing(name, path))
                continue
            fn.restype = restype
            fn.argtypes = argtypes
            setattr(self, name, fn)
        ver: int = self.s3d_version()
        if (ver >> 16) != (EXPECTED_VERSION >> 16) or ver < EXPECTED_VERSION:
            raise ImportError(
                f"s3direct: {path} is version {_fmt_version(ver)}, this package needs "
                f"{_fmt_version(EXPECTED_VERSION)} (same major, at least this minor)"
            )
        self.version = ver

    # -- errors --------------------------------------------------------------------------------
    def last_error(self, rc: int) -> errors.S3DirectError:
        """The exception for return code rc, with the calling thread's error detail. Must be
        called on the thread that made the failing call, before any other s3direct call."""
        info = ErrorInfo()
        self.s3d_last_error(ctypes.byref(info))
        code = info.code if info.code < 0 else rc
        if code != rc:
            # The thread's detail belongs to an older failure; report the code we got.
            info = ErrorInfo()
            code = rc
        name = _dec(self.s3d_err_name(rc))
        msg = _dec(info.message) or _dec(self.s3d_strerror(rc))
        return errors.make_error(
            code,
            msg,
            name=name,
            http_status=info.http_status,
            operation=_dec(info.operation),
            bucket=_dec(info.bucket),
            key=_dec(info.key),
            s3_code=_dec(info.s3_code),
            s3_message=_dec(info.s3_message),
            request_id=_dec(info.request_id),
        )

    def check(self, rc: int) -> int:
        """Raises the matching exception when rc is negative; returns rc otherwise."""
        if rc < 0:
            raise self.last_error(rc)
        return rc


def set_unsigned(o: Structure, name: str, value: int | None) -> None:
    """o.name = value for an unsigned integer field (None: 0, the library's default). A value
    ctypes would wrap (negative, or over the field's width) is refused here, naming the
    argument, instead of reaching the library as another number."""
    v = 0 if value is None else value
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"{name} must be an integer: {value!r}")
    ctype = dict((f[0], f[1]) for f in o._fields_)[name]
    top = (1 << (8 * ctypes.sizeof(ctype))) - 1
    if not 0 <= v <= top:
        raise errors.InvalidArgument(
            errors.S3D_EINVAL, f"{name} must be from 0 to {top} (None: the default): {v}"
        )
    setattr(o, name, v)


def _fmt_version(v: int) -> str:
    return f"{(v >> 16) & 0xFF}.{(v >> 8) & 0xFF}.{v & 0xFF}"


def _dec(b: bytes | None) -> str:
    if not b:
        return ""
    return b.decode("utf-8", "replace")


def enc(s: str | bytes | os.PathLike[str] | os.PathLike[bytes] | None) -> bytes | None:
    """str / PathLike / bytes / None -> NUL-terminated bytes for a const char* argument."""
    if s is None:
        return None
    if isinstance(s, bytes):
        return s
    s = os.fspath(s)
    if isinstance(s, bytes):
        return s
    if "\0" in s:
        raise ValueError(f"string contains a NUL character: {s!r}")
    return s.encode("utf-8")


def candidate_paths() -> list[str]:
    """Where the library is looked for, in order."""
    here = os.path.dirname(os.path.abspath(__file__))
    out: list[str] = []
    env = os.environ.get("S3D_LIBRARY")
    if env:
        out.append(env)
    # The package's _lib/ (a wheel); for `pip install -e .` every entry of the package's
    # __path__, where scikit-build-core's editable finder lists the installed _lib/ beside
    # this source folder.
    from . import __path__ as pkg_path

    for d in [here] + [os.path.abspath(p) for p in pkg_path if os.path.abspath(p) != here]:
        out.append(os.path.join(d, "_lib", "libs3direct.so"))
    bdir = os.environ.get("S3D_BUILD_DIR")
    if bdir:
        out.append(os.path.join(bdir, "libs3direct.so"))
    repo = os.path.dirname(os.path.dirname(here))
    out.append(os.path.join(repo, "build", "libs3direct.so"))
    return out


_lib: Lib | None = None
_lib_lock = threading.Lock()


def lib() -> Lib:
    """The library, loaded on first use. S3D_LIBRARY (an explicit path) must exist; the other
    candidates are tried in order."""
    global _lib
    if _lib is not None:
        _log.sync(_lib)
        return _lib
    with _lib_lock:
        if _lib is not None:
            return _lib
        tried: list[str] = []
        for i, p in enumerate(candidate_paths()):
            explicit = i == 0 and bool(os.environ.get("S3D_LIBRARY"))
            if not os.path.exists(p):
                if explicit:
                    raise ImportError(f"s3direct: S3D_LIBRARY={p} does not exist")
                tried.append(p)
                continue
            _lib = Lib(p)
            _log.sync(_lib)
            return _lib
        raise ImportError(
            "s3direct: libs3direct.so not found; build it (cmake --build BUILD --target "
            "s3direct) and set S3D_LIBRARY or S3D_BUILD_DIR. Tried: " + ", ".join(tried)
        )
