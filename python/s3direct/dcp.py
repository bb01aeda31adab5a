"""torch.distributed.checkpoint storage backed by s3direct: S3DirectStorageWriter and
S3DirectStorageReader, for ``dcp.save(state_dict, storage_writer=...)`` and
``dcp.load(state_dict, storage_reader=...)``.

Layout under ``path`` (``s3://bucket/prefix`` or a local folder), as FileSystemWriter's with
a token of the save in every object name (T: 16 hex digits, the coordinator's, new per save):

    __R_T_0.safetensors  every tensor item rank R wrote, one safetensors object per rank,
                         written by the C writer (CUDA tensors streamed from device memory);
                         tensor names are "<n>:<fqn>" (n: the item's position in the rank's plan)
    __R_T_b<n>.bin       each byte item (non-tensor values DCP serializes with torch.save)
    .metadata            DCP's Metadata object, pickled as FileSystemWriter does; written last
                         by the coordinator, so a checkpoint is visible only when complete

Saving again to the same path (the sharded save protocol of the C writer, in Python): the
ranks upload in parallel under the new save's names, so the previous checkpoint's objects and
its .metadata stay as they were; the coordinator replaces .metadata (one PUT, atomic) once
every rank has written, and only then deletes the objects the previous .metadata named. A
rank that dies mid-save leaves the previous checkpoint loadable and nothing of the new one
visible (its orphaned objects are not named by any .metadata). Checkpoints written before
the token (``__R_0.safetensors``) load as before and are cleaned up by the next save.

Reads: each rank opens the objects holding its items once (one header read each) and fetches
only the byte ranges it needs in one planned transfer per object (s3d_reader_read), up to 8
objects at once on the client's one request budget (a resharded load reads many): straight
into the destination tensor when the requested chunk is a contiguous byte range of the stored
tensor and the destination is contiguous with the same dtype; otherwise the stored tensor is
read into a temporary and the chunk copied into the (narrowed) destination. With group=, a
byte range several ranks need (a replicated tensor) is fetched by one of them and sent to the
others over the group (_ranks.Session, as load(group=) does).

The .metadata file is a pickle, as in every torch DCP storage: load checkpoints you trust.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import os
import pickle
import uuid
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional, Tuple, Union, cast

import torch
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta, TensorStorageMetadata
from torch.distributed.checkpoint.planner import (
    LoadItemType,
    LoadPlan,
    LoadPlanner,
    ReadItem,
    SavePlan,
    SavePlanner,
    WriteItemType,
)
from torch.distributed.checkpoint.storage import StorageReader, StorageWriter, WriteResult
from torch.futures import Future

from . import _log, _ranks, _reader, _save, _types, errors, streams
from ._progress import Combined, ProgressArg
from ._stats import SaveStats
from ._uri import PathLike
from .client import Client, resolve

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup

METADATA_NAME = ".metadata"
# A byte range of a stored tensor: (object, tensor name, byte offset, byte length).
_Unit = Tuple[str, str, int, int]

__all__ = ["S3DirectStorageWriter", "S3DirectStorageReader"]

# The most objects one rank's read_data opens and reads at once (as cp --recursive copies up
# to 8 files at once): the requests of all of them share the client's one budget.
_OBJECTS_AT_ONCE = 8


@dataclass
class _RankPrefix:
    prefix: str


@dataclass
class S3DirectStorageInfo:
    """Where one item lives: the object/file (relative to the checkpoint path), the tensor
    name inside it (None for a byte item) and the byte length."""

    relative_path: str
    tensor: str | None
    length: int


class _Location:
    def __init__(self, path: PathLike, client: Optional[Client]) -> None:
        p = os.fspath(path)
        self.path = p.rstrip("/") if streams.is_s3(p) else p
        self.client = client

    @property
    def s3(self) -> bool:
        return streams.is_s3(self.path)

    def join(self, name: str) -> str:
        return f"{self.path}/{name}" if self.s3 else os.path.join(self.path, name)

    def mkdir(self) -> None:
        if not self.s3:
            os.makedirs(self.path, exist_ok=True)

    def exists(self, name: str) -> bool:
        if not self.s3:
            return os.path.exists(self.join(name))
        b, k = streams.split_s3(self.join(name))
        try:
            resolve(self.client).head(b, k)
            return True
        except errors.NoSuchKey:
            return False

    def write_bytes(self, name: str, data: Union[bytes, memoryview]) -> None:
        """Atomic: an object is one PUT / multipart upload; a file is written and renamed."""
        if self.s3:
            b, k = streams.split_s3(self.join(name))
            resolve(self.client).upload_bytes(b, k, data)
        else:
            with streams.writer(self.join(name)) as f:
                f.write(data)

    def remove(self, name: str) -> None:
        """Deletes the object or file if it exists."""
        if self.s3:
            b, k = streams.split_s3(self.join(name))
            resolve(self.client).delete_object(b, k)
        else:
            try:
                os.unlink(self.join(name))
            except FileNotFoundError:
                pass

    def remove_many(self, names: list[str]) -> None:
        """Deletes these objects or files (missing ones are not an error)."""
        if not names:
            return
        if self.s3:
            resolve(self.client).delete([self.join(n) for n in names])
        else:
            for n in names:
                self.remove(n)

    def read_bytes(self, name: str) -> bytes:
        if self.s3:
            b, k = streams.split_s3(self.join(name))
            return resolve(self.client).download_bytes(b, k)
        with open(self.join(name), "rb") as f:
            return f.read()


def _validate(checkpoint_id: Any) -> bool:
    try:
        p = os.fspath(checkpoint_id)
    except TypeError:
        return False
    return isinstance(p, str) and (p.startswith("s3://") or "://" not in p)


class _AtLocation:
    """What the writer and the reader share: the checkpoint's path and which ids they serve."""

    loc: _Location

    @property
    def checkpoint_id(self) -> str:
        """The checkpoint's path."""
        return self.loc.path

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: Union[str, os.PathLike[str]]) -> bool:
        """Whether checkpoint_id is a path this storage serves.

        Args:
            checkpoint_id: what DCP was given.

        Returns:
            True for an s3:// URI or a local path (not another URL scheme).
        """
        return _validate(checkpoint_id)


