"""Nested training state <-> (JSON tree, named tensors).

The tree is stored in the safetensors ``__metadata__`` under TREE_KEY ("s3direct_tree") as
``{"format": "s3direct.tree", "version": 1, "tree": NODE}`` where NODE is one of:

    JSON null / true / false / integer / string   that leaf itself (ints of any size)
    {"f": "1.5"} / {"f": "inf"} / {"f": "nan"}    a float, as repr() (exact round trip)
    {"t": "model.layer.weight"}                   a tensor, by its safetensors name;
                                                  "P": 1 an nn.Parameter ("g": 0 when it did
                                                  not require grad), "g": 1 a plain tensor
                                                  that required grad (readers that ignore
                                                  them get plain tensors); "np": 1 a numpy
                                                  array, "np": 2 a numpy scalar (stored as a
                                                  tensor, loaded back as numpy on the CPU)
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
import binascii
import json
import pickle
import sys
from collections import OrderedDict
from typing import Any, Callable, Iterator, Mapping, NoReturn, Optional, Tuple, Union

import torch

from . import errors

# Not "s3direct.<x>": the C writer reserves that prefix for its own keys (format, crc32c).
TREE_KEY = "s3direct_tree"
TREE_FORMAT = "s3direct.tree"
TREE_VERSION = 1
ROOT_TENSOR_NAME = "tensor"

# A node of the JSON tree (see above), as json.loads returns it.
Node = Any
# Where a leaf sits in the structure: dict keys and list / tuple indices from the root.
Path = Tuple[Union[str, int], ...]
# flatten's expand: the object to store in place of a leaf, or None to store the leaf itself.
Expand = Callable[[Any], Any]
# unflatten's tensors: a mapping from name to tensor, or tensors(name, path) -> tensor.
Tensors = Union[Mapping[str, Any], Callable[[str, Path], Any]]


def path_str(path: Path) -> str:
    return ".".join(str(p) for p in path) if path else "<root>"


def pickle_refused(uri: str, path: Path) -> errors.PickleRefused:
    """The error for a pickled leaf of uri's tree at path when allow_pickle is not given."""
    return errors.PickleRefused(
        errors.S3D_EINVAL,
        f"{uri}: leaf at {path_str(path)} is pickled; pass "
        f"allow_pickle=True only if you trust the checkpoint",
    )


def _expand_default(obj: object) -> Any:
    """nn.Module and Optimizer leaves are saved as their state_dict()."""
    if isinstance(obj, torch.nn.Module):
        return obj.state_dict()
    if isinstance(obj, torch.optim.Optimizer):
        return obj.state_dict()
    return None


class Flattened:
    """tree: the JSON-able node; tensors: list of (name, path tuple, tensor) in tree order."""

    def __init__(self) -> None:
        self.tree: Node = None
        self.tensors: list[tuple[str, Path, torch.Tensor]] = []
        self._names: set[str] = set()

    def unique_name(self, path: Path) -> str:
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


def flatten(
    obj: Any, *, allow_pickle: bool = False, expand: Optional[Expand] = _expand_default
) -> Flattened:
    """Walks obj; raises InvalidArgument naming the path of the first leaf it cannot store."""
    out = Flattened()
    out.tree = _flatten(obj, (), out, allow_pickle, expand, set())
    return out


def _flatten(
    obj: Any,
    path: Path,
    out: Flattened,
    allow_pickle: bool,
    expand: Optional[Expand],
    active: set[int],
) -> Node:
    if isinstance(obj, torch.Tensor):
        return _tensor_node(obj, path, out)
    arr = _numpy_leaf(obj)
    if arr is not None:
        node = _flatten(arr[0], path, out, allow_pickle, expand, active)
        node["np"] = arr[1]
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
        return _container_node(obj, path, out, allow_pickle, expand, active)
    if type(obj) is torch.Size:
        return {"S": [int(d) for d in obj]}
    if isinstance(obj, float):  # float subclasses (numpy.float64) as plain floats
        return {"f": repr(float(obj))}
    return _pickled_node(obj, path, allow_pickle)


