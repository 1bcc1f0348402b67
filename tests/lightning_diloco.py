"""PyTorch Lightning's own launcher with DiLoCo (``collectives.optim``) instead of DDP:
``Trainer(accelerator="cpu", devices=2, strategy=LocalSteps())`` starts the ranks itself (it
runs this script again for rank 1).

``LocalSteps`` is Lightning's DDP strategy (its launcher, process group, samplers and
collectives) with the model left unwrapped: DDP would average the gradients of every step,
DiLoCo averages the models every ``SYNC_EVERY`` steps. The LightningModule builds DiLoCo over
the optimizer Lightning gives it (``self.optimizers()``, a subclass of the inner optimizer's
class) when training starts, and steps it in ``optimizer_step``: Lightning's closure (forward,
backward, gradient clipping) runs inside the inner step, and the trainer counts the steps as
usual. Checked on every rank: the model was not wrapped, every sync was made, the loss fell,
the global weights are the same on every rank.

Run: python tests/lightning_diloco.py ROOT_DIR
"""

from __future__ import annotations

import hashlib
import os
import sys
import traceback
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

try:
    import lightning.pytorch as L
except ImportError:
    import pytorch_lightning as L

from collectives.optim import DiLoCo
from compcoll_bench.commands.train_models import task

STEPS, BATCH, SYNC_EVERY = 40, 16, 4


class LocalSteps(L.strategies.DDPStrategy):
    """Lightning's DDP strategy without the DDP wrapper: every rank trains its own model."""

    def configure_ddp(self) -> None:
        pass  # the LightningModule stays as it is; DiLoCo does the averaging


class Digits(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = task("cnn", 0).make()
        self.losses: list[float] = []
        self.diloco: DiLoCo | None = None

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], _: int) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        self.losses.append(float(loss.detach()))
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), 3e-3)

    def on_train_start(self) -> None:  # every rank: DiLoCo's constructor is collective
        # On the default group: Lightning's loop broadcasts on it every step while a sync is
        # exchanged in the background, which DiLoCo does on a communicator of its own.
        self.diloco = DiLoCo(self.optimizers(), self, sync_every=SYNC_EVERY,
                             compressor="uniform:bits=8")

    def optimizer_step(self, epoch: int, batch_idx: int, optimizer: Any,
                       optimizer_closure: Any = None) -> None:
        assert self.diloco is not None
        self.diloco.step(closure=optimizer_closure)  # the inner step runs Lightning's closure

    def on_train_end(self) -> None:
        assert self.diloco is not None
        self.diloco.flush()  # every rank: the last interval's progress into the global weights


def checked(root: str) -> list[str]:
    failures: list[str] = []
    cases = 0

    def check(cond: bool, what: str) -> None:
        nonlocal cases
        cases += 1
        if not cond:
            failures.append(what)

    x, y = task("cnn", 0).train
    loader = DataLoader(TensorDataset(x, y), batch_size=BATCH, shuffle=True)
    trainer = L.Trainer(accelerator="cpu", devices=2, strategy=LocalSteps(), max_steps=STEPS,
                        gradient_clip_val=1.0, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        default_root_dir=root)
    model = Digits()
    trainer.fit(model, train_dataloaders=loader)
    opt = model.diloco
    check(trainer.strategy.model is model, f"the model was not wrapped: "
                                           f"{type(trainer.strategy.model).__name__}")
    check(opt is not None and opt.steps == STEPS and opt.syncs == STEPS // SYNC_EVERY,
          f"{STEPS // SYNC_EVERY} syncs in {STEPS} steps: "
          f"{opt and opt.syncs} in {opt and opt.steps}")
    check(trainer.global_step == STEPS, f"the trainer counted {trainer.global_step} steps")
    losses = model.losses
    check(len(losses) == STEPS, f"{STEPS} training steps ran: {len(losses)}")
    check(sum(losses[-5:]) < 0.75 * sum(losses[:5]),
          f"the loss fell: {losses[:5]} -> {losses[-5:]}")
    assert opt is not None
    with opt.global_weights() as m:
        flat = torch.cat([p.detach().reshape(-1) for p in m.parameters()])
    digest = hashlib.sha256(flat.numpy().tobytes()).hexdigest()
    every: list[str | None] = [None] * trainer.world_size
    dist.all_gather_object(every, digest)
    check(len(set(every)) == 1, "the same global weights on every rank")
    return [f"rank {trainer.global_rank}: {f}" for f in failures] + [f"cases={cases}"]


def main() -> None:
    try:
        out = checked(sys.argv[1])
        cases = int(out.pop().split("=")[1])
    except Exception as exc:  # noqa: BLE001 - reported as this rank's failure
        out, cases = [f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=8)}"], 1
    for f in out:
        print("FAIL", f, flush=True)
    world = dist.get_world_size() if dist.is_initialized() else 0
    print(f"lightning diloco: np={world} cases={cases} FAILURES {len(out)}", flush=True)
    sys.stderr.flush()
    # As the torchrun scripts: leave without interpreter finalization (gloo's teardown race).
    os._exit(1 if out else 0)


if __name__ == "__main__":
    main()
