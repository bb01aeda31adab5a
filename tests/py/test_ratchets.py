"""Ratchets: sizes that may only shrink (issue 38, item 5), checked on the tree.

- no C function over 120 lines and no Python function over 80 lines (src/, tools/, include/,
  python/s3direct/, bench/), but for the few listed below at their lengths when the rule came
  in: a listed one may not grow, and when it shrinks its number here is lowered with it (or
  the entry removed once it is under the limit), so the list only ever tightens;
- no source file (.c, .h, .py of src/, tools/, include/, python/s3direct/, bench/) over
  1,000 lines, but for the listed few, on the same terms;
- code fences balanced in README.md, CONTRIBUTING.md, bench/README.md and docs/**/*.md;
- no import circle between the modules of python/s3direct, counting every import (inside
  functions and under TYPE_CHECKING too): a module that needs another's types only declares a
  Protocol of its own or takes them from _types (issue 38 opened the last four, 6 -> 0).

A C function is measured as .clang-format lays it out (BreakBeforeBraces: Linux): from the line
holding only its opening brace, at column 0 after the signature, to the line of the brace that
closes it (at column 0 too), both counted; comments, string literals and preprocessor lines
are blanked first so that braces in them do not count. A Python function is measured from its `def` line to its last line (ast), its
decorators left out, nested functions included in the one that holds them.

Text only: no build, no library, no server. Each failure names every offender with its count.
"""

from __future__ import annotations

import ast
import os
import re

from test_rules import _docs, _read, _tracked

C_LIMIT = 120
PY_LIMIT = 80
FILE_LIMIT = 1000

# "path:function" -> its length in lines when the rule came in (2026-12-07). Only shrinks.
LONG_C = {
    "bench/pathsim.c:main": 164,
    "bench/ckpt_bench.c:main": 148,
}
# "path:Class.function" (nested: "outer.<locals>.inner") -> its length. Only shrinks.
LONG_PY = {
    "bench/incremental/run.py:main": 142,
    "bench/peers/worker.py:prep_load": 133,
    "bench/demo_tensors.py:main": 127,
    "bench/incremental/worker.py:measure_main": 117,
    "bench/peers/worker.py:main": 104,
    "bench/stream/run.py:main": 93,
    "bench/ranks/run.py:main": 92,
    "bench/path/run.py:main": 92,
    "bench/peers/run.py:main": 87,
}
# path -> its length in lines. Only shrinks. None today: src/engine/xfer.c, the last one, went
# under the limit when its GET conveniences moved to xfer_get.c (issue 38, item 1).
BIG_FILES: dict[str, int] = {}

SOURCE_ROOTS = ("src/", "tools/", "include/", "python/s3direct/", "bench/")


# ---- measuring ----------------------------------------------------------------------------