def _tensor_node(obj: torch.Tensor, path: Path, out: Flattened) -> Node:
    name = out.unique_name(path)
    out.tensors.append((name, path, obj))
    node: dict[str, Any] = {"t": name}
    if isinstance(obj, torch.nn.Parameter):
        node["P"] = 1
        if not obj.requires_grad:
            node["g"] = 0
    elif obj.requires_grad:
        node["g"] = 1
    return node


def _container_node(
    obj: Any,
    path: Path,
    out: Flattened,
    allow_pickle: bool,
    expand: Optional[Expand],
    active: set[int],
) -> Node:
    """A dict, OrderedDict, list or tuple (exactly those types), its items flattened."""
    if id(obj) in active:
        raise errors.InvalidArgument(
            errors.S3D_EINVAL, f"s3direct.save: reference cycle at {path_str(path)}"
        )
    active.add(id(obj))
    try:
        if type(obj) is list or type(obj) is tuple:
            items = [
                _flatten(v, path + (i,), out, allow_pickle, expand, active)
                for i, v in enumerate(obj)
            ]
            return {"l": items} if type(obj) is list else {"T": items}
        pairs: list[list[Any]] = []
        for k, v in obj.items():
            if isinstance(k, bool) or not isinstance(k, (str, int)):
                raise errors.InvalidArgument(
                    errors.S3D_EINVAL,
                    f"s3direct.save: dict key {k!r} of type {type(k).__name__} at "
                    f"{path_str(path)} is not a str or int (only those keys are stored)",
                )
            pairs.append(
                [
                    k if isinstance(k, str) else int(k),
                    _flatten(v, path + (k,), out, allow_pickle, expand, active),
                ]
            )
        node: dict[str, Any] = {"d": pairs}
        if type(obj) is OrderedDict:
            node["o"] = 1
        return node
    finally:
        active.discard(id(obj))


def _pickled_node(obj: Any, path: Path, allow_pickle: bool) -> Node:
    """A leaf JSON cannot hold: pickled with allow_pickle, else InvalidArgument."""
    if allow_pickle:
        try:
            data = pickle.dumps(obj, protocol=4)
        except Exception as e:
            raise errors.InvalidArgument(
                errors.S3D_EINVAL,
                f"s3direct.save: leaf at {path_str(path)} ({type(obj).__name__}) cannot be "
                f"pickled: {e}",
            ) from e
        return {"p": base64.b64encode(data).decode("ascii")}
    raise errors.InvalidArgument(
        errors.S3D_EINVAL,
        f"s3direct.save: leaf at {path_str(path)} has type {type(obj).__module__}."
        f"{type(obj).__qualname__}, which JSON cannot represent; convert it, or pass "
        f"allow_pickle=True (unsafe to load from untrusted sources)",
    )


def _numpy_leaf(obj: Any) -> Optional[tuple[torch.Tensor, int]]:
    """A numpy array (1) or scalar (2) of a dtype torch holds, as (tensor, kind); else None.
    numpy.float64 stays a float (it is one). Arrays of other dtypes (object, strings, float128)
    fall through to pickling or the error."""
    np = sys.modules.get("numpy")
    if np is None or isinstance(obj, float):
        return None
    if isinstance(obj, np.ndarray):
        kind = 1
    elif isinstance(obj, np.generic):
        kind, obj = 2, np.asarray(obj)
    else:
        return None
    if obj.dtype.kind not in "biufc":
        return None
    try:
        a = np.asarray(obj, dtype=obj.dtype.newbyteorder("="), order="C")
        return torch.from_numpy(a), kind
    except (TypeError, ValueError, RuntimeError):
        return None


# A node is a dict with exactly one of these tags ("o" may accompany "d"; "P", "g" a "t").
_TAGS = frozenset(("t", "f", "d", "l", "T", "S", "dtype", "device", "p"))
# (tag, key it may come with)
_OPTIONAL = frozenset((("d", "o"), ("t", "P"), ("t", "g"), ("t", "np")))
_INT64 = 1 << 63


