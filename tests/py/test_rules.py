"""The rules CONTRIBUTING.md writes down, checked on the tree rather than trusted:

- every ``#include`` of src/, include/, tools/ and bench/ against the dependency table of
  CONTRIBUTING.md (read from the table itself, so the rule and the check cannot drift), and the
  Python package binds only functions the public headers declare;
- every repository path the docs name (README.md, CONTRIBUTING.md, docs/**/*.md,
  bench/README.md) exists;
- every C source file name, and every private header name, appears once in the tree;
- the Python package has no file commit of its own (it calls the C library's).

Text only: no build, no library, no server. Each test names every offender it finds.
"""

from __future__ import annotations

import ast
import fnmatch
import itertools
import os
import re
import subprocess

import pytest

from conftest import REPO

LAYERS_ORDER = ["common", "s3", "format", "device", "engine"]
PUBLIC = "s3direct"  # include/s3direct/: what tools/, bench/ and Python may use


def _tracked() -> list[str]:
    """The files of the tree: in a checkout, git's list plus the new files it does not ignore
    (a file is held to the rules before it is added); else every file below REPO."""
    if not os.path.exists(os.path.join(REPO, "CMakeLists.txt")):
        pytest.skip("not a source checkout")
    try:
        out = subprocess.run(["git", "-C", REPO, "ls-files", "-z", "--cached", "--others",
                              "--exclude-standard"], capture_output=True,
                             check=True).stdout.decode()
        files = [f for f in out.split("\0") if f]
        # A file deleted in the work tree but not yet in git's index is not part of the tree.
        return [f for f in files if os.path.exists(os.path.join(REPO, f))]
    except (OSError, subprocess.CalledProcessError):
        files = []
        for root, dirs, names in os.walk(REPO):
            dirs[:] = [d for d in dirs if not d.startswith((".", "build", "dist"))]
            files += [os.path.relpath(os.path.join(root, n), REPO) for n in names]
        return files


def _read(rel: str) -> str:
    with open(os.path.join(REPO, rel), encoding="utf-8", errors="replace") as f:
        return f.read()


# ---- the dependency rule ------------------------------------------------------------------

def dependency_table(text: str) -> dict[str, set[str]]:
    """CONTRIBUTING's table: layer -> the layers it may include. 'nothing' is none, 'all of
    the above' every layer listed before it, else the backticked names."""
    table: dict[str, set[str]] = {}
    for m in re.finditer(r"^\|\s*`src/(\w+)/`\s*\|[^|]*\|\s*([^|]*?)\s*\|\s*$", text, re.M):
        layer, deps = m.group(1), m.group(2)
        if deps == "nothing":
            table[layer] = set()
        elif deps == "all of the above":
            table[layer] = set(table)
        else:
            table[layer] = set(re.findall(r"`(\w+)`", deps))
    return table


_INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)


def include_violations(files: dict[str, str], table: dict[str, set[str]]) -> list[str]:
    """'file: #include "x" (why)' for each include the rule forbids. files: path -> text."""
    bad = []
    for path, text in sorted(files.items()):
        parts = path.split("/")
        if parts[0] == "src":
            if len(parts) < 3 or parts[1] not in table:
                bad.append(f"{path}: in no folder of CONTRIBUTING's table")
                continue
            own = parts[1]
            allowed = table[own] | {own, PUBLIC}
        elif parts[0] == "include":
            own, allowed = PUBLIC, {PUBLIC}
        else:  # tools/ and bench/: the public headers and their own folder
            own, allowed = parts[0], {PUBLIC}
        folder = os.path.dirname(path)
        for m in _INCLUDE.finditer(text):
            quoted, name = m.group(1) == '"', m.group(2)
            first = name.split("/")[0]
            if "/" in name and (first in table or first == PUBLIC):
                if first not in allowed:
                    bad.append(f"{path}: #include {m.group(0).split('include', 1)[1].strip()}"
                               f" ({own} may use {', '.join(sorted(allowed))})")
            elif quoted:
                # Only a header of the same folder may be named without its folder; anything
                # else ("../src/x.h", "x.h" from elsewhere) goes around the table.
                if "/" in name or not os.path.exists(os.path.join(REPO, folder, name)):
                    bad.append(f'{path}: #include "{name}" (not a header of {folder}/ and '
                               f"not folder-qualified)")
    return bad


