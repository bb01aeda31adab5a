"""Runs the Trainer fits of test_lightning.py in a process of its own, whose sys.path has
s3fs (for ModelCheckpoint's s3:// dirpath) from tests/.lightning-s3fs before the system's
packages: s3fs's botocore stays out of the test process.

    _lightning_fit.py ROOT OUT.json        ROOT: "s3://bucket/prefix" or a local folder

1. an uninterrupted 4-epoch fit (no checkpoints);
2. a 2-epoch fit with ModelCheckpoint(dirpath=ROOT/ckpts, save_last=True, save_top_k=1);
3. a 4-epoch fit resumed from ROOT/ckpts/last.ckpt.
Each logs its training loss at every step; OUT.json gets the three lists, the epochs the
resumed fit ran, and what ModelCheckpoint recorded.
"""

from __future__ import annotations

import json
import sys

import torch
from torch.utils.data import DataLoader, TensorDataset

import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint
from s3direct.lightning import S3DirectCheckpointIO


class Tiny(L.LightningModule):
    def __init__(self, lr: float = 0.05, width: int = 8) -> None:
        super().__init__()
        self.save_hyperparameters()  # hyper_parameters in the checkpoint
        self.net = torch.nn.Sequential(torch.nn.Linear(4, width), torch.nn.Tanh(),
                                       torch.nn.Linear(width, 1))
        self.losses: list[float] = []
        self.epochs: list[int] = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.losses.append(loss.detach().item())
        if batch_idx == 0:
            self.epochs.append(self.current_epoch)
        return loss

    def configure_optimizers(self):
        # Momentum and a scheduler: their state must come back for the losses to match.
        opt = torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)
        return [opt], [torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.7)]


def data() -> DataLoader:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(32, 4, generator=g)
    y = x.sum(1, keepdim=True) + 0.1 * torch.randn(32, 1, generator=g)
    # No shuffling: the batch order must not depend on RNG state the checkpoint does not hold.
    return DataLoader(TensorDataset(x, y), batch_size=8, shuffle=False)


def trainer(epochs: int, callbacks: list, checkpointing: bool) -> L.Trainer:
    return L.Trainer(max_epochs=epochs, plugins=[S3DirectCheckpointIO()], callbacks=callbacks,
                     enable_checkpointing=checkpointing, logger=False,
                     enable_progress_bar=False, enable_model_summary=False,
                     accelerator="cpu", devices=1)


def main() -> None:
    root, out = sys.argv[1].rstrip("/"), sys.argv[2]
    ckpts = f"{root}/ckpts"

    L.seed_everything(7)
    full = Tiny()
    trainer(4, [], False).fit(full, data())

    L.seed_everything(7)
    first = Tiny()
    mc = ModelCheckpoint(dirpath=ckpts, save_last=True, save_top_k=1)
    trainer(2, [mc], True).fit(first, data())
    after_first = {"best": mc.best_model_path, "last": mc.last_model_path}

    L.seed_everything(7)
    resumed = Tiny()
    mc2 = ModelCheckpoint(dirpath=ckpts, save_last=True, save_top_k=1)
    trainer(4, [mc2], True).fit(resumed, data(), ckpt_path=f"{ckpts}/last.ckpt")

    with open(out, "w") as f:
        json.dump({"full": full.losses, "first": first.losses, "resumed": resumed.losses,
                   "resumed_epochs": resumed.epochs, "after_first": after_first,
                   "after_resume": {"best": mc2.best_model_path, "last": mc2.last_model_path}},
                  f)


if __name__ == "__main__":
    main()
