"""vLLM's `--load-format s3direct`: model weights streamed from S3 (or a local folder) into the
model as they arrive, through s3direct.stream().

    pip install s3direct vllm
    vllm serve ./config-dir --load-format s3direct \\
        --model-loader-extra-config '{"uri": "s3://bucket/llama-3-8b/"}'

The loader is registered with vLLM's loader-registration interface
(vllm.model_executor.model_loader.register_model_loader) when vLLM loads its plugins: the
package declares register() under the "vllm.general_plugins" entry point, which vLLM calls in
every process it starts. Importing this module registers it too.

The weights come from model_loader_extra_config["uri"] (an S3 folder, a sharded index or one
object; s3direct.load's forms) or, without it, from the model path vLLM was given. The
model's config and tokenizer are read by vLLM from that path as usual (a local folder, or the
Hub). Each tensor goes to the model's load_weights() as soon as its bytes are in, on the
model's device (vLLM's own loaders hand load_weights CPU tensors; s3direct lands them on the
GPU through its pinned staging pool), so the model places, shards and converts the first
layers while the rest is still on the network. Other keys of the extra config: "endpoint_url",
"profile", "region" (the Client's), and "device" ("cpu" to hand load_weights CPU tensors).

vLLM does not install on the machines this package is tested on; the loader is tested against
a stand-in of vLLM's loader interface (tests/py/test_vllm_loader.py) and the streaming itself
on a transformers model.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any, Iterator, Optional, Tuple

import torch

from . import _stream
from .client import Client

LOAD_FORMAT = "s3direct"
_registered: list[type] = []


def weights(
    model_config: Any, extra: Optional[dict[str, Any]], device: Optional[torch.device] = None
) -> Iterator[Tuple[str, torch.Tensor]]:
    """The (name, tensor) iterator the loader feeds to model.load_weights().

    Args:
        model_config: vLLM's ModelConfig (its .model is the path vLLM was given).
        extra: vLLM's load_config.model_loader_extra_config (may be None).
        device: where the tensors land (default: the extra config's "device", else the
            current CUDA device when there is one, else the CPU).

    Returns:
        An iterator of (name, tensor), in file order.
    """
    extra = dict(extra or {})
    uri = extra.pop("uri", None) or str(model_config.model)
    dev = extra.pop("device", None)
    if device is None:
        device = (
            torch.device(dev)
            if dev
            else (
                torch.device("cuda", torch.cuda.current_device())
                if torch.cuda.is_available()
                else torch.device("cpu")
            )
        )
    kw = {k: extra.pop(k) for k in ("endpoint_url", "profile", "region") if k in extra}
    if extra:
        raise ValueError(
            f"--model-loader-extra-config for s3direct: unknown keys "
            f"{sorted(extra)} (known: uri, device, endpoint_url, profile, region)"
        )
    client = Client(**kw) if kw else None
    return iter(_stream.stream(uri, device=device, client=client))


def register() -> None:
    """Registers the "s3direct" load format with vLLM (idempotent). vLLM calls it through the
    "vllm.general_plugins" entry point."""
    if _registered:
        return
    # By name (Any): vLLM is an optional dependency without type information here.
    loaders = importlib.import_module("vllm.model_executor.model_loader")
    base: Any = importlib.import_module("vllm.model_executor.model_loader.base_loader")

    class S3DirectModelLoader(base.BaseModelLoader):  # type: ignore[misc]
        """vLLM model loader: weights streamed by s3direct into model.load_weights()."""

        def download_model(self, model_config: Any) -> None:
            """Nothing to download ahead: the weights are streamed at load time."""

        def load_weights(self, model: Any, model_config: Any) -> None:
            """Feeds every tensor to model.load_weights() as it arrives; fails naming the
            parameters the checkpoint did not fill.

            Args:
                model: the vLLM model (nn.Module with load_weights(iterable)).
                model_config: vLLM's ModelConfig.
            """
            extra = getattr(self.load_config, "model_loader_extra_config", None)
            try:
                dev: Optional[torch.device] = next(model.parameters()).device
            except StopIteration:
                dev = None
            if extra and extra.get("device"):
                dev = None  # the config's choice wins
            loaded = model.load_weights(weights(model_config, extra, dev))
            if loaded is not None:
                missing = {n for n, _ in model.named_parameters()} - set(loaded)
                if missing:
                    raise ValueError(
                        f"s3direct loader: the checkpoint did not fill "
                        f"{len(missing)} parameters: {sorted(missing)[:10]}"
                    )

    loaders.register_model_loader(LOAD_FORMAT)(S3DirectModelLoader)
    _registered.append(S3DirectModelLoader)


# Imported by hand in a process where vLLM is installed: register at once.
if importlib.util.find_spec("vllm") is not None:
    register()