def _c_files(tracked: list[str]) -> dict[str, str]:
    roots = ("src/", "include/", "tools/", "bench/")
    return {f: _read(f) for f in tracked
            if f.startswith(roots) and f.endswith((".c", ".h"))}


def test_dependency_table_is_readable():
    table = dependency_table(_read("CONTRIBUTING.md"))
    assert list(table) == LAYERS_ORDER, table
    assert table["common"] == set() and table["engine"] == {"common", "s3", "format", "device"}


def test_includes_follow_the_dependency_table():
    table = dependency_table(_read("CONTRIBUTING.md"))
    files = _c_files(_tracked())
    assert any(f.startswith("src/engine/") for f in files) and any(
        f.startswith("tools/") for f in files)
    bad = include_violations(files, table)
    assert not bad, "includes against CONTRIBUTING.md's dependency rule:\n" + "\n".join(bad)


def test_include_check_catches_violations():
    """The checker itself, on made-up files: each kind of violation is found."""
    table = dependency_table(_read("CONTRIBUTING.md"))
    files = {
        "src/s3/a.c": '#include "format/safetensors.h"\n#include "common/error.h"\n',
        "src/common/b.c": '#include "engine/xfer.h"\n',
        "src/device/c.c": '#include "s3/http.h"\n#include "s3direct/client.h"\n',
        "tools/d.c": '#include "common/error.h"\n#include "../src/engine/xfer.h"\n'
                     '#include <engine/pool.h>\n#include "cli.h"\n#include <stdio.h>\n',
        "include/s3direct/e.h": '#include "common/compiler.h"\n',
        "src/newlayer/f.c": "",
    }
    bad = include_violations(files, table)
    for needle in ["src/s3/a.c: #include \"format/", "src/common/b.c: #include \"engine/",
                   "src/device/c.c: #include \"s3/", "tools/d.c: #include \"common/",
                   "tools/d.c: #include \"../src", "tools/d.c: #include <engine/",
                   "include/s3direct/e.h: #include \"common/", "src/newlayer/f.c: in no folder"]:
        assert any(b.startswith(needle) for b in bad), (needle, bad)
    assert len(bad) == 8, bad


def _public_functions() -> set[str]:
    names = set()
    for f in _tracked():
        if f.startswith("include/s3direct/") and f.endswith(".h"):
            names |= set(re.findall(r"S3D_API\b[^;(]*?\b(s3d_\w+)\s*\(", _read(f)))
    return names


def test_python_binds_only_the_public_api():
    """python/ uses only include/s3direct/: every function _capi declares is S3D_API in a
    public header."""
    tree = ast.parse(_read("python/s3direct/_capi.py"))
    sigs: list[str] = []
    for node in ast.walk(tree):
        target = node.target if isinstance(node, ast.AnnAssign) else (
            node.targets[0] if isinstance(node, ast.Assign) and node.targets else None)
        if isinstance(target, ast.Name) and target.id == "_SIGNATURES":
            assert isinstance(node.value, ast.Dict)
            sigs = [k.value for k in node.value.keys if isinstance(k, ast.Constant)]
    assert len(sigs) > 40, "_SIGNATURES not found in python/s3direct/_capi.py"
    public = _public_functions()
    assert len(public) > 40
    assert not set(sigs) - public, f"bound but not public: {sorted(set(sigs) - public)}"


# ---- paths named in the docs --------------------------------------------------------------

DOCS_GLOBS = ["README.md", "CONTRIBUTING.md", "bench/README.md", "docs/**/*.md"]
# Names the docs use for something that is not a file of this tree, each with its reason.
NOT_TREE_PATHS = {
    ("docs/gpu-check.md", "tests/bin/"): "a folder of the GPU bundle (make gpu-bundle)",
    ("docs/gpu-check.md", "tests/fakecuda/"): "a folder of the GPU bundle (make gpu-bundle)",
    ("docs/internals/staging-pool.md", "./cufile.log"): "cuFile's log in the working folder",
}
_TICKED = re.compile(r"`([^`\n]+)`")
_LINK = re.compile(r"\]\(([^)\s#]+)")
_SOURCE_EXT = re.compile(r"\.(c|h|py|sh|cmake)$")


def _docs(tracked: list[str]) -> list[str]:
    return sorted(f for f in tracked
                  if any(fnmatch.fnmatch(f, g) or (g.startswith("docs/**") and
                                                   f.startswith("docs/") and f.endswith(".md"))
                         for g in DOCS_GLOBS))