def blank_c(text: str) -> str:
    """text with comments, string and character literals replaced by spaces (newlines kept),
    and preprocessor lines (with their continuations) blanked, so that only code braces
    remain and every line keeps its number and its column 0."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
        elif c == "#" and (i == 0 or text[i - 1] == "\n" or not text[
                text.rfind("\n", 0, i) + 1:i].strip()):
            j = i
            while j < n and text[j] != "\n":
                j = j + 2 if text.startswith("\\\n", j) else j + 1
        else:
            out.append(c)
            i += 1
            continue
        out.append(re.sub(r"[^\n]", " ", text[i:j]))
        i = j
    return "".join(out)


_NOT_NAMES = {"S3D_API", "S3D_NODISCARD", "S3D_STATIC", "__attribute__", "S3D_PRINTF"}


def c_functions(text: str) -> list[tuple[str, int, int]]:
    """(name, line of the opening brace, length in lines) for each function definition: a
    line that is only "{" at column 0 outside any braces, to the brace that closes it
    (matched by depth, not by column: clang-format also puts the closing brace of a block
    after a label, `fail : {`, at column 0)."""
    lines = blank_c(text).split("\n")
    found = []
    start, depth = 0, 0
    for no, line in enumerate(lines, 1):
        if depth == 0 and line.rstrip() == "{":
            start = no
        for ch in line:
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0 and start:
                    found.append((_c_name(lines, start), start, no - start + 1))
                    start = 0
    return found


def _c_name(lines: list[str], brace: int) -> str:
    """The function whose signature ends on the lines just above the brace (line brace)."""
    sig = []
    k = brace - 2
    while k >= 0 and lines[k].strip() and not lines[k].startswith("}") and \
            not lines[k].rstrip().endswith((";", "{")):
        sig.insert(0, lines[k])
        k -= 1
    names = [m for m in re.findall(r"(\w+)\s*\(", " ".join(sig)) if m not in _NOT_NAMES]
    return names[0] if names else f"?{brace}"


def py_functions(text: str) -> list[tuple[str, int, int]]:
    """(qualified name, def line, length in lines) for each def in the module."""
    found = []

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                q = prefix + child.name
                found.append((q, child.lineno, (child.end_lineno or child.lineno)
                              - child.lineno + 1))
                walk(child, q + ".<locals>.")
            elif isinstance(child, ast.ClassDef):
                walk(child, prefix + child.name + ".")
            else:
                walk(child, prefix)

    walk(ast.parse(text), "")
    return found


def _sources(exts: tuple[str, ...]) -> list[str]:
    return sorted(f for f in _tracked() if f.startswith(SOURCE_ROOTS) and f.endswith(exts))


def measured_functions() -> tuple[dict[str, int], dict[str, int]]:
    """"path:name" -> length, for C and for Python (the longest where a name repeats)."""
    c: dict[str, int] = {}
    for f in _sources((".c", ".h")):
        for name, _, n in c_functions(_read(f)):
            c[f"{f}:{name}"] = max(n, c.get(f"{f}:{name}", 0))
    py: dict[str, int] = {}
    for f in _sources((".py",)):
        for name, _, n in py_functions(_read(f)):
            py[f"{f}:{name}"] = max(n, py.get(f"{f}:{name}", 0))
    return c, py


def ratchet_violations(measured: dict[str, int], listed: dict[str, int], limit: int,
                       what: str) -> list[str]:
    """One line per item over the limit and not listed, listed and grown, listed and shrunk
    (its number here is lowered), listed and now under the limit (its entry goes), or listed
    and gone."""
    bad = []
    for key, n in sorted(measured.items(), key=lambda kv: -kv[1]):
        if n > limit and key not in listed:
            bad.append(f"{key}: {n} lines, over the limit of {limit} ({what}); split it")
    for key, was in sorted(listed.items()):
        n = measured.get(key)
        if n is None:
            bad.append(f"{key}: listed at {was} lines but not found; remove it from the list")
        elif n <= limit:
            bad.append(f"{key}: {n} lines, now within the limit of {limit} (listed at {was}); "
                       f"remove it from the list")
        elif n > was:
            bad.append(f"{key}: {n} lines, grown from the {was} listed (limit {limit}); it may "
                       f"only shrink")
        elif n < was:
            bad.append(f"{key}: {n} lines, shrunk from the {was} listed: write {n} in the list "
                       f"so that it cannot grow back")
    return bad


# ---- the ratchets -------------------------------------------------------------------------

def test_c_functions_within_the_limit():
    c, _ = measured_functions()
    assert len(c) > 500 and "src/engine/pool.c:s3d_pool_new" in c, sorted(c)[:20]
    bad = ratchet_violations(c, LONG_C, C_LIMIT, "C function")
    assert not bad, "C functions against the ratchet (tests/py/test_ratchets.py, LONG_C):\n" + \
        "\n".join(bad)


def test_python_functions_within_the_limit():
    _, py = measured_functions()
    assert len(py) > 500 and "python/s3direct/client.py:Client.__init__" in py
    bad = ratchet_violations(py, LONG_PY, PY_LIMIT, "Python function")
    assert not bad, "Python functions against the ratchet (tests/py/test_ratchets.py, " \
        "LONG_PY):\n" + "\n".join(bad)


def test_source_files_within_the_limit():
    sizes = {f: _read(f).count("\n") for f in _sources((".c", ".h", ".py"))}
    assert "src/engine/pool.c" in sizes and "python/s3direct/client.py" in sizes
    bad = ratchet_violations(sizes, BIG_FILES, FILE_LIMIT, "source file")
    assert not bad, "source files against the ratchet (tests/py/test_ratchets.py, " \
        "BIG_FILES):\n" + "\n".join(bad)


C_SAMPLE = """\
/* a { in a comment */
static int S3D_NODISCARD
short_one(const char *s, int n)
{
    const char *brace = "}";
    if (n > 0) {
        return '{';
    }
fail : {
    n = 1;
}
#define NOT_A_BODY {
    return 0;
}

static const struct x table[] = {
    {1, 2},
};

