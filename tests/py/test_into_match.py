"""load_into's name matching as a table (s3direct._into.match, a pure function): no file, no
server. The end-to-end behaviour (the same rules over real checkpoints) is in
test_python_api.py and test_torch_*.py."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from s3direct import _dtypes  # noqa: E402
from s3direct._into import match  # noqa: E402
from s3direct._types import TensorEntry  # noqa: E402


def _entries(**shapes):
    """name -> TensorEntry, float32, in the given order (names with "__" for ".")."""
    out = {}
    for i, (n, shape) in enumerate(shapes.items()):
        name = n.replace("__", ".")
        nbytes = 4 * int(torch.tensor(shape).prod()) if shape else 4
        out[name] = TensorEntry(i, name, _dtypes.to_s3d(torch.float32), tuple(shape), nbytes)
    return out


def _m(entries, target, modules=("",), opt=(), metadata=None, names=None):
    return match(list(names or entries), entries, target, list(modules), list(opt),
                 metadata or {})


def test_exact_names_read_in_file_order():
    e = _entries(b=(2,), a=(3,))
    t = {"a": torch.zeros(3), "b": torch.zeros(2)}
    m = _m(e, t)
    assert m.reads == [("b", "b"), ("a", "a")]  # the checkpoint's order, not the target's
    assert (m.missing, m.unexpected, m.mismatched, m.extra, m.shared) == ([], [], [], set(), {})


def test_missing_unexpected_and_mismatched_all_reported():
    e = _entries(m__w=(2, 3), m__b=(3,), m__extra=(1,))
    t = {"m.w": torch.zeros(3, 2), "m.b": torch.zeros(3, dtype=torch.float16),
         "m.gone": torch.zeros(1)}
    m = _m(e, t, modules=("m",))
    assert m.reads == []
    assert m.missing == ["m.gone"] and m.unexpected == ["m.extra"]
    assert m.mismatched == ["m.w: checkpoint F32[2, 3], target float32[3, 2]",
                            "m.b: checkpoint F32[3], target float16[3]"]


def test_entries_outside_the_targets_modules_are_extra_not_unexpected():
    e = _entries(model__w=(2,), rng=(4,), model__x=(1,))
    m = _m(e, {"model.w": torch.zeros(2)}, modules=("model",))
    assert m.unexpected == ["model.x"] and m.extra == {"rng"}
    assert m.reads == [("model.w", "model.w"), ("rng", "rng")]


def test_tied_weight_shared_in_the_target_reads_nothing():
    e = _entries(emb=(4, 2))
    w = torch.zeros(4, 2)
    m = _m(e, {"emb": w, "head": w})  # the checkpoint stored the pair once
    assert m.shared == {"head": "emb"} and m.missing == []
    assert m.reads == [("emb", "emb")]


def test_tied_weight_not_shared_in_the_target_reads_the_kept_tensor():
    e = _entries(emb=(4, 2))
    t = {"emb": torch.zeros(4, 2), "head": torch.zeros(4, 2)}  # separate memory here
    assert _m(e, t).missing == ["head"]
    m = _m(e, t, metadata={"head": "emb"})
    assert m.missing == [] and m.shared == {}
    assert m.reads == [("emb", "emb"), ("head", "emb")]
    # An alias naming nothing stored does not satisfy it.
    assert _m(e, t, metadata={"head": "nope"}).missing == ["head"]


def test_optimizer_prefixes_are_left_to_the_optimizer():
    e = _entries(model__w=(2,), optim__state__0__exp_avg=(2,), optim__param_groups=(1,))
    m = _m(e, {"model.w": torch.zeros(2)}, modules=("model",), opt=("optim",))
    assert m.reads == [("model.w", "model.w")]
    assert (m.missing, m.unexpected, m.extra) == ([], [], set())


def test_a_whole_state_dict_claims_every_name():
    e = _entries(w=(2,), other=(1,))
    m = _m(e, {"w": torch.zeros(2)}, modules=("",))
    assert m.unexpected == ["other"] and m.extra == set()


def test_a_name_repeated_in_the_tree_is_read_once():
    e = _entries(w=(2,))
    m = _m(e, {"w": torch.zeros(2)}, names=["w", "w"])
    assert m.reads == [("w", "w")]
