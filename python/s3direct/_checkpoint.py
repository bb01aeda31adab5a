"""load: a checkpoint's tensors allocated and read (CheckpointReader, _reader.py), its
structure rebuilt (_tree). save and save_async are in _save.py.

Python never touches tensor bytes here: it hands the C reader (data_ptr, capacity) of each
freshly allocated destination. See docs/python.md for the user-facing contract.
"""

from __future__ import annotations

import contextlib
import gc
import os
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Optional, Sequence, Union

import torch

from . import _ranks, _tree, errors
from ._bulkload import load_all
from ._progress import ProgressArg
from ._reader import CheckpointReader, _tree_doc
from ._types import Dest
from ._uri import PathLike
from .client import Client

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup

DeviceArg = Union[str, int, torch.device, None]


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """The cyclic GC off while millions of acyclic objects (entries, tensors, tree nodes) are
    made: each collection would walk all of them again."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _device(device: Union[str, int, torch.device]) -> torch.device:
    d = torch.device(device)
    if d.type == "cuda" and d.index is None:
        d = torch.device("cuda", torch.cuda.current_device())
    return d


def _select(
    r: CheckpointReader, names: Iterable[str], keys: Union[str, Sequence[str], None]
) -> list[str]:
    """Names among `names` that keys select: a key selects the tensor of that name and every
    tensor under it (name + "."). Unknown keys -> KeyError listing them."""
    if keys is None:
        return list(names)
    if isinstance(keys, str):
        keys = [keys]
    chosen: list[str] = []
    unknown: list[str] = []
    for k in keys:
        hit = [n for n in names if n == k or n.startswith(k + ".")]
        if not hit:
            unknown.append(k)
        chosen.extend(hit)
    if unknown:
        raise KeyError(f"{r.uri}: no tensor at {', '.join(map(repr, unknown))}")
    return list(dict.fromkeys(chosen))


def _map_location(device: DeviceArg, map_location: Any) -> Any:
    """device, or torch.load's map_location given as its alias (a device or device string)."""
    if map_location is None:
        return device
    if isinstance(map_location, (dict, type(lambda: 0))) or callable(map_location):
        raise errors.InvalidArgument(
            errors.S3D_EINVAL,
            "map_location must be a device (str or torch.device) here: tensors are allocated "
            "on it before the bytes arrive, so a dict or a function cannot remap them",
        )
    if device is not None and torch.device(device) != torch.device(map_location):
        raise errors.InvalidArgument(
            errors.S3D_EINVAL,
            f"device={device!r} and map_location={map_location!r} disagree; give one",
        )
    return map_location


def load(
    uri: PathLike,
    *,
    device: DeviceArg = None,
    keys: Union[str, Sequence[str], None] = None,
    progress: ProgressArg = False,
    client: Optional[Client] = None,
    allow_pickle: bool = False,
    verify: bool = True,
    map_location: DeviceArg = None,
    group: Optional["ProcessGroup"] = None,
) -> Any:
    """Loads what save() stored: the same structure, tensors allocated on device.

    Args:
        uri: "s3://bucket/key", a local path, file:// URI, index URI or model folder.
        device: where tensors are allocated ("cpu", "cuda", "cuda:N"); map_location is an
            alias, as torch.load spells it.
        keys: paths (tensor names or prefixes such as "model"): only those tensors are
            fetched, returned as a flat dict name -> tensor.
        progress: True (bar or summary line) or a callable(done_bytes, total_bytes).
        client: the Client to use. allow_pickle: accept pickled leaves. verify: check CRC32C.
        group: a torch.distributed process group whose ranks all call load() with it: each
            rank fetches its share of the bytes (whole tensors, balanced) and the group's
            backend (gloo, NCCL) moves the rest between ranks, so the checkpoint is read from
            storage once per group. keys may differ between ranks: only what some rank asks
            for is read, and sent only to the ranks that asked (see docs/python.md).

    Returns:
        The saved structure; a plain safetensors file (no s3direct tree) gives a dict
        name -> tensor.

    Raises:
        NoSuchKey / NoSuchFile, FormatError (a torch.save file says so), ChecksumMismatch,
        PickleRefused, KeyError (keys not in the checkpoint).
        With group: the error of a rank that failed, on every rank, naming it; Timeout when a
        rank does not report within the group's timeout.
    """
    device = _map_location(device, map_location)
    dev = _device("cpu" if device is None else device)
    alloc_dev = dev if dev.type in ("cpu", "cuda") else torch.device("cpu")
    sess = None if group is None else _ranks.Session(group, f"load {os.fspath(uri)}")
    with _gc_paused():
        return _load(uri, dev, alloc_dev, keys, progress, client, allow_pickle, verify, sess)


@contextlib.contextmanager
def _shared(sess: Optional[_ranks.Session]) -> Iterator[None]:
    """With group=: a failure on this rank is posted for the other ranks before it propagates,
    so that they raise with its text instead of waiting for the group's timeout."""
    try:
        yield
    except BaseException as e:
        if sess is not None:
            sess.fail(e)
        raise


def _read(
    r: CheckpointReader,
    dests: Sequence[Dest],
    sess: Optional[_ranks.Session],
    progress: ProgressArg,
    verify: bool,
) -> None:
    if sess is None:
        r.read(dests, progress=progress, verify=verify)
    else:
        sess.read(r, dests, progress=progress, verify=verify)


def _load(
    uri: PathLike,
    dev: torch.device,
    alloc_dev: torch.device,
    keys: Union[str, Sequence[str], None],
    progress: ProgressArg,
    client: Optional[Client],
    allow_pickle: bool,
    verify: bool,
    sess: Optional[_ranks.Session],
) -> Any:
    with _shared(sess), CheckpointReader(uri, client) as r:
        doc = _tree_doc(r)
        if keys is None and sess is None:
            return load_all(r, doc, alloc_dev, dev, allow_pickle, progress, verify)
        if doc is not None:
            tree_names: list[str] = []
            for path, tag, node in _tree.walk(doc["tree"]):
                if tag == "p" and not allow_pickle and keys is None:
                    raise _tree.pickle_refused(r.uri, path)
                if tag == "t":
                    if node["t"] not in r.by_name:
                        raise errors.FormatError(
                            errors.S3D_EFMT_METADATA,
                            f"{r.uri}: the tree names tensor {node['t']!r}, which the file "
                            f"does not hold",
                        )
                    tree_names.append(node["t"])
        else:
            tree_names = [e.name for e in r.tensors]
        # By keys, a tied name (stored once under the name it is tied to) is selected as
        # load() returns it, and comes back tied to that tensor.
        tied = r.tied_names() if keys is not None else {}
        chosen = _select(r, tree_names + list(tied), keys)
        out: dict[str, torch.Tensor] = {}
        dests: list[Dest] = []
        stored: dict[str, torch.Tensor] = {}
        for name in chosen:
            sname = tied.get(name, name)
            t = stored.get(sname)
            if t is None:
                e = r.by_name[sname]
                t = torch.empty(e.shape, dtype=e.torch_dtype(r.uri), device=alloc_dev)
                stored[sname] = t
                dests.append((e, t, 0, 0))
            out[name] = t
        _read(r, dests, sess, progress, verify)
    if alloc_dev != dev:
        out = {k: v.to(dev) for k, v in out.items()}
    if doc is None or keys is not None:
        return out
    return _tree.unflatten(doc["tree"], out, allow_pickle=allow_pickle)
