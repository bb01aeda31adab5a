"""load_into: a checkpoint read into existing tensors (modules, state dicts, optimizers), and
the plan it shares with load_into(wait=False) (_stream.LoadHandle). Beside _checkpoint.py
(load()), _reader.py (CheckpointReader) and _save.py (save, save_async)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, NamedTuple, Optional, Sequence, cast

import torch

from . import _dtypes, _ranks, _tree, errors
from ._checkpoint import _read, _shared
from ._progress import ProgressArg
from ._reader import CheckpointReader, _tree_doc
from ._save import _tie_key
from ._types import Dest, TensorEntry
from ._uri import PathLike
from .client import Client

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup


# ---- load_into -------------------------------------------------------------------------------
def _target_tensors(
    target: Any,
) -> tuple[
    dict[str, tuple[_tree.Path, torch.Tensor]],
    list[tuple[_tree.Path, torch.optim.Optimizer]],
    list[str],
]:
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
    if (
        isinstance(target, dict)
        and target
        and all(isinstance(v, torch.Tensor) for v in target.values())
    ):
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
                f"for the optimizer there",
                missing=[_tree.path_str(path)],
            )
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


def load_into(
    target: Any,
    uri: PathLike,
    *,
    strict: bool = True,
    progress: ProgressArg = False,
    client: Optional[Client] = None,
    allow_pickle: bool = False,
    verify: bool = True,
    group: Optional["ProcessGroup"] = None,
    wait: bool = True,
) -> Any:
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
            raise errors.InvalidArgument(
                errors.S3D_EINVAL, "load_into(wait=False) cannot be combined with group="
            )
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

    def __init__(
        self,
        doc: Optional[dict[str, Any]],
        dests: list[Dest],
        names: list[str],
        copies: dict[int, tuple[torch.Tensor, torch.Tensor]],
        opt_states: list[tuple[torch.optim.Optimizer, _tree.Node, dict[str, torch.Tensor]]],
        opt_prefixes: list[tuple[str, _tree.Path, torch.optim.Optimizer]],
        result: dict[str, Any],
        allow_pickle: bool,
    ) -> None:
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
                    f"load_into {uri}: optimizer at {where or '<root>'}: {e}"
                ) from e
        if self.doc is None:
            return self.result
        return _tree.unflatten(
            self.doc["tree"],
            lambda name, path: self.result.get(name),
            allow_pickle=self.allow_pickle,
        )


class Match(NamedTuple):
    """How load_into pairs a target's tensors with a checkpoint's (match()).

    reads: (name, stored name) for each tensor to read, in the checkpoint's order: the
        target's tensor of that name gets the stored tensor's bytes (the same name, or for a
        tied weight the stored tensor the checkpoint kept for it), or, for a name in extra,
        a new CPU tensor does.
    extra: stored names the target has no place for and no module of it claims: loaded and
        returned (an "rng" beside "model").
    shared: target name -> the target name it shares memory with, for a tied weight the
        checkpoint stores once: filled through that memory, nothing read for it.
    missing, unexpected, mismatched: what does not fit, as StateMismatch reports it."""

    reads: list[tuple[str, str]]
    extra: set[str]
    shared: dict[str, str]
    missing: list[str]
    unexpected: list[str]
    mismatched: list[str]


def match(
    file_names: Sequence[str],
    entries: Mapping[str, TensorEntry],
    target: Mapping[str, torch.Tensor],
    modules: Sequence[str],
    opt_prefixes: Sequence[str],
    metadata: Mapping[str, str],
) -> Match:
    """load_into's matching, a pure function: file_names are the checkpoint's tensor names in
    its order (entries: their descriptions), target the target's tensors by the names save()
    gives, modules the prefixes of the modules and state dicts it holds ("" for all),
    opt_prefixes those of its optimizers (their names are matched elsewhere), metadata the
    checkpoint's ({removed: kept} for the tied weights a writer stored once)."""
    plain = list(
        dict.fromkeys(n for n in file_names if not any(_under(n, p) for p in opt_prefixes))
    )
    plain_set = set(plain)
    missing = [n for n in target if n not in plain_set]
    # Tied weights: a name the checkpoint stores once (safetensors save_model, Hugging
    # Face, s3direct.save) is satisfied by the target tensor it shares memory with, or
    # else from the stored tensor the metadata names ({removed: kept}).
    shared: dict[str, str] = {}
    aliases: list[tuple[str, str]] = []
    if missing:
        by_key: dict[tuple[Any, ...], str] = {}
        for n, t in target.items():
            k = _tie_key(t)
            if k is not None and n in plain_set:
                by_key.setdefault(k, n)
        still: list[str] = []
        for n in missing:
            k = _tie_key(target[n])
            alias = metadata.get(n)
            if k is not None and k in by_key:
                shared[n] = by_key[k]
            elif alias is not None and alias in plain_set and alias in entries:
                aliases.append((n, alias))
            else:
                still.append(n)
        missing = still
    # A name under a module (or a state dict) the target has is unexpected, as in
    # load_state_dict; other entries are loaded and returned.
    unexpected = [n for n in plain if n not in target and any(_under(n, m) for m in modules)]
    extra = {n for n in plain if n not in target} - set(unexpected)
    reads: list[tuple[str, str]] = []
    mismatched: list[str] = []
    for name, src in [(n, n) for n in plain] + aliases:
        if name in extra:
            reads.append((name, name))
            continue
        if name not in target:
            continue
        e, t = entries[src], target[name]
        if tuple(t.shape) != tuple(e.shape) or t.dtype != _dtypes.to_torch(e.dtype):
            mismatched.append(
                f"{name}: checkpoint {_dtypes.name(e.dtype)}{list(e.shape)}, target "
                f"{t.dtype}{list(t.shape)}".replace("torch.", "")
            )
            continue
        reads.append((name, src))
    return Match(reads, extra, shared, missing, unexpected, mismatched)


