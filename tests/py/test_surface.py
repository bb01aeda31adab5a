"""The Python surface as a user first reads it (issue 37, item 4): help(s3direct) short with
the functions in it, every public name in dir(), the docstring examples right, exceptions
under the builtins users catch, a clear error without torch, readable log timestamps, one
spelling for an object's location."""

from __future__ import annotations

import io
import logging
import os
import pydoc
import re
import subprocess
import sys

import pytest

import s3direct
from s3direct import errors

TENSOR_API = ["save", "load", "load_into", "save_async", "safe_open", "CheckpointManager"]


def _run(code, **env):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, **env))


def test_import_stays_light():
    """import s3direct, dir() and help() do not import torch."""
    r = _run("import sys, pydoc, s3direct; d = dir(s3direct); "
             "assert 'torch' not in sys.modules, 'import'; "
             "print(all(n in d for n in s3direct.__all__)); "
             "print('torch' in sys.modules)")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", "False"]


def test_dir_and_all_list_the_tensor_api():
    d = dir(s3direct)
    for name in TENSOR_API + ["Client", "reader", "writer", "library_version", "SaveStats"]:
        assert name in s3direct.__all__ and name in d, name
    # the exceptions are attributes (and in dir(), for completion), all of s3direct.errors
    for name in errors.__all__:
        assert name in d and getattr(s3direct, name) is getattr(errors, name), name


def test_help_is_short_and_shows_the_functions():
    pytest.importorskip("torch")
    text = pydoc.render_doc(s3direct, renderer=pydoc.plaintext)
    lines = text.splitlines()
    assert len(lines) < 1200, len(lines)  # 2,153 before issue 37, mostly exception methods
    funcs = text[text.index("\nFUNCTIONS\n"):]
    for name in ("save", "load", "load_into", "save_async", "reader", "writer"):
        assert re.search(rf"^    {name}\(", funcs, re.M), name
    classes = text[text.index("\nCLASSES\n"):text.index("\nFUNCTIONS\n")]
    for name in ("safe_open", "CheckpointManager", "Client"):
        assert f"class {name}(" in classes, name
    assert "class NoSuchKey(" not in text and "with_traceback" not in text
    # the description lists the functions before the exceptions, and each exception once
    desc = text[text.index("\nDESCRIPTION\n"):text.index("\nCLASSES\n")]
    assert desc.index("save(state, uri)") < desc.index("Exceptions")
    for name in errors.__all__:
        assert name in desc, name


def test_docstring_examples_use_the_writer_in_a_with_block():
    doc = s3direct.__doc__ or ""
    assert "torch.save(obj, s3direct.writer(" not in doc
    assert "with s3direct.writer(uri) as f:" in doc
    for path in ("README.md", os.path.join("docs", "python.md")):
        full = os.path.join(os.path.dirname(__file__), "..", "..", path)
        if os.path.exists(full):
            with open(full, encoding="utf-8") as f:
                assert "torch.save(obj, s3direct.writer(" not in f.read(), path


def test_exceptions_derive_from_the_builtins():
    c = errors._CODES
    want = {
        "EFMT_JSON": ValueError, "ENOTENSOR": ValueError, "ECONFIG": ValueError,
        "EURI": ValueError, "ENOCREDS": ValueError, "EINVAL": ValueError,
        "ENETWORK": OSError, "ETLS": OSError, "ERETRIES": OSError, "EIO": OSError,
        "ECHECKSUM": OSError, "ENOSUCHKEY": FileNotFoundError, "ENOENT": FileNotFoundError,
        "ENOSUCHBUCKET": FileNotFoundError, "EACCESS": PermissionError,
        "ETIMEDOUT": TimeoutError, "EBUCKETEXISTS": FileExistsError,
    }
    for code, base in want.items():
        e = errors.make_error(c[code], f"message of {code}")
        assert isinstance(e, base) and isinstance(e, s3direct.S3DirectError), code
        assert str(e) == f"message of {code}" and e.code == c[code]
    # the S3 errors are OSErrors, the argument and data errors are not
    assert issubclass(s3direct.TransferError, OSError)
    assert not issubclass(s3direct.FormatError, OSError)
    assert not issubclass(s3direct.TransferError, ValueError)
    assert issubclass(s3direct.TorchMissing, ModuleNotFoundError)
    # still picklable with their detail (DCP and multiprocessing send them between processes)
    import pickle

    e = errors.make_error(c["EHTTP"], "boom", http_status=503, s3_code="SlowDown")
    back = pickle.loads(pickle.dumps(e))
    assert type(back) is type(e) and str(back) == "boom" and back.http_status == 503


def test_without_torch_the_tensor_api_says_so():
    """Where torch is not installed, import, dir() and help() work, `from s3direct import
    save` works, and each call raises TorchMissing (an S3DirectError and an ImportError)
    naming what to install."""
    code = """
import sys
sys.modules["torch"] = None  # import torch fails as it does where torch is not installed
import pydoc, s3direct
from s3direct import save, load
pydoc.render_doc(s3direct, renderer=pydoc.plaintext)
for name in %r:
    try:
        getattr(s3direct, name)("s3://b/k")
    except ImportError as e:
        assert isinstance(e, s3direct.S3DirectError) and isinstance(e, s3direct.TorchMissing)
        assert str(e).startswith(f"s3direct.{name} needs PyTorch"), str(e)
        assert "pip install torch" in str(e)
    else:
        raise AssertionError(name)
print("ok")
""" % (TENSOR_API,)
    r = _run(code)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr
