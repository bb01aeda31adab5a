"""The s3direct_tree JSON: a malformed tree raises FormatError naming the node, at any depth
(nothing else escapes: no RecursionError, TypeError, ValueError, RuntimeError); deep trees
round trip; the rebuild is iterative. The atheris target tests/fuzz/fuzz_tree.py is replayed
here on its seeds and on random mutations (the long run needs atheris; see that file)."""

from __future__ import annotations

import importlib.util
import json
import os
import random

import pytest
import torch

import s3direct
from s3direct import _tree

HERE = os.path.dirname(os.path.abspath(__file__))
FUZZ = os.path.join(HERE, "..", "fuzz")


def _doc(tree) -> str:
    return json.dumps({"format": "s3direct.tree", "version": 1, "tree": tree})


def _write(tmp_path, tree_text, tensors=None):
    from safetensors.torch import save_file

    path = str(tmp_path / "t.safetensors")
    save_file(tensors or {"a": torch.ones(2)}, path, metadata={"s3direct_tree": tree_text})
    return path


BAD = [
    # (tree, text the message must hold)
    ({"d": 5}, "node at <root> is malformed: 'd' must be a list"),
    ({"d": [["a"]]}, "node at <root> is malformed: 'd' must be a list of [key, node] pairs"),
    ({"d": [[1.5, 1]]}, "dict key 1.5 is not a string or an integer"),
    ({"d": [[True, 1]]}, "dict key True is not a string or an integer"),
    ({"d": [["model", {"d": [["w", {"S": [1, "a"]}]]}]]},
     "node at model.w is malformed: 'S' must be a list of 64-bit integers"),
    ({"l": [0, {"S": [2 ** 70]}]}, "node at 1 is malformed"),
    ({"l": 5}, "'l' must be a list"),
    ({"T": {"a": 1}}, "'T' must be a list"),
    ({"device": "nonsense:zz"}, "is not a torch device"),
    ({"device": 3}, "'device' must be a string"),
    ({"dtype": "float99"}, "unknown torch dtype"),
    ({"dtype": "Tensor"}, "unknown torch dtype"),
    ({"f": "abc"}, "'abc' is not a float"),
    ({"f": 1.5}, "'f' must be a string"),
    ({"t": 5}, "'t' must be a string"),
    ({"t": "a", "l": []}, "exactly one of the keys"),
    ({"x": 1}, "exactly one of the keys"),
    ({"d": [], "o": 7}, "'o' must be 0 or 1"),
    ({"t": "a", "P": "yes"}, "'P' must be 0 or 1"),
    ({"t": "a", "np": 3}, "'np' must be 1 or 2"),
    ({"t": "a", "np": True}, "'np' must be 1 or 2"),
    ({"f": "1.0", "np": 1}, "unexpected key 'np'"),
    ({"l": [], "P": 1}, "unexpected key 'P'"),
    ({"t": "a", "zz": 1}, "unexpected key 'zz'"),
    ({"p": "!!!not base64"}, "not base64"),
    ([1, 2], "a JSON list is not a node"),
    (2.5, "a JSON float is not a node"),
    ({"d": [["k", {"l": [{"l": [None, [1]]}]}]]}, "node at k.0.1 is malformed"),
]


@pytest.mark.parametrize("tree,needle", BAD, ids=[str(i) for i in range(len(BAD))])
def test_malformed_tree_names_the_node(tmp_path, lib_path, tree, needle):
    path = _write(tmp_path, _doc(tree))
    with pytest.raises(s3direct.FormatError) as ei:
        s3direct.load(path)
    assert needle in str(ei.value)
    assert "s3direct_tree" in str(ei.value)


@pytest.mark.parametrize("text,needle", [
    ('{"format":"s3direct.tree","version":1,"tree":' + '{"l":[' * 200000, "nested too deeply"),
    ('{"format":"s3direct.tree","version":1,"tree":' + '[' * 200000, "nested too deeply"),
    ('{"format":"s3direct.tree","version":"1","tree":1}', "tree version '1' is newer"),
    ('{"format":"s3direct.tree","version":1,"tree":' + "9" * 5000 + "}", "not valid JSON"),
    ("[]", "is not an s3direct tree"),
], ids=["deep-nodes", "deep-lists", "version-str", "huge-int", "not-a-tree"])
def test_malformed_document(tmp_path, lib_path, text, needle):
    path = _write(tmp_path, text)
    with pytest.raises(s3direct.FormatError) as ei:
        s3direct.load(path)
    assert needle in str(ei.value)


def test_deep_tree_round_trips(tmp_path, lib_path):
    """As deep as the JSON parser allows: the walk and the rebuild are iterative."""
    depth = 300
    obj = torch.arange(3)
    for i in range(depth):
        obj = [obj, i] if i % 2 else {"k": obj}
    path = str(tmp_path / "deep.safetensors")
    s3direct.save(obj, path)
    back = s3direct.load(path)
    for i in reversed(range(depth)):
        assert (back[1] == i) if i % 2 else True
        back = back[0] if i % 2 else back["k"]
    assert torch.equal(back, torch.arange(3))


def test_unflatten_is_iterative():
    """Depth far beyond the recursion limit (the tree was built in Python, not parsed)."""
    import sys

    depth = sys.getrecursionlimit() * 3
    node = {"t": "x"}
    for _ in range(depth):
        node = {"l": [node]}
    _tree.check(node, "here")
    assert [p for p, _, _ in _tree.walk(node)] == [(0,) * depth]
    out = _tree.unflatten(node, {"x": 42})
    for _ in range(depth):
        out = out[0]
    assert out == 42


def _fuzz_module():
    spec = importlib.util.spec_from_file_location("fuzz_tree", os.path.join(FUZZ, "fuzz_tree.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_fuzz_target_replay():
    """The fuzz target's seeds, the BAD cases, and 3,000 random byte-level mutations of them:
    only FormatError / PickleRefused may come out (test_one_input lets nothing else pass)."""
    mod = _fuzz_module()
    corpus = os.path.join(FUZZ, "corpus", "tree")
    seeds = [open(os.path.join(corpus, f), "rb").read() for f in sorted(os.listdir(corpus))]
    seeds += [_doc(t).encode() for t, _ in BAD]
    for s in seeds:
        mod.test_one_input(s)
    rnd = random.Random(9)
    alphabet = b'{}[]",:0123456789-.eE tfnulrTSdopx\\'
    for _ in range(3000):
        b = bytearray(rnd.choice(seeds))
        for _ in range(rnd.randint(1, 6)):
            op, i = rnd.random(), rnd.randrange(len(b) + 1)
            if op < 0.4 and b:
                del b[min(i, len(b) - 1)]
            elif op < 0.8:
                b[i:i] = bytes([rnd.choice(alphabet)])
            else:
                j = rnd.randrange(len(b) + 1)
                b[i:i] = b[min(i, j):max(i, j)][:64]
        mod.test_one_input(bytes(b))


def test_parameter_flag_on_integer_tensor(tmp_path, lib_path):
    """"P" on an integer tensor cannot become a Parameter that requires grad: FormatError."""
    path = _write(tmp_path, _doc({"d": [["a", {"t": "a", "P": 1}]]}),
                  {"a": torch.arange(3)})
    with pytest.raises(s3direct.FormatError) as ei:
        s3direct.load(path)
    assert "node at a" in str(ei.value)