def _short(node: Node) -> str:
    """A bounded description of node for an error message (never a deep repr)."""
    if isinstance(node, dict):
        keys = list(node)[:4]
        return "{" + ", ".join(repr(k)[:20] for k in keys) + (", ...}" if len(node) > 4 else "}")
    if isinstance(node, list):
        return f"a list of {len(node)}"
    return repr(node)[:80]


def _node_problem(node: Node) -> Optional[str]:
    """Why node is not a tree node (None if it is one). Its children, and the [key, node]
    pairs of a "d", are checked by check() as it reaches them."""
    if node is None or isinstance(node, (bool, str, TLeaf)) or type(node) is int:
        return None
    if not isinstance(node, dict):
        return f"a JSON {type(node).__name__} is not a node"
    tags = [k for k in node if k in _TAGS]
    if len(tags) != 1:
        return "it must have exactly one of the keys " + ", ".join(sorted(_TAGS))
    tag = tags[0]
    extra = [k for k in node if k != tag and (tag, k) not in _OPTIONAL]
    if extra:
        return f"unexpected key {extra[0]!r:.40}"
    for opt in ("o", "P", "g"):
        if opt in node and node[opt] not in (0, 1):
            return f"{opt!r} must be 0 or 1"
    if "np" in node and (node["np"] not in (1, 2) or type(node["np"]) is not int):
        return "'np' must be 1 or 2"
    v = node[tag]
    if tag in ("t", "f", "dtype", "device", "p") and not isinstance(v, str):
        return f"{tag!r} must be a string"
    if tag == "f":
        try:
            float(v)
        except ValueError:
            return f"{v!r:.40} is not a float"
    elif tag == "dtype":
        if not isinstance(getattr(torch, v, None), torch.dtype):
            return f"unknown torch dtype {v!r:.40}"
    elif tag == "device":
        try:
            torch.device(v)
        except (RuntimeError, ValueError, TypeError):
            return f"{v!r:.40} is not a torch device"
    elif tag == "p":
        try:
            base64.b64decode(v, validate=True)
        except (binascii.Error, ValueError):
            return "the pickled leaf is not base64"
    elif tag == "S":
        if not isinstance(v, list) or any(
            type(d) is not int or not -_INT64 <= d < _INT64 for d in v
        ):
            return "'S' must be a list of 64-bit integers"
    elif tag in ("l", "T"):
        if not isinstance(v, list):
            return f"{tag!r} must be a list"
    elif tag == "d":
        if not isinstance(v, list):
            return "'d' must be a list of [key, node] pairs"
    return None


def _pair_problem(pair: Any) -> Optional[str]:
    if not isinstance(pair, list) or len(pair) != 2:
        return "'d' must be a list of [key, node] pairs"
    k = pair[0]
    if not isinstance(k, str) and type(k) is not int:
        return f"dict key {_short(k)} is not a string or an integer"
    return None


def check(tree: Node, where: str) -> None:
    """Raises FormatError naming the first malformed node of tree. Iterative (any depth), one
    frame per open container: no list of every child and its path is made (a header of 1.66
    M tensors has them all in one dict; issue 35, item 9). A "d" key equal to its tensor
    leaf's name is made the same str object (one copy of each name, not two)."""

    def fail(node: Node, path: Path, why: str) -> NoReturn:
        raise errors.FormatError(
            errors.S3D_EFMT_METADATA,
            f"{where}: {TREE_KEY} node at {path_str(path)} is malformed: {why} ({_short(node)})",
        )

    why = _node_problem(tree)
    if why is not None:
        fail(tree, (), why)
    tag, items = _children(tree)
    if items is None:
        return
    stack: list[tuple[Node, Path, Optional[str], Iterator[Any]]] = [(tree, (), tag, items)]
    while stack:
        node, path, tag, items = stack[-1]
        item = next(items, _END)
        if item is _END:
            stack.pop()
            continue
        if tag == "d":
            why = _pair_problem(item)
            if why is not None:
                fail(node, path, why)
            k, child = item
            if type(child) is TLeaf and type(k) is str and k == child.t:
                item[0] = child.t
        else:
            k, child = item
        cpath = path + (k,)
        why = _node_problem(child)
        if why is not None:
            fail(child, cpath, why)
        ctag, citems = _children(child)
        if citems is not None:
            stack.append((child, cpath, ctag, citems))


