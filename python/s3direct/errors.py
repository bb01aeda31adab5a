"""Exceptions raised by s3direct, one class per family of S3D_E* codes (include/s3direct/errors.h).

Every exception from the C library is an S3DirectError carrying the detail the library recorded:
``code`` (the negative S3D_E* value), ``name`` ("S3D_ENOSUCHKEY"), ``message`` (one complete
line), ``http_status`` (0 when no HTTP response was involved), ``s3_code`` (the S3 <Code>),
``s3_message``, ``request_id``, ``operation``, ``bucket`` and ``key`` (empty strings when
unknown).

Each class also derives from the builtin exception users already catch, so
``except OSError`` (and its FileNotFoundError / PermissionError / TimeoutError /
FileExistsError) catches what the storage or the network did, ``except ValueError`` what was
wrong with the arguments, the configuration or the data, as for ``open()``, ``json`` and
``safetensors`` callers.

Hierarchy::

    S3DirectError                                                       builtin base
    +-- NoSuchKey            object does not exist (S3D_ENOSUCHKEY)     also FileNotFoundError
    |   +-- NoSuchFile       local file or folder does not exist (S3D_ENOENT)
    +-- NoSuchBucket                                                    also FileNotFoundError
    +-- AccessDenied         S3D_EACCESS, S3D_EEXPIRED (credentials expired); PermissionError
    |   +-- SignatureDoesNotMatch   wrong secret key (S3D_ESIGNATURE)
    |   +-- InvalidAccessKeyId      unknown key id (S3D_EKEYID)
    +-- ChecksumMismatch     stored CRC32C differs from the bytes read      also OSError
    +-- FormatError          malformed safetensors header/index, truncated   also ValueError
    |                        data, missing tensor
    +-- TransferError        network, TLS, HTTP, server, retries exhausted,  also OSError
    |   |                    local I/O
    |   +-- Timeout          connect/transfer timeout, deadline (S3D_ETIMEDOUT) also TimeoutError
    +-- ConfigError          bad configuration or URI                        also ValueError
    |   +-- NoCredentials    also a configured provider that failed (S3D_ECREDS)
    +-- DeviceError          CUDA / cuFile / no such GPU
    +-- Cancelled
    +-- NotSupported
    |   +-- TorchMissing     the tensor API without PyTorch installed   also ModuleNotFoundError
    +-- BucketAlreadyExists                                             also FileExistsError
    +-- InvalidArgument                                                 also ValueError
    +-- StateMismatch        load_into: target and checkpoint disagree   also ValueError
    +-- PickleRefused        a pickled leaf without allow_pickle=True    also ValueError
"""

from __future__ import annotations

from typing import Any, Iterable

# Values from the S3D_ERRNO_MAP in errors.h (ABI: append only); tests/py/test_binding.py walks
# every code the library names and checks it against this table and _BY_CODE.
_CODES = {
    "EINVAL": -1,
    "ENOMEM": -2,
    "EIO": -3,
    "ENOENT": -4,
    "ECANCELED": -5,
    "ETOOBIG": -6,
    "EURI": -7,
    "ECONFIG": -8,
    "ENOCREDS": -9,
    "ECONNECT": -10,
    "ETIMEDOUT": -11,
    "ENETWORK": -12,
    "ETLS": -13,
    "EHTTP": -14,
    "ENOSUCHKEY": -15,
    "ENOSUCHBUCKET": -16,
    "EACCESS": -17,
    "ESIGNATURE": -18,
    "EKEYID": -19,
    "ESLOWDOWN": -20,
    "ESERVER": -21,
    "EPROTO": -22,
    "ERETRIES": -23,
    "ECHECKSUM": -24,
    "EBUCKETEXISTS": -25,
    "ENOUPLOAD": -26,
    "ERANGE": -27,
    "ENOTSUP": -28,
    "ENODEVICE": -29,
    "ECUDA": -30,
    "ECUFILE": -31,
    "EFMT_HEADER_SIZE": -40,
    "EFMT_JSON": -41,
    "EFMT_DTYPE": -42,
    "EFMT_SHAPE": -43,
    "EFMT_OFFSETS": -44,
    "EFMT_OVERLAP": -45,
    "EFMT_HOLE": -46,
    "EFMT_SIZE_MISMATCH": -47,
    "EFMT_DUPLICATE": -48,
    "EFMT_UTF8": -49,
    "EFMT_TRUNCATED": -50,
    "EFMT_METADATA": -51,
    "EFMT_INDEX": -52,
    "EFMT_SHARD_PATH": -53,
    "EFMT_FIELD": -54,
    "ENOTENSOR": -55,
    "EDEST": -56,
    "ECHANGED": -57,
    "EMFILE": -58,
    "ECREDS": -59,
    "EEXPIRED": -60,
}
S3D_EINVAL = _CODES["EINVAL"]
S3D_ENOTSUP = _CODES["ENOTSUP"]
S3D_EDEST = _CODES["EDEST"]
S3D_EFMT_METADATA = _CODES["EFMT_METADATA"]
CODE_NAMES = {v: "S3D_" + n for n, v in _CODES.items()}


