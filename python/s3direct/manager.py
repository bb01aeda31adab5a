"""CheckpointManager: numbered checkpoints under one prefix, as Orbax's CheckpointManager
keeps them: save by step, list the complete ones, restore the newest, keep the last N, and
save each one incrementally against the one before.

Layout under the prefix (``s3://bucket/run1/`` or a local folder)::

    step-0000001000.safetensors                       one object per step, or, with shard_size,
    step-0000001000/model.safetensors.index.json      a folder per step: the index and
    step-0000001000/model-TOKEN-00001-of-00004.safetensors   its shards

A step exists only when it is complete: s3direct writes an object or file atomically, and a
sharded checkpoint becomes visible with its index, written last. So the listing takes only
the names above, spelled exactly so (10 digits at least); a temporary file, an index-less
step folder left by a killed save, or anything else under the prefix is never a step.

One writer per prefix (one process, as Orbax's primary host): two managers saving under one
prefix would prune each other's steps.
"""

from __future__ import annotations

import concurrent.futures
import os
import re
import shutil
import threading
from typing import Any, Dict, List, NamedTuple, Optional

from . import _checkpoint, _into, _save, _uri, errors
from ._log import logger
from ._progress import ProgressArg
from ._stats import SaveStats
from ._uri import PathLike
from .client import Client, resolve

__all__ = ["CheckpointManager"]

_SINGLE = re.compile(r"step-(\d{10,})\.safetensors")
_FOLDER = re.compile(r"step-(\d{10,})/")


def _name(step: int) -> str:
    return f"step-{step:010d}"


class _Found(NamedTuple):
    """What a listing of the prefix holds, by step."""

    single: Dict[int, str]  # step -> URI of its complete step-N.safetensors
    sharded: Dict[int, str]  # step -> URI of its step-N/ index (complete)
    folders: Dict[int, List[str]]  # step -> what is in step-N/ (S3: every object; local: [])