def _expand(word: str) -> list[str]:
    """src/s3/http.{c,h} -> both."""
    m = re.search(r"\{([^{}]*)\}", word)
    if m is None:
        return [word]
    return list(itertools.chain.from_iterable(
        _expand(word[:m.start()] + alt + word[m.end():]) for alt in m.group(1).split(",")))


def _ignored(paths: list[str]) -> set[str]:
    """The paths git ignores (build outputs such as bench/.venv-peers)."""
    try:
        # Each also as a folder: a pattern such as "/bench/.venv-peers/" matches only that.
        r = subprocess.run(["git", "-C", REPO, "check-ignore", "--no-index", "--stdin"],
                           input="\n".join(paths + [p + "/" for p in paths]),
                           capture_output=True, text=True)
        return {p.rstrip("/") for p in r.stdout.split("\n")}
    except OSError:
        return set()


def doc_path_violations(docs: dict[str, str], tracked: list[str]) -> list[str]:
    """'doc: `path`' for each path a doc names that is not in the tree. A path is a link
    target (relative to its doc), a word in backticks whose first folder is a top-level entry
    of the tree (src/, tests/, Makefile ...), or a bare source file name in backticks (x.c,
    x.py, x.sh), resolved anywhere in the tree; a word with * or an
    upper-case placeholder (fuzz_T.c, NAME) must match something; {a,b} names both."""
    entries = set(tracked)
    for t in tracked:
        while "/" in t:
            t = t.rsplit("/", 1)[0]
            entries.add(t)
    top = {t.split("/")[0] for t in tracked}
    names = {os.path.basename(t) for t in tracked}
    found: list[tuple[str, str, str]] = []
    for doc, text in docs.items():
        words = [w for m in _TICKED.finditer(text) for w in m.group(1).split()]
        links = [m.group(1) for m in _LINK.finditer(text) if "://" not in m.group(1)]
        for link in links:  # a link target is a path relative to its doc
            found.append((doc, "path", link))
        for raw in words:
            w = raw.split("::")[0].strip(".,;:'\"").lstrip("(").rstrip(")")
            if not w or "://" in w or w.startswith(("-", "$", "~")) or "=" in w:
                continue
            first = w.split("/")[0]
            if "/" in w and (first in top or first in (".", "..")):
                kind = "path"
            elif "/" not in w and _SOURCE_EXT.search(w) and not w.startswith(".") and \
                    re.fullmatch(r"[\w.*{},-]+", w):
                kind = "name"
            else:
                continue
            if (doc, w) in NOT_TREE_PATHS:
                continue
            for one in _expand(w):
                found.append((doc, kind, one))
    # (git refuses a whole list that holds a path outside the tree: "../x" stays out.)
    ignored = _ignored(sorted({os.path.normpath(one) for _, kind, one in found
                               if kind == "path" and not one.startswith(".")}))
    bad = []
    for doc, kind, one in found:
        cand = one.rstrip("/")
        if kind == "path":
            rel = os.path.normpath(os.path.join(os.path.dirname(doc), cand))
            if cand in entries or rel in entries or cand in ignored:
                continue
            pool, pat = entries, cand
        else:
            if cand in names:
                continue
            pool, pat = names, cand
        # Globs and placeholders: T, NAME, N stand for any name.
        pat = re.sub(r"(?<![A-Za-z0-9])[A-Z][A-Z0-9]*(?![a-z0-9])", "*", pat)
        if ("*" in pat) and any(fnmatch.fnmatchcase(p, pat) for p in pool):
            continue
        bad.append(f"{doc}: `{one}`")
    return sorted(set(bad))


def test_paths_named_in_the_docs_exist():
    tracked = _tracked()
    docs = {d: _read(d) for d in _docs(tracked)}
    assert "CONTRIBUTING.md" in docs and any(d.startswith("docs/internals/") for d in docs)
    bad = doc_path_violations(docs, tracked)
    assert not bad, "paths the docs name that are not in the tree:\n" + "\n".join(bad)


