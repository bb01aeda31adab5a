"""The shared library's ABI against the headers: the exported symbols are exactly the functions
declared S3D_API in include/s3direct/*.h, each under the version node of src/libs3direct.map,
and the map lists exactly them; every destructor says "NULL ok" and accepts NULL."""

from __future__ import annotations

import ctypes
import glob
import os
import re
import shutil
import subprocess

import pytest

from conftest import REPO

MAP = os.path.join(REPO, "src", "libs3direct.map")
_DECL = re.compile(r"S3D_API\s+([^;{]*?)\b(s3d_\w+)\s*\(([^)]*)\)\s*;", re.S)


def header_decls() -> dict[str, tuple[str, str, str]]:
    """name -> (return type, parameters, the comment block just above) of every S3D_API
    function in the public headers."""
    out = {}
    for h in sorted(glob.glob(os.path.join(REPO, "include", "s3direct", "*.h"))):
        text = open(h, encoding="utf-8").read()
        for m in _DECL.finditer(text):
            before = text[:m.start()].rstrip()
            comment = ""
            if before.endswith("*/"):
                comment = before[before.rfind("/*"):]
            out[m.group(2)] = (" ".join(m.group(1).split()), " ".join(m.group(3).split()),
                               comment)
    return out


def map_nodes() -> dict[str, list[str]]:
    """version node -> the names in its global: list."""
    text = re.sub(r"/\*.*?\*/", "", open(MAP, encoding="utf-8").read(), flags=re.S)
    nodes = {}
    for m in re.finditer(r"(\w[\w.]*)\s*\{(.*?)\}\s*[\w.]*\s*;", text, re.S):
        body = m.group(2)
        glob_part = body.split("local:")[0].split("global:")[-1]
        nodes[m.group(1)] = [s.strip() for s in glob_part.split(";") if s.strip()]
    return nodes


def test_map_lists_exactly_the_header_functions():
    decls = header_decls()
    assert len(decls) > 40  # the regex found the API, not a fraction of it
    nodes = map_nodes()
    assert list(nodes) == ["S3DIRECT_0.1"], nodes.keys()
    listed = [n for names in nodes.values() for n in names]
    assert len(listed) == len(set(listed)), "a name listed twice"
    assert set(listed) == set(decls), (
        f"in the headers, not the map: {sorted(set(decls) - set(listed))}; "
        f"in the map, not the headers: {sorted(set(listed) - set(decls))}")
    assert "local:\n        *;" in open(MAP, encoding="utf-8").read()


def test_exported_symbols_are_the_header_functions(lib_path):
    readelf = shutil.which("readelf")
    if readelf is None:
        pytest.skip("no readelf")
    out = subprocess.run([readelf, "--dyn-syms", "-W", lib_path], check=True,
                         capture_output=True, text=True).stdout
    exported: dict[str, str] = {}
    for line in out.splitlines():
        f = line.split()
        # Num: Value Size Type Bind Vis Ndx Name
        if len(f) < 8 or not f[0][:-1].isdigit() or f[6] == "UND":
            continue
        if f[3] == "OBJECT" and f[6] == "ABS":
            continue  # the version node's own symbol (S3DIRECT_0.1)
        name, _, version = f[7].partition("@")
        exported[name] = version.lstrip("@")
    exported.pop("", None)
    decls = header_decls()
    assert set(exported) == set(decls), (
        f"exported but not declared S3D_API: {sorted(set(exported) - set(decls))}; "
        f"declared but not exported: {sorted(set(decls) - set(exported))}")
    # readelf prints the version after the name (name@@S3DIRECT_0.1) in binutils >= 2.35.
    versions = {v for v in exported.values() if v}
    if versions:
        assert versions == {"S3DIRECT_0.1"}, versions


def destructors() -> dict[str, tuple[str, str, str]]:
    return {n: d for n, d in header_decls().items()
            if d[0] == "void" and re.search(r"_(free|close)$", n)}


def test_destructors_say_null_ok():
    ds = destructors()
    assert {"s3d_client_free", "s3d_reader_close", "s3d_cancel_free",
            "s3d_upload_stream_free"} <= set(ds)
    for name, (_, _, comment) in ds.items():
        assert "NULL ok" in comment, f"{name}: its comment does not say NULL ok"


def test_destructors_accept_null(lib_path):
    dll = ctypes.CDLL(lib_path)
    for name, (_, params, _) in destructors().items():
        assert params.count(",") == 0 and "*" in params, (name, params)
        fn = getattr(dll, name)
        fn.restype = None
        fn.argtypes = [ctypes.c_void_p]
        fn(None)  # a crash here fails the whole run, loudly
