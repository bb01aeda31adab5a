"""Each lazily imported name of the package, and each module, imported FIRST in a fresh
process: a circular import shows only in the order where the cycle's second module is the one
asked for (load_into once failed this way in every spawned rank, while tests that had already
imported s3direct._checkpoint passed)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")

PKG = os.path.join(os.path.dirname(__file__), "..", "..", "python")
MODULES = sorted(f[:-3] for f in os.listdir(os.path.join(PKG, "s3direct"))
                 if f.endswith(".py") and f not in ("__init__.py", "__main__.py"))
OPTIONAL = {"lightning": "lightning", "vllm": None, "hf": "transformers", "fs": "fsspec"}


def first(code):
    env = dict(os.environ, PYTHONPATH=os.path.abspath(PKG))
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=120)


def test_each_lazy_name_first(lib_path):
    import s3direct

    names = sorted(s3direct._TORCH_API)
    assert "load_into" in names and "stream" in names
    for name in names:
        p = first(f"import s3direct; s3direct.{name}")
        assert p.returncode == 0, f"s3direct.{name} first: {p.stderr[-2000:]}"


@pytest.mark.parametrize("mod", MODULES)
def test_each_module_first(mod, lib_path):
    need = OPTIONAL.get(mod, "")
    if need:
        pytest.importorskip(need)
    if mod == "vllm":
        return  # imports without vLLM by design (tested in test_vllm_loader)
    p = first(f"import s3direct.{mod}")
    assert p.returncode == 0, f"s3direct.{mod} first: {p.stderr[-2000:]}"