def test_doc_path_check_catches_violations():
    tracked = ["src/engine/xfer.c", "src/engine/xfer.h", "tests/fuzz/fuzz_ini.c", "Makefile",
               "docs/internals/engine.md"]
    docs = {"docs/internals/engine.md":
            "See `src/engine/xfer.{c,h}`, `tests/fuzz/fuzz_T.c`, [engine](engine.md), `xfer.c`"
            " and `make test`.\nGone: `src/engine/fileio.c`, `tools/xfer.c` (tools/ is no "
            "folder here), `src/engine/gone.{c,h}`, `tmpfile.c`, [old](old.md).\n"}
    bad = doc_path_violations(docs, tracked)
    assert bad == sorted(["docs/internals/engine.md: `src/engine/fileio.c`",
                          "docs/internals/engine.md: `src/engine/gone.c`",
                          "docs/internals/engine.md: `src/engine/gone.h`",
                          "docs/internals/engine.md: `tmpfile.c`",
                          "docs/internals/engine.md: `old.md`"]), bad


# ---- one name, one file -------------------------------------------------------------------

def duplicate_names(tracked: list[str]) -> list[str]:
    """C sources (.c) and private headers (.h outside include/) whose file name is used twice.
    Public headers are always named with their folder (s3direct/log.h) and may share a name
    with a private one."""
    seen: dict[str, list[str]] = {}
    for f in tracked:
        if f.endswith(".c") or (f.endswith(".h") and not f.startswith("include/")):
            seen.setdefault(os.path.basename(f), []).append(f)
    return [f"{n}: {', '.join(sorted(v))}" for n, v in sorted(seen.items()) if len(v) > 1]


def test_c_file_names_are_unique():
    tracked = _tracked()
    assert "src/engine/xfer.c" in tracked
    bad = duplicate_names(tracked)
    assert not bad, "file names used twice:\n" + "\n".join(bad)


def test_unique_name_check_catches_violations():
    assert duplicate_names(["src/engine/xfer.c", "tools/xfer.c", "include/s3direct/log.h",
                            "src/common/log.h", "src/a/x.h", "tests/x.h"]) == [
        "x.h: src/a/x.h, tests/x.h", "xfer.c: src/engine/xfer.c, tools/xfer.c"]


# ---- Python is a thin layer ---------------------------------------------------------------

def test_python_has_no_file_commit_of_its_own():
    """Files written whole are committed by the C library (s3d_file_stream_*, tmpfile.c: fsync,
    rename, fsync of the folder, sweep of leftovers); a Python copy of that drifts."""
    own = re.compile(r"\bos\.(replace|rename|renames|fsync|fdatasync|link)\s*\(")
    bad = []
    for f in _tracked():
        if f.startswith("python/") and f.endswith(".py"):
            for n, line in enumerate(_read(f).splitlines(), 1):
                if own.search(line):
                    bad.append(f"{f}:{n}: {line.strip()}")
    assert not bad, "\n".join(bad)


LIB_LOADER = "python/s3direct/_capi.py"  # loads libs3direct.so, the one library Python calls
_LOADS = {"CDLL", "PyDLL", "LoadLibrary", "find_library"}
_DRIVER_NAME = re.compile(r"^cu[A-Z]\w*$|libcuda|libcudart|libcufile")


def foreign_library_calls(files: dict[str, str]) -> list[str]:
    """'path:line: why' for each place Python could call a library other than the C
    library's public API: a ctypes library load outside LIB_LOADER, an attribute named like a
    CUDA driver function (dll.cuStreamCreate), or a CUDA library's name in code (docstrings
    may name them)."""
    bad = []
    for path, text in sorted(files.items()):
        tree = ast.parse(text)
        docs = {id(n.body[0].value) for n in ast.walk(tree)
                if isinstance(n, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                and n.body and isinstance(n.body[0], ast.Expr)}
        for node in ast.walk(tree):
            name = (node.attr if isinstance(node, ast.Attribute) else
                    node.id if isinstance(node, ast.Name) else None)
            if name in _LOADS and path != LIB_LOADER:
                bad.append(f"{path}:{node.lineno}: loads a library ({name})")
            elif name is not None and _DRIVER_NAME.search(name):
                bad.append(f"{path}:{node.lineno}: calls the CUDA driver ({name})")
            elif (isinstance(node, ast.Constant) and isinstance(node.value, str)
                  and id(node) not in docs and _DRIVER_NAME.search(node.value)):
                bad.append(f"{path}:{node.lineno}: names a CUDA library ({node.value[:40]!r})")
    return bad


def test_python_calls_only_the_library():
    """Python is a thin layer over the library's public API (CONTRIBUTING.md): no library
    load and no CUDA driver call of its own (save_async's fence hands torch's events to the
    library, issue 39)."""
    files = {f: _read(f) for f in _tracked() if f.startswith("python/") and f.endswith(".py")}
    assert LIB_LOADER in files
    bad = foreign_library_calls(files)
    assert not bad, "\n".join(bad)


def test_foreign_library_check_catches_violations():
    old_fence = (
        '"""Docstrings may say cuStreamWaitEvent and libcuda.so.1."""\n'
        'import ctypes\n'
        'dll = ctypes.CDLL("libcuda.so.1")\n'
        'dll.cuStreamCreate(None, 1)\n')
    assert foreign_library_calls({"python/s3direct/_fence.py": old_fence}) == [
        "python/s3direct/_fence.py:3: loads a library (CDLL)",
        "python/s3direct/_fence.py:3: names a CUDA library ('libcuda.so.1')",
        "python/s3direct/_fence.py:4: calls the CUDA driver (cuStreamCreate)"]
    assert foreign_library_calls({LIB_LOADER: 'import ctypes\nd = ctypes.CDLL(p)\n'}) == []


# ---- one reader of the environment --------------------------------------------------------

_C_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
ENV_READER = "src/common/env.c"


def _getenv_calls(files: dict[str, str]) -> list[str]:
    """'path:line' of each getenv / secure_getenv call outside comments in files (path -> text)
    other than the one reader."""
    out = []
    for path, text in sorted(files.items()):
        if path == ENV_READER:
            continue
        code = _C_COMMENT.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)
        for m in re.finditer(r"\b(?:secure_)?getenv\s*\(", code):
            out.append(f"{path}:{code.count(chr(10), 0, m.start()) + 1}")
    return out


