"""The package ships py.typed and is annotated throughout: user code type-checks against it with
mypy --strict, the package itself passes mypy --strict (its [tool.mypy] in pyproject.toml), and
the public API has docstrings with Args / Returns sections. mypy tests skip when it is absent."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys

import pytest

from conftest import PYDIR, REPO

GOOD = '''
import torch, s3direct
version: str = s3direct.__version__
def f(m: torch.nn.Module) -> None:
    s3direct.save({"a": torch.ones(1)}, "s3://b/k.safetensors", shard_size=None)
    state = s3direct.load("s3://b/k.safetensors", map_location="cpu")
    s3direct.load_into(m, "s3://b/k.safetensors", strict=False)
    with s3direct.writer("s3://b/x.pt") as w:
        torch.save(state, w)
'''
BAD = '''
import s3direct
s3direct.load("s3://b/k.safetensors", verify="yes")
'''


def test_py_typed_present():
    assert os.path.exists(os.path.join(PYDIR, "s3direct", "py.typed"))


@pytest.mark.parametrize("code,ok", [(GOOD, True), (BAD, False)])
def test_user_code_type_checks(tmp_path, code, ok):
    pytest.importorskip("mypy")
    f = tmp_path / "user.py"
    f.write_text(code)
    r = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent",
                        "--no-incremental", str(f)], capture_output=True, text=True,
                       env=dict(os.environ, MYPYPATH=PYDIR), timeout=600)
    assert (r.returncode == 0) == ok, r.stdout + r.stderr


def test_package_passes_mypy_strict(tmp_path):
    """make typecheck: no error in the package, with no per-module relaxation."""
    pytest.importorskip("mypy")
    if not os.path.exists(os.path.join(REPO, "pyproject.toml")):
        pytest.skip("no source checkout")
    r = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--cache-dir",
                        str(tmp_path / "cache"), os.path.join("python", "s3direct")],
                       capture_output=True, text=True, cwd=REPO, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Success: no issues found" in r.stdout


def test_package_passes_mypy_strict_as_installed(tmp_path):
    """mypy --strict of the package as a user's checker sees it: no project configuration
    (no [tool.mypy] overrides), tqdm importable without stubs or absent (issue 24.4: tqdm
    without types-tqdm failed it). The package imports tqdm by name only."""
    pytest.importorskip("mypy")
    r = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--config-file", "",
                        "--cache-dir", str(tmp_path / "cache"), "-p", "s3direct"],
                       capture_output=True, text=True, cwd=tmp_path, timeout=900,
                       env=dict(os.environ, MYPYPATH=PYDIR))
    assert r.returncode == 0, r.stdout + r.stderr
    for root, _, files in os.walk(os.path.join(PYDIR, "s3direct")):
        for name in files:
            if name.endswith(".py"):
                with open(os.path.join(root, name), encoding="utf-8") as f:
                    for line in f:
                        assert not line.lstrip().startswith(("import tqdm", "from tqdm")), name


def _public_api():
    """(qualified name, object) of every public function, class and method: what s3direct
    exports, the objects its functions return, and the DCP storage classes."""
    pytest.importorskip("torch")
    import s3direct
    import s3direct.dcp
    from s3direct._safe_open import TensorSlice
    from s3direct.streams import S3Reader, S3Writer

    out = []
    classes = [TensorSlice, S3Reader, S3Writer, s3direct.dcp.S3DirectStorageWriter,
               s3direct.dcp.S3DirectStorageReader]
    try:  # the Lightning plugin, where lightning is installed
        from s3direct.lightning import S3DirectCheckpointIO
        classes.append(S3DirectCheckpointIO)
    except ImportError:
        pass
    for name in s3direct.__all__:
        obj = getattr(s3direct, name)
        if not callable(obj):
            continue  # __version__
        if inspect.isclass(obj):
            classes.append(obj)
        else:
            out.append((name, obj))
    for cls in classes:
        out.append((cls.__name__, cls))
        for attr, v in vars(cls).items():
            if attr.startswith("_"):
                continue
            if isinstance(v, (classmethod, staticmethod)):
                v = v.__func__
            if isinstance(v, property):
                v = v.fget
            if inspect.isfunction(v):
                out.append((f"{cls.__name__}.{attr}", v))
    return out


def test_public_api_has_docstrings():
    """Every public function and class says what it does; one that takes arguments has an
    Args section (a class: for its __init__'s), and one that also returns a value a Returns
    section (a no-argument accessor's one line says what it returns)."""
    problems = []
    for name, obj in _public_api():
        doc = inspect.getdoc(obj) or ""
        if not doc.strip():
            problems.append(f"{name}: no docstring")
            continue
        if inspect.isclass(obj):
            if "__init__" not in vars(obj):
                continue
            sig = inspect.signature(obj.__init__)
        else:
            sig = inspect.signature(obj)
        params = [p for p in sig.parameters.values() if p.name not in ("self", "cls")]
        if params and "Args:" not in doc:
            problems.append(f"{name}: no Args section")
        returns = sig.return_annotation not in ("None", None, inspect.Signature.empty)
        if params and returns and not inspect.isclass(obj) and "Returns:" not in doc:
            problems.append(f"{name}: no Returns section")
    assert not problems, "\n".join(problems)