class S3DirectError(Exception):
    """Base of every s3direct error. ``str(e)`` is the library's one-line message.

    Args:
        code: the negative S3D_E* value.
        message: one complete line.
        name, http_status, operation, bucket, key, s3_code, s3_message, request_id: the detail
            the library recorded (empty or 0 when unknown); name defaults to the code's name.
    """

    def __init__(
        self,
        code: int,
        message: str,
        *,
        name: str = "",
        http_status: int = 0,
        operation: str = "",
        bucket: str = "",
        key: str = "",
        s3_code: str = "",
        s3_message: str = "",
        request_id: str = "",
    ) -> None:
        super().__init__(message)
        self.code = code
        self.name = name or CODE_NAMES.get(code, "S3D_UNKNOWN")
        self.message = message
        self.http_status = http_status
        self.operation = operation
        self.bucket = bucket
        self.key = key
        self.s3_code = s3_code
        self.s3_message = s3_message
        self.request_id = request_id

    def __reduce__(self) -> tuple[Any, ...]:
        # Picklable, so errors cross process boundaries (DCP, multiprocessing) intact.
        return (_rebuild, (type(self), self.code, self.message, self.__dict__))


def _rebuild(
    cls: type[S3DirectError], code: int, message: str, state: dict[str, Any]
) -> S3DirectError:
    e = cls.__new__(cls)
    Exception.__init__(e, message)
    e.__dict__.update(state)
    return e


class NoSuchKey(S3DirectError, FileNotFoundError):
    """The object does not exist (also a FileNotFoundError)."""


class NoSuchFile(NoSuchKey):
    """A local file or folder does not exist (also a FileNotFoundError)."""


class NoSuchBucket(S3DirectError, FileNotFoundError):
    """The bucket does not exist (also a FileNotFoundError)."""


class AccessDenied(S3DirectError, PermissionError):
    """The server (or the file system) refused access (also a PermissionError)."""


class SignatureDoesNotMatch(AccessDenied):
    """The secret key does not match the key id (S3D_ESIGNATURE)."""


class InvalidAccessKeyId(AccessDenied):
    """The server does not know the access key id (S3D_EKEYID)."""


class ChecksumMismatch(S3DirectError, OSError):
    """The stored CRC32C differs from the bytes read (S3D_ECHECKSUM; also an OSError, as
    gzip's BadGzipFile is)."""


class FormatError(S3DirectError, ValueError):
    """A malformed safetensors header or index, truncated data, or a missing tensor (also a
    ValueError, as json and safetensors raise for bad data)."""


class TransferError(S3DirectError, OSError):
    """Network, TLS, HTTP, server or local I/O failure, or retries exhausted (also an
    OSError)."""


class Timeout(TransferError, TimeoutError):
    """A connect or transfer timeout, or the deadline passed (also a TimeoutError)."""


class ConfigError(S3DirectError, ValueError):
    """Bad configuration or URI (S3D_ECONFIG, S3D_EURI; also a ValueError)."""


class NoCredentials(ConfigError):
    """No credentials found, or a configured provider failed (S3D_ENOCREDS, S3D_ECREDS)."""


class DeviceError(S3DirectError):
    """CUDA or cuFile failed, or there is no such GPU."""


class Cancelled(S3DirectError):
    """The call was cancelled (S3D_ECANCELED)."""


class NotSupported(S3DirectError):
    """The operation is not supported here, or the library is too old (S3D_ENOTSUP)."""


# ImportError's own ``name`` (the missing module) is typed str | None; here it is the code's
# name, as on every S3DirectError ("S3D_ENOTSUP").
class TorchMissing(NotSupported, ModuleNotFoundError):  # type: ignore[misc]
    """The tensor API (save, load, safe_open...) was called where PyTorch is not installed
    (also a ModuleNotFoundError, so ``except ImportError`` catches it).

    Args:
        what: the function or class that needs torch ("s3direct.save").
    """

    def __init__(self, what: str) -> None:
        super().__init__(
            S3D_ENOTSUP,
            f"{what} needs PyTorch, which is not installed here: pip install "
            f"torch (or s3direct[torch]). The CLI, Client, reader() and writer() "
            f"work without it",
        )


class BucketAlreadyExists(S3DirectError, FileExistsError):
    """create_bucket: the bucket exists (S3D_EBUCKETEXISTS; also a FileExistsError)."""


class InvalidArgument(S3DirectError, ValueError):
    """An argument the library refused (also a ValueError)."""