class TLeaf:
    """A tensor leaf with no flag, {"t": name}, as parse() keeps it: one small object (56
    bytes) in place of a dict (184), for the 1.66 M leaves of a large header (issue 35, item
    9). Read like that dict: node["t"], "t" in node, node.get(key)."""

    __slots__ = ("t",)

    def __init__(self, t: str) -> None:
        self.t = t

    def __getitem__(self, key: str) -> str:
        if key != "t":
            raise KeyError(key)
        return self.t

    def __contains__(self, key: object) -> bool:
        return key == "t"

    def get(self, key: str, default: Any = None) -> Any:
        return self.t if key == "t" else default

    def __eq__(self, other: object) -> bool:
        if isinstance(other, TLeaf):
            return other.t == self.t
        return isinstance(other, dict) and other == {"t": self.t}

    __hash__ = None  # type: ignore[assignment]  # equal to a dict, so unhashable as one

    def __repr__(self) -> str:
        return repr({"t": self.t})


def _compact(obj: dict[str, Any]) -> Any:
    """json.loads's object_hook: a plain tensor leaf becomes a TLeaf as soon as it is read."""
    if len(obj) == 1 and type(obj.get("t")) is str:
        return TLeaf(obj["t"])
    return obj


def parse(text: str, where: str) -> dict[str, Any]:
    """The tree document from the metadata value, every node checked; FormatError naming the
    node when it is not one."""
    try:
        doc = json.loads(text, object_hook=_compact)
    except RecursionError as e:
        raise errors.FormatError(
            errors.S3D_EFMT_METADATA, f"{where}: {TREE_KEY} is nested too deeply"
        ) from e
    except ValueError as e:
        raise errors.FormatError(
            errors.S3D_EFMT_METADATA, f"{where}: {TREE_KEY} is not valid JSON: {e}"
        ) from e
    if not isinstance(doc, dict) or doc.get("format") != TREE_FORMAT or "tree" not in doc:
        raise errors.FormatError(
            errors.S3D_EFMT_METADATA, f"{where}: {TREE_KEY} is not an s3direct tree"
        )
    if type(doc.get("version")) is not int or doc["version"] > TREE_VERSION:
        raise errors.FormatError(
            errors.S3D_EFMT_METADATA,
            f"{where}: tree version {_short(doc.get('version'))} is newer than this package "
            f"reads ({TREE_VERSION}); upgrade s3direct",
        )
    check(doc["tree"], where)
    return doc


_END: Any = object()  # next()'s default: the end of a container's children


def _children(node: Node) -> tuple[Optional[str], Optional[Iterator[Any]]]:
    """(tag, iterator of (key or index, child)) of a container node; (None, None) for a leaf.
    A "d" yields its [key, node] pairs themselves."""
    if isinstance(node, dict):
        if "d" in node:
            return "d", iter(node["d"])
        if "l" in node:
            return "l", enumerate(node["l"])
        if "T" in node:
            return "T", enumerate(node["T"])
    return None, None


