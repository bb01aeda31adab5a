"""s3direct.fs: an fsspec filesystem whose bytes are moved by the C library.

    import fsspec, s3direct.fs
    fs = fsspec.filesystem("s3direct", endpoint_url="http://127.0.0.1:8000")
    with fs.open("bucket/data.bin", "wb") as f:     # a multipart upload, visible on close
        f.write(payload)
    fs.ls("bucket/run1/"); fs.cat_file("bucket/data.bin", start=0, end=1024)
    s3direct.fs.register_s3()                       # s3:// URLs now open through s3direct too

Protocol ``s3direct://`` (registered by the ``fsspec.specs`` entry point of an installed
package, and by importing this module); ``register_s3()`` makes ``s3://`` (and ``s3a://``) use
it as well, replacing s3fs for the process. Paths are ``bucket/key``, with or without a
protocol; folders are key prefixes ending in "/", as s3fs shows them.

Nothing here moves bytes itself: reads are the ranged GETs of s3direct.reader's S3Reader (one
object version, pinned by its ETag at open), writes go to s3direct.writer's S3Writer (the C
upload stream: parts uploaded in the background, the object appears on close), and
get_file/put_file/cp_file/cat_file/pipe_file call the Client's whole-object transfers.
fsspec is imported when this module is: ``import s3direct`` never imports it.
"""

from __future__ import annotations

import datetime
import errno
import importlib
import inspect
import os
from typing import Any, Mapping, cast

from . import errors, streams
from .client import Client, ListedObject, resolve

# Imported by name, as lightning.py imports Lightning: fsspec ships no type information, and
# mypy then sees the same module with and without it installed.
_spec: Any = importlib.import_module("fsspec.spec")
_callbacks: Any = importlib.import_module("fsspec.callbacks")
_registry: Any = importlib.import_module("fsspec.registry")

_CLIENT_ARGS = frozenset(p for p in inspect.signature(Client.__init__).parameters if p != "self")
# fsspec's own storage options (listings cache), handed to AbstractFileSystem.
_FSSPEC_ARGS = frozenset({"use_listings_cache", "listings_expiry_time", "max_paths"})
# s3fs options that need nothing from us at these values (any other value: TypeError).
_S3FS_NEUTRAL = {
    "version_aware": False,
    "requester_pays": False,
    "asynchronous": False,
    "loop": None,
    "session": None,
    "cache_regions": False,
    "default_fill_cache": True,
    "s3_additional_kwargs": None,
}


def _bad_option(name: str, value: object) -> TypeError:
    return TypeError(
        f"S3DirectFileSystem: {name}={value!r} is not supported (s3direct takes "
        f"the s3fs options key, secret, token, anon, endpoint_url, profile, "
        f"client_kwargs, config_kwargs, use_ssl, default_block_size, and every "
        f"s3direct.Client argument)"
    )


