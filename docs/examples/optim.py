# mpiexec -n 2
"""Training that communicates less than every gradient: DiLoCo and 1-bit Adam, no DDP.

Run under an MPI launcher or torchrun:
    mpiexec -n 2 python docs/examples/optim.py
"""

import torch

import collectives
from collectives.optim import DiLoCo, OneBitAdam

rank = collectives.as_communicator().rank


def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 * step + rank)  # each rank its own data
    x = torch.randn(64, 16, generator=g)
    return x, x[:, :4].sum(dim=1, keepdim=True).tanh()


def fit(model: torch.nn.Module, opt: torch.optim.Optimizer | DiLoCo, steps: int) -> float:
    for step in range(steps):
        x, y = batch(step)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
    return float(loss)


# DiLoCo: AdamW steps on every rank, and every 10 steps an outer Nesterov step on the 8-bit
# average of the ranks' pseudo-gradients. Rank 0's weights are loaded into every rank first.
model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
opt = DiLoCo(torch.optim.AdamW(model.parameters(), lr=3e-3), model, sync_every=10,
             compressor="uniform:bits=8")
loss = fit(model, opt, 200)
print(f"rank {rank}: DiLoCo, {opt.syncs} syncs in {opt.steps} steps, loss {loss:.4f}")

# 1-bit Adam: 16-bit gradients for the first 50 steps, then 1-bit momenta with error feedback.
model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
opt1 = OneBitAdam(model.parameters(), lr=3e-3, freeze_step=50)
loss = fit(model, opt1, 200)
print(f"rank {rank}: OneBitAdam, frozen at step {opt1.frozen_at}, loss {loss:.4f}")
assert loss < 0.1