def _raise_problems(uri: str, m: Match, strict: bool) -> None:
    problems: list[str] = []
    if m.mismatched:
        problems.append(f"{len(m.mismatched)} mismatched: " + "; ".join(m.mismatched))
    if strict and m.missing:
        problems.append(f"{len(m.missing)} missing from the checkpoint: " + ", ".join(m.missing))
    if strict and m.unexpected:
        problems.append(
            f"{len(m.unexpected)} unexpected in the checkpoint: " + ", ".join(m.unexpected)
        )
    if problems:
        raise errors.StateMismatch(
            f"load_into {uri}: " + " | ".join(problems),
            missing=m.missing if strict else (),
            unexpected=m.unexpected if strict else (),
            mismatched=m.mismatched,
        )


def _plan_into(target: Any, r: CheckpointReader, strict: bool, allow_pickle: bool) -> IntoPlan:
    """load_into's plan: match() of target and checkpoint (StateMismatch on what does not
    fit), then a destination for each tensor to read."""
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
                f"(it was not written by s3direct.save)"
            )
        modules = [""]  # a plain file is one state dict: every name is the target's
    tensors = {n: t for n, (_, t) in found.items()}
    m = match(
        file_names, r.by_name, tensors, modules, [p for p, _, _ in opt_prefixes], r.metadata()
    )
    _raise_problems(r.uri, m, strict)
    dests: list[Dest] = []
    names: list[str] = []
    copies: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
    result: dict[str, Any] = {n: tensors[n] for n in m.shared}
    for name, src in m.reads:
        e = r.by_name[src]
        if name in m.extra:
            t = torch.empty(e.shape, dtype=e.torch_dtype(r.uri), device="cpu")
            result[name] = t
            dests.append((e, t, 0, 0))
            names.append(name)
            continue
        t = tensors[name].detach()
        result[name] = tensors[name]
        if t.is_contiguous() and t.device.type in ("cpu", "cuda"):
            dests.append((e, t, 0, 0))
        else:
            tmp = torch.empty(
                e.shape, dtype=t.dtype, device=t.device if t.device.type == "cuda" else "cpu"
            )
            copies[len(dests)] = (t, tmp)
            dests.append((e, tmp, 0, 0))
        names.append(name)
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
