"""PyTorch Lightning's own launcher with the compression hook: ``Trainer(accelerator="cpu",
devices=2, strategy="ddp")`` starts the ranks itself (it runs this script again for rank 1).

Modes (the first argument):

* ``callback``: :class:`collectives.lightning.CompressionCallback` with rules (the large layer
  8-bit, the rest uncompressed), the digits CNN, Adam, a DistributedSampler Lightning adds.
  Checked on every rank: the hook ran once per optimizer step, groups went out with a
  compressor other than ``none``, the loss fell, every rank holds the same weights, and the
  state was closed when ``fit`` ended.
* ``compcoll``: ``DDPStrategy(process_group_backend="compcoll")`` and no callback: the default
  group is compcoll's, DDP's buckets took its compressed path, the loss fell.

Every rank prints ``lightning fit: np=P cases=N FAILURES F`` and exits with its verdict.

Run: python tests/lightning_fit.py MODE ROOT_DIR
"""

from __future__ import annotations

import os
import sys
import traceback

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

try:
    import lightning.pytorch as L
except ImportError:
    import pytorch_lightning as L

from collectives.lightning import CompressionCallback
from compcoll_bench.commands.train_models import task

STEPS, BATCH = 40, 16
RULES = [("numel>=16384", "uniform:bits=8"), ("*", "none")]


class Digits(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = task("cnn", 0).make()
        self.losses: list[float] = []

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], _: int) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        self.losses.append(float(loss.detach()))
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), 3e-3)


def fit(mode: str, root: str) -> tuple[L.Trainer, Digits, CompressionCallback | None]:
    x, y = task("cnn", 0).train
    loader = DataLoader(TensorDataset(x, y), batch_size=BATCH, shuffle=True)
    callback = CompressionCallback(RULES) if mode == "callback" else None
    strategy = "ddp" if mode == "callback" else \
        L.strategies.DDPStrategy(process_group_backend="compcoll")
    trainer = L.Trainer(accelerator="cpu", devices=2, strategy=strategy, max_steps=STEPS,
                        callbacks=[callback] if callback else [], logger=False,
                        enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, default_root_dir=root)
    model = Digits()
    trainer.fit(model, train_dataloaders=loader)
    return trainer, model, callback


def checked(mode: str, root: str) -> list[str]:
    failures: list[str] = []
    cases = 0

    def check(cond: bool, what: str) -> None:
        nonlocal cases
        cases += 1
        if not cond:
            failures.append(what)

    trainer, model, callback = fit(mode, root)
    losses = model.losses
    check(len(losses) == STEPS, f"{STEPS} training steps ran: {len(losses)}")
    check(sum(losses[-5:]) < sum(losses[:5]), f"the loss fell: {losses[:5]} -> {losses[-5:]}")
    if callback is not None:
        state = callback.state
        check(state.step == STEPS, f"the hook ran once per step ({state.step} of {STEPS})")
        specs = {spec for rec in state.timeline for _, spec, _ in rec.get("groups", ())}
        check(bool(specs - {"none"}), f"groups went out compressed: {specs}")
        worker = state._worker._thread
        check(worker is None or not worker.is_alive(), "the state was closed after fit")
    else:
        pg = dist.distributed_c10d._get_default_group()
        check(dist.get_backend() == "compcoll", f"the group's backend: {dist.get_backend()}")
        check(getattr(pg, "compressed", 0) > 0, "DDP's buckets took the compressed path")
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    every = [torch.empty_like(flat) for _ in range(trainer.world_size)]
    dist.all_gather(every, flat)
    check(all(torch.equal(e, every[0]) for e in every), "the same weights on every rank")
    return [f"rank {trainer.global_rank}: {f}" for f in failures] + [f"cases={cases}"]


def main() -> None:
    mode, root = sys.argv[1], sys.argv[2]
    try:
        out = checked(mode, root)
        cases = int(out.pop().split("=")[1])
    except Exception as exc:  # noqa: BLE001 - reported as this rank's failure
        out, cases = [f"{mode}: {type(exc).__name__}: {exc}\n{traceback.format_exc(limit=8)}"], 1
    for f in out:
        print("FAIL", f, flush=True)
    world = dist.get_world_size() if dist.is_initialized() else 0
    print(f"lightning fit: np={world} cases={cases} FAILURES {len(out)}", flush=True)
    sys.stderr.flush()
    # As the torchrun scripts: leave without interpreter finalization (gloo's teardown race).
    os._exit(1 if out else 0)


if __name__ == "__main__":
    main()