def client_options(kw: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Splits storage options into (s3direct.Client arguments, the filesystem's own).

    s3fs's names map to the Client's: key/secret/token -> access_key_id/secret_access_key/
    session_token, anon -> anonymous, client_kwargs' endpoint_url, region_name, verify and
    aws_* keys, config_kwargs' s3.addressing_style, connect_timeout and retries.max_attempts,
    use_ssl=False -> http:// for an endpoint given without a scheme.

    Raises:
        TypeError: an option s3direct cannot honour (it is not silently ignored).
    """
    kw = dict(kw)
    out: dict[str, Any] = {}
    own: dict[str, Any] = {}
    rename = {
        "key": "access_key_id",
        "secret": "secret_access_key",
        "token": "session_token",
        "anon": "anonymous",
        "region_name": "region",
    }
    for k in list(kw):
        if k in _FSSPEC_ARGS or k in ("default_block_size", "default_cache_type"):
            own[k] = kw.pop(k)
        elif k in _S3FS_NEUTRAL:
            v = kw.pop(k)
            if v != _S3FS_NEUTRAL[k] and not (k == "s3_additional_kwargs" and not v):
                raise _bad_option(k, v)
    ck = dict(kw.pop("client_kwargs", None) or {})
    for k, v in ck.items():
        name = {
            "aws_access_key_id": "access_key_id",
            "aws_secret_access_key": "secret_access_key",
            "aws_session_token": "session_token",
            "region_name": "region",
            "endpoint_url": "endpoint_url",
        }.get(k)
        if name is not None:
            out[name] = v
        elif k == "verify":
            if v is False:
                out["verify_ssl"] = False
            elif isinstance(v, (str, os.PathLike)):
                out["ca_bundle"] = v
        elif k == "use_ssl":
            kw.setdefault("use_ssl", v)
        else:
            raise _bad_option(f"client_kwargs[{k!r}]", v)
    cfg = dict(kw.pop("config_kwargs", None) or {})
    for k, v in cfg.items():
        if k == "s3" and isinstance(v, Mapping) and set(v) <= {"addressing_style"}:
            out["addressing"] = v.get("addressing_style")
        elif k == "connect_timeout":
            out["connect_timeout_ms"] = int(float(v) * 1000)
        elif k == "retries" and isinstance(v, Mapping) and set(v) <= {"max_attempts", "mode"}:
            if "max_attempts" in v:
                out["max_attempts"] = int(v["max_attempts"])
        elif k == "region_name":
            out["region"] = v
        else:
            raise _bad_option(f"config_kwargs[{k!r}]", v)
    use_ssl = kw.pop("use_ssl", True)
    for k, v in kw.items():
        name = rename.get(k, k)
        if name not in _CLIENT_ARGS:
            raise _bad_option(k, v)
        out[name] = v
    ep = out.get("endpoint_url")
    if ep and "://" not in ep:
        out["endpoint_url"] = ("https://" if use_ssl else "http://") + ep
    return {k: v for k, v in out.items() if v is not None}, own


class S3DirectFileSystem(_spec.AbstractFileSystem):  # type: ignore[misc]  # Any: fsspec
    """An fsspec filesystem over S3 through s3direct.

    Args:
        client: an s3direct.Client to use (then no other client option may be given).
        endpoint_url, region, profile, and every other s3direct.Client argument: the client
            made for this filesystem; with none, the process's default client (configured
            from the environment and ~/.aws as the AWS CLI is).
        key, secret, token, anon, client_kwargs, config_kwargs, use_ssl: s3fs's names for
            the same (see client_options), so s3fs storage_options keep working.
        default_block_size: bytes per ranged GET of a file opened for reading (default
            8 MiB); open(block_size=) sets it per file.
        default_cache_type: fsspec's cache of a file opened for reading (default "none": the
            reader's own read-ahead buffer of block_size bytes serves small reads).
        use_listings_cache, listings_expiry_time, max_paths: fsspec's listings cache.

    Raises:
        TypeError: an option s3direct cannot honour.
        ValueError, ConfigError: from s3direct.Client.
    """

    protocol: Any = ("s3direct",)
    root_marker = ""
    DEFAULT_BLOCK_SIZE = streams.DEFAULT_READ_AHEAD

    def __init__(self, *args: Any, client: Client | None = None, **kwargs: Any) -> None:
        opts, own = client_options(kwargs)
        if client is not None and opts:
            raise TypeError(
                f"S3DirectFileSystem: give client= or client options "
                f"({', '.join(sorted(opts))}), not both"
            )
        fsspec_opts = {k: v for k, v in own.items() if k in _FSSPEC_ARGS}
        super().__init__(*args, **fsspec_opts)
        self._given = client
        self._client: Client | None = (
            client if client is not None else (Client(**opts) if opts else None)
        )
        self.default_block_size: int = int(own.get("default_block_size") or self.DEFAULT_BLOCK_SIZE)
        self.default_cache_type: str = own.get("default_cache_type") or "none"

    @property
    def client(self) -> Client:
        """The s3direct.Client this filesystem uses."""
        return resolve(self._client)

    # ---- paths --------------------------------------------------------------------------------
    @classmethod
    def _strip_protocol(cls, path: Any) -> Any:
        if isinstance(path, list):
            return [cls._strip_protocol(p) for p in path]
        path = os.fspath(path)
        for proto in ("s3direct", "s3", "s3a"):
            if path.startswith(proto + "://"):
                path = path[len(proto) + 3 :]
                break
            if path.startswith(proto + "::"):
                path = path[len(proto) + 2 :]
                break
        return path.rstrip("/").lstrip("/")

    def unstrip_protocol(self, name: str) -> str:
        """name with this filesystem's protocol ("s3direct://bucket/key")."""
        return f"{self.protocol[0]}://{self._strip_protocol(name)}"

    def split_path(self, path: str) -> tuple[str, str]:
        """("bucket", "key") of a path; the key is "" for a bucket."""
        p = self._strip_protocol(path)
        bucket, _, key = p.partition("/")
        return bucket, key

    @staticmethod
    def _uri(bucket: str, key: str) -> str:
        return f"s3://{bucket}/{key}"

    # ---- info and listings --------------------------------------------------------------------
    @staticmethod
    def _time(t: int) -> datetime.datetime | None:
        return datetime.datetime.fromtimestamp(t, tz=datetime.timezone.utc) if t else None

    def _file_entry(self, bucket: str, o: ListedObject) -> dict[str, Any]:
        return {
            "name": f"{bucket}/{o.key}",
            "size": o.size,
            "type": "file",
            "ETag": o.etag,
            "LastModified": self._time(o.last_modified),
            "StorageClass": "STANDARD",
        }

    @staticmethod
    def _dir_entry(name: str) -> dict[str, Any]:
        return {"name": name, "size": 0, "type": "directory", "StorageClass": "DIRECTORY"}

    def _list(
        self, bucket: str, key: str, *, recursive: bool = False, limit: int | None = None
    ) -> list[ListedObject]:
        prefix = key + "/" if key else ""
        return self.client.list(
            self._uri(bucket, prefix), delimiter=None if recursive else "/", limit=limit
        )

    def _lsdir(self, path: str, refresh: bool = False) -> list[dict[str, Any]]:
        if not refresh and path in self.dircache:
            return cast("list[dict[str, Any]]", self.dircache[path])
        bucket, key = self.split_path(path)
        entries = []
        for o in self._list(bucket, key):
            if o.is_prefix:
                entries.append(self._dir_entry(f"{bucket}/{o.key.rstrip('/')}"))
            elif o.key != (key + "/" if key else ""):  # a folder's own marker object
                entries.append(self._file_entry(bucket, o))
        entries.sort(key=lambda e: e["name"])
        if entries or not key:
            self.dircache[path] = entries
        return entries

    def ls(self, path: str, detail: bool = True, refresh: bool = False, **kwargs: Any) -> list[Any]:
        """One level of a bucket or folder.

        Args:
            path: "bucket", "bucket/folder" (a file lists as itself).
            detail: dicts (name, size, type "file" or "directory", ETag, LastModified) rather
                than names.
            refresh: list again rather than answer from the listings cache.

        Returns:
            The entries, by name.

        Raises:
            FileNotFoundError: no such bucket, and no file or folder at path.
            NotImplementedError: path "" (listing the buckets).
        """
        path = self._strip_protocol(path)
        if not path:
            raise NotImplementedError(
                "S3DirectFileSystem.ls(''): listing buckets is not supported; list a bucket"
            )
        entries = self._lsdir(path, refresh)
        if not entries and "/" in path:
            info = self._head(path)  # a file lists as itself, as on a local filesystem
            if info is None:
                raise FileNotFoundError(
                    errno.ENOENT, "no such file or folder", self.unstrip_protocol(path)
                )
            entries = [info]
        return entries if detail else [e["name"] for e in entries]

    def _head(self, path: str) -> dict[str, Any] | None:
        bucket, key = self.split_path(path)
        try:
            h = self.client.head(bucket, key)
        except errors.NoSuchKey:
            return None
        out = {
            "name": f"{bucket}/{key}",
            "size": int(h.size),
            "type": "file",
            "ETag": h.etag.decode("utf-8", "replace"),
            "LastModified": self._time(int(h.last_modified)),
            "ContentType": h.content_type.decode("utf-8", "replace"),
        }
        crc = h.checksum_crc32c.decode("ascii", "replace")
        if crc:
            out["ChecksumCRC32C"] = crc
        return out

    def info(self, path: str, refresh: bool = False, **kwargs: Any) -> dict[str, Any]:
        """What is at path: a file (HEAD) or a folder (a prefix holding something) or a bucket.

        Args:
            path: "bucket" or "bucket/key".
            refresh: ask the server rather than the listings cache.

        Returns:
            A dict with name, size, type; for files also ETag, LastModified (a UTC datetime),
            ContentType and ChecksumCRC32C when the server keeps one.

        Raises:
            FileNotFoundError: nothing at path (NoSuchKey, NoSuchBucket).
            PermissionError: access denied.
        """
        path = self._strip_protocol(path)
        if not path:
            return self._dir_entry("")
        bucket, key = self.split_path(path)
        if not refresh:
            cached = self._ls_from_cache(path)
            if cached is not None:
                hit = [e for e in cached if e["name"] == path]
                return dict(hit[0]) if hit else self._dir_entry(path)
        if key:
            found = self._head(path)
            if found is not None:
                return found
        # A bucket, or a folder: a prefix holding at least one object.
        if self._list(bucket, key, limit=1):
            return self._dir_entry(path)
        if not key:
            return self._dir_entry(path)  # an empty bucket (NoSuchBucket raised otherwise)
        raise FileNotFoundError(errno.ENOENT, "no such file or folder", self.unstrip_protocol(path))

    def exists(self, path: str, **kwargs: Any) -> bool:
        """Whether a file, folder or bucket is at path (permission errors are raised, not
        answered False)."""
        try:
            self.info(path)
            return True
        except FileNotFoundError:
            return False

    def find(
        self,
        path: str,
        maxdepth: int | None = None,
        withdirs: bool = False,
        detail: bool = False,
        **kwargs: Any,
    ) -> Any:
        """Every file under path, from one recursive listing (fsspec's walk when maxdepth is
        given); folders too with withdirs.

        Raises:
            ValueError: path "" (all of S3).
        """
        path = self._strip_protocol(path)
        bucket, key = self.split_path(path)
        if not bucket:
            raise ValueError("S3DirectFileSystem.find: cannot traverse all of S3")
        if maxdepth is not None:
            return super().find(path, maxdepth=maxdepth, withdirs=withdirs, detail=detail, **kwargs)
        try:
            objs = self._list(bucket, key, recursive=True)
        except FileNotFoundError:
            objs = []
        out: dict[str, dict[str, Any]] = {}
        base = f"{bucket}/{key}" if key else bucket
        # The listing is complete for every folder under base: each folder's entries go to
        # the listings cache, as ls would have made them (later isdir/info/ls ask no server).
        tree: dict[str, dict[str, dict[str, Any]]] = {base: {}}
        for o in objs:
            name = f"{bucket}/{o.key}"
            if o.key.endswith("/"):  # a folder's marker object: the folder, not a file
                d = name.rstrip("/")
                tree.setdefault(d, {})
            else:
                out[name] = self._file_entry(bucket, o)
                d = self._parent(name)
                tree.setdefault(d, {})[name] = out[name]
            while len(d) > len(base):  # d and its parents up to base, each in its parent
                p = self._parent(d)
                sub = tree.setdefault(p, {})
                if d in sub:
                    break
                sub[d] = self._dir_entry(d)
                d = p
        if objs:
            for d, sub in tree.items():
                self.dircache[d] = sorted(sub.values(), key=lambda e: e["name"])
        if withdirs:
            out.update({d: self._dir_entry(d) for d in tree if d != base})
            if out and key:
                out[base] = self._dir_entry(base)
        if not out and key:
            found = self._head(path)
            if found is not None:
                out[path] = found
        names = sorted(out)
        return {n: out[n] for n in names} if detail else names

    def invalidate_cache(self, path: str | None = None) -> None:
        """Forgets cached listings: all of them, or those of path and its parents."""
        if path is None:
            self.dircache.clear()
            return
        p = self._strip_protocol(path)
        while p:
            self.dircache.pop(p, None)
            p = self._parent(p)
        self.dircache.pop("", None)

    def modified(self, path: str) -> datetime.datetime:
        """The object's LastModified, a UTC datetime.

        Raises:
            IsADirectoryError: path is a folder or bucket.
        """
        info = self.info(path)
        if info["type"] != "file" or info.get("LastModified") is None:
            raise IsADirectoryError(
                errno.EISDIR, "a folder has no modification time", self.unstrip_protocol(path)
            )
        return cast(datetime.datetime, info["LastModified"])

    def ukey(self, path: str) -> str:
        """The object's ETag (quotes included): it changes when the content does."""
        return cast(str, self.info(path, refresh=True)["ETag"])

    def checksum(self, path: str) -> int:
        """An int made from the object's ETag (fsspec's checksum)."""
        tokenize = importlib.import_module("fsspec.utils").tokenize
        return int(tokenize(self.ukey(path)), 16)

    # ---- folders and buckets ------------------------------------------------------------------
    def _bucket_exists(self, bucket: str) -> bool:
        try:
            self.client.list(self._uri(bucket, ""), limit=1)
            return True
        except errors.NoSuchBucket:
            return False

    def mkdir(self, path: str, create_parents: bool = True, **kwargs: Any) -> None:
        """Creates the bucket of path when path is a bucket (or when create_parents and the
        bucket is missing); a folder needs nothing on S3, as in s3fs.

        Raises:
            FileExistsError: path is a bucket that exists.
            FileNotFoundError: the bucket is missing and create_parents is False.
        """
        path = self._strip_protocol(path)
        if not path:
            raise ValueError("S3DirectFileSystem.mkdir: empty path")
        bucket, key = self.split_path(path)
        if self._bucket_exists(bucket):
            if not key:
                raise FileExistsError(errno.EEXIST, "bucket exists", bucket)
            return
        if key and not create_parents:
            raise FileNotFoundError(errno.ENOENT, "no such bucket", bucket)
        try:
            self.client.create_bucket(bucket)
        except errors.BucketAlreadyExists as e:
            raise FileExistsError(errno.EEXIST, str(e), bucket) from e
        self.invalidate_cache(bucket)

    def makedirs(self, path: str, exist_ok: bool = False) -> None:
        """mkdir with parents; an existing bucket is an error only without exist_ok."""
        try:
            self.mkdir(path, create_parents=True)
        except FileExistsError:
            if not exist_ok:
                raise

    def rmdir(self, path: str) -> None:
        """Deletes an empty bucket (folders vanish with their last object).

        Raises:
            FileExistsError: path is a folder or file (use rm); OSError (ENOTEMPTY): the
            bucket holds objects; FileNotFoundError: nothing there.
        """
        path = self._strip_protocol(path)
        bucket, key = self.split_path(path)
        if key:
            if self.exists(path):
                raise FileExistsError(errno.EEXIST, "not a bucket; use rm", path)
            raise FileNotFoundError(errno.ENOENT, "no such file or folder", path)
        try:
            self.client.delete_bucket(bucket)
        except errors.InvalidArgument as e:
            if e.s3_code == "BucketNotEmpty":
                raise OSError(errno.ENOTEMPTY, str(e), bucket) from e
            raise
        self.invalidate_cache(bucket)

    # ---- deleting and copying -----------------------------------------------------------------
    def rm_file(self, path: str, **kwargs: Any) -> None:
        """Deletes one object (a missing one is not an error, as on S3)."""
        bucket, key = self.split_path(path)
        self.client.delete_object(bucket, key)
        self.invalidate_cache(self._parent(self._strip_protocol(path)))

    def rm(
        self, path: Any, recursive: bool = False, maxdepth: int | None = None, **kwargs: Any
    ) -> None:
        """Deletes files (DeleteObjects, 1,000 keys a request); with recursive, everything
        under a folder, and a bucket named as path itself once empty, as s3fs does.

        Raises:
            FileNotFoundError: nothing matches path.
        """
        paths = self.expand_path(path, recursive=recursive, maxdepth=maxdepth)
        uris: list[str] = []
        buckets: list[str] = []
        for p in paths:
            bucket, key = self.split_path(p)
            if not key:
                buckets.append(bucket)
                continue
            uris.append(self._uri(bucket, key))
            if recursive:  # a folder's marker object, made by other tools
                uris.append(self._uri(bucket, key + "/"))
        if uris:
            self.client.delete(uris)
        for b in buckets:
            self.rmdir(b)
        for p in paths:
            self.invalidate_cache(p)

    def cp_file(self, path1: str, path2: str, **kwargs: Any) -> None:
        """Copies one object (s3d_copy_object: on the server where it can, else through
        this client; proved by the source's ETag or CRC32C).

        Raises:
            FileNotFoundError: path1 is no object.
        """
        b1, k1 = self.split_path(path1)
        b2, k2 = self.split_path(path2)
        if not k1 or not k2:
            raise IsADirectoryError(
                errno.EISDIR, "cp_file copies objects, not buckets", path1 if not k1 else path2
            )
        self.client.copy_object(b1, k1, b2, k2)
        self.invalidate_cache(self._parent(self._strip_protocol(path2)))

    # ---- whole objects ------------------------------------------------------------------------
    def cat_file(
        self, path: str, start: int | None = None, end: int | None = None, **kwargs: Any
    ) -> bytes:
        """The object's bytes, or [start, end) of them (negative: from the end) with one
        ranged GET split into parallel parts by the library.

        Raises:
            FileNotFoundError: no such object.
        """
        bucket, key = self.split_path(path)
        if not key:
            raise IsADirectoryError(errno.EISDIR, "a bucket has no content", bucket)
        if start is None and end is None:
            return self.client.download_bytes(bucket, key)
        if (start or 0) < 0 or end is None or end < 0:
            size = int(self.client.head(bucket, key).size)
            start = start or 0
            start = max(size + start, 0) if start < 0 else start
            end = size if end is None else (max(size + end, 0) if end < 0 else min(end, size))
        start = start or 0
        if end <= start:
            return b""
        buf = bytearray(end - start)
        try:
            got = self.client.download_into(bucket, key, start, buf, end - start)
        except errors.TransferError as e:
            if e.name == "S3D_ERANGE":  # start past the end
                return b""
            raise
        return bytes(buf) if got == len(buf) else bytes(buf[:got])

    def pipe_file(self, path: str, value: bytes, mode: str = "overwrite", **kwargs: Any) -> None:
        """Writes value as the object at path (multipart when large).

        Args:
            mode: "overwrite", or "create": FileExistsError when the object exists (checked
                with a HEAD first: S3 has no exclusive create here, so a writer racing this
                one can still win).
        """
        if mode == "create" and self.exists(path):
            raise FileExistsError(errno.EEXIST, "exists", self.unstrip_protocol(path))
        bucket, key = self.split_path(path)
        self.client.upload_bytes(bucket, key, value)
        self.invalidate_cache(self._parent(self._strip_protocol(path)))

    def touch(self, path: str, truncate: bool = True, **kwargs: Any) -> None:
        """An empty object at path (truncate=False on an existing one: ValueError, S3 cannot
        update a modification time)."""
        if not truncate and self.exists(path):
            raise ValueError("S3DirectFileSystem.touch: S3 cannot touch an existing object")
        self.pipe_file(path, b"")

    def get_file(
        self, rpath: str, lpath: Any, callback: Any = None, outfile: Any = None, **kwargs: Any
    ) -> None:
        """Downloads one object into a local file with the library's parallel ranged GETs,
        the file appearing only when complete. The callback is told the size once done."""
        callback = callback or _callbacks.DEFAULT_CALLBACK
        if outfile is not None or not isinstance(lpath, (str, os.PathLike)):
            return cast(
                None, super().get_file(rpath, lpath, callback=callback, outfile=outfile, **kwargs)
            )
        lpath = os.fspath(lpath)
        if os.path.isdir(lpath):
            return None
        bucket, key = self.split_path(rpath)
        parent = os.path.dirname(os.path.abspath(lpath))
        os.makedirs(parent, exist_ok=True)
        try:
            if not key:
                raise errors.NoSuchKey(errors._CODES["ENOSUCHKEY"], "a bucket")
            self.client.download_file(bucket, key, lpath)
        except FileNotFoundError:
            if self.isdir(rpath):  # a folder: a local folder, as fsspec's get makes one
                os.makedirs(lpath, exist_ok=True)
                return None
            raise
        size = os.path.getsize(lpath)
        callback.set_size(size)
        callback.relative_update(size)
        return None

    def put_file(
        self, lpath: Any, rpath: str, callback: Any = None, mode: str = "overwrite", **kwargs: Any
    ) -> None:
        """Uploads one local file (parts read and sent in parallel by the library); a local
        folder needs nothing on S3. mode="create": FileExistsError when the object exists
        (checked first, as pipe_file)."""
        callback = callback or _callbacks.DEFAULT_CALLBACK
        if mode == "create" and self.exists(rpath):
            raise FileExistsError(errno.EEXIST, "exists", self.unstrip_protocol(rpath))
        if os.path.isdir(lpath):
            return
        bucket, key = self.split_path(rpath)
        if not key:
            raise IsADirectoryError(errno.EISDIR, "put_file needs a key, not a bucket", rpath)
        size = os.path.getsize(lpath)
        callback.set_size(size)
        self.client.upload_file(bucket, key, lpath)
        callback.relative_update(size)
        self.invalidate_cache(self._parent(self._strip_protocol(rpath)))

    # ---- file objects -------------------------------------------------------------------------
    def _open(
        self,
        path: str,
        mode: str = "rb",
        block_size: int | None = None,
        autocommit: bool = True,
        cache_options: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> S3DirectFile:
        return S3DirectFile(
            self,
            path,
            mode,
            block_size=block_size or self.default_block_size,
            autocommit=autocommit,
            cache_options=cache_options,
            cache_type=kwargs.pop("cache_type", self.default_cache_type),
            **kwargs,
        )


class S3DirectFile(_spec.AbstractBufferedFile):  # type: ignore[misc]  # Any: fsspec
    """A file of S3DirectFileSystem. Mode "rb": seekable, reads served by s3direct's
    S3Reader (ranged GETs of block_size bytes read ahead; larger reads go straight into the
    caller's buffer), all of one object version. Modes "wb" and "xb": bytes go to the C
    upload stream (S3Writer) as they are written; the object appears on close() (or, with
    autocommit=False, on commit()); discard(), leaving a ``with`` block by an exception, or a
    file garbage-collected unclosed, aborts the upload and leaves the key as it was. "xb"
    checks with a HEAD that no object is there first (not atomic: S3 has no exclusive
    create here). No "ab": S3 objects cannot be appended to.

    Args:
        fs, path, mode, block_size, autocommit, cache_type, cache_options: as fsspec's
            AbstractBufferedFile.
        ContentType: the object's Content-Type (writes).
    """

    closed: bool  # fsspec's property (an annotation only: mypy sees no type in Any)

    def __init__(
        self,
        fs: S3DirectFileSystem,
        path: str,
        mode: str = "rb",
        block_size: int | None = None,
        autocommit: bool = True,
        cache_type: str = "none",
        cache_options: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        path = fs._strip_protocol(path)
        bucket, key = fs.split_path(path)
        if not key:
            raise IsADirectoryError(errno.EISDIR, "open: a bucket is not a file", path)
        if mode not in ("rb", "wb", "xb"):
            raise NotImplementedError(
                f"S3DirectFile: mode {mode!r} is not supported "
                f"(rb, wb, xb; S3 objects cannot be appended to)"
            )
        self._reader: streams.S3Reader | None = None
        self._writer: streams.S3Writer | None = None
        uri = fs._uri(bucket, key)
        bs = block_size or fs.DEFAULT_BLOCK_SIZE
        size = None
        if mode == "rb":
            self._reader = streams.S3Reader(uri, client=fs.client, read_ahead=bs)
            size = self._reader.size
        elif mode == "xb" and fs.exists(path):
            raise FileExistsError(errno.EEXIST, "exists", fs.unstrip_protocol(path))
        content_type = kwargs.pop("ContentType", None)
        super().__init__(
            fs,
            path,
            mode,
            block_size=bs,
            autocommit=autocommit,
            cache_type=cache_type,
            cache_options=cache_options,
            size=size,
            **kwargs,
        )
        if mode != "rb":
            w = streams.S3Writer(uri, client=fs.client, content_type=content_type)
            # This file finishes or aborts the writer itself (close, commit, discard, its own
            # __exit__), so torch.save into it needs no `with` on the writer.
            self._writer = w.__enter__()

    # reads
    def _fetch_range(self, start: int, end: int) -> bytes:
        r = self._reader
        assert r is not None
        r.seek(start)
        return r.read(end - start)

    def readinto(self, b: Any) -> int:
        """Reads into b at the position; with cache_type "none", straight into b."""
        r = self._reader
        if r is None or getattr(self.cache, "name", None) != "none":
            return cast(int, super().readinto(b))
        if self.closed:
            raise ValueError("I/O operation on closed file.")
        r.seek(self.loc)
        n = r.readinto(b)
        self.loc += n
        return n

    # writes
    def write(self, data: Any) -> int:
        """Hands data to the upload stream (parts leave in the background).

        Raises:
            ValueError: not open for writing, or closed.
        """
        if not self.writable():
            raise ValueError("File not in write mode")
        w = self._writer
        if w is None or self.closed:
            raise ValueError("I/O operation on closed file.")
        n = w.write(data)
        self.loc += n
        return n

    def flush(self, force: bool = False) -> None:
        """Nothing to do: the upload stream sends parts as they fill (raises on a closed
        file, as fsspec's files do)."""
        if self.closed:
            raise ValueError("Flush on closed file")

    def commit(self) -> None:
        """Completes the upload: the object appears (autocommit=False, transactions)."""
        w, self._writer = self._writer, None
        if w is not None:
            try:
                w.close()
            finally:
                self.fs.invalidate_cache(self.path)

    def discard(self) -> None:
        """Aborts the upload: nothing appears, the key keeps what it had."""
        w, self._writer = self._writer, None
        if w is not None:
            w.abort()

    def close(self) -> None:
        """Completes the upload (autocommit) or keeps it for commit(); drops the reader."""
        if self.closed:
            return
        try:
            if self._reader is not None:
                self._reader.close()
                self._reader = None
            elif self.autocommit:
                self.commit()
        finally:
            self.cache = None
            self.closed = True

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is not None and self._writer is not None:
            self.discard()
            self.closed = True
        else:
            self.close()

    def __del__(self) -> None:
        # Never complete an upload from the garbage collector (io.IOBase.__del__ would call
        # close()): dropped here, the S3Writer's own finalizer aborts it and warns.
        if getattr(self, "_writer", None) is not None and not self.closed:
            self._closed = True
            self._writer = None


class S3DirectS3FileSystem(S3DirectFileSystem):
    """S3DirectFileSystem under the s3:// protocol (what register_s3 installs)."""

    protocol: Any = ("s3", "s3a", "s3direct")


def register_s3(clobber: bool = True) -> None:
    """Makes fsspec open s3:// and s3a:// URLs with s3direct (S3DirectS3FileSystem) in this
    process, in place of s3fs: pandas, Lightning, torch DCP's FsspecWriter, datasets ... then
    reach S3 through the C library. storage_options given for s3fs keep working (key,
    secret, client_kwargs={"endpoint_url": ...}, see client_options).

    Args:
        clobber: replace an implementation already registered (s3fs's is, by default).
    """
    for proto in ("s3", "s3a"):
        _registry.register_implementation(proto, S3DirectS3FileSystem, clobber=clobber)


def _register_own() -> None:
    # The entry point registers "s3direct" for an installed package; a source checkout (or a
    # Python that did not load entry points) has it once this module is imported.
    if "s3direct" not in _registry.registry:
        _registry.register_implementation("s3direct", S3DirectFileSystem, clobber=True)


_register_own()

__all__ = [
    "S3DirectFileSystem",
    "S3DirectFile",
    "S3DirectS3FileSystem",
    "register_s3",
    "client_options",
]
