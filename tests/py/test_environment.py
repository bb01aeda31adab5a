"""docs/internals/environment.md lists every environment variable the tree reads (issue 38,
item 4): each `S3D_*` variable that code reads is on the page, and each variable on the page is
read somewhere. Text only: no build, no library, no server.

Reads found:
- C (.c, .h anywhere in the tree): a string literal "S3D_..." among the arguments of a call
  whose name holds "env" (getenv, setenv, s3d_env, env_any) or of S3D_TEST_HOOK*;
- Python (.py anywhere): os.environ.get / os.environ[...] / os.environ.setdefault / .pop /
  os.getenv with a literal "S3D_..." name;
- shell (.sh, .ci/run): $S3D_... or ${S3D_...}.
"""

from __future__ import annotations

import re

from test_rules import _read, _tracked

PAGE = "docs/internals/environment.md"

_C_CALL = re.compile(r"\b(?:\w*env\w*|S3D_TEST_HOOK\w*)\s*\(([^()]*)\)")
_C_NAME = re.compile(r'"(S3D_\w+)"')
_PY = re.compile(r"""(?:\benviron(?:\.get|\.setdefault|\.pop)?\s*[\[(]|\bgetenv\s*\()\s*"""
                 r"""["'](S3D_\w+)["']""")
_SH = re.compile(r"\$\{?(S3D_[A-Z0-9_]+)")


def s3d_reads(files: dict[str, str]) -> dict[str, set[str]]:
    """S3D_* variable -> the files that read (or set) it. files: path -> text."""
    found: dict[str, set[str]] = {}
    for path, text in files.items():
        if path.endswith((".c", ".h")):
            for call in _C_CALL.finditer(text):
                for m in _C_NAME.finditer(call.group(1)):
                    found.setdefault(m.group(1), set()).add(path)
            continue
        if path.endswith(".py"):
            rx = _PY
        elif path.endswith(".sh") or path == ".ci/run":
            rx = _SH
        else:
            continue
        for m in rx.finditer(text):
            found.setdefault(m.group(1), set()).add(path)
    return found


def page_variables(text: str) -> list[str]:
    """The variables of the page: the backticked names in the first cell of each table row."""
    names = []
    for line in text.split("\n"):
        m = re.match(r"^\|([^|]*)\|", line)
        if m and not set(m.group(1).strip()) <= set("-"):
            names += re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)`", m.group(1))
    return names


def _code_files() -> dict[str, str]:
    """The tree's code, this file left out (its made-up examples are no reads)."""
    return {f: _read(f) for f in _tracked()
            if (f.endswith((".c", ".h", ".py", ".sh")) or f == ".ci/run")
            and f != "tests/py/test_environment.py"}


def test_every_s3d_variable_read_is_on_the_page():
    listed = set(page_variables(_read(PAGE)))
    reads = s3d_reads(_code_files())
    assert "S3D_LOG" in reads and "src/common/log.c" in reads["S3D_LOG"], sorted(reads)
    missing = [f"{v} (read in {', '.join(sorted(reads[v]))})" for v in sorted(reads)
               if v not in listed]
    assert not missing, f"variables read but not on {PAGE}:\n" + "\n".join(missing)


def test_every_variable_on_the_page_is_read():
    names = page_variables(_read(PAGE))
    assert len(names) > 50 and "AWS_PROFILE" in names and "S3D_TEST_RETRY_BASE_MS" in names
    dup = sorted({n for n in names if names.count(n) > 1})
    assert not dup, f"listed twice on {PAGE}: {dup}"
    files = _code_files()
    reads = s3d_reads(files)
    code = "\n".join(files.values())
    bad = []
    for n in names:
        if n.startswith("S3D_"):
            if n not in reads:
                bad.append(n)
        elif not re.search(r"""["']%s["']|\$\{?%s\b""" % (n, n), code):
            bad.append(n)
    assert not bad, f"on {PAGE} but read by no code: {bad}"


def test_read_finder_on_made_up_files():
    files = {
        "src/a.c": 'x = getenv("S3D_A"); env_any(env, "s", "S3D_B"); env("AWS_X");\n'
                   '/* S3D_C */ setenv("S3D_D", "1", 1); s = "S3D_E";\n',
        "python/b.py": 'os.environ.get("S3D_F")\nos.environ["S3D_G"] = 1\nos.getenv(\'S3D_H\')\n'
                       'x = "S3D_I"\n',
        "scripts/c.sh": 'echo ${S3D_J:-1} $S3D_K S3D_L\n',
        "README.md": "getenv(\"S3D_M\")\n",
    }
    assert sorted(s3d_reads(files)) == ["S3D_A", "S3D_B", "S3D_D", "S3D_F", "S3D_G", "S3D_H",
                                        "S3D_J", "S3D_K"]
    page = ("| variable | what |\n|---|---|\n| `S3D_A` | a `S3D_X` |\n"
            "| `http_proxy`, `HTTP_PROXY` | b |\n")
    assert page_variables(page) == ["S3D_A", "http_proxy", "HTTP_PROXY"]
