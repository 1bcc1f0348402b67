"""Hugging Face Accelerate under torchrun, with the DDP hook registered on what
``accelerator.prepare`` returns.

``Accelerator(cpu=True, gradient_accumulation_steps=2)`` starts the process group from
torchrun's variables; ``prepare(model, optimizer, dataloader)`` gives a DistributedDataParallel
model (and shards the data per rank); the hook goes on that model, the loop uses
``accelerator.accumulate`` and ``accelerator.backward`` as Accelerate's examples do. Checked on
every rank: the prepared model is DDP and binding the unwrapped one is refused; the hook ran
once per synchronized step (not on the accumulation steps, which DDP's ``no_sync`` skips),
groups went out with a compressor other than ``none``, the loss fell, the same weights on every
rank, the state was closed.

Run: torchrun --standalone --nproc-per-node 2 tests/torchrun/accelerate_ddp.py
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from accelerate import Accelerator
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset

import collectives.ddp as cddp
from compcoll_bench.commands.train_models import task

from torchrun_checks import Checks, P

BATCHES, ACCUM, BATCH = 40, 2, 16  # 47 batches per rank and epoch
RULES = [("numel>=16384", "uniform:bits=8"), ("*", "none")]
checks = Checks("torchrun accelerate")
check = checks.check


def main() -> None:
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=ACCUM)
    check(accelerator.num_processes == P, f"Accelerate sees {accelerator.num_processes} "
                                          f"processes of {P}")
    t = task("cnn", 0)
    x, y = t.train
    loader = DataLoader(TensorDataset(x, y), batch_size=BATCH, shuffle=True,
                        generator=torch.Generator().manual_seed(0))
    model = t.make()
    optimizer = torch.optim.Adam(model.parameters(), 3e-3)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    check(isinstance(model, DDP), f"prepare() gives a DDP model: {type(model).__name__}")
    try:
        cddp.CompressionState().bind(accelerator.unwrap_model(model))
        check(False, "binding the unwrapped model is refused")
    except TypeError as exc:
        check("DistributedDataParallel" in str(exc), f"the refusal says why: {exc}")

    state = cddp.CompressionState(policy=RULES).bind(model)
    model.register_comm_hook(state, cddp.compression_hook)
    losses = []
    batches = iter(loader)
    for _ in range(BATCHES):
        xb, yb = next(batches)
        with accelerator.accumulate(model):
            loss = F.cross_entropy(model(xb), yb)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
        losses.append(float(loss.detach()))
    state.close()

    check(state.step == BATCHES // ACCUM,
          f"the hook ran once per synchronized step ({state.step} of {BATCHES // ACCUM})")
    specs = {spec for rec in state.timeline for _, spec, _ in rec.get("groups", ())}
    check(bool(specs - {"none"}), f"groups went out compressed: {specs}")
    check(sum(losses[-5:]) < sum(losses[:5]), f"the loss fell: {losses[:5]} -> {losses[-5:]}")
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    every = [torch.empty_like(flat) for _ in range(P)]
    dist.all_gather(every, flat)
    check(all(torch.equal(e, every[0]) for e in every), "the same weights on every rank")
    worker = state._worker._thread
    check(worker is None or not worker.is_alive(), "state.close() stopped the hook's thread")
    accelerator.end_training()


if __name__ == "__main__":
    checks.guarded("accelerate", main)
    checks.finish()