int two_lines(void)
{
}
"""


def test_measures_on_made_up_sources():
    assert c_functions(C_SAMPLE) == [("short_one", 4, 11), ("two_lines", 21, 2)]
    py = "class A:\n    @property\n    def f(self):\n        def g():\n            pass\n" \
         "        return 1\n\n\ndef h():\n    pass\n"
    assert py_functions(py) == [("A.f", 3, 4), ("A.f.<locals>.g", 4, 2), ("h", 9, 2)]


def test_ratchet_check_catches_each_case():
    listed = {"a:grown": 130, "a:shrunk": 150, "a:under": 140, "a:gone": 125, "a:same": 121}
    measured = {"a:grown": 131, "a:shrunk": 149, "a:under": 120, "a:same": 121, "a:new": 122,
                "a:fine": 10}
    bad = ratchet_violations(measured, listed, 120, "C function")
    assert [b.split(":")[1] for b in bad] == ["new", "gone", "grown", "shrunk", "under"], bad
    assert "122 lines" in bad[0] and "131 lines, grown from the 130" in bad[2], bad


# ---- code fences --------------------------------------------------------------------------

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")


def fence_violations(doc: str, text: str) -> list[str]:
    """'doc:line: why' for each code fence that is not closed, and for each line inside a
    block that looks like an opening fence with a language (the closing fence before it was
    probably lost, as in "``` text" with words after it, which does not close a block)."""
    bad = []
    opened: tuple[int, str] | None = None
    for no, line in enumerate(text.split("\n"), 1):
        m = _FENCE.match(line)
        if opened is None:
            if m and not (m.group(1)[0] == "`" and "`" in m.group(2)):
                opened = (no, m.group(1))
        elif m and m.group(1)[0] == opened[1][0] and len(m.group(1)) >= len(opened[1]) and \
                not m.group(2).strip():
            opened = None
        elif m and re.fullmatch(r"\w[\w+-]*", m.group(2).strip()):
            bad.append(f"{doc}:{no}: an opening fence inside the block opened at line "
                       f"{opened[0]}")
    if opened is not None:
        bad.append(f"{doc}:{opened[0]}: code fence never closed")
    return bad


def test_code_fences_are_balanced():
    docs = _docs(_tracked())
    assert "README.md" in docs and "docs/python.md" in docs
    bad = [b for d in docs for b in fence_violations(d, _read(d))]
    assert not bad, "unbalanced code fences:\n" + "\n".join(bad)


def test_fence_check_catches_violations():
    assert fence_violations("d", "```python\nx\n```\n~~~\n```\n~~~\n````\n```\n````\n") == []
    assert fence_violations("d", "```ini\n[a]\n``` text after\n\n```python\nx\n```\n") == [
        "d:5: an opening fence inside the block opened at line 1"]
    assert fence_violations("d", "a\n```c\nint x;\n") == ["d:2: code fence never closed"]


def _package_imports(sources: dict[str, str]) -> dict[str, set[str]]:
    """module -> the package's modules it imports anywhere in its text (relative imports and
    `s3direct.X`), for sources keyed by module name."""
    graph: dict[str, set[str]] = {}
    for mod, text in sources.items():
        out: set[str] = set()
        for n in ast.walk(ast.parse(text)):
            if isinstance(n, ast.ImportFrom):
                parts = (n.module or "").split(".")
                if n.level == 1 and n.module:
                    out.add(parts[0])
                elif n.level == 1 or (n.level == 0 and n.module == "s3direct"):
                    out.update(a.name for a in n.names)
                elif n.level == 0 and parts[0] == "s3direct":
                    out.add(parts[1])
            elif isinstance(n, ast.Import):
                out.update(a.name.split(".")[1] for a in n.names
                           if a.name.startswith("s3direct."))
        graph[mod] = {m for m in out if m in sources and m != mod}
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def test_python_package_has_no_import_circles():
    pkg = "python/s3direct"
    sources = {f[:-3]: _read(os.path.join(pkg, f)) for f in sorted(os.listdir(pkg))
               if f.endswith(".py")}
    assert len(sources) > 20
    assert not _circles(_package_imports(sources)), _circles(_package_imports(sources))


def test_circle_check_catches_each_kind_of_import():
    sources = {
        "a": "from . import b\n",
        "b": "def f():\n    from .c import x\n",
        "c": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from s3direct.a import y\n",
        "d": "import s3direct.e\n",
        "e": "from s3direct import d\n",
        "f": "from . import a\n",  # into a circle, not part of it
    }
    assert _circles(_package_imports(sources)) == [["a", "b", "c"], ["d", "e"]]
    del sources["c"]
    assert _circles(_package_imports(sources)) == [["d", "e"]]
