"""The ctypes layer: struct layouts match the C headers, version check, error mapping."""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess

import pytest

from conftest import REPO

STRUCTS = {
    # ctypes class name -> C struct name
    "ErrorInfo": "s3d_error_info",
    "ClientOptions": "s3d_client_options",
    "ClientConfig": "s3d_client_config",
    "ObjectInfo": "s3d_object_info",
    "ListEntry": "s3d_list_entry",
    "TransferOptions": "s3d_transfer_options",
    "TensorInfo": "s3d_tensor_info",
    "TensorDest": "s3d_tensor_dest",
    "ReadOptions": "s3d_read_options",
    "TensorSrc": "s3d_tensor_src",
    "MetadataEntry": "s3d_metadata_entry",
    "WriteOptions": "s3d_write_options",
}


def test_struct_layouts_match_headers(tmp_path):
    """Compiles a program that prints sizeof and every offsetof from the real headers and
    compares with the ctypes declarations, field by field."""
    from s3direct import _capi

    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    lines = ['#include <stdio.h>', '#include <stddef.h>', '#include "s3direct/s3direct.h"',
             "int main(void) {"]
    for cls_name, c_name in STRUCTS.items():
        cls = getattr(_capi, cls_name)
        lines.append(f'printf("{cls_name} =sizeof %zu\\n", sizeof(struct {c_name}));')
        for field, _ in cls._fields_:
            lines.append(f'printf("{cls_name} {field} %zu\\n", '
                         f'offsetof(struct {c_name}, {field}));')
    lines.append("return 0; }")
    src = tmp_path / "layout.c"
    src.write_text("\n".join(lines))
    exe = tmp_path / "layout"
    subprocess.run([cc, "-std=c11", "-I", os.path.join(REPO, "include"), str(src), "-o",
                    str(exe)], check=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    seen = 0
    for line in out.splitlines():
        cls_name, what, value = line.split()
        cls = getattr(_capi, cls_name)
        want = ctypes.sizeof(cls) if what == "=sizeof" else getattr(cls, what).offset
        assert want == int(value), f"{cls_name}.{what}: ctypes {want}, C {value}"
        seen += 1
    assert seen == sum(len(getattr(_capi, c)._fields_) + 1 for c in STRUCTS)


def test_dtype_enum_matches_library(lib_path):
    from s3direct import _capi

    lib = _capi.lib()
    for value, name in enumerate(_capi.DTYPE_NAMES):
        if value == 0:
            continue
        assert lib.s3d_dtype_name(value).decode() == name
        assert lib.s3d_dtype_from_name(name.encode(), len(name)) == value


def test_error_names_match_library(lib_path):
    from s3direct import _capi, errors

    lib = _capi.lib()
    for code, name in errors.CODE_NAMES.items():
        assert lib.s3d_err_name(code).decode() == name


def c_error_codes(lib) -> dict[int, str]:
    """Every code the C library names (s3d_err_name), walked from the C side."""
    out = {}
    for code in range(-1, -1000, -1):
        name = lib.s3d_err_name(code).decode()
        if name != "S3D_UNKNOWN":
            out[code] = name
    return out


def test_every_c_error_code_maps_to_python(lib_path):
    """errors.py's table is copied from errors.h: every code the library has must be there
    with its name and a class chosen for it, and the X-macro list in the
    header must agree with the library (a code appended on one side only fails here)."""
    import re

    from s3direct import _capi, errors

    lib = _capi.lib()
    c_codes = c_error_codes(lib)
    header = open(os.path.join(REPO, "include", "s3direct", "errors.h")).read()
    macro = {int(v): "S3D_" + n for n, v in re.findall(r"X\((E\w+), (-\d+),", header)}
    assert macro == c_codes
    assert errors.CODE_NAMES == c_codes
    for code, name in c_codes.items():
        # Each code is given its class on purpose (the base class too), so a code appended
        # in C fails here until errors.py decides what it raises.
        assert code in errors._BY_CODE or name.startswith("S3D_EFMT_"), f"{name}: no class"
        cls = errors.error_class(code)
        e = errors.make_error(code, "m")
        assert (type(e), e.code, e.name, str(e)) == (cls, code, name, "m")
        if name.startswith("S3D_EFMT_"):
            assert issubclass(cls, errors.FormatError), name
        assert lib.s3d_strerror(code).decode() != "", name
    # A code the library does not have stays the base class.
    assert errors.error_class(-999) is errors.S3DirectError


def test_version_check(lib_path):
    import s3direct
    from s3direct import _capi

    lib = _capi.lib()
    assert lib.version >> 16 == _capi.EXPECTED_VERSION >> 16
    assert s3direct.library_version() == _capi._fmt_version(lib.s3d_version())


def test_error_classes():
    from s3direct import errors

    c = errors._CODES
    assert isinstance(errors.make_error(c["ENOSUCHKEY"], "x"), errors.NoSuchKey)
    assert isinstance(errors.make_error(c["ESIGNATURE"], "x"), errors.AccessDenied)
    assert isinstance(errors.make_error(c["EKEYID"], "x"), errors.AccessDenied)
    assert isinstance(errors.make_error(c["EFMT_TRUNCATED"], "x"), errors.FormatError)
    assert isinstance(errors.make_error(c["EFMT_JSON"], "x"), errors.FormatError)
    assert isinstance(errors.make_error(c["ECHECKSUM"], "x"), errors.ChecksumMismatch)
    assert isinstance(errors.make_error(c["ERETRIES"], "x"), errors.TransferError)
    assert isinstance(errors.make_error(c["ECHANGED"], "x"), errors.TransferError)
    assert isinstance(errors.make_error(c["EMFILE"], "x"), errors.TransferError)
    assert isinstance(errors.make_error(c["ENOCREDS"], "x"), errors.ConfigError)
    # An HTTP error the C side left generic is refined by the S3 <Code>.
    e = errors.make_error(c["EHTTP"], "x", s3_code="NoSuchBucket", http_status=404)
    assert isinstance(e, errors.NoSuchBucket) and e.http_status == 404
    # Pickling keeps class and fields (errors cross process boundaries).
    import pickle

    e2 = pickle.loads(pickle.dumps(errors.make_error(c["EACCESS"], "denied", bucket="b",
                                                     request_id="r1")))
    assert type(e2) is errors.AccessDenied
    assert (e2.code, e2.bucket, e2.request_id, str(e2)) == (c["EACCESS"], "b", "r1", "denied")


def test_failure_detail_reaches_exception(lib_path, tmp_path):
    import s3direct

    missing = tmp_path / "nope.safetensors"
    with pytest.raises(s3direct.NoSuchKey) as ei:
        s3direct.load(missing)
    assert ei.value.code in (-4, -15)
    assert "nope.safetensors" in str(ei.value)


def test_client_config_and_fork(lib_path, s3_env):
    import s3direct

    c = s3direct.Client(endpoint_url=s3_env["AWS_ENDPOINT_URL"], max_concurrency=3,
                        part_size=5 << 20)
    cfg = c.config()
    assert cfg["endpoint_url"].rstrip("/") == s3_env["AWS_ENDPOINT_URL"].rstrip("/")
    assert cfg["max_concurrency"] == 3 and cfg["part_size"] == 5 << 20
    d1 = s3direct.default_client()
    assert s3direct.default_client() is d1
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: a new default client; the explicit one makes its own C client
        ok = b"0"
        try:
            h_parent = c._h
            cfg = c.config()
            ok = b"1" if (s3direct.default_client() is not d1 and c._h is not h_parent
                          and cfg["max_concurrency"] == 3
                          and cfg["part_size"] == 5 << 20) else b"2"
        except BaseException as e:  # noqa: BLE001  the parent reports it
            ok = repr(e).encode()[:200]
        os.write(w, ok)
        os._exit(0)
    os.close(w)
    got = os.read(r, 200)
    os.waitpid(pid, 0)
    assert got == b"1"
    assert c.config()["max_concurrency"] == 3  # the parent's client is untouched
    c.close()


def test_dataloader_fork_workers_with_a_client_from_dataset_init(lib_path, s3_env, bucket):
    """A Dataset that makes its Client in __init__, read by DataLoader workers under Linux's
    default fork context: each worker uses its own C client (issue 24.3: every worker raised
    ConfigError), every item arrives intact, and the parent's client still works."""
    import torch
    from torch.utils.data import DataLoader, Dataset

    import s3direct

    c0 = s3direct.Client(endpoint_url=s3_env["AWS_ENDPOINT_URL"])
    uris = []
    for i in range(6):
        u = f"s3://{bucket}/item{i}.safetensors"
        s3direct.save({"x": torch.full((4,), float(i))}, u, client=c0)
        uris.append(u)

    class Items(Dataset):
        def __init__(self) -> None:
            self.client = s3direct.Client(endpoint_url=s3_env["AWS_ENDPOINT_URL"])
            self.client.config()  # used in the parent before the workers fork

        def __len__(self) -> int:
            return len(uris)

        def __getitem__(self, i: int):
            return s3direct.load(uris[i], client=self.client)["x"], os.getpid()

    ds = Items()
    loader = DataLoader(ds, batch_size=None, num_workers=2, multiprocessing_context="fork")
    got = list(loader)
    assert [int(x[0]) for x, _ in got] == list(range(6))
    assert all(torch.equal(x, torch.full((4,), float(i))) for i, (x, _) in enumerate(got))
    assert os.getpid() not in {p for _, p in got}
    assert s3direct.load(uris[0], client=ds.client)["x"][0] == 0
    ds.client.close()
    c0.close()