def walk(node: Node, path: Path = ()) -> Iterator[tuple[Path, str, Any]]:
    """Yields (path, tag, node) for every tagged leaf, in tree order: tensors ("t") and
    pickles ("p"); node is a dict or a TLeaf. Iterative, one frame per open container, so the
    cost is linear in the tree whatever its depth and its width."""
    stack: list[tuple[Path, Iterator[Any]]] = [((), iter(((path, node),)))]
    first = True
    while stack:
        p, items = stack[-1]
        item = next(items, _END)
        if item is _END:
            stack.pop()
            continue
        k, n = item
        cp = k if first else p + (k,)  # the root's "key" is its whole path
        first = False
        if type(n) is TLeaf:
            yield cp, "t", n
            continue
        if isinstance(n, dict):
            if "t" in n:
                yield cp, "t", n
                continue
            if "p" in n:
                yield cp, "p", n
                continue
        _, kids = _children(n)
        if kids is not None:
            stack.append((cp, kids))


def restore_grad(node: dict[str, Any], t: Any) -> Any:
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


def _leaf(node: Node, path: Path, tensors: Tensors, allow_pickle: bool) -> Any:
    if node is None or isinstance(node, (bool, int, str)):
        return node
    if type(node) is TLeaf:
        name = node.t
        return tensors(name, path) if callable(tensors) else tensors[name]
    if isinstance(node, dict):
        if "t" in node:
            name = node["t"]
            t = tensors(name, path) if callable(tensors) else tensors[name]
            if node.get("np") in (1, 2) and isinstance(t, torch.Tensor):
                a = t.detach().cpu().numpy()
                return a[()] if node["np"] == 2 else a
            try:
                return restore_grad(node, t)
            except RuntimeError as e:  # requires_grad on an integer tensor
                raise errors.FormatError(
                    errors.S3D_EFMT_METADATA,
                    f"{TREE_KEY} node at {path_str(path)}: tensor {name!r} cannot be restored "
                    f"as saved: {e}",
                ) from e
        if "f" in node:
            return float(node["f"])
        if "S" in node:
            return torch.Size(node["S"])
        if "dtype" in node:
            dt = getattr(torch, node["dtype"], None)
            if not isinstance(dt, torch.dtype):
                raise errors.FormatError(
                    errors.S3D_EFMT_METADATA,
                    f"leaf at {path_str(path)}: unknown torch dtype {node['dtype']!r}",
                )
            return dt
        if "device" in node:
            return torch.device(node["device"])
        if "p" in node:
            if not allow_pickle:
                raise errors.PickleRefused(
                    errors.S3D_EINVAL,
                    f"leaf at {path_str(path)} is pickled; pass allow_pickle=True only if you "
                    f"trust the checkpoint (unpickling runs arbitrary code)",
                )
            return pickle.loads(base64.b64decode(node["p"]))
    raise errors.FormatError(
        errors.S3D_EFMT_METADATA, f"tree node at {path_str(path)} is malformed: {_short(node)}"
    )


def unflatten(node: Node, tensors: Tensors, *, allow_pickle: bool = False, path: Path = ()) -> Any:
    """Rebuilds the structure. tensors maps a name to its tensor (a callable may be given
    instead: tensors(name, path) -> tensor). Iterative (an explicit stack), so the cost is
    linear in the number of nodes and any depth that JSON could hold works."""
    tag, kids = _children(node)
    if kids is None:
        return _leaf(node, path, tensors, allow_pickle)
    # Frames: [tag, node, children, values so far, path].
    stack: list[list[Any]] = [[tag, node, kids, [], path]]
    while True:
        f = stack[-1]
        item = next(f[2], _END)
        if item is not _END:
            k, child = item
            cpath = f[4] + (k,)
            ctag, ckids = _children(child)
            if ckids is None:
                f[3].append(_leaf(child, cpath, tensors, allow_pickle))
            else:
                stack.append([ctag, child, ckids, [], cpath])
            continue
        stack.pop()
        ftag, fnode, _, vals, _ = f
        if ftag == "d":
            items = zip((k for k, _ in fnode["d"]), vals)
            value: Any = OrderedDict(items) if fnode.get("o") else dict(items)
        elif ftag == "l":
            value = vals
        else:
            value = tuple(vals)
        if not stack:
            return value
        stack[-1][3].append(value)
