"""Read once, share: load(group=pg) and load_into(group=pg) over a torch.distributed group.

Every rank opens the checkpoint (its headers only) and works out which tensors it needs. Then:

    phase 1   every rank posts {status, fingerprint of the checkpoint, needed tensors} to the
              group's store and reads everyone's: a rank that failed to open makes all raise
    plan      the same pure function on every rank (plan()): tensors every rank needs are cut
              into W contiguous runs of file order, balanced by bytes, one run per rank
              (whole tensors; a large tensor without a CRC32C to check may be cut by bytes);
              a tensor a few ranks need goes to the least loaded of them; one rank's alone
              stays its own
    fetch     each rank reads its pieces straight into its destination tensors: one planned
              transfer of the C reader (CheckpointReader.read), nothing else touches S3
    phase 2   every rank posts its fetch status: a failed fetch makes all raise, naming the
              rank and carrying its error text, before any collective starts
    exchange  torch.distributed moves the bytes: per owner, in file order, one broadcast per
              large piece straight from/into the destination, small pieces packed into
              buffers of up to 32 MiB; pieces only some ranks need go point to point
              (batch_isend_irecv) to those ranks only

The status exchanges go through the group's store (ProcessGroup.get_group_store, the TCP
store torch.distributed rendezvoused on), not a collective: a rank that died or hangs is named
by every other rank when the group's timeout passes, and a failure posts its text there.
Byte movement between ranks is torch.distributed's own (gloo, NCCL); bytes from S3 only the
C library's.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import time
from typing import TYPE_CHECKING, Any, Callable, Protocol, Sequence, Tuple

import torch

from . import errors
from ._progress import ProgressArg
from ._types import Dest, TensorEntry

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup


class CheckpointReader(Protocol):
    """What a Session needs of _reader.CheckpointReader (declared here, not imported:
    _checkpoint imports this module)."""

    uri: str

    @property
    def tensors(self) -> list[TensorEntry]: ...

    def shards(self) -> list[tuple[str, int, int]]: ...

    def versions(self) -> list[str]: ...

    def read(
        self, dests: Sequence[Dest], *, progress: ProgressArg = False, verify: bool = True
    ) -> None: ...


# Pieces at least this large are broadcast in place (no copy); smaller ones are packed into
# buffers of this size, so a checkpoint of many small tensors takes few collectives.
BUCKET = 32 << 20

# Seconds the process hosting the store waits, before it raises a failure, for the other
# ranks to have read it (Session._leave).
LINGER = 10.0

# Seconds a rank whose exchange failed waits for the others to report the same, before it
# names those that did not (Session._exchange_failed).
EXCHANGE_WAIT = 5.0

# The load count of each group in this process: the store keys of one load(group=) are the
# same on every rank as long as every rank calls load/load_into with the group in the same
# order, which collectives require anyway.
_seq: dict[str, int] = {}


class Piece:
    """Bytes [off, off + length) of input tensor i: fetched by owner, needed by needers
    (group ranks, sorted; the owner is one of them)."""

    __slots__ = ("i", "off", "length", "owner", "needers")

    def __init__(self, i: int, off: int, length: int, owner: int, needers: Tuple[int, ...]) -> None:
        self.i, self.off, self.length, self.owner, self.needers = i, off, length, owner, needers

    def __repr__(self) -> str:
        return f"Piece({self.i}, {self.off}, {self.length}, {self.owner}, {self.needers})"

    def key(self) -> Tuple[int, int, int, int, Tuple[int, ...]]:
        return (self.i, self.off, self.length, self.owner, self.needers)


def plan(
    sizes: Sequence[int], needers: Sequence[Tuple[int, ...]], world: int, splittable: Sequence[bool]
) -> list[Piece]:
    """Who fetches what. Pure and deterministic: every rank computes the same plan.

    Args:
        sizes: bytes of each tensor, in file order (the reader's order).
        needers: for each tensor, the group ranks that need it (sorted; may be empty).
        world: the group's size.
        splittable: whether a tensor may be cut into byte ranges (no CRC32C to check, which
            needs the whole tensor read by one rank).

    Returns:
        The pieces, tensors needed by every rank first (file order), then the others; empty
        tensors and tensors nobody needs have none.
    """
    load = [0] * world
    full = [i for i, n in enumerate(needers) if len(n) == world and sizes[i] > 0]
    out: list[Piece] = []
    everyone = tuple(range(world))
    total = sum(sizes[i] for i in full)
    cum, r = 0, 0  # bytes of `full` before the current tensor; the rank filling now
    for i in full:
        n, off = sizes[i], 0
        while off < n:
            end_r = (r + 1) * total // world  # rank r's run ends here (cumulative bytes)
            start = cum + off
            if r == world - 1 or cum + n <= end_r:
                out.append(Piece(i, off, n - off, r, everyone))
                load[r] += n - off
                break
            if splittable[i] and n > total // world // 2:
                # A large tensor crossing the boundary: cut it there.
                cut = end_r - cum
                if cut > off:
                    out.append(Piece(i, off, cut - off, r, everyone))
                    load[r] += cut - off
                    off = cut
                r += 1
            elif end_r - start >= cum + n - end_r:
                # Most of it before the boundary: whole to r, the next run starts after it.
                out.append(Piece(i, off, n - off, r, everyone))
                load[r] += n - off
                r += 1
                break
            else:
                r += 1
        cum += n
    # Tensors some ranks need: whole, to the least loaded of those ranks.
    for i, who in enumerate(needers):
        if 0 < len(who) < world and sizes[i] > 0:
            owner = min(who, key=lambda q: (load[q], q))
            load[owner] += sizes[i]
            out.append(Piece(i, 0, sizes[i], owner, tuple(who)))
    return out


def byte_view(t: torch.Tensor) -> torch.Tensor:
    """The bytes of a contiguous tensor as a flat uint8 tensor sharing its memory."""
    return t.detach().reshape(-1).view(torch.uint8)


# ---- the group ------------------------------------------------------------------------------
def _dist() -> Any:
    import torch.distributed as dist

    return dist


def _timeout(pg: "ProcessGroup", backend: str) -> datetime.timedelta:
    """The group's timeout (init_process_group / new_group(timeout=...)). torch has no public
    getter for it: read from the backend's options, else torch's default."""
    dist = _dist()
    try:
        dev = torch.device("cuda" if "nccl" in backend else "cpu")
        t = pg._get_backend(dev).options._timeout
        if isinstance(t, datetime.timedelta):
            return t
    except Exception:
        pass
    t = dist.default_pg_timeout
    assert isinstance(t, datetime.timedelta)
    return t


# What a rank posts in the store is data, never code: JSON of {"s3direct": 1, "kind": "ok" or
# "fail", "value": ...}, read back with a size cap and checked field by field. The store is
# torch's TCPStore, which listens on every interface without authentication: a pickle read
# from it ran whatever another client of the store wrote under the key a load waited for.
_POST_MAX = 64 << 20
_DETAIL = (
    "http_status",
    "operation",
    "bucket",
    "key",
    "s3_code",
    "s3_message",
    "request_id",
    "name",
)


def _encode(kind: str, value: Any) -> bytes:
    return json.dumps({"s3direct": 1, "kind": kind, "value": value}, separators=(",", ":")).encode()


def _decode(blob: bytes) -> Tuple[str, Any]:
    """(kind, value) of a post; ValueError for anything else."""
    if not isinstance(blob, (bytes, bytearray)) or len(blob) > _POST_MAX:
        raise ValueError("not bytes, or over the size cap")
    d = json.loads(bytes(blob).decode("utf-8"))
    if (
        not isinstance(d, dict)
        or d.get("s3direct") != 1
        or d.get("kind") not in ("ok", "fail")
        or "value" not in d
    ):
        raise ValueError("not an s3direct post")
    return str(d["kind"]), d["value"]


def _describe(e: BaseException) -> dict[str, Any]:
    """A rank's failure as its peers will raise it: an S3DirectError's class name, code,
    message and detail, else its type name and text."""
    if isinstance(e, errors.S3DirectError):
        return {
            "cls": type(e).__name__,
            "code": int(e.code),
            "message": str(e.message),
            "fields": {
                k: v for k, v in e.__dict__.items() if k in _DETAIL and isinstance(v, (str, int))
            },
        }
    return {"cls": "", "code": 0, "message": f"{type(e).__name__}: {e}", "fields": {}}


def differ(infos: Sequence[dict[str, Any]], field: str) -> list[int]:
    """The group ranks whose post has another value of field than rank 0's."""
    return [q for q, g in enumerate(infos) if g[field] != infos[0][field]]


def _check_info(g: Any) -> dict[str, Any]:
    """A rank's phase-1 post, checked field by field (ValueError, TypeError, KeyError)."""
    if not isinstance(g, dict):
        raise TypeError("not an object")
    if not (
        isinstance(g["uri"], str)
        and isinstance(g["fp"], str)
        and isinstance(g["need"], str)
        and isinstance(g["verify"], bool)
        and isinstance(g["versions"], list)
        and isinstance(g["devices"], list)
        and all(isinstance(v, str) for v in g["versions"] + g["devices"])
    ):
        raise TypeError("a field of the wrong type")
    return g


class Session:
    """One load(group=) on this rank: the store phases and the exchange.

    Args:
        group: the process group (torch.distributed.group.WORLD or a subgroup).
        what: the operation as messages name it ("load s3://b/k").

    Raises:
        InvalidArgument: torch.distributed is not initialized, or this rank is not in group.
    """

    def __init__(self, group: "ProcessGroup", what: str) -> None:
        dist = _dist()
        if not dist.is_available() or not dist.is_initialized():
            raise errors.InvalidArgument(
                errors.S3D_EINVAL,
                f"{what}: group= needs torch.distributed initialized (init_process_group)",
            )
        self.pg = group
        self.what = what
        self.rank = dist.get_rank(group)
        if self.rank < 0:
            raise errors.InvalidArgument(
                errors.S3D_EINVAL, f"{what}: this process is not a rank of group="
            )
        self.world = dist.get_world_size(group)
        self.backend = str(dist.get_backend(group))
        self.timeout = _timeout(group, self.backend)
        name = str(getattr(group, "group_name", id(group)))
        seq = _seq.get(name, 0)
        _seq[name] = seq + 1
        self.seq = seq
        self.prefix = f"s3direct/load/{seq}"
        self.store: Any = group.get_group_store()
        self.posted = 0  # phases this rank has posted
        self.left = False  # _leave() done

    def _global(self, r: int) -> int:
        g: int = _dist().get_global_rank(self.pg, r)
        return g

    def _ranks_str(self, ranks: Sequence[int]) -> str:
        word = "rank" if len(ranks) == 1 else "ranks"
        return (
            f"{word} {', '.join(map(str, ranks))} of the group (global "
            f"{', '.join(str(self._global(r)) for r in ranks)})"
        )

    def _post(self, phase: int, payload: bytes) -> None:
        self.store.set(f"{self.prefix}/{phase}/{self.rank}", payload)
        self.posted = phase

    def _gather(self, phase: int) -> list[Any]:
        keys = [f"{self.prefix}/{phase}/{r}" for r in range(self.world)]
        try:
            try:
                self.store.wait(keys, self.timeout)
            except Exception as e:
                missing = [r for r in range(self.world) if not self.store.check([keys[r]])]
                if missing:
                    self._leave(skip=missing)
                    raise errors.Timeout(
                        errors._CODES["ETIMEDOUT"],
                        f"{self.what}: {self._ranks_str(missing)} did not report within "
                        f"{self.timeout.total_seconds():g} s (the process group's timeout): "
                        f"died, hangs, or did not call it with this group",
                    ) from e
            blobs = [self.store.get(k) for k in keys]
        except errors.S3DirectError:
            raise
        except Exception as e:
            raise errors.TransferError(
                errors._CODES["ENETWORK"],
                f"{self.what}: lost the process group's store ({e}): the process that hosts "
                f"it (global rank 0, with env:// rendezvous) failed or exited",
            ) from e
        vals = []
        for r, blob in enumerate(blobs):
            try:
                vals.append(_decode(blob))
            except (ValueError, UnicodeDecodeError) as e:
                self._leave()
                raise errors.TransferError(
                    errors._CODES["EPROTO"],
                    f"{self.what}: {self._ranks_str([r])} posted a value that is not "
                    f"s3direct's under {keys[r]} ({e}): another client of the process "
                    f"group's store wrote it; nothing of it was run",
                ) from None
        for r, v in enumerate(vals):
            if v[0] == "fail":
                self._leave()
                self._raise_peer(r, v[1])
        # Everyone has read the previous phase's keys (of this load, or the last phase of the
        # previous load on this group): this rank's can go.
        if phase > 1:
            self._delete(f"{self.prefix}/{phase - 1}/{self.rank}")
        elif self.seq > 0:
            self._delete(f"s3direct/load/{self.seq - 1}/2/{self.rank}")
        return [v[1] for v in vals]

    def _leave(self, skip: Sequence[int] = ()) -> None:
        """Before this rank raises: says it is done with the store, and if this process hosts
        the store (global rank 0 with env:// rendezvous: its exit takes the store, and a
        failure's text, away from the ranks still reading it), waits a little for the other
        ranks (not those in skip) to say the same. Once per load. Never raises."""
        if self.left:
            return
        self.left = True
        try:
            self.store.set(f"{self.prefix}/done/{self.rank}", b"1")
            if _dist().get_rank() != 0:
                return
            keys = [
                f"{self.prefix}/done/{r}"
                for r in range(self.world)
                if r != self.rank and r not in skip
            ]
            if keys:
                wait = min(LINGER, self.timeout.total_seconds())
                self.store.wait(keys, datetime.timedelta(seconds=wait))
        except Exception:
            pass

    def _delete(self, key: str) -> None:
        try:
            self.store.delete_key(key)
        except Exception:
            pass  # stores without delete (FileStore on old torch) keep the small key

    def _raise_peer(self, r: int, err: Any) -> None:
        head = f"{self.what}: {self._ranks_str([r])} failed: "
        if not isinstance(err, dict):
            raise errors.S3DirectError(errors._CODES["EIO"], head + "(no detail)")
        message = str(err.get("message", ""))[:4096]
        code = err.get("code")
        name = err.get("cls")
        found = getattr(errors, name, None) if isinstance(name, str) and name else None
        if (
            isinstance(code, int)
            and isinstance(found, type)
            and issubclass(found, errors.S3DirectError)
        ):
            raw = err.get("fields")
            # Each detail field with its own type (strings; http_status an int).
            fields: dict[str, Any] = {
                k: v
                for k, v in (raw if isinstance(raw, dict) else {}).items()
                if k in _DETAIL and isinstance(v, str if k != "http_status" else int)
            }
            try:
                e = found(code, head + message, **fields)
            except TypeError:  # a subclass with its own constructor (StateMismatch)
                e = errors.S3DirectError(code, head + message, **fields)
            raise e
        raise errors.S3DirectError(errors._CODES["EIO"], head + message)

    def fail(self, e: BaseException) -> None:
        """Posts this rank's failure to the phases not posted yet, so that every peer raises
        with its text instead of waiting for the timeout. Never raises."""
        try:
            blob = _encode("fail", _describe(e))
            for phase in range(self.posted + 1, 3):
                self._post(phase, blob)
        except Exception:
            pass
        self._leave()

    # ---- the read --------------------------------------------------------------------------
    def read(
        self, r: "CheckpointReader", dests: Sequence["Dest"], *, progress: ProgressArg, verify: bool
    ) -> None:
        """Fills dests (whole tensors: offset and length 0) on this rank, fetching only this
        rank's share from storage and the rest from the ranks that fetched it.

        Args:
            r: the open checkpoint (every rank opened the same one).
            dests: (entry, tensor, 0, 0); several may name one entry.
            progress, verify: as for CheckpointReader.read (progress counts this rank's fetch).

        Raises:
            Timeout: a rank of the group did not report within the group's timeout.
            S3DirectError (the failing rank's class): a rank failed; the message names it.
            InvalidArgument: the ranks passed different verify=, destination devices or URIs.
            TransferError (S3D_ECHANGED): the ranks opened different versions (a replace).
            FormatError: the ranks opened checkpoints with different tensors.
            TransferError: the exchange between the ranks failed (the ranks that did not
                report after it named).
        """
        by_entry: dict[int, list[torch.Tensor]] = {}
        for e, t, off, length in dests:
            assert off == 0 and length == 0, "shared reads take whole tensors"
            by_entry.setdefault(e.index, []).append(t)
        n = len(r.tensors)
        need = bytearray((n + 7) // 8)
        for i in by_entry:
            need[i // 8] |= 1 << (i % 8)
        fp = hashlib.sha256(
            repr([(e.name, e.dtype, e.shape, e.nbytes) for e in r.tensors] + [r.shards()]).encode()
        ).hexdigest()
        devices = sorted({t.device.type for ts in by_entry.values() for t in ts})
        mine_info = {
            "uri": r.uri,
            "versions": r.versions(),
            "fp": fp,
            "need": bytes(need).hex(),
            "verify": bool(verify),
            "devices": devices,
        }
        got = self.agree(mine_info)
        try:
            infos = [_check_info(g) for g in got]
            needs = [bytes.fromhex(g["need"]) for g in infos]
            if any(len(b) != len(need) for b in needs):
                raise ValueError("wrong length")
        except (ValueError, TypeError, KeyError) as bad:
            raise errors.TransferError(
                errors._CODES["EPROTO"], f"{self.what}: a rank posted a malformed need map ({bad})"
            ) from None
        self._compare(infos)
        needers = [
            tuple(q for q in range(self.world) if needs[q][i // 8] >> (i % 8) & 1) for i in range(n)
        ]
        pieces = plan(
            [e.nbytes for e in r.tensors],
            needers,
            self.world,
            [not (verify and e.has_crc) for e in r.tensors],
        )
        views = {id(p): self._view(by_entry, r, p) for p in pieces if self.rank in p.needers}
        mine: list[Dest] = []
        for p in pieces:
            if p.owner != self.rank:
                continue
            e = r.tensors[p.i]
            if p.off == 0 and p.length == e.nbytes:
                mine.append((e, by_entry[p.i][0], 0, 0))
            else:
                mine.append((e, views[id(p)], p.off, p.length))
        self.fetch_and_share(pieces, views, lambda: r.read(mine, progress=progress, verify=verify))
        # A stored tensor read into several destinations (tied names in load_into).
        for ts in by_entry.values():
            for t in ts[1:]:
                t.copy_(ts[0])

    def _compare(self, infos: Sequence[dict[str, Any]]) -> None:
        """What every rank must agree on before a plan is made, each with an error naming the
        ranks that differ from rank 0 of the group: the arguments that shape the plan and the
        collectives (verify=, where the destinations are), then the checkpoint itself (every
        shard's version: the ETag of an object, the inode and times of a file; then its
        tensors). Each rank reads its share from what it opened, so ranks that opened two
        versions would put together a mix of both."""
        for field, what in (("verify", "verify="), ("devices", "destination devices")):
            odd = differ(infos, field)
            if odd:
                raise errors.InvalidArgument(
                    errors.S3D_EINVAL,
                    f"{self.what}: the ranks passed different {what} ({self._ranks_str(odd)}: "
                    f"{infos[odd[0]][field]}; rank 0: {infos[0][field]}); every rank of the "
                    f"group must pass the same",
                )
        odd = differ(infos, "versions")
        if odd:
            other = [q for q in odd if infos[q]["uri"] != infos[0]["uri"]]
            if other:
                raise errors.InvalidArgument(
                    errors.S3D_EINVAL,
                    f"{self.what}: the ranks load different checkpoints "
                    f"({self._ranks_str(other)}: {infos[other[0]]['uri']}; rank 0: "
                    f"{infos[0]['uri']}); every rank of the group must load the same one",
                )
            where = (
                "the object's ETag"
                if infos[0]["uri"].startswith("s3://")
                else "the file's inode or modification time"
            )
            raise errors.TransferError(
                errors._CODES["ECHANGED"],
                f"{self.what}: the ranks opened different versions of the checkpoint "
                f"({self._ranks_str(odd)} differ from rank 0 of the group in {where}): it was "
                f"replaced between the ranks' opens, or the ranks read node-local copies "
                f"(group= shares one stored checkpoint; for node-local copies, use a group per "
                f"node); nothing was read",
            )
        odd = differ(infos, "fp")
        if odd:
            raise errors.FormatError(
                errors.S3D_EFMT_METADATA,
                f"{self.what}: the ranks opened checkpoints with different tensors "
                f"({self._ranks_str(odd)} differ from rank 0 of the group)",
            )

    def agree(self, info: Any) -> list[Any]:
        """Phase 1: posts this rank's info (JSON: lists, str, int, float, bool, None; tuples
        come back as lists) and returns every rank's, in group rank order.

        Raises:
            Timeout: a rank did not post within the group's timeout (named).
            S3DirectError: a rank posted a failure (named, with its text).
        """
        self._post(1, _encode("ok", info))
        return self._gather(1)

    def fetch_and_share(
        self, pieces: Sequence[Piece], views: dict[int, torch.Tensor], fetch: Callable[[], None]
    ) -> None:
        """Runs this rank's fetch (of the pieces it owns, into views), agrees that every rank's
        succeeded (phase 2), then moves the pieces between the ranks that need them.

        Args:
            pieces: the plan, the same on every rank.
            views: id(piece) -> this rank's contiguous uint8 destination of the piece, for
                every piece whose needers include this rank.
            fetch: reads this rank's pieces into their views.

        Raises:
            The fetch's own error on this rank; on the others as agree() raises.
        """
        try:
            fetch()
        except BaseException as ex:
            self.fail(ex)
            raise
        self._post(2, _encode("ok", ""))
        self._gather(2)
        try:
            self._exchange(pieces, views)
        except errors.S3DirectError:
            raise
        except Exception as ex:
            raise self._exchange_failed(ex) from ex

    def _exchange_failed(self, ex: Exception) -> errors.S3DirectError:
        """The error for a collective of the exchange that raised (torch.distributed's own
        RuntimeError: a peer died, stopped past the group's timeout, or the backend broke):
        this rank says so in the store (phase 3), waits a little for the others to say the
        same, and names those that did not: the ranks that died or stopped."""
        text = " ".join(str(ex).split())[:300]
        missing: list[int] = []
        try:
            self.store.set(f"{self.prefix}/3/{self.rank}", _encode("fail", _describe(ex)))
            keys = [f"{self.prefix}/3/{q}" for q in range(self.world)]
            deadline = time.monotonic() + min(EXCHANGE_WAIT, self.timeout.total_seconds())
            while True:
                missing = [q for q in range(self.world) if not self.store.check([keys[q]])]
                if not missing or time.monotonic() >= deadline:
                    break
                time.sleep(0.05)
        except Exception:
            missing = []  # the store went with its host (global rank 0): nobody to name
        self._leave(skip=missing)
        who = (
            f"{self._ranks_str(missing)} did not report after it: died or stopped"
            if missing
            else "every rank of the group saw it fail"
        )
        return errors.TransferError(
            errors._CODES["ENETWORK"],
            f"{self.what}: the exchange of tensor bytes between the ranks failed "
            f"({type(ex).__name__}: {text}); {who}",
        )

    @staticmethod
    def _view(
        by_entry: dict[int, list[torch.Tensor]], r: "CheckpointReader", p: Piece
    ) -> torch.Tensor:
        flat = byte_view(by_entry[p.i][0])
        assert flat.numel() == r.tensors[p.i].nbytes
        return flat.narrow(0, p.off, p.length)

    def _comm_ok(self, t: torch.Tensor) -> bool:
        """Whether the group's backend moves this tensor where it is."""
        if "nccl" in self.backend and "gloo" not in self.backend:
            return t.device.type == "cuda"
        return t.device.type == "cpu" or "nccl" in self.backend

    def _comm_device(self) -> torch.device:
        if "nccl" in self.backend:
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device("cpu")

    def _broadcast_batch(
        self, batch: list[Piece], owner: int, dev: torch.device, views: dict[int, torch.Tensor]
    ) -> None:
        """The owner's small pieces packed into one buffer, broadcast, unpacked; batch emptied."""
        if not batch:
            return
        size = sum(p.length for p in batch)
        buf = torch.empty(size, dtype=torch.uint8, device=dev)
        pos = 0
        if self.rank == owner:
            for p in batch:
                buf[pos : pos + p.length].copy_(views[id(p)])
                pos += p.length
        _dist().broadcast(buf, src=self._global(owner), group=self.pg)
        if self.rank != owner:
            pos = 0
            for p in batch:
                views[id(p)].copy_(buf[pos : pos + p.length])
                pos += p.length
        batch.clear()

    def _exchange(self, pieces: Sequence[Piece], views: dict[int, torch.Tensor]) -> None:
        dist = _dist()
        full = [p for p in pieces if len(p.needers) == self.world and self.world > 1]
        dev = self._comm_device()
        for owner in range(self.world):
            src = self._global(owner)
            batch: list[Piece] = []
            for p in full:
                if p.owner != owner:
                    continue
                v = views[id(p)]
                if p.length >= BUCKET and self._comm_ok(v):
                    self._broadcast_batch(batch, owner, dev, views)
                    dist.broadcast(v, src=src, group=self.pg)
                    continue
                if sum(q.length for q in batch) + p.length > BUCKET:
                    self._broadcast_batch(batch, owner, dev, views)
                batch.append(p)
            self._broadcast_batch(batch, owner, dev, views)
        # Pieces only some ranks need: from the owner to each of them, point to point.
        ops: list[Any] = []
        back: list[Tuple[torch.Tensor, torch.Tensor]] = []
        for k, p in enumerate(pieces):
            if len(p.needers) in (1, self.world) or self.rank not in p.needers:
                continue
            v = views[id(p)]
            c = v if self._comm_ok(v) else torch.empty(v.shape, dtype=v.dtype, device=dev)
            if self.rank == p.owner:
                if c is not v:
                    c.copy_(v)
                for q in p.needers:
                    if q != p.owner:
                        ops.append(dist.P2POp(dist.isend, c, self._global(q), self.pg, k))
            else:
                ops.append(dist.P2POp(dist.irecv, c, self._global(p.owner), self.pg, k))
                if c is not v:
                    back.append((v, c))
        if ops:
            for w in dist.batch_isend_irecv(ops):
                w.wait()
        for v, c in back:
            v.copy_(c)
