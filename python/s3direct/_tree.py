"""Nested training state <-> (JSON tree, named tensors).

The tree is stored in the safetensors ``__metadata__`` under TREE_KEY ("s3direct_tree") as
``{"format": "s3direct.tree", "version": 1, "tree": NODE}`` where NODE is one of:

    JSON null / true / false / integer / string   that leaf itself (ints of any size)
    {"f": "1.5"} / {"f": "inf"} / {"f": "nan"}    a float, as repr() (exact round trip)
    {"t": "model.layer.weight"}                   a tensor, by its safetensors name;
                                                  "P": 1 an nn.Parameter ("g": 0 when it did
                                                  not require grad), "g": 1 a plain tensor
                                                  that required grad (readers that ignore
                                                  them get plain tensors)
    {"d": [[key, NODE], ...]}                     a dict; key a JSON string or integer;
                                                  "o": 1 marks an OrderedDict
    {"l": [NODE, ...]} / {"T": [NODE, ...]}       a list / a tuple
    {"S": [int, ...]}                             a torch.Size
    {"dtype": "bfloat16"} / {"device": "cuda:0"}  a torch.dtype / torch.device
    {"p": "<base64>"}                             a pickled leaf (only with allow_pickle)

Tensors are named by their path in the structure, components joined with "." (dict keys as
str(key), list and tuple indices as decimals), so a plain state_dict keeps its own names and
the object is an ordinary safetensors file. Two paths that give the same name (a key holding a
".") get "#2", "#3"... appended to the later one; the tree records the name actually used.
"""

from __future__ import annotations

import base64
import json
import pickle
from collections import OrderedDict

import torch

from . import errors

# Not "s3direct.<x>": the C writer reserves that prefix for its own keys (format, crc32c).
TREE_KEY = "s3direct_tree"
TREE_FORMAT = "s3direct.tree"
TREE_VERSION = 1
ROOT_TENSOR_NAME = "tensor"


def path_str(path) -> str:
    return ".".join(str(p) for p in path) if path else "<root>"


def _expand_default(obj):
    """nn.Module and Optimizer leaves are saved as their state_dict()."""
    if isinstance(obj, torch.nn.Module):
        return obj.state_dict()
    if isinstance(obj, torch.optim.Optimizer):
        return obj.state_dict()
    return None


class Flattened:
    """tree: the JSON-able node; tensors: list of (name, path tuple, tensor) in tree order."""

    def __init__(self):
        self.tree = None
        self.tensors: list = []
        self._names: set = set()

    def unique_name(self, path) -> str:
        base = ".".join(str(p) for p in path) if path else ROOT_TENSOR_NAME
        name, n = base, 1
        while name in self._names:
            n += 1
            name = f"{base}#{n}"
        self._names.add(name)
        return name

    def to_json(self) -> str:
        doc = {"format": TREE_FORMAT, "version": TREE_VERSION, "tree": self.tree}
        return json.dumps(doc, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def flatten(obj, *, allow_pickle: bool = False, expand=_expand_default) -> Flattened:
    """Walks obj; raises InvalidArgument naming the path of the first leaf it cannot store."""
    out = Flattened()
    out.tree = _flatten(obj, (), out, allow_pickle, expand, set())
    return out


def _flatten(obj, path, out: Flattened, allow_pickle, expand, active):
    if isinstance(obj, torch.Tensor):
        name = out.unique_name(path)
        out.tensors.append((name, path, obj))
        node = {"t": name}
        if isinstance(obj, torch.nn.Parameter):
            node["P"] = 1
            if not obj.requires_grad:
                node["g"] = 0
        elif obj.requires_grad:
            node["g"] = 1
        return node
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, int) and type(obj) is int:
        return obj
    if type(obj) is float:
        return {"f": repr(obj)}
    if isinstance(obj, torch.dtype):
        return {"dtype": str(obj).replace("torch.", "")}
    if isinstance(obj, torch.device):
        return {"device": str(obj)}
    if expand is not None:
        sub = expand(obj)
        if sub is not None:
            return _flatten(sub, path, out, allow_pickle, expand, active)
    if type(obj) in (dict, OrderedDict, list, tuple):
        if id(obj) in active:
            raise errors.InvalidArgument(
                errors.S3D_EINVAL, f"s3direct.save: reference cycle at {path_str(path)}")
        active.add(id(obj))
        try:
            if type(obj) is list or type(obj) is tuple:
                items = [_flatten(v, path + (i,), out, allow_pickle, expand, active)
                         for i, v in enumerate(obj)]
                return {"l": items} if type(obj) is list else {"T": items}
            pairs = []
            for k, v in obj.items():
                if isinstance(k, bool) or not isinstance(k, (str, int)):
                    raise errors.InvalidArgument(
                        errors.S3D_EINVAL,
                        f"s3direct.save: dict key {k!r} of type {type(k).__name__} at "
                        f"{path_str(path)} is not a str or int (only those keys are stored)")
                pairs.append([k if isinstance(k, str) else int(k),
                              _flatten(v, path + (k,), out, allow_pickle, expand, active)])
            node = {"d": pairs}
            if type(obj) is OrderedDict:
                node["o"] = 1
            return node
        finally:
            active.discard(id(obj))
    if type(obj) is torch.Size:
        return {"S": [int(d) for d in obj]}
    if isinstance(obj, float):  # float subclasses (numpy.float64) as plain floats
        return {"f": repr(float(obj))}
    if allow_pickle:
        try:
            data = pickle.dumps(obj, protocol=4)
        except Exception as e:
            raise errors.InvalidArgument(
                errors.S3D_EINVAL,
                f"s3direct.save: leaf at {path_str(path)} ({type(obj).__name__}) cannot be "
                f"pickled: {e}") from e
        return {"p": base64.b64encode(data).decode("ascii")}
    raise errors.InvalidArgument(
        errors.S3D_EINVAL,
        f"s3direct.save: leaf at {path_str(path)} has type {type(obj).__module__}."
        f"{type(obj).__qualname__}, which JSON cannot represent; convert it, or pass "
        f"allow_pickle=True (unsafe to load from untrusted sources)")