class StateMismatch(S3DirectError, ValueError):
    """load_into: missing / unexpected keys, shape or dtype differences, all listed at once in
    the message; also available as the lists ``missing``, ``unexpected`` and ``mismatched``.

    Args:
        message: the whole report.
        missing, unexpected, mismatched: the names (mismatched: a line per name) it lists.
    """

    def __init__(
        self,
        message: str,
        missing: Iterable[str] = (),
        unexpected: Iterable[str] = (),
        mismatched: Iterable[str] = (),
    ) -> None:
        super().__init__(S3D_EDEST, message)
        self.missing = list(missing)
        self.unexpected = list(unexpected)
        self.mismatched = list(mismatched)


class PickleRefused(S3DirectError, ValueError):
    """A pickled leaf was met without allow_pickle=True (also a ValueError)."""


class InsecureConnectionWarning(UserWarning):
    """A Client was made with verify_ssl=False: TLS certificates are not verified, so anyone
    on the path can read and change the bytes (urllib3's InsecureRequestWarning, the AWS CLI's
    --no-verify-ssl warning)."""


__all__ = [
    "S3DirectError",
    "NoSuchKey",
    "NoSuchFile",
    "NoSuchBucket",
    "AccessDenied",
    "SignatureDoesNotMatch",
    "InvalidAccessKeyId",
    "ChecksumMismatch",
    "FormatError",
    "TransferError",
    "Timeout",
    "ConfigError",
    "NoCredentials",
    "DeviceError",
    "Cancelled",
    "NotSupported",
    "TorchMissing",
    "BucketAlreadyExists",
    "InvalidArgument",
    "StateMismatch",
    "PickleRefused",
    "InsecureConnectionWarning",
]

_c = _CODES
_BY_CODE: dict[int, type[S3DirectError]] = {
    _c["ENOSUCHKEY"]: NoSuchKey,
    _c["ENOENT"]: NoSuchFile,
    _c["ENOSUCHBUCKET"]: NoSuchBucket,
    _c["EACCESS"]: AccessDenied,
    _c["ESIGNATURE"]: SignatureDoesNotMatch,
    _c["EKEYID"]: InvalidAccessKeyId,
    _c["ECHECKSUM"]: ChecksumMismatch,
    _c["ECONNECT"]: TransferError,
    _c["ETIMEDOUT"]: Timeout,
    _c["ENETWORK"]: TransferError,
    _c["ETLS"]: TransferError,
    _c["EHTTP"]: TransferError,
    _c["ESLOWDOWN"]: TransferError,
    _c["ESERVER"]: TransferError,
    _c["EPROTO"]: TransferError,
    _c["ERETRIES"]: TransferError,
    _c["ENOUPLOAD"]: TransferError,
    _c["ERANGE"]: TransferError,
    _c["EIO"]: TransferError,
    _c["ECHANGED"]: TransferError,
    _c["EMFILE"]: TransferError,
    _c["ECONFIG"]: ConfigError,
    _c["EURI"]: ConfigError,
    _c["ENOCREDS"]: NoCredentials,
    _c["ECREDS"]: NoCredentials,
    _c["EEXPIRED"]: AccessDenied,
    _c["ENODEVICE"]: DeviceError,
    _c["ECUDA"]: DeviceError,
    _c["ECUFILE"]: DeviceError,
    _c["ECANCELED"]: Cancelled,
    _c["ENOTSUP"]: NotSupported,
    _c["EBUCKETEXISTS"]: BucketAlreadyExists,
    _c["EINVAL"]: InvalidArgument,
    _c["EDEST"]: InvalidArgument,
    _c["ENOTENSOR"]: FormatError,
    # No family of their own: the base class (tests/py/test_binding.py checks that every C
    # code is listed here or in the EFMT_ range).
    _c["ENOMEM"]: S3DirectError,
    _c["ETOOBIG"]: S3DirectError,
}

# An S3 <Code> refines a generic code (an HTTP error the C side did not classify).
_BY_S3_CODE: dict[str, type[S3DirectError]] = {
    "NoSuchKey": NoSuchKey,
    "NoSuchBucket": NoSuchBucket,
    "AccessDenied": AccessDenied,
    "SignatureDoesNotMatch": SignatureDoesNotMatch,
    "InvalidAccessKeyId": InvalidAccessKeyId,
}


def error_class(code: int, s3_code: str = "") -> type[S3DirectError]:
    """The exception class for a negative S3D_E* code, refined by the S3 <Code> if given."""
    cls = _BY_CODE.get(code)
    if cls is None and -54 <= code <= -40:
        cls = FormatError
    if cls in (None, TransferError, S3DirectError) and s3_code in _BY_S3_CODE:
        cls = _BY_S3_CODE[s3_code]
    return cls or S3DirectError


def make_error(code: int, message: str, **fields: Any) -> S3DirectError:
    """The exception object for a negative S3D_E* code and its detail fields."""
    return error_class(code, fields.get("s3_code", ""))(code, message, **fields)
