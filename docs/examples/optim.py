# mpiexec -n 2
"""Training that communicates less than every gradient: DiLoCo and 1-bit Adam, no DDP.

Run under an MPI launcher or torchrun:
    mpiexec -n 2 python docs/examples/optim.py
    torchrun --standalone --nproc-per-node 2 docs/examples/optim.py
"""

import os

import torch
import torch.distributed as dist

import collectives
from collectives.optim import DiLoCo, OneBitAdam

if "RANK" in os.environ:                      # torchrun: join its ranks (comm=None follows)
    dist.init_process_group("gloo")
rank = collectives.as_communicator().rank    # MPI.COMM_WORLD under mpiexec


def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 * step + rank)  # each rank its own data
    x = torch.randn(64, 16, generator=g)
    return x, x[:, :4].sum(dim=1, keepdim=True).tanh()


def fit(model: torch.nn.Module, opt: torch.optim.Optimizer | DiLoCo,
        steps: int) -> tuple[float, float]:
    """Train; the mean loss of the first and of the last 20 steps."""
    losses = []
    for step in range(steps):
        x, y = batch(step)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return sum(losses[:20]) / 20, sum(losses[-20:]) / 20


# DiLoCo: AdamW steps on every rank, and every 10 steps a sync: the 8-bit average of the ranks'
# pseudo-gradients, exchanged in the background during the next 10 steps, then the outer step.
# Rank 0's weights are loaded into every rank first.
model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
opt = DiLoCo(torch.optim.AdamW(model.parameters(), lr=3e-3), model, sync_every=10,
             compressor="uniform:bits=8")
first, last = fit(model, opt, 200)
opt.flush()  # the sync in flight lands: every step's progress is in the global weights
print(f"rank {rank}: DiLoCo, {opt.syncs} syncs in {opt.steps} steps, "
      f"loss {first:.4f} -> {last:.4f}")
assert last < first / 3  # the loss fell to well under a third

# 1-bit Adam: 16-bit gradients for the first 50 steps, then 1-bit momenta with error feedback.
model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
opt1 = OneBitAdam(model.parameters(), lr=3e-3, freeze_step=50)
first, last = fit(model, opt1, 200)
print(f"rank {rank}: OneBitAdam, frozen at step {opt1.frozen_at}, loss {first:.4f} -> {last:.4f}")
assert last < first / 3  # the loss fell to well under a third
if dist.is_initialized():                     # torchrun's group: nothing is in flight now
    dist.destroy_process_group()