class S3DirectStorageWriter(_AtLocation, StorageWriter):
    """A torch.distributed.checkpoint StorageWriter: ``dcp.save(state_dict,
    storage_writer=S3DirectStorageWriter(path))``.

    Args:
        path: s3://bucket/prefix or a local folder.
        client: an s3direct.Client (default: the process's).
        checksum: store a CRC32C per tensor.
        overwrite: False refuses a path that already holds a complete checkpoint.
        incremental: each save of this writer (after the first) uses the tensor object this
            rank wrote in its previous save as its base: tensors whose bytes did not change are
            copied server-side instead of sent (s3direct.save's ``base``). False: every save
            is a full one.
        progress: as for s3direct.save: True (a bar or summary line per rank) or a
            callable(done_bytes, total_bytes) for this rank's tensor object.

    Raises:
        RuntimeError: (from prepare_local_plan) overwrite=False and a checkpoint exists.
        NoSuchBucket, AccessDenied, TransferError, InvalidArgument: from writing the items.
    """

    def __init__(
        self,
        path: PathLike,
        *,
        client: Optional[Client] = None,
        checksum: bool = True,
        overwrite: bool = True,
        incremental: bool = True,
        progress: ProgressArg = False,
    ) -> None:
        super().__init__()
        self._client = client
        self.progress = progress
        self.incremental = incremental
        self._last_tensor_uri: Optional[str] = None  # this rank's previous save's tensors
        self.last_stats: Optional[SaveStats] = None  # what its last write_data did
        self.loc = _Location(path, client)
        self.checksum = checksum
        self.overwrite = overwrite
        self.save_id = uuid.uuid4().hex
        self.rank: Optional[int] = None
        self.is_coordinator = False
        self.use_collectives = True
        self._old: set[str] = set()  # the previous checkpoint's objects (coordinator)

    def reset(self, checkpoint_id: Optional[PathLike] = None) -> None:
        """Starts a new save (a new save_id).

        Args:
            checkpoint_id: a new path to write to, or None to keep the current one.
        """
        if checkpoint_id:
            self.loc = _Location(checkpoint_id, self._client)
        self.save_id = uuid.uuid4().hex

    def set_up_storage_writer(self, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        """Records the rank's role.

        Args:
            is_coordinator: this rank writes .metadata.
            args, kwargs: DCP's further arguments; ``rank`` and ``use_collectives`` are used.
        """
        self.is_coordinator = is_coordinator
        self.rank = kwargs.get("rank")
        self.use_collectives = kwargs.get("use_collectives", True)

    def _metadata_name(self) -> str:
        if not self.use_collectives and self.rank is not None:
            return f"__{self.rank}{METADATA_NAME}"
        return METADATA_NAME

    def prepare_local_plan(self, plan: SavePlan) -> SavePlan:
        """Makes the local folder; checks overwrite.

        Args:
            plan: this rank's plan.

        Returns:
            The plan, with its object name prefix when DCP runs without collectives.

        Raises:
            RuntimeError: overwrite=False and a complete checkpoint is at the path.
        """
        self.loc.mkdir()
        if not self.overwrite and self.loc.exists(self._metadata_name()):
            raise RuntimeError(f"checkpoint already exists at {self.loc.path} and overwrite=False")
        if self.rank is not None and not self.use_collectives:
            self._old = self._previous_objects()
            plan = dataclasses.replace(
                plan, storage_data=_RankPrefix(f"__{self.rank}_{self.save_id[:16]}_")
            )
        return plan

    def prepare_global_plan(self, plans: list[SavePlan]) -> list[SavePlan]:
        """Gives each rank its object name prefix, with this save's token; notes the objects
        of the checkpoint already at the path, which finish() deletes once it is replaced.

        Args:
            plans: every rank's plan (on the coordinator).

        Returns:
            The plans, each with its rank's prefix.
        """
        # The previous checkpoint stays complete and untouched while the ranks write: their
        # names are this save's own, and .metadata is replaced last (finish).
        self._old = self._previous_objects()
        tok = self.save_id[:16]
        return [
            dataclasses.replace(p, storage_data=_RankPrefix(f"__{i}_{tok}_"))
            if p.storage_data is None
            else p
            for i, p in enumerate(plans)
        ]

    def _previous_objects(self) -> set[str]:
        """The objects the .metadata at the path names (empty when there is none, or when it
        cannot be read: then nothing is deleted)."""
        try:
            md = pickle.loads(self.loc.read_bytes(self._metadata_name()))
            return {
                i.relative_path
                for i in (md.storage_data or {}).values()
                if isinstance(i, S3DirectStorageInfo)
            }
        except Exception:
            return set()

    def write_data(self, plan: SavePlan, planner: SavePlanner) -> Future[list[WriteResult]]:
        """Writes this rank's tensor items as one safetensors object and each byte item as its
        own object.

        Args:
            plan: this rank's final plan.
            planner: resolves each item to its data.

        Returns:
            A completed Future of the WriteResults (each with its S3DirectStorageInfo).

        Raises:
            NoSuchBucket, AccessDenied, TransferError, InvalidArgument: the write failed.
        """
        sd = plan.storage_data
        prefix = sd.prefix if sd is not None else f"__{self.rank or 0}_{self.save_id[:16]}_"
        results: list[WriteResult] = []
        srcs: list[_save._Src] = []
        tensor_obj = f"{prefix}0.safetensors"
        nbytes_items = 0
        for n, item in enumerate(plan.items):
            if item.type == WriteItemType.BYTE_IO:
                data = planner.resolve_data(item)
                buf = data.getbuffer() if isinstance(data, io.BytesIO) else bytes(data)
                name = f"{prefix}b{nbytes_items}.bin"
                nbytes_items += 1
                self.loc.write_bytes(name, buf)
                results.append(
                    WriteResult(
                        index=item.index,
                        size_in_bytes=len(buf),
                        storage_data=S3DirectStorageInfo(name, None, len(buf)),
                    )
                )
                continue
            t = cast(torch.Tensor, planner.resolve_data(item))  # not BYTE_IO: a tensor
            tname = f"{n}:{item.index.fqn}"
            src = _save._prepare(t, tname, (item.index.fqn,))
            srcs.append(src)
            size = src.tensor.numel() * src.tensor.element_size()
            results.append(
                WriteResult(
                    index=item.index,
                    size_in_bytes=size,
                    storage_data=S3DirectStorageInfo(tensor_obj, tname, size),
                )
            )
        if srcs:
            uri = self.loc.join(tensor_obj)
            base = self._last_tensor_uri if self.incremental and self.checksum else None
            self.last_stats = _save._write(
                resolve(self._client),
                uri,
                srcs,
                None,
                None,
                shard_size=None,
                checksum=self.checksum,
                progress=self.progress,
                cuda_stream=_save._cuda_stream(srcs),
                base=base,
            )
            self._last_tensor_uri = uri
        fut: Future[list[WriteResult]] = Future()
        fut.set_result(results)
        return fut

    def finish(self, metadata: Metadata, results: list[list[WriteResult]]) -> None:
        """Writes .metadata (pickled, as FileSystemWriter does): the checkpoint is complete.

        Args:
            metadata: DCP's Metadata.
            results: every rank's WriteResults.

        Raises:
            NoSuchBucket, AccessDenied, TransferError: the write failed.
        """
        storage_md: dict[Any, Any] = {}
        for wr_list in results:
            storage_md.update({wr.index: wr.storage_data for wr in wr_list})
        metadata.storage_data = storage_md
        metadata.storage_meta = self.storage_meta()
        if hasattr(metadata, "version"):
            metadata.version = "1.0.0"
        self.loc.write_bytes(self._metadata_name(), pickle.dumps(metadata))
        # The new checkpoint is complete and visible: the previous one's objects can go. A
        # failure here leaves garbage, never a broken checkpoint.
        new = {i.relative_path for i in storage_md.values() if isinstance(i, S3DirectStorageInfo)}
        stale = sorted(self._old - new)
        self._old = set()
        try:
            self.loc.remove_many(stale)
        except errors.S3DirectError as e:
            _log.logger.warning(
                "%s: the previous checkpoint's objects were not all deleted: %s", self.loc.path, e
            )

    def storage_meta(self) -> StorageMeta | None:
        """The checkpoint id (the path) and this save's id."""
        return StorageMeta(checkpoint_id=self.loc.path, save_id=self.save_id)


def _contiguous_range(
    shape: tuple[int, ...], offsets: list[int], lengths: list[int], elem: int
) -> Optional[tuple[int, int]]:
    """(byte offset, byte length) when the chunk [offsets, offsets + lengths) of a row-major
    tensor of this shape is one contiguous byte range; None otherwise."""
    nd = len(shape)
    # The chunk is contiguous if, past the first dimension that is not length 1, every
    # dimension is taken whole.
    k = 0
    while k < nd and lengths[k] == 1:
        k += 1
    for d in range(k + 1, nd):
        if offsets[d] != 0 or lengths[d] != shape[d]:
            return None
    stride, start = 1, 0
    for d in range(nd - 1, -1, -1):
        start += offsets[d] * stride
        stride *= shape[d]
    count = 1
    for x in lengths:
        count *= x
    return start * elem, count * elem


class S3DirectStorageReader(_AtLocation, StorageReader):
    """A torch.distributed.checkpoint StorageReader: ``dcp.load(state_dict,
    storage_reader=S3DirectStorageReader(path))``.

    Args:
        path: s3://bucket/prefix or a local folder written by S3DirectStorageWriter.
        client: an s3direct.Client (default: the process's).
        verify: check the stored CRC32C of tensors read whole.
        group: the process group dcp.load runs on (torch.distributed.group.WORLD when it is
            given none), to read each stored byte range that several ranks need (replicated
            tensors) once and share it over the group, as load(group=) does. Every rank of the
            group must use a reader with it. None: every rank reads what it needs.
        progress: as for s3direct.load: True (one bar or summary line per rank over all the
            objects it reads at once) or a callable(done_bytes, total_bytes).

    Raises:
        FileNotFoundError (NoSuchKey on S3): no .metadata at path (from read_metadata).
        FormatError, ChecksumMismatch, StateMismatch, TransferError: from reading the items.
    """

    def __init__(
        self,
        path: PathLike,
        *,
        client: Optional[Client] = None,
        verify: bool = True,
        group: Optional["ProcessGroup"] = None,
        progress: ProgressArg = False,
    ) -> None:
        super().__init__()
        self._client = client
        self.progress = progress
        self._prog: Optional[Combined] = None  # during read_data
        self.loc = _Location(path, client)
        self.verify = verify
        self.group = group
        self._md: Optional[Metadata] = None
        self.storage_data: dict[Any, Any] = {}
        self.load_id = uuid.uuid4().hex
        self.rank: Optional[int] = None
        self._metadata_digest = ""  # SHA-256 of the .metadata read_metadata read

    def reset(self, checkpoint_id: Optional[PathLike] = None) -> None:
        """Starts a new load (a new load_id).

        Args:
            checkpoint_id: a new path to read from, or None to keep the current one.
        """
        self.storage_data = {}
        if checkpoint_id:
            self.loc = _Location(checkpoint_id, self._client)
        self.load_id = uuid.uuid4().hex

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        """Reads and unpickles .metadata (``__RANK.metadata`` when DCP passes a rank).

        Args:
            args, kwargs: DCP's arguments; ``rank`` is used.

        Returns:
            DCP's Metadata, with this load's id.

        Raises:
            FileNotFoundError (NoSuchKey on S3): no checkpoint at the path.
        """
        rank = kwargs.get("rank")
        name = METADATA_NAME if rank is None else f"__{rank}{METADATA_NAME}"
        raw = self.loc.read_bytes(name)
        # Which version of the checkpoint this rank planned from: ranks that share bytes
        # (group=) compare it first (_read_shared).
        self._metadata_digest = hashlib.sha256(raw).hexdigest()
        metadata: Metadata = pickle.loads(raw)
        if getattr(metadata, "storage_meta", None) is None:
            metadata.storage_meta = StorageMeta()
        cast(StorageMeta, metadata.storage_meta).load_id = self.load_id  # set just above
        return metadata

    def set_up_storage_reader(
        self, metadata: Metadata, is_coordinator: bool, *args: Any, **kwargs: Any
    ) -> None:
        """Takes the item locations from the metadata.

        Args:
            metadata: what read_metadata returned.
            is_coordinator: unused.
            args, kwargs: DCP's further arguments; ``rank`` is used.

        Raises:
            FormatError: the metadata has no storage_data.
        """
        self.storage_data = metadata.storage_data
        self._md = metadata
        self.rank = kwargs.get("rank")
        if self.storage_data is None:
            raise errors.FormatError(
                errors._CODES["EFMT_METADATA"], f"{self.loc.path}: .metadata has no storage_data"
            )

    def prepare_local_plan(self, plan: LoadPlan) -> LoadPlan:
        """Nothing to add to a rank's plan.

        Args:
            plan: this rank's plan.

        Returns:
            plan, unchanged.
        """
        return plan

    def prepare_global_plan(self, plans: list[LoadPlan]) -> list[LoadPlan]:
        """Nothing to add to the plans.

        Args:
            plans: every rank's plan (on the coordinator).

        Returns:
            plans, unchanged.
        """
        return plans

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> Future[None]:
        """Reads the plan's items: each object's header once, then one planned transfer of
        the needed byte ranges per object, up to 8 objects at once.

        Args:
            plan: this rank's plan.
            planner: gives the destination tensors and takes the results.

        Returns:
            A completed Future.

        Raises:
            FormatError: a tensor the metadata names is not in its object.
            StateMismatch: a destination's shape differs from the requested chunk.
            ChecksumMismatch, TransferError: the read failed.
        """
        with Combined(self.progress, f"dcp.load {os.path.basename(str(self.loc.path))}") as prog:
            self._prog = prog
            try:
                if self.group is not None:
                    return self._read_shared(plan, planner, self.group)
                return self._read_plain(plan, planner)
            finally:
                self._prog = None

    def _read_plain(self, plan: LoadPlan, planner: LoadPlanner) -> Future[None]:
        per_obj: dict[str, list[ReadItem]] = {}
        for req in plan.items:
            info = self.storage_data[req.storage_index]
            per_obj.setdefault(info.relative_path, []).append(req)
        jobs: list[tuple[str, list[tuple[ReadItem, torch.Tensor]]]] = []
        for rel, reqs in per_obj.items():
            byte_reqs = [r for r in reqs if r.type == LoadItemType.BYTE_IO]
            tensor_reqs = [r for r in reqs if r.type != LoadItemType.BYTE_IO]
            if byte_reqs:
                data = self.loc.read_bytes(rel)
                for req in byte_reqs:
                    planner.load_bytes(req, io.BytesIO(data))
            if tensor_reqs:
                # The planner is asked on this thread only: it need not be thread-safe.
                jobs.append((rel, [(r, planner.resolve_tensor(r).detach()) for r in tensor_reqs]))
        # Several objects at once (a resharded load reads many ranks' objects): each header
        # and each object's planned transfer on a thread of its own, all on the client's one
        # request budget, so no connection idles between objects. Results are copied and
        # committed here, in the plan's order of completion.
        workers = min(len(jobs), _OBJECTS_AT_ONCE)
        if workers <= 1:
            for rel, items in jobs:
                self._commit(self._read_object(rel, items), planner)
        else:
            with ThreadPoolExecutor(
                max_workers=workers, thread_name_prefix="s3direct-dcp-read"
            ) as ex:
                futs = [ex.submit(self._read_object, rel, items) for rel, items in jobs]
                try:
                    for f in as_completed(futs):
                        self._commit(f.result(), planner)
                except BaseException:
                    for f in futs:
                        f.cancel()
                    raise
        fut: Future[None] = Future()
        fut.set_result(None)
        return fut

    def _unit(self, req: ReadItem, target: torch.Tensor) -> Optional[_Unit]:
        """(object, tensor, byte offset, byte length) of a tensor item that is one contiguous
        byte range read straight into its destination, from the checkpoint's metadata (no
        header read); None for the others (read through a temporary)."""
        info = self.storage_data[req.storage_index]
        md = self._md.state_dict_metadata.get(req.storage_index.fqn) if self._md else None
        if not isinstance(md, TensorStorageMetadata) or info.tensor is None:
            return None
        chunk = next(
            (c for c in md.chunks if tuple(c.offsets) == tuple(req.storage_index.offset or ())),
            None,
        )
        if chunk is None and len(md.chunks) == 1:
            chunk = md.chunks[0]
        dt = md.properties.dtype
        if (
            chunk is None
            or not target.is_contiguous()
            or target.dtype != dt
            or target.device.type not in ("cpu", "cuda")
            or tuple(target.shape) != tuple(req.lengths)
        ):
            return None
        rng = _contiguous_range(
            tuple(chunk.sizes), list(req.storage_offsets), list(req.lengths), _dtypes_elem_size(dt)
        )
        if rng is None or rng[1] == 0:
            return None
        return (info.relative_path, info.tensor, rng[0], rng[1])

    def _read_shared(
        self, plan: LoadPlan, planner: LoadPlanner, group: "ProcessGroup"
    ) -> Future[None]:
        """read_data with group: byte ranges several ranks need are fetched by one of them
        (the least loaded, _ranks.plan) and sent to the others over the group; the rest as
        without a group. Every rank of the group runs it once per dcp.load."""
        sess = _ranks.Session(group, f"dcp.load {self.loc.path}")
        posts: list[
            list[tuple[ReadItem, torch.Tensor, Optional[tuple[torch.Tensor, list[int], list[int]]]]]
        ] = []
        try:
            shared, local = self._split_items(plan, planner)
            first: dict[_Unit, torch.Tensor] = {}
            for unit, _, target in shared:
                first.setdefault(unit, target)
            units, needers = self._agree_units(sess, first)
            pieces = _ranks.plan(
                [u[3] for u in units],
                [tuple(needers[u]) for u in units],
                sess.world,
                [False] * len(units),
            )
            views = {
                id(p): _ranks.byte_view(first[cast(_Unit, units[p.i])])
                for p in pieces
                if sess.rank in p.needers
            }
            ranges: dict[str, list[tuple[str, int, int, torch.Tensor]]] = {}
            for p in pieces:
                if p.owner == sess.rank:
                    u = cast(_Unit, units[p.i])
                    ranges.setdefault(u[0], []).append((u[1], u[2], u[3], first[u]))
            sess.fetch_and_share(
                pieces, views, lambda: posts.extend(self._fetch_objects(local, ranges))
            )
        except BaseException as e:
            sess.fail(e)
            raise
        for unit, req, target in shared:
            if target is not first[unit]:
                target.copy_(first[unit])  # one range asked for twice on this rank
            planner.commit_tensor(req, target)
        for post in posts:
            self._commit(post, planner)
        fut: Future[None] = Future()
        fut.set_result(None)
        return fut

    def _split_items(
        self,
        plan: LoadPlan,
        planner: LoadPlanner,
    ) -> tuple[
        list[tuple[_Unit, ReadItem, torch.Tensor]], dict[str, list[tuple[ReadItem, torch.Tensor]]]
    ]:
        """The plan's items: bytes loaded now; tensors that are whole byte ranges (shared
        over the group) apart from the others (read by this rank, per object)."""
        shared: list[tuple[_Unit, ReadItem, torch.Tensor]] = []
        local: dict[str, list[tuple[ReadItem, torch.Tensor]]] = {}
        for req in plan.items:
            info = self.storage_data[req.storage_index]
            if req.type == LoadItemType.BYTE_IO:
                planner.load_bytes(req, io.BytesIO(self.loc.read_bytes(info.relative_path)))
                continue
            target = planner.resolve_tensor(req).detach()
            unit = self._unit(req, target)
            if unit is None:
                local.setdefault(info.relative_path, []).append((req, target))
            else:
                shared.append((unit, req, target))
        return shared, local

    def _agree_units(
        self,
        sess: _ranks.Session,
        first: dict[_Unit, torch.Tensor],
    ) -> tuple[list[tuple[Any, ...]], dict[tuple[Any, ...], list[int]]]:
        """Every rank's units (and .metadata digest) exchanged: the sorted union of units and
        the ranks that need each. Ranks that read different .metadata fail, all of them."""
        got = sess.agree({"metadata": self._metadata_digest, "units": sorted(first)})
        if not all(
            isinstance(g, dict)
            and isinstance(g.get("metadata"), str)
            and isinstance(g.get("units"), list)
            for g in got
        ):
            raise errors.TransferError(
                errors._CODES["EPROTO"], f"{sess.what}: a rank posted a malformed plan"
            )
        odd = _ranks.differ(got, "metadata")
        if odd:
            # Each rank reads the objects its own .metadata names: two versions would give
            # the ranks two different checkpoints.
            raise errors.TransferError(
                errors._CODES["ECHANGED"],
                f"{sess.what}: the ranks read different versions of {METADATA_NAME} "
                f"({sess._ranks_str(odd)} differ from rank 0 of the group): the checkpoint "
                f"was replaced between the ranks' reads; nothing was read",
            )
        units = sorted({tuple(u) for g in got for u in g["units"]})
        needers: dict[tuple[Any, ...], list[int]] = {u: [] for u in units}
        for q, g in enumerate(got):
            for u in g["units"]:
                needers[tuple(u)].append(q)
        return units, needers

    def _fetch_objects(
        self,
        local: dict[str, list[tuple[ReadItem, torch.Tensor]]],
        ranges: dict[str, list[tuple[str, int, int, torch.Tensor]]],
    ) -> list[
        list[tuple[ReadItem, torch.Tensor, Optional[tuple[torch.Tensor, list[int], list[int]]]]]
    ]:
        """This rank's objects read side by side (_read_object each): its own items and the
        ranges it fetches for the group; what _commit needs, per object."""
        rels = sorted(set(local) | set(ranges))
        with ThreadPoolExecutor(
            max_workers=max(1, min(len(rels), _OBJECTS_AT_ONCE)),
            thread_name_prefix="s3direct-dcp-read",
        ) as ex:
            futs = [
                ex.submit(self._read_object, rel, local.get(rel, []), ranges.get(rel, []))
                for rel in rels
            ]
            try:
                return [f.result() for f in futs]
            except BaseException:
                for f in futs:
                    f.cancel()
                raise

    def _read_object(
        self,
        rel: str,
        items: list[tuple[ReadItem, torch.Tensor]],
        ranges: Optional[list[tuple[str, int, int, torch.Tensor]]] = None,
    ) -> list[tuple[ReadItem, torch.Tensor, Optional[tuple[torch.Tensor, list[int], list[int]]]]]:
        """Opens one object, reads the items' bytes into their destinations (or temporaries)
        and each (tensor, byte offset, byte length, destination) of ranges; returns what
        _commit needs for the items. Runs on any thread; never calls the planner."""
        uri = self.loc.join(rel)
        with _reader.CheckpointReader(uri, resolve(self._client)) as r:
            dests: list[_types.Dest] = []
            post: list[
                tuple[ReadItem, torch.Tensor, Optional[tuple[torch.Tensor, list[int], list[int]]]]
            ] = []
            for name, off, length, dst in ranges or []:
                e = r.by_name.get(name)
                if e is None or off + length > e.nbytes:
                    raise errors.FormatError(
                        errors._CODES["ENOTENSOR"],
                        f"{uri}: no tensor {name!r} of {off + length} bytes or more",
                    )
                whole = off == 0 and length == e.nbytes
                dests.append((e, dst, 0 if whole else off, 0 if whole else length))
            for req, target in items:
                info = self.storage_data[req.storage_index]
                e = r.by_name.get(info.tensor)
                if e is None:
                    raise errors.FormatError(
                        errors._CODES["ENOTENSOR"], f"{uri}: no tensor {info.tensor!r}"
                    )
                stored_dt = e.torch_dtype(uri)
                offsets = list(req.storage_offsets)
                lengths = list(req.lengths)
                if tuple(target.shape) != tuple(lengths):
                    raise errors.StateMismatch(
                        f"{uri}: {req.storage_index.fqn}: destination {list(target.shape)} "
                        f"!= requested chunk {lengths}"
                    )
                direct = (
                    target.is_contiguous()
                    and target.dtype == stored_dt
                    and target.device.type in ("cpu", "cuda")
                )
                rng = _contiguous_range(e.shape, offsets, lengths, _dtypes_elem_size(stored_dt))
                if direct and rng is not None:
                    whole = rng == (0, e.nbytes)
                    dests.append((e, target, 0 if whole else rng[0], 0 if whole else rng[1]))
                    post.append((req, target, None))
                else:
                    dev = target.device if target.device.type == "cuda" else "cpu"
                    tmp = torch.empty(e.shape, dtype=stored_dt, device=dev)
                    dests.append((e, tmp, 0, 0))
                    post.append((req, target, (tmp, offsets, lengths)))
            r.read(
                dests,
                verify=self.verify,
                progress=self._prog.part() if self._prog is not None else False,
            )
        return post

    @staticmethod
    def _commit(
        post: list[
            tuple[ReadItem, torch.Tensor, Optional[tuple[torch.Tensor, list[int], list[int]]]]
        ],
        planner: LoadPlanner,
    ) -> None:
        for req, target, chunk in post:
            if chunk is not None:
                t, offsets, lengths = chunk
                for d, (o, n) in enumerate(zip(offsets, lengths)):
                    t = t.narrow(d, o, n)
                target.copy_(t)
            planner.commit_tensor(req, target)


def _dtypes_elem_size(dt: torch.dtype) -> int:
    return torch.empty((), dtype=dt).element_size()
