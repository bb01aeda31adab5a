"""load_into: a checkpoint read into existing tensors (modules, state dicts, optimizers), and
the plan it shares with load_into(wait=False) (_stream.LoadHandle). Split from _checkpoint.py,
which keeps saving, the reader and load()."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Dict, List, Optional, cast

import torch

from . import _dtypes, _ranks, _tree, errors
from ._checkpoint import CheckpointReader, _read, _shared, _tie_key, _tree_doc
from ._progress import ProgressArg
from ._types import Dest
from ._uri import PathLike
from .client import Client

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup


# ---- load_into -------------------------------------------------------------------------------
def _target_tensors(target: Any) -> tuple[dict[str, tuple[_tree.Path, torch.Tensor]],
                                          list[tuple[_tree.Path, torch.optim.Optimizer]],
                                          list[str]]:
    """(names -> (path, tensor), [(path, optimizer)], [module prefix]) with the names save()
    would give."""
    names = _tree.Flattened()
    found: dict[str, tuple[_tree.Path, torch.Tensor]] = {}
    optims: list[tuple[_tree.Path, torch.optim.Optimizer]] = []
    modules: list[str] = []

    def walk(obj: Any, path: _tree.Path) -> None:
        if isinstance(obj, torch.Tensor):
            found[names.unique_name(path)] = (path, obj)
        elif isinstance(obj, torch.nn.Module):
            modules.append(".".join(str(p) for p in path))
            walk(obj.state_dict(), path)
        elif isinstance(obj, torch.optim.Optimizer):
            optims.append((path, obj))
        elif isinstance(obj, dict):
            for k, v in obj.items():
                walk(v, path + (k,))
        elif isinstance(obj, (list, tuple)):
            for i, v in enumerate(obj):
                walk(v, path + (i,))

    walk(target, ())
    if isinstance(target, dict) and target and all(isinstance(v, torch.Tensor)
                                                   for v in target.values()):
        modules.append("")  # a state dict: it stands for the whole checkpoint, as a module does
    return found, optims, modules


def _subtree(node: _tree.Node, path: _tree.Path, uri: str) -> _tree.Node:
    for comp in path:
        nxt = None
        if isinstance(node, dict) and "d" in node:
            for k, v in node["d"]:
                if k == comp or str(k) == str(comp):
                    nxt = v
                    break
        elif isinstance(node, dict) and ("l" in node or "T" in node):
            items = cast(List[Any], node.get("l", node.get("T")))
            if isinstance(comp, int) and 0 <= comp < len(items):
                nxt = items[comp]
        if nxt is None:
            raise errors.StateMismatch(
                f"load_into {uri}: the checkpoint has nothing at {_tree.path_str(path)} "
                f"for the optimizer there", missing=[_tree.path_str(path)])
        node = nxt
    return node


def _under(name: str, prefix: str) -> bool:
    return prefix == "" or name == prefix or name.startswith(prefix + ".")


def _opt_device(opt: torch.optim.Optimizer) -> torch.device:
    for g in opt.param_groups:
        for p in g["params"]:
            dev: torch.device = p.device
            return dev
    return torch.device("cpu")


def load_into(target: Any, uri: PathLike, *, strict: bool = True,
              progress: ProgressArg = False, client: Optional[Client] = None,
              allow_pickle: bool = False, verify: bool = True,
              group: Optional["ProcessGroup"] = None, wait: bool = True) -> Any:
    """Loads a checkpoint into existing tensors, without allocating new ones.

    Optimizers: their state tensors do not exist before the first step, so for an optimizer the
    matching part of the checkpoint is loaded (state tensors allocated on the device of its
    first parameter) and given to optimizer.load_state_dict(), which restores state and
    hyper-parameters. A checkpoint name is "unexpected" only under a module (or state dict) the
    target holds, as in load_state_dict; entries the target has no place for (an "rng" tensor
    beside "model" and "optim") are loaded onto the CPU and returned, not dropped.

    Args:
        target: an nn.Module (its state_dict tensors, which alias its parameters and buffers),
            a state dict, or a nested structure of those, tensors, modules and optimizers (e.g.
            {"model": model, "optim": optimizer}), matched by the names save() gives.
        uri: as for load().
        strict: missing and unexpected tensors are errors; shape and dtype differences always
            are.
        progress, client, allow_pickle, verify: as for load().
        group: as for load(): the checkpoint is read once per group and shared; the targets
            may differ between ranks (each gets what its target names).
        wait: False returns at once, while the bytes arrive: a LoadHandle whose ready(name)
            and wait(name) tell when one tensor is in place (its GPU copy complete), and whose
            wait() returns what load_into returns. Not with group=.

    Returns:
        The checkpoint's structure with the target's tensors in it and everything else (step
        count, RNG state) from the file; with wait=False, a LoadHandle.

    Raises:
        StateMismatch: every missing / unexpected / mismatched tensor, in one exception.
        NoSuchKey / NoSuchFile, FormatError, ChecksumMismatch, PickleRefused: as for load().
        With group: as for load().
    """
    if not wait:
        if group is not None:
            raise errors.InvalidArgument(errors.S3D_EINVAL,
                                         "load_into(wait=False) cannot be combined with group=")
        from ._stream import LoadHandle

        r = CheckpointReader(uri, client)
        try:
            plan = _plan_into(target, r, strict, allow_pickle)
        except BaseException:
            r.close()
            raise
        return LoadHandle(r, plan, progress=progress, verify=verify)
    sess = None if group is None else _ranks.Session(group, f"load_into {os.fspath(uri)}")
    with _shared(sess), CheckpointReader(uri, client) as r:
        plan = _plan_into(target, r, strict, allow_pickle)
        _read(r, plan.dests, sess, progress, verify)
    return plan.finish(os.fspath(uri))


class IntoPlan:
    """What load_into reads (dests, (entry, tensor, 0, 0) each, and the name each fills) and
    what it does once the bytes are in (copies into non-contiguous targets, optimizer state,
    the result's structure)."""

    def __init__(self, doc: Optional[dict[str, Any]], dests: list[Dest], names: list[str],
                 copies: dict[int, tuple[torch.Tensor, torch.Tensor]],
                 opt_states: list[tuple[torch.optim.Optimizer, _tree.Node,
                                        dict[str, torch.Tensor]]],
                 opt_prefixes: list[tuple[str, _tree.Path, torch.optim.Optimizer]],
                 result: dict[str, Any], allow_pickle: bool) -> None:
        self.doc, self.dests, self.names, self.copies = doc, dests, names, copies
        self.opt_states, self.opt_prefixes = opt_states, opt_prefixes
        self.result, self.allow_pickle = result, allow_pickle

    def copy(self, k: int) -> None:
        """Destination k is in place: copies it into its non-contiguous target, if any."""
        pair = self.copies.pop(k, None)
        if pair is not None:
            with torch.no_grad():
                pair[0].copy_(pair[1])

    def finish(self, uri: str) -> Any:
        for k in list(self.copies):
            self.copy(k)
        for opt, sub, loaded in self.opt_states:
            try:
                opt.load_state_dict(_tree.unflatten(sub, loaded, allow_pickle=self.allow_pickle))
            except (ValueError, KeyError) as e:
                where = next(p for p, _, o in self.opt_prefixes if o is opt)
                raise errors.StateMismatch(
                    f"load_into {uri}: optimizer at {where or '<root>'}: {e}") from e
        if self.doc is None:
            return self.result
        return _tree.unflatten(self.doc["tree"], lambda name, path: self.result.get(name),
                               allow_pickle=self.allow_pickle)


def _plan_into(target: Any, r: CheckpointReader, strict: bool, allow_pickle: bool) -> IntoPlan:
    """load_into's matching of target and checkpoint: StateMismatch on what does not fit."""
    found, optims, modules = _target_tensors(target)
    opt_prefixes = [(".".join(str(p) for p in path), path, opt) for path, opt in optims]
    doc = _tree_doc(r)
    if doc is not None:
        file_names = [n["t"] for _, tag, n in _tree.walk(doc["tree"]) if tag == "t"]
    else:
        file_names = [e.name for e in r.tensors]
        if optims:
            raise errors.StateMismatch(
                f"load_into {r.uri}: a plain safetensors file has no optimizer state "
                f"(it was not written by s3direct.save)")
    if doc is None:
        modules = [""]  # a plain file is one state dict: every name is the target's
    plain = list(dict.fromkeys(n for n in file_names
                               if not any(_under(n, p) for p, _, _ in opt_prefixes)))
    plain_set = set(plain)
    missing = [n for n in found if n not in plain_set]
    # Tied weights: a name the checkpoint stores once (safetensors save_model, Hugging
    # Face, s3direct.save) is satisfied by the target tensor it shares memory with, or
    # else from the stored tensor the metadata names ({removed: kept}).
    tied_from: dict[str, tuple[Optional[str], Optional[torch.Tensor]]] = {}
    if missing:
        by_key: dict[tuple[Any, ...], str] = {}
        for n, (_, t) in found.items():
            k = _tie_key(t)
            if k is not None and n in plain_set:
                by_key.setdefault(k, n)
        meta = r.metadata()
        still: list[str] = []
        for n in missing:
            k = _tie_key(found[n][1])
            alias = meta.get(n)
            if k is not None and k in by_key:
                result_tied = found[n][1]
                tied_from[n] = (None, result_tied)
            elif alias in plain_set and alias in r.by_name:
                tied_from[n] = (alias, None)
            else:
                still.append(n)
        missing = still
    # A name under a module (or a state dict) the target has is unexpected, as in
    # load_state_dict; other entries (an "rng" beside "model") are loaded and returned.
    unexpected = [n for n in plain if n not in found
                  and any(_under(n, m) for m in modules)]
    mismatched: list[str] = []
    dests: list[Dest] = []
    names: list[str] = []
    copies: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
    result: dict[str, Any] = {}
    extra = set(n for n in plain if n not in found) - set(unexpected)
    todo = [(n, n) for n in plain]
    for n, (alias, tied_tensor) in tied_from.items():
        if alias is not None:
            todo.append((n, alias))  # read the kept tensor's bytes into this name too
        else:
            result[n] = tied_tensor  # filled through the memory it shares
    for name, src in todo:
        if name in extra:
            e = r.by_name[name]
            t = torch.empty(e.shape, dtype=e.torch_dtype(r.uri), device="cpu")
            result[name] = t
            dests.append((e, t, 0, 0))
            names.append(name)
            continue
        if name not in found:
            continue
        e = r.by_name[src]
        t = found[name][1].detach()
        want = _dtypes.to_torch(e.dtype)
        if tuple(t.shape) != tuple(e.shape) or t.dtype != want:
            mismatched.append(
                f"{name}: checkpoint {_dtypes.name(e.dtype)}{list(e.shape)}, target "
                f"{t.dtype}{list(t.shape)}".replace("torch.", ""))
            continue
        result[name] = found[name][1]
        if t.is_contiguous() and t.device.type in ("cpu", "cuda"):
            dests.append((e, t, 0, 0))
        else:
            tmp = torch.empty(e.shape, dtype=t.dtype,
                              device=t.device if t.device.type == "cuda" else "cpu")
            copies[len(dests)] = (t, tmp)
            dests.append((e, tmp, 0, 0))
        names.append(name)
    problems: list[str] = []
    if mismatched:
        problems.append(f"{len(mismatched)} mismatched: " + "; ".join(mismatched))
    if strict and missing:
        problems.append(f"{len(missing)} missing from the checkpoint: " + ", ".join(missing))
    if strict and unexpected:
        problems.append(f"{len(unexpected)} unexpected in the checkpoint: "
                        + ", ".join(unexpected))
    if problems:
        raise errors.StateMismatch(f"load_into {r.uri}: " + " | ".join(problems),
                                   missing=missing if strict else (),
                                   unexpected=unexpected if strict else (),
                                   mismatched=mismatched)
    # Optimizer parts: allocate their tensors, read them in the same transfer.
    opt_states: list[tuple[torch.optim.Optimizer, _tree.Node, dict[str, torch.Tensor]]] = []
    for _prefix, path, opt in opt_prefixes:
        # doc is not None here: a plain file with optimizers in target raised above.
        sub = _subtree(cast(Dict[str, Any], doc)["tree"], path, r.uri)
        dev = _opt_device(opt)
        loaded: dict[str, torch.Tensor] = {}
        for _, tag, node in _tree.walk(sub):
            if tag == "t":
                e = r.by_name[node["t"]]
                t = torch.empty(e.shape, dtype=e.torch_dtype(r.uri), device=dev)
                loaded[e.name] = t
                dests.append((e, t, 0, 0))
                names.append(e.name)
        opt_states.append((opt, sub, loaded))
        result.update(loaded)
    if doc is not None and not allow_pickle:
        for path, tag, _ in _tree.walk(doc["tree"]):
            if tag == "p":
                raise _tree.pickle_refused(r.uri, path)
    return IntoPlan(doc, dests, names, copies, opt_states, opt_prefixes, result, allow_pickle)