def parse(text: str, where: str) -> dict:
    """The tree document from the metadata value; FormatError when it is not one."""
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise errors.FormatError(errors.S3D_EFMT_METADATA,
                                 f"{where}: {TREE_KEY} is not valid JSON: {e}") from e
    if not isinstance(doc, dict) or doc.get("format") != TREE_FORMAT or "tree" not in doc:
        raise errors.FormatError(errors.S3D_EFMT_METADATA,
                                 f"{where}: {TREE_KEY} is not an s3direct tree")
    if not isinstance(doc.get("version"), int) or doc["version"] > TREE_VERSION:
        raise errors.FormatError(
            errors.S3D_EFMT_METADATA,
            f"{where}: tree version {doc.get('version')!r} is newer than this package reads "
            f"({TREE_VERSION}); upgrade s3direct")
    return doc


def walk(node, path=()):
    """Yields (path, tag, node) for every tagged leaf: tensors ("t") and pickles ("p")."""
    if isinstance(node, dict):
        if "t" in node:
            yield path, "t", node
        elif "p" in node:
            yield path, "p", node
        elif "d" in node:
            for k, v in node["d"]:
                yield from walk(v, path + (k,))
        elif "l" in node or "T" in node:
            for i, v in enumerate(node.get("l", node.get("T"))):
                yield from walk(v, path + (i,))


def restore_grad(node: dict, t):
    """The tensor as it was saved: an nn.Parameter ("P": 1, requires_grad unless "g": 0) or a
    plain tensor that required grad ("g": 1). Tensors already of the right kind (load_into's
    own) are returned as they are."""
    if not isinstance(t, torch.Tensor):
        return t
    if node.get("P") and not isinstance(t, torch.nn.Parameter):
        return torch.nn.Parameter(t, requires_grad=bool(node.get("g", 1)))
    if node.get("g") == 1 and not t.requires_grad and (t.is_floating_point() or t.is_complex()):
        return t.requires_grad_(True)
    return t


def unflatten(node, tensors, *, allow_pickle: bool = False, path=()):
    """Rebuilds the structure. tensors maps a name to its tensor (a callable may be given
    instead: tensors(name, path) -> tensor)."""
    if node is None or isinstance(node, (bool, int, str)):
        return node
    if isinstance(node, dict):
        if "t" in node:
            name = node["t"]
            t = tensors(name, path) if callable(tensors) else tensors[name]
            return restore_grad(node, t)
        if "f" in node:
            return float(node["f"])
        if "d" in node:
            items = [(k, unflatten(v, tensors, allow_pickle=allow_pickle, path=path + (k,)))
                     for k, v in node["d"]]
            return OrderedDict(items) if node.get("o") else dict(items)
        if "l" in node:
            return [unflatten(v, tensors, allow_pickle=allow_pickle, path=path + (i,))
                    for i, v in enumerate(node["l"])]
        if "T" in node:
            return tuple(unflatten(v, tensors, allow_pickle=allow_pickle, path=path + (i,))
                         for i, v in enumerate(node["T"]))
        if "S" in node:
            return torch.Size(node["S"])
        if "dtype" in node:
            dt = getattr(torch, node["dtype"], None)
            if not isinstance(dt, torch.dtype):
                raise errors.FormatError(
                    errors.S3D_EFMT_METADATA,
                    f"leaf at {path_str(path)}: unknown torch dtype {node['dtype']!r}")
            return dt
        if "device" in node:
            return torch.device(node["device"])
        if "p" in node:
            if not allow_pickle:
                raise errors.PickleRefused(
                    errors.S3D_EINVAL,
                    f"leaf at {path_str(path)} is pickled; pass allow_pickle=True only if you "
                    f"trust the checkpoint (unpickling runs arbitrary code)")
            return pickle.loads(base64.b64decode(node["p"]))
    raise errors.FormatError(errors.S3D_EFMT_METADATA,
                             f"tree node at {path_str(path)} is malformed: {node!r:.80}")

