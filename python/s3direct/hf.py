"""Hugging Face transformers through s3direct: a TrainerCallback that saves each checkpoint the
Trainer saves to S3 as a model folder, and from_pretrained from such a folder.

    from s3direct.hf import S3DirectCallback, from_pretrained
    trainer = Trainer(..., callbacks=[S3DirectCallback("s3://bucket/run1")])
    model = from_pretrained(AutoModelForCausalLM, "s3://bucket/run1/checkpoint-500/")

The folder is what save_pretrained writes (config.json, model.safetensors or
model.safetensors.index.json with its shards), so transformers' own from_pretrained opens a
copy of it, and s3direct.load / load_into / stream read it in place. transformers is imported
by name when this module is used; it is not a dependency of the package.
"""

from __future__ import annotations

import importlib
import json
from typing import Any, Optional

import torch

from . import _into, _save, streams
from .client import Client

_transformers: Any = importlib.import_module("transformers")

SHARD_SIZE = 5 << 30  # save_pretrained's default max_shard_size ("5GB")


def _folder(uri: str) -> str:
    return uri if uri.endswith("/") else uri + "/"


def save_pretrained(
    model: Any,
    uri: str,
    *,
    client: Optional[Client] = None,
    shard_size: int = SHARD_SIZE,
    base: Optional[str] = None,
) -> Any:
    """Writes model as save_pretrained lays out a folder: config.json, then the weights
    (sharded as model-0000i-of-0000N.safetensors beside model.safetensors.index.json when
    larger than shard_size; tied weights stored once, as save_pretrained does).

    Args:
        model: a transformers PreTrainedModel.
        uri: the folder, "s3://bucket/prefix/" or a local path.
        client: the Client to use. shard_size: bytes of data per shard.
        base: a previous folder written this way: unchanged tensors are copied server-side
            (s3direct.save's base=).

    Returns:
        The SaveStats of the weights' save.
    """
    folder = _folder(uri)
    with streams.writer(folder + "config.json", client=client) as f:
        f.write(model.config.to_json_string().encode())
    return _save.save(
        model.state_dict(),
        folder,
        shard_size=shard_size,
        metadata={"format": "pt"},
        client=client,
        base=None if base is None else _folder(base),
    )


def from_pretrained(
    cls: Any,
    uri: str,
    *,
    device: Any = "cpu",
    client: Optional[Client] = None,
    **config_kwargs: Any,
) -> Any:
    """A model from a folder save_pretrained (or save_pretrained here) wrote on S3 or disk:
    config.json read through s3direct, the model built on the device with no weights
    initialised from random, then the weights read straight into it (s3direct.load_into).

    Args:
        cls: a transformers model class or auto class (AutoModelForCausalLM, ...).
        uri: the folder.
        device: where the model lives ("cpu", "cuda", "cuda:N").
        client: the Client to use.
        config_kwargs: overrides of the config's fields.

    Returns:
        The model, in eval mode.
    """
    folder = _folder(uri)
    with streams.reader(folder + "config.json", client=client) as f:
        fields = json.load(f)
    fields.update(config_kwargs)
    config = _transformers.AutoConfig.for_model(**fields)
    with torch.device(device):
        model = cls.from_config(config) if hasattr(cls, "from_config") else cls(config)
    _into.load_into(model, folder, client=client)
    return model.eval()


class S3DirectCallback(_transformers.TrainerCallback):  # type: ignore[misc]
    """Saves the model to S3 (or a folder) each time the Trainer saves a checkpoint: to
    URI/checkpoint-STEP/ in save_pretrained's layout, each save against the one before
    (tensors that did not change are copied server-side). Only the main process saves.

    Args:
        uri: the run's folder ("s3://bucket/run1").
        client: the Client to use.
        shard_size: bytes of data per shard (save_pretrained's 5 GB by default).
        incremental: save each checkpoint against the previous one (base=).

    The Trainer's own checkpoint (optimizer, scheduler, RNG) still goes to its output_dir;
    this callback adds the model where the serving side reads it.
    """

    def __init__(
        self,
        uri: str,
        *,
        client: Optional[Client] = None,
        shard_size: int = SHARD_SIZE,
        incremental: bool = True,
    ) -> None:
        super().__init__()
        self.uri = uri.rstrip("/")
        self.client = client
        self.shard_size = shard_size
        self.incremental = incremental
        self.saved: list[str] = []  # the folders written, in order
        self.last_stats: Any = None

    def on_save(
        self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any
    ) -> None:
        """Writes URI/checkpoint-STEP/ from the Trainer's model.

        Args:
            args, state, control: the Trainer's (state.global_step names the folder).
            model: the model the Trainer trains (passed by the Trainer).
            kwargs: the Trainer's other callback arguments (unused).
        """
        if model is None or not state.is_world_process_zero:
            return
        model = getattr(model, "module", model)  # DDP-wrapped
        folder = f"{self.uri}/checkpoint-{state.global_step}/"
        base = self.saved[-1] if self.incremental and self.saved else None
        self.last_stats = save_pretrained(
            model, folder, client=self.client, shard_size=self.shard_size, base=base
        )
        self.saved.append(folder)
