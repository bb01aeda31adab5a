"""The Hugging Face recipe of docs/python.md: a transformers model (a tiny Llama with tied
embeddings, built from a config, no hub download) saved to an S3 folder in the Hugging Face
layout, then config + weights loaded from that folder into transformers on a device; the
folder written locally also loads with transformers' own from_pretrained."""

from __future__ import annotations

import json

import pytest
import torch

import s3direct

transformers = pytest.importorskip("transformers")


def tiny_llama():
    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32,
                                   num_hidden_layers=2, num_attention_heads=2,
                                   num_key_value_heads=2, max_position_embeddings=32,
                                   tie_word_embeddings=True)
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(cfg).eval()


def save_hf_folder(model, folder):
    """What save_pretrained writes, through s3direct: config.json and sharded weights."""
    s3direct.save(model.state_dict(), folder, shard_size=4096, metadata={"format": "pt"})
    with s3direct.writer(folder + "config.json") as f:
        f.write(json.dumps(model.config.to_dict()).encode())


def load_hf_folder(folder, device):
    # The recipe, as docs/python.md gives it.
    with s3direct.reader(folder + "config.json") as f:
        config = transformers.AutoConfig.for_model(**json.load(f))
    with torch.device(device):
        model = transformers.AutoModelForCausalLM.from_config(config)
    s3direct.load_into(model, folder)
    return model.eval()


def test_s3_folder_into_transformers(s3_env, bucket):
    ref = tiny_llama()
    folder = f"s3://{bucket}/tiny-llama/"
    save_hf_folder(ref, folder)
    names = [o.key for o in s3direct.Client().list(folder)]
    assert f"tiny-llama/model.safetensors.index.json" in names and len(names) >= 4
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = load_hf_folder(folder, device)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    x = torch.randint(0, 64, (2, 7))
    with torch.no_grad():
        want = ref(x).logits
        got = model(x.to(device)).logits.cpu()
    assert torch.equal(got, want)


def test_local_folder_loads_with_from_pretrained(tmp_path, lib_path):
    ref = tiny_llama()
    folder = str(tmp_path) + "/"
    save_hf_folder(ref, folder)
    model = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    x = torch.randint(0, 64, (1, 5))
    with torch.no_grad():
        assert torch.equal(model(x).logits, ref(x).logits)


def test_stream_into_transformers(s3_env, bucket):
    """The serving recipe of docs/python.md ("Tensors as they arrive"): each tensor is copied
    into the model as soon as it lands, as a serving engine's load_weights(iterable) does."""
    ref = tiny_llama()
    folder = f"s3://{bucket}/tiny-llama-stream/"
    save_hf_folder(ref, folder)
    with s3direct.reader(folder + "config.json") as f:
        config = transformers.AutoConfig.for_model(**json.load(f))
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    # The recipe.
    params = model.state_dict()
    seen = []
    with torch.no_grad():
        for name, tensor in s3direct.stream(folder):
            params[name].copy_(tensor)
            seen.append(name)
    assert sorted(seen) == sorted(set(ref.state_dict()) - {"lm_head.weight"})  # tied: once
    x = torch.randint(0, 64, (2, 7))
    with torch.no_grad():
        assert torch.equal(model(x).logits, ref(x).logits)
