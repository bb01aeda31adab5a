"""The Python surface as a user first reads it (issue 37, item 4): help(s3direct) short with
the functions in it, every public name in dir(), the docstring examples right, exceptions
under the builtins users catch, a clear error without torch, readable log timestamps, one
spelling for an object's location."""

from __future__ import annotations

import io
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
    """No example passes a writer straight to torch.save (which saves nothing); the prose
    that explains why may name it."""
    example = re.compile(r"^\s*torch\.save\([^,]+, s3direct\.writer\(", re.M)
    doc = s3direct.__doc__ or ""
    assert not example.search(doc)
    assert "with s3direct.writer(uri) as f:" in doc
    for path in ("README.md", os.path.join("docs", "python.md")):
        full = os.path.join(os.path.dirname(__file__), "..", "..", path)
        if os.path.exists(full):
            with open(full, encoding="utf-8") as f:
                assert not example.search(f.read()), path


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


STAMP = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"


def test_log_lines_carry_iso_utc_stamps(lib_path):
    """S3D_LOG's lines, printed by the Python bridge, are stamped 2026-12-07T14:03:11.042Z
    (not raw epoch seconds), as the C library's own stderr lines are (the CLI)."""
    code = ("import s3direct; s3direct.Client(endpoint_url='http://127.0.0.1:9', "
            "device=-1).close()")
    r = _run(code, S3D_LOG="info")
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("[s3direct ")]
    assert lines and all(re.match(rf"^\[s3direct {STAMP} [A-Z]+\] ", ln) for ln in lines), \
        r.stderr
    from s3direct import _cli

    exe = next((c for c in _cli.candidate_paths() if os.access(c, os.X_OK)), None)
    if exe is None:
        pytest.skip("the s3direct CLI is not built (set S3D_BUILD_DIR)")
    env = dict(os.environ, S3D_LOG="info", AWS_ENDPOINT_URL="http://127.0.0.1:9",
               AWS_ACCESS_KEY_ID="k", AWS_SECRET_ACCESS_KEY="s", AWS_MAX_ATTEMPTS="1")
    r = subprocess.run([exe, "ls", "s3://no-such-bucket"], capture_output=True, text=True,
                       env=env, timeout=60)
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("[s3direct ")]
    assert lines and all(re.match(rf"^\[s3direct {STAMP} [a-z]+\] ", ln) for ln in lines), \
        r.stderr


def test_head_takes_a_uri_as_list_does(s3_env, bucket, lib_path):
    c = s3direct.Client()
    try:
        c.upload_bytes(bucket, "dir/obj.bin", b"x" * 1234)
        by_uri = c.head(f"s3://{bucket}/dir/obj.bin")
        by_pair = c.head(bucket, "dir/obj.bin")
        assert by_uri.size == by_pair.size == 1234
        assert [o.size for o in c.list(f"s3://{bucket}/dir/")] == [1234]
        with pytest.raises(s3direct.NoSuchKey):
            c.head(f"s3://{bucket}/dir/missing")
        with pytest.raises(s3direct.InvalidArgument, match="names a bucket"):
            c.head(f"s3://{bucket}")
        with pytest.raises(s3direct.ConfigError, match="not an s3:// URI"):
            c.head("/tmp/local-file")
    finally:
        c.close()


def test_file_objects_get_a_clear_type_error(tmp_path, lib_path):
    """load, safe_open, save, reader and writer take locations; a file object (which torch.load
    and safetensors accept) is a TypeError that says what is accepted and, for a file opened
    from a path, which path to pass."""
    pytest.importorskip("torch")
    import torch

    path = tmp_path / "w.safetensors"
    s3direct.save({"a": torch.ones(2)}, str(path))
    with open(path, "rb") as f:
        for call in (lambda: s3direct.load(f), lambda: s3direct.safe_open(f, "pt"),
                     lambda: s3direct.reader(f)):
            with pytest.raises(TypeError, match=r"takes a location .*got BufferedReader: "
                               r"pass the file's path, '.*w\.safetensors'.*torch\.load\(f\)"):
                call()
    for call in (lambda: s3direct.load(io.BytesIO(b"x")),
                 lambda: s3direct.save({"a": torch.ones(1)}, io.BytesIO())):
        with pytest.raises(TypeError, match=r"got BytesIO\. For a file object: .*"
                           r"safetensors\.torch\.load\(f\.read\(\)\)"):
            call()
    with pytest.raises(TypeError, match="got int$"):
        s3direct.load(42)
    assert torch.equal(s3direct.load(path)["a"], torch.ones(2))  # os.PathLike still works
