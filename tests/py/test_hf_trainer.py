"""s3direct.hf: a transformers Trainer saving through S3DirectCallback to S3 (a tiny Llama,
two steps, a checkpoint each), each checkpoint a save_pretrained folder that
s3direct.hf.from_pretrained loads back equal to the trained model, and that transformers'
own from_pretrained opens once copied to disk."""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")  # the Trainer needs it

import s3direct  # noqa: E402
from test_hf_recipe import tiny_llama  # noqa: E402  (the same tiny Llama)


class Tokens(torch.utils.data.Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        ids = torch.randint(0, 64, (12,), generator=g)
        return {"input_ids": ids, "labels": ids.clone()}


def test_trainer_saves_through_callback(bucket, tmp_path, s3_env):
    from s3direct.hf import S3DirectCallback, from_pretrained

    model = tiny_llama()
    cb = S3DirectCallback(f"s3://{bucket}/run1")
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"), max_steps=2, save_steps=1, per_device_train_batch_size=4,
        report_to=[], use_cpu=True, logging_steps=1)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=Tokens(), callbacks=[cb])
    trainer.train()
    assert cb.saved == [f"s3://{bucket}/run1/checkpoint-1/", f"s3://{bucket}/run1/checkpoint-2/"]
    names = sorted(o.key for o in s3direct.Client().list(f"s3://{bucket}/run1/checkpoint-2/"))
    assert f"run1/checkpoint-2/config.json" in names
    # Every weight moved in the step, so the second save (made against the first) reuses none.
    assert cb.last_stats is not None and cb.last_stats.tensors_total > 0
    got = from_pretrained(transformers.AutoModelForCausalLM, cb.saved[-1])
    trained = trainer.model
    for (n, a), (_, b) in zip(sorted(got.state_dict().items()),
                              sorted(trained.state_dict().items())):
        assert torch.equal(a, b.cpu()), n
    assert got.lm_head.weight is got.model.embed_tokens.weight  # tied, as save_pretrained
    # The folder is save_pretrained's layout: transformers opens a copy of it.
    local = tmp_path / "copy"
    local.mkdir()
    for n in names:
        with s3direct.reader(f"s3://{bucket}/{n}") as f, open(local / os.path.basename(n),
                                                              "wb") as out:
            out.write(f.read())
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(local))
    x = torch.randint(0, 64, (2, 7))
    with torch.no_grad():
        assert torch.equal(hf.eval()(x).logits, got(x).logits)