def test_library_reads_the_environment_in_one_place():
    """Every variable the library reads goes through s3d_env / s3d_env_int (src/common/env.c):
    one behaviour for an empty value and for a malformed number (issue 38)."""
    src = {f: _read(f) for f in _tracked() if f.startswith("src/") and f.endswith((".c", ".h"))}
    assert ENV_READER in src and len(src) > 50
    bad = _getenv_calls(src)
    assert not bad, "getenv() outside " + ENV_READER + ": " + ", ".join(bad)


def test_getenv_check_catches_calls_not_comments():
    files = {"src/a.c": "/* getenv(\"X\") */\nint x = 1; // getenv(\"Y\")\nchar *p = getenv(\"Z\");\n",
             "src/b.c": "p = secure_getenv (\"W\");\n", ENV_READER: "return getenv(name);\n"}
    assert _getenv_calls(files) == ["src/a.c:3", "src/b.c:1"]


def _hook_violations(files: dict[str, str]) -> list[str]:
    """'path: why' for a "S3D_TEST_..." name read other than through S3D_TEST_HOOK*, and for
    an S3D_TEST_HOOK* reading a name without the S3D_TEST_ prefix (comments left out)."""
    bad = []
    for path, text in sorted(files.items()):
        code = _C_COMMENT.sub(" ", text)
        hooked = set()
        for m in re.finditer(r'\bS3D_TEST_HOOK(?:_INT)?\s*\(\s*"(\w+)"', code):
            hooked.add(m.start(1))
            if not m.group(1).startswith("S3D_TEST_"):
                bad.append(f"{path}: the hook {m.group(1)} is not named S3D_TEST_*")
        for m in re.finditer(r'"(S3D_TEST_\w+)"', code):
            if m.start(1) not in hooked:
                bad.append(f"{path}: {m.group(1)} read without S3D_TEST_HOOK")
    return bad


def test_test_hooks_only_through_the_hook_macros():
    """The S3D_TEST_* variables are read in src/ only through S3D_TEST_HOOK / _INT, which a
    build without S3D_TEST_HOOKS (the wheel) compiles to "unset" (issue 38)."""
    src = {f: _read(f) for f in _tracked() if f.startswith("src/") and f.endswith((".c", ".h"))}
    assert any("S3D_TEST_HOOK(" in t for t in src.values())
    bad = _hook_violations(src)
    assert not bad, "\n".join(bad)


def test_hook_check_catches_violations():
    files = {"src/a.c": 'p = S3D_TEST_HOOK("S3D_TEST_X");\nq = s3d_env("S3D_TEST_Y");\n'
                        '/* "S3D_TEST_Z" */ r = S3D_TEST_HOOK_INT("S3D_W", 0, 1, &v);\n'}
    assert _hook_violations(files) == ["src/a.c: the hook S3D_W is not named S3D_TEST_*",
                                       "src/a.c: S3D_TEST_Y read without S3D_TEST_HOOK"]
