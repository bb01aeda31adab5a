"""What a user may pass as a location, turned into what the C library takes.

- ``s3://bucket/key``: as is (the C library parses it).
- a local path (str or os.PathLike); ``file:///abs/path`` (or ``file://localhost/...``) is the
  local path /abs/path.
- anything else with a scheme (``https://``, ``gs://``, ``s3:/b/k`` with one slash) is an error,
  never a local file name.
- a folder (``s3://bucket/model/`` with its slash, or a local directory) holds a model as
  Hugging Face writes it: load reads ``model.safetensors`` there, else
  ``model.safetensors.index.json``; save writes ``model.safetensors`` (or the index, with
  shard_size); as the base of an incremental save, the model file found there as for load.
"""

from __future__ import annotations

import ctypes
import os
import re
import urllib.parse
from typing import Any, Optional, Protocol, Union

from . import _capi, errors
from ._capi import enc


class Client(Protocol):
    """What the URI helpers need of a client.Client (declared here, not imported: client
    imports this module)."""

    def head(self, bucket: str, key: "str | None" = None) -> Any: ...

    def list(
        self, prefix: str, *, delimiter: "str | None" = None, limit: "int | None" = None
    ) -> Any: ...


PathLike = Union[str, "os.PathLike[str]"]

WEIGHTS_NAME = "model.safetensors"
INDEX_NAME = "model.safetensors.index.json"

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")


def _bad(uri: str, why: str) -> errors.ConfigError:
    return errors.ConfigError(errors._CODES["EURI"], f"{uri!r}: {why}")


def _not_a_location(uri: object) -> TypeError:
    """The TypeError for an object that is no location: a file object (what torch.load and
    safetensors' load(bytes) take) or anything else os.fspath refuses. The C library reads
    from a location only (s3d_reader_open takes a URI), so the message says what to pass."""
    what = type(uri).__name__
    msg = (
        f"s3direct takes a location (an s3:// URI, a local path or file:// URI, as a str or "
        f"os.PathLike); got {what}"
    )
    if callable(getattr(uri, "read", None)) or callable(getattr(uri, "write", None)):
        name = getattr(uri, "name", None)
        if isinstance(name, str) and os.path.isfile(name):
            msg += f": pass the file's path, {name!r}"
        msg += (
            ". For a file object: torch.load(f) / torch.save(obj, f), or "
            "safetensors.torch.load(f.read()) / f.write(safetensors.torch.save(tensors))"
        )
    return TypeError(msg)


def normalize(uri: PathLike) -> str:
    """An s3:// URI or a local path; ConfigError (EURI) for a location s3direct cannot use,
    TypeError for an object that is no location (a file object)."""
    if not isinstance(uri, (str, bytes, os.PathLike)):
        raise _not_a_location(uri)
    u = os.fspath(uri)
    if not isinstance(u, str):
        raise errors.InvalidArgument(
            errors.S3D_EINVAL, f"a location must be a str or os.PathLike of str: {u!r}"
        )
    if u.startswith("s3://"):
        return u
    m = _SCHEME.match(u)
    if m is None or (len(m.group(1)) == 1 and os.name == "nt"):
        return u  # a local path (a drive letter on Windows)
    scheme = m.group(1).lower()
    if scheme == "file":
        p = urllib.parse.urlparse(u)
        if p.netloc not in ("", "localhost"):
            raise _bad(u, f"file:// URIs name a local path; host {p.netloc!r} is not local")
        return urllib.parse.unquote(p.path)
    if scheme in ("s3", "s3a", "s3n"):
        rest = u[m.end() :].lstrip("/")
        raise _bad(u, f"not an S3 URI; write s3://{rest}")
    raise _bad(
        u,
        f"{scheme}:// is not supported; s3direct takes s3://bucket/key URIs and "
        f"local paths (set endpoint_url on the Client for another S3 server)",
    )


def is_folder(uri: str) -> bool:
    if uri.startswith("s3://"):
        return uri.endswith("/")
    return uri.endswith(os.sep) or os.path.isdir(uri)


def _join(folder: str, name: str) -> str:
    if folder.startswith("s3://"):
        return folder + name
    return os.path.join(folder, name)


def for_load(uri: PathLike, client: "Client") -> str:
    """normalize(), and a folder resolved to the model file in it (NoSuchKey when neither
    model.safetensors nor model.safetensors.index.json is there)."""
    u = normalize(uri)
    if not is_folder(u):
        return u
    found = _model_in(u, client)
    if found is not None:
        return found
    cls = errors.NoSuchKey if u.startswith("s3://") else errors.NoSuchFile
    raise cls(
        errors._CODES["ENOSUCHKEY"] if u.startswith("s3://") else errors._CODES["ENOENT"],
        f"{u}: the folder has neither {WEIGHTS_NAME} nor {INDEX_NAME}",
    )


def folder_for_missing(uri: str, client: "Client") -> Optional[str]:
    """For an S3 key that does not exist: the model file in the folder of that name
    (uri + "/"), if the folder holds one; else None. Raises NoSuchKey naming the folder when
    the prefix holds objects but no model file, so the error says what is there."""
    if not uri.startswith("s3://") or uri.endswith("/"):
        return None
    folder = uri + "/"
    found = _model_in(folder, client)
    if found is not None:
        return found
    try:
        some = client.list(folder, delimiter="/")
    except errors.S3DirectError:
        some = []
    if some:
        raise errors.NoSuchKey(
            errors._CODES["ENOSUCHKEY"],
            f"{uri}: no such object, but {folder} is a folder, and it has neither "
            f"{WEIGHTS_NAME} nor {INDEX_NAME}; name the file in it",
        )
    return None


def for_save(uri: PathLike, sharded: bool) -> str:
    u = normalize(uri)
    if is_folder(u):
        return _join(u, INDEX_NAME if sharded else WEIGHTS_NAME)
    return u


def for_base(uri: PathLike, client: "Client") -> str:
    """The base of an incremental save: normalize(), and a folder resolved as for_load()
    resolves it. A folder holding neither model file (or that cannot be looked into) gives
    its model.safetensors, which the library cannot open: a missing base is never an error,
    the library then saves everything."""
    u = normalize(uri)
    if not is_folder(u):
        return u
    try:
        found = _model_in(u, client)
    except errors.S3DirectError:  # no such bucket, access denied: no base either
        found = None
    return found or _join(u, WEIGHTS_NAME)


def _model_in(folder: str, client: "Client") -> Optional[str]:
    """The folder's model.safetensors, else its model.safetensors.index.json, else None."""
    for name in (WEIGHTS_NAME, INDEX_NAME):
        cand = _join(folder, name)
        if _exists(cand, client):
            return cand
    return None


def _exists(uri: str, client: "Client") -> bool:
    if not uri.startswith("s3://"):
        return os.path.isfile(uri)
    bucket, key = split_s3(uri)
    try:
        client.head(bucket, key)
        return True
    except errors.NoSuchKey:
        return False


def split_s3(uri: str) -> tuple[str, str]:
    """(bucket, key) of an s3:// URI, parsed by the C library (s3d_uri_parse)."""
    lib = _capi.lib()
    b = ctypes.create_string_buffer(256)
    k = ctypes.create_string_buffer(4096)
    lib.check(lib.s3d_uri_parse(enc(uri), b, len(b), k, len(k)))
    return b.value.decode("utf-8"), k.value.decode("utf-8")
