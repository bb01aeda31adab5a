"""Runs every ```python block of README.md and docs/python.md against the test server, in
order, in one namespace per file (as a reader would run them one after another).

The blocks are the documentation's own text; the test only supplies what a reader already has
(a model, an optimizer, a training state: see PRELUDE) and points the placeholders at the test
server: "s3://bucket/" becomes a fresh bucket, "http://127.0.0.1:8000" the server's endpoint,
and on a machine without CUDA the device strings "cuda" and "cuda:N" become "cpu". A block
preceded by ``<!-- docs-test: skip -->`` is not run; ``<!-- docs-test: needs-gpu -->`` runs
only with CUDA; ``<!-- docs-test: needs-transformers -->`` only when transformers imports (the
prelude then writes the tiny model the block loads).
"""

from __future__ import annotations

import glob
import os
import re

import pytest
import torch

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCS = ["README.md", "docs/python.md"]

_BLOCK = re.compile(r"(?:<!--\s*docs-test:\s*([\w-]+)\s*-->\s*\n)?```python\n(.*?)```",
                    re.S)

PRELUDE = '''
import torch, s3direct

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 4)
        self.out = torch.nn.Linear(4, 2)

    def forward(self, x):
        return self.out(torch.relu(self.fc(x)))

def build_model():
    return Net()

def build_optimizer():
    return torch.optim.AdamW(model.parameters(), lr=1e-3)

model = build_model()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1)
model(torch.randn(3, 8)).sum().backward()
opt.step()
sched.step()
step = 1000
obj = {"weights": model.state_dict(), "step": step}
state_dict = {"model": model.state_dict()}
uri = "s3://bucket/run1/step1000.safetensors"
s3direct.save(model, "s3://bucket/model.safetensors")
# What S3DirectCheckpointIO writes for a module (s3direct.save of Lightning's dict); the
# docs' LightningModule is a plain module here: its state_dict() is what the block loads.
lit_model = model
s3direct.save({"epoch": 3, "global_step": 16, "state_dict": lit_model.state_dict(),
               "optimizer_states": [opt.state_dict()], "hyper_parameters": {"lr": 1e-3}},
              "s3://bucket/ckpts/last.ckpt")
s3direct.save({"model.embed_tokens.weight": torch.randn(16, 4),
               "lm_head.weight": torch.randn(16, 4)}, "s3://bucket/llama/")
rank, n = 1, 4
old_checkpoints = []
try:
    import json, transformers
    _cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32,
                                    num_hidden_layers=2, num_attention_heads=2,
                                    num_key_value_heads=2, tie_word_embeddings=True)
    _m = transformers.AutoModelForCausalLM.from_config(_cfg)
    s3direct.save(_m.state_dict(), "s3://bucket/tiny-llama/", shard_size=4096)
    with s3direct.writer("s3://bucket/tiny-llama/config.json") as _f:
        _f.write(json.dumps(_cfg.to_dict()).encode())
    HAVE_TRANSFORMERS = True
except ImportError:
    HAVE_TRANSFORMERS = False
'''


_C_BLOCK = re.compile(r"```c\n(.*?)```", re.S)
_C_DOCS = sorted(os.path.relpath(p, REPO) for p in
                 glob.glob(os.path.join(REPO, "*.md"))
                 + glob.glob(os.path.join(REPO, "docs", "**", "*.md"), recursive=True))


@pytest.mark.parametrize("doc", [d for d in _C_DOCS
                                 if _C_BLOCK.search(open(os.path.join(REPO, d)).read())])
def test_c_blocks_compile(doc, lib_path, tmp_path):
    """Every ```c block of the docs is a complete file that compiles with -Wall -Wextra
    -Werror against the installed-style include path and links against the built library:
    as a program when it has a main, else as a shared object with no undefined symbol."""
    import shutil
    import subprocess

    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    text = open(os.path.join(REPO, doc), encoding="utf-8").read()
    for n, code in enumerate(_C_BLOCK.findall(text)):
        src = tmp_path / f"block{n}.c"
        src.write_text(code)
        has_main = re.search(r"\bint\s+main\s*\(", code) is not None
        out = tmp_path / (f"block{n}" if has_main else f"libblock{n}.so")
        cmd = [cc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-I",
               os.path.join(REPO, "include"), str(src), "-o", str(out),
               "-L", os.path.dirname(lib_path), "-ls3direct", "-Wl,--no-undefined"]
        if not has_main:
            cmd[1:1] = ["-shared", "-fPIC"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        assert r.returncode == 0, f"{doc} C block {n} does not build:\n{r.stderr}"


def blocks(doc):
    text = open(os.path.join(REPO, doc), encoding="utf-8").read()
    return [(m.group(1) or "", m.group(2)) for m in _BLOCK.finditer(text)]


def adapt(code, bucket, endpoint):
    code = code.replace("s3://bucket/", f"s3://{bucket}/")
    code = code.replace("http://127.0.0.1:8000", endpoint)
    if not torch.cuda.is_available():
        code = re.sub(r'"cuda(:\d+)?"', '"cpu"', code)
    return code


@pytest.mark.parametrize("doc", DOCS)
def test_python_blocks_run(doc, s3_env, bucket, tmp_path, monkeypatch):
    found = blocks(doc)
    assert found, f"{doc} has no python block"
    monkeypatch.chdir(tmp_path)
    ns: dict = {"__name__": "__docs__"}
    exec(compile(adapt(PRELUDE, bucket, s3_env["AWS_ENDPOINT_URL"]), "<prelude>", "exec"), ns)
    ran = 0
    for i, (mark, code) in enumerate(found):
        if mark == "skip" or (mark == "needs-gpu" and not torch.cuda.is_available()):
            continue
        if mark == "needs-transformers" and not ns["HAVE_TRANSFORMERS"]:
            continue
        src = adapt(code, bucket, s3_env["AWS_ENDPOINT_URL"])
        try:
            exec(compile(src, f"{doc} python block {i + 1}", "exec"), ns)
        except Exception as e:
            raise AssertionError(f"{doc}: python block {i + 1} failed: {e!r}\n{code}") from e
        ran += 1
    assert ran, f"{doc}: every block skipped"
