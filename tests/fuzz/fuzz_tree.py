"""Atheris fuzz target for the s3direct_tree JSON (python/s3direct/_tree.py).

Any input must either rebuild a structure or raise s3direct.FormatError (PickleRefused for a
pickled leaf, which is refused unless allow_pickle); anything else escaping (RecursionError,
TypeError, ValueError, RuntimeError, KeyError, ...) is a crash.

    python3 tests/fuzz/fuzz_tree.py -atheris_runs=1000000 tests/fuzz/corpus/tree
(needs `pip install atheris`; PYTHONPATH=python, no library build: the tree module is pure
Python). tests/py/test_tree.py replays the seeds and a few thousand random inputs through
test_one_input without atheris, in `make test`.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "python"))

from s3direct import _tree, errors  # noqa: E402


def _tensor(name, path):
    if not isinstance(name, str):
        raise AssertionError(f"tensor name {name!r} reached the lookup unchecked")
    return name


def test_one_input(data: bytes) -> None:
    text = data.decode("utf-8", "replace")
    try:
        doc = _tree.parse(text, "fuzz")
        for _path, tag, node in _tree.walk(doc["tree"]):
            assert tag in ("t", "p") and isinstance(node, (dict, _tree.TLeaf))
        _tree.unflatten(doc["tree"], _tensor, allow_pickle=False)
    except (errors.FormatError, errors.PickleRefused):
        pass


def main() -> None:
    import atheris

    atheris.instrument_func(test_one_input)
    for f in (_tree.parse, _tree.check, _tree._node_problem, _tree.walk, _tree._children,
              _tree._leaf, _tree.unflatten, _tree._short):
        atheris.instrument_func(f)
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
