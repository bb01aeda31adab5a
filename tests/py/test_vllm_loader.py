"""vLLM's --load-format s3direct (s3direct/vllm.py) against a stand-in of vLLM's loader
interface: vLLM itself does not install here (no GPU, several GB of CUDA wheels). The stand-in
has the shape of vllm.model_executor.model_loader as of vLLM 0.10-0.11: register_model_loader
(a decorator that checks the class derives from BaseModelLoader), get_model_loader(LoadConfig),
BaseModelLoader(load_config) with download_model(model_config) and
load_weights(model, model_config). The model's load_weights(iterable) is a vLLM model's: it
consumes (name, tensor) pairs and returns the names it loaded."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")

import s3direct  # noqa: E402

STAND_IN = {
    "vllm/__init__.py": "",
    "vllm/model_executor/__init__.py": "",
    "vllm/model_executor/model_loader/base_loader.py": '''
        from abc import ABC, abstractmethod

        class BaseModelLoader(ABC):
            def __init__(self, load_config):
                self.load_config = load_config

            @abstractmethod
            def download_model(self, model_config):
                raise NotImplementedError

            @abstractmethod
            def load_weights(self, model, model_config):
                raise NotImplementedError
        ''',
    "vllm/model_executor/model_loader/__init__.py": '''
        from vllm.model_executor.model_loader.base_loader import BaseModelLoader

        _LOAD_FORMAT_TO_MODEL_LOADER = {}

        def register_model_loader(load_format):
            def _wrapper(cls):
                if not issubclass(cls, BaseModelLoader):
                    raise ValueError("The model loader must be a subclass of BaseModelLoader.")
                _LOAD_FORMAT_TO_MODEL_LOADER[load_format] = cls
                return cls
            return _wrapper

        def get_model_loader(load_config):
            fmt = load_config.load_format
            if fmt not in _LOAD_FORMAT_TO_MODEL_LOADER:
                raise ValueError(f"Load format `{fmt}` is not supported")
            return _LOAD_FORMAT_TO_MODEL_LOADER[fmt](load_config)
        ''',
}

RUN = '''
import sys, types, torch
import s3direct.vllm  # registers the loader: vllm is importable
from vllm.model_executor.model_loader import get_model_loader

uri, mode = sys.argv[1], sys.argv[2]
torch.manual_seed(0)
ref = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(6)])

class Model(torch.nn.Sequential):
    """A vLLM model's load_weights: consumes (name, tensor), returns the names loaded."""
    order = []
    def load_weights(self, weights):
        params = dict(self.named_parameters())
        done = set()
        for name, t in weights:
            if name == "extra":
                continue
            with torch.no_grad():
                params[name].copy_(t)
            done.add(name)
            self.order.append(name)
        return done

model = Model(*[torch.nn.Linear(64, 64) for _ in range(6)])
extra = {"uri": uri} if mode != "model-path" else None
if mode == "bad-key":
    extra["colour"] = "blue"
lc = types.SimpleNamespace(load_format="s3direct", model_loader_extra_config=extra)
mc = types.SimpleNamespace(model=uri)
loader = get_model_loader(lc)
loader.download_model(mc)
try:
    loader.load_weights(model, mc)
except ValueError as e:
    print("VALUEERROR", e)
    sys.exit(0)
for a, b in zip(model.parameters(), ref.parameters()):
    assert torch.equal(a, b)
print("OK", len(model.order))
'''


@pytest.fixture
def stand_in(tmp_path):
    for rel, text in STAND_IN.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text))
    (tmp_path / "run.py").write_text(RUN)
    return tmp_path


def run(stand_in, uri, mode):
    env = dict(os.environ)
    pkg = os.path.join(os.path.dirname(__file__), "..", "..", "python")
    env["PYTHONPATH"] = os.pathsep.join([str(stand_in), os.path.abspath(pkg),
                                         env.get("PYTHONPATH", "")])
    p = subprocess.run([sys.executable, str(stand_in / "run.py"), uri, mode], env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


def test_vllm_loader_streams_into_load_weights(stand_in, bucket, s3_env):
    torch.manual_seed(0)
    ref = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(6)])
    folder = f"s3://{bucket}/m/"
    s3direct.save(ref.state_dict(), folder + "model.safetensors.index.json", shard_size=20000)
    assert "OK 12" in run(stand_in, folder, "extra-uri")
    assert "OK 12" in run(stand_in, folder, "model-path")
    assert "unknown keys ['colour']" in run(stand_in, folder, "bad-key")


def test_vllm_loader_names_unfilled_parameters(stand_in, bucket, s3_env):
    torch.manual_seed(0)
    ref = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(5)])  # one layer short
    uri = f"s3://{bucket}/short.safetensors"
    s3direct.save(ref.state_dict(), uri)
    out = run(stand_in, uri, "extra-uri")
    assert "did not fill 2 parameters" in out and "5.weight" in out


def test_register_without_vllm_is_a_clear_import_error(lib_path):
    import s3direct.vllm as sv  # importing without vLLM registers nothing and does not fail

    if sv._registered:
        pytest.skip("vLLM is installed here")
    with pytest.raises(ImportError):
        sv.register()