class CheckpointManager:
    """Numbered checkpoints under a prefix: ``save(step, state)`` writes
    ``PREFIX/step-<step, 10 digits>.safetensors`` (with shard_size, the sharded checkpoint
    ``PREFIX/step-<step>/model.safetensors.index.json`` and its shards), saved incrementally
    against the newest complete step: its unchanged tensors are copied, not sent (see
    ``s3direct.save(base=)``). After each save the steps beyond the newest ``keep`` are
    deleted, so an old checkpoint goes only once a newer one is complete. ``latest()`` and
    ``restore()`` see only complete checkpoints: a save killed half-way is never the latest.

    Args:
        prefix: "s3://bucket/run1" (a trailing slash or none: the steps go under it) or a
            local folder (made on the first save).
        keep: how many of the newest steps to keep (None: all). At least 1.
        client: the Client for saves, loads, listing and deletes (default: the process's).
        shard_size: bytes per shard: each step is a sharded checkpoint in a folder of its
            own. None: one object per step.
        incremental: save each step with the newest complete step as its base. False: every
            save sends everything.

    Raises:
        ValueError: keep below 1, or shard_size below 1.
        ConfigError: prefix is not a location s3direct serves (gs://, https://).
    """

    def __init__(
        self,
        prefix: PathLike,
        keep: Optional[int] = None,
        *,
        client: Optional[Client] = None,
        shard_size: Optional[int] = None,
        incremental: bool = True,
    ) -> None:
        if keep is not None and (isinstance(keep, bool) or keep < 1):
            raise ValueError(f"CheckpointManager: keep must be None or at least 1: {keep!r}")
        if shard_size is not None and shard_size < 1:
            raise ValueError(f"CheckpointManager: shard_size must be positive: {shard_size!r}")
        u = _uri.normalize(prefix)
        self._s3 = u.startswith("s3://")
        if self._s3:
            self._dir = u.rstrip("/") + "/"
        else:
            self._dir = os.path.join(u, "")
        self.keep = keep
        self.shard_size = shard_size
        self.incremental = incremental
        self._client = client
        self._lock = threading.Lock()
        self._pending: List["concurrent.futures.Future[SaveStats]"] = []

    @property
    def prefix(self) -> str:
        """The folder the steps are written in: "s3://bucket/run1/" or "/path/run1/"."""
        return self._dir

    def uri(self, step: int) -> str:
        """Where save(step) writes.

        Args:
            step: the step number (an int >= 0).

        Returns:
            The object or file URI; with shard_size, the index's.

        Raises:
            ValueError: step is not an int >= 0.
        """
        _check_step(step)
        if self.shard_size:
            return self._join(f"{_name(step)}/{_uri.INDEX_NAME}")
        return self._join(f"{_name(step)}.safetensors")

    # ---- listing ----------------------------------------------------------------------------
    def steps(self) -> List[int]:
        """The steps with a complete checkpoint under the prefix, oldest first. Saves still
        running (save_async) are not among them until they are complete.

        Returns:
            A sorted list of step numbers ([] when the prefix holds none).

        Raises:
            NoSuchBucket, AccessDenied: from S3 (a missing local folder holds no steps).
        """
        found = self._scan()
        return sorted(set(found.single) | set(found.sharded))

    def latest(self) -> Optional[int]:
        """The newest complete step.

        Returns:
            Its step number, or None when there is none.

        Raises:
            NoSuchBucket, AccessDenied: from S3.
        """
        s = self.steps()
        return s[-1] if s else None

    def _join(self, rel: str) -> str:
        if self._s3:
            return self._dir + rel
        return os.path.join(self._dir, *rel.split("/"))

    def _scan(self) -> _Found:
        found = _Found({}, {}, {})
        if self._s3:
            plen = len(self._dir)
            for o in resolve(self._client).list(self._dir):
                self._classify(found, o.uri[plen:], o.uri)
            return found
        try:
            names = os.listdir(self._dir)
        except (FileNotFoundError, NotADirectoryError):
            return found
        for n in names:
            path = os.path.join(self._dir, n)
            if os.path.isdir(path):
                idx = os.path.join(path, _uri.INDEX_NAME)
                self._classify(found, f"{n}/", path)
                if os.path.isfile(idx):
                    self._classify(found, f"{n}/{_uri.INDEX_NAME}", idx)
            elif os.path.isfile(path):
                self._classify(found, n, path)
        return found

    @staticmethod
    def _classify(found: _Found, rel: str, uri: str) -> None:
        """Records rel (a name relative to the prefix; "step-N/" for a folder itself) under
        its step when it is spelled as this module writes it."""
        m = _SINGLE.fullmatch(rel)
        if m is not None:
            step = int(m.group(1))
            if rel == f"{_name(step)}.safetensors":
                found.single[step] = uri
            return
        m = _FOLDER.match(rel)
        if m is None:
            return
        step = int(m.group(1))
        if m.group(0) != f"{_name(step)}/":
            return
        found.folders.setdefault(step, [])
        rest = rel[m.end() :]
        if rest:
            found.folders[step].append(uri)
        if rest == _uri.INDEX_NAME:
            found.sharded[step] = uri

    def _complete_uri(self, found: _Found, step: int) -> Optional[str]:
        """The URI of a complete step, in this manager's layout when both exist."""
        first, second = (
            (found.sharded, found.single) if self.shard_size else (found.single, found.sharded)
        )
        return first.get(step) or second.get(step)

    # ---- saving -----------------------------------------------------------------------------
    def save(
        self,
        step: int,
        state: Any,
        *,
        metadata: Optional[Dict[str, str]] = None,
        progress: ProgressArg = False,
        allow_pickle: bool = False,
    ) -> SaveStats:
        """Saves state as step, then deletes the steps beyond keep. Waits first for this
        manager's save_async saves, so the steps are written in call order.

        Args:
            step: the step number (an int >= 0); saving a step again replaces it.
            state: what s3direct.save takes (a state dict, nested training state).
            metadata, progress, allow_pickle: as for s3direct.save.

        Returns:
            The save's SaveStats (base_used True when the previous step served data).

        Raises:
            ValueError: step is not an int >= 0.
            What s3direct.save raises. A failed delete of an old step is logged (a warning
            on the "s3direct" logger), not raised: the new checkpoint is complete.
        """
        uri = self.uri(step)
        self.wait_until_finished(raise_errors=False)
        self._make_dirs(step)
        stats = _save.save(
            state,
            uri,
            shard_size=self.shard_size,
            metadata=metadata,
            progress=progress,
            client=self._client,
            allow_pickle=allow_pickle,
            base=self._base(),
        )
        self._prune(step)
        return stats

    def save_async(
        self,
        step: int,
        state: Any,
        *,
        metadata: Optional[Dict[str, str]] = None,
        progress: ProgressArg = False,
        allow_pickle: bool = False,
    ) -> "concurrent.futures.Future[SaveStats]":
        """Snapshots state and saves it as step in the background, as s3direct.save_async
        does; saves run one at a time in call order, so the base of this save (the newest
        complete step when it starts) is the previous save when that one succeeded. The
        steps beyond keep are deleted before the Future resolves.

        Args:
            step, state, metadata, progress, allow_pickle: as for save().

        Returns:
            A Future whose result() is the SaveStats, or raises the save's exception.

        Raises:
            ValueError: step is not an int >= 0.
            InvalidArgument: as for s3direct.save_async, before anything is submitted.
        """
        uri = self.uri(step)
        self._make_dirs(step)
        fut = _save._submit(
            state,
            uri,
            shard_size=self.shard_size,
            metadata=metadata,
            checksum=True,
            progress=progress,
            client=resolve(self._client),
            allow_pickle=allow_pickle,
            base=self._base,
            after=lambda _: self._prune(step),
        )
        with self._lock:
            self._pending.append(fut)
        fut.add_done_callback(self._forget)
        return fut

    def _forget(self, fut: "concurrent.futures.Future[SaveStats]") -> None:
        with self._lock:
            if fut in self._pending:
                self._pending.remove(fut)

    def wait_until_finished(self, raise_errors: bool = True) -> None:
        """Waits for this manager's save_async saves.

        Args:
            raise_errors: raise the exception of the first one that failed (each Future
                raises its own as well).

        Raises:
            What a failed save raised, with raise_errors.
        """
        with self._lock:
            pending = list(self._pending)
        for f in pending:
            err = f.exception()
            if err is not None and raise_errors:
                raise err

    def _make_dirs(self, step: int) -> None:
        if self._s3:
            return
        os.makedirs(os.path.dirname(self.uri(step)), exist_ok=True)

    def _base(self) -> Optional[str]:
        """The newest complete step's URI (None when not incremental, or none is there).
        Called as a save starts: a listing that fails means a full save, not a failed one."""
        if not self.incremental:
            return None
        try:
            found = self._scan()
        except (errors.S3DirectError, OSError) as e:
            logger.debug("CheckpointManager %s: no base, listing failed: %s", self._dir, e)
            return None
        done = set(found.single) | set(found.sharded)
        return self._complete_uri(found, max(done)) if done else None

    def _prune(self, saved: int) -> None:
        """After step saved is complete: deletes the steps beyond keep (never saved itself),
        and step folders without an index older than the newest complete step (left by a
        killed sharded save; they can never complete)."""
        try:
            found = self._scan()
            complete = sorted(set(found.single) | set(found.sharded))
            doomed = []
            if self.keep is not None:
                doomed = [s for s in complete[: -self.keep] if s != saved]
            newest = complete[-1] if complete else -1
            stale = [
                s for s in found.folders if s not in found.sharded and s < newest and s != saved
            ]
            for s in doomed:
                self._delete(found, s)
            for s in stale:
                self._delete_folder(found, s)
        except (errors.S3DirectError, OSError) as e:
            logger.warning(
                "CheckpointManager %s: deleting old steps after step %d failed: %s",
                self._dir,
                saved,
                e,
            )

    # ---- deleting ---------------------------------------------------------------------------
    def delete(self, step: int) -> None:
        """Deletes a step (both layouts; the index of a sharded one first, so that a reader
        never sees it half gone as complete). A missing step is not an error.

        Args:
            step: the step number.

        Raises:
            ValueError: step is not an int >= 0.
            AccessDenied, TransferError: from S3; OSError from the local file system.
        """
        _check_step(step)
        self._delete(self._scan(), step)

    def _delete(self, found: _Found, step: int) -> None:
        single = found.single.get(step)
        if single is not None:
            if self._s3:
                resolve(self._client).delete(single)
            else:
                _remove(single)
        self._delete_folder(found, step)

    def _delete_folder(self, found: _Found, step: int) -> None:
        index = found.sharded.get(step)
        if self._s3:
            c = resolve(self._client)
            if index is not None:
                c.delete(index)
            rest = [u for u in found.folders.get(step, []) if u != index]
            if rest:
                c.delete(rest)
            return
        if index is not None:
            _remove(index)
        folder = self._join(_name(step))
        if os.path.isdir(folder) and not os.path.islink(folder):
            shutil.rmtree(folder)

    # ---- restoring --------------------------------------------------------------------------
    def _find(self, step: Optional[int]) -> str:
        found = self._scan()
        done = set(found.single) | set(found.sharded)
        if step is None:
            if not done:
                raise self._missing(f"{self._dir} holds no complete checkpoint")
            step = max(done)
        else:
            _check_step(step)
        uri = self._complete_uri(found, step)
        if uri is None:
            raise self._missing(f"{self._dir} holds no complete checkpoint of step {step}")
        return uri

    def _missing(self, msg: str) -> errors.S3DirectError:
        if self._s3:
            return errors.NoSuchKey(errors._CODES["ENOSUCHKEY"], msg)
        return errors.NoSuchFile(errors._CODES["ENOENT"], msg)

    def restore(self, step: Optional[int] = None, **load_kwargs: Any) -> Any:
        """Loads a complete step with s3direct.load.

        Args:
            step: the step (None: the newest complete one).
            load_kwargs: passed to s3direct.load (device=, keys=, progress=...); client=
                defaults to the manager's.

        Returns:
            What s3direct.load returns: the saved state.

        Raises:
            NoSuchKey (S3) / NoSuchFile (local): no complete checkpoint of that step, or
            none at all. What s3direct.load raises.
        """
        uri = self._find(step)
        if self._client is not None:
            load_kwargs.setdefault("client", self._client)
        return _checkpoint.load(uri, **load_kwargs)

    def restore_into(self, target: Any, step: Optional[int] = None, **load_kwargs: Any) -> Any:
        """Loads a complete step into existing tensors with s3direct.load_into.

        Args:
            target: what s3direct.load_into takes (a module, {"model": m, "optim": opt}).
            step: the step (None: the newest complete one).
            load_kwargs: passed to s3direct.load_into (strict=, progress=...); client=
                defaults to the manager's.

        Returns:
            What s3direct.load_into returns.

        Raises:
            NoSuchKey (S3) / NoSuchFile (local): no complete checkpoint of that step.
            What s3direct.load_into raises.
        """
        uri = self._find(step)
        if self._client is not None:
            load_kwargs.setdefault("client", self._client)
        return _into.load_into(target, uri, **load_kwargs)

    def __repr__(self) -> str:
        extra = "".join(
            f", {k}={v!r}"
            for k, v in (("keep", self.keep), ("shard_size", self.shard_size))
            if v is not None
        )
        if not self.incremental:
            extra += ", incremental=False"
        return f"s3direct.CheckpointManager({self._dir!r}{extra})"


def _check_step(step: int) -> None:
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"CheckpointManager: a step is an int >= 0: {step!r}")


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
