"""The package ships py.typed and its main entry points are annotated: user code type-checks
against them with mypy --strict (mypy is skipped when absent)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import PYDIR

GOOD = '''
import torch, s3direct
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
