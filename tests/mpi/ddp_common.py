"""Shared pieces of the DDP hook scripts: torch.distributed from MPI ranks, a small model."""

from __future__ import annotations

import numpy as np
import torch
from mpi4py import MPI
from torch import nn

from collectives.ddp import init_from_mpi

from common import WORLD


def init_gloo() -> None:
    """torch.distributed over gloo on localhost (rank 0's TCP store, port sent over MPI)."""
    init_from_mpi(WORLD, "gloo", timeout=60)


class Net(nn.Module):
    """Embedding, conv, norm and linear layers: every kind a policy can name."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(64, 16)
        self.conv = nn.Conv1d(16, 16, 3, padding=1)
        self.norm = nn.LayerNorm(16)
        self.fc1 = nn.Linear(16 * 8, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.emb(x).transpose(1, 2)
        h = torch.relu(self.conv(h)).transpose(1, 2)
        h = self.norm(h).reshape(len(x), -1)
        return self.fc2(torch.relu(self.fc1(h)))


def local_grads(step: int) -> dict[str, torch.Tensor]:
    """This rank's own gradients of ``step`` (the model of :func:`make`, no averaging)."""
    torch.manual_seed(0)
    net = Net()
    x, y = batch(step)
    nn.functional.cross_entropy(net(x), y).backward()
    return {n: p.grad.detach().clone() for n, p in net.named_parameters()}


def order_bound(step: int) -> dict[str, torch.Tensor]:
    """Per element, how far two sums of ``step``'s averaged gradients can lie apart when
    they add the same fp32 terms x_r = g_r * (1/P) in different orders (another algorithm,
    another layout, another engine).

    Any order of the P - 1 additions is within (P - 1) * u * sum_r |x_r| of the exact sum
    (u = eps / 2, first order), so two orders are within (P - 1) * eps * sum_r |x_r| of each
    other; a tenth more covers the second-order terms. At P <= 2 the bound is 0: a + b and
    b + a are the same float.
    """
    size = WORLD.size
    eps = float(np.finfo(np.float32).eps)
    out = {}
    for name, g in local_grads(step).items():
        mine = (g * (1.0 / size)).abs().double().numpy()
        total = np.empty_like(mine)
        WORLD.Allreduce(mine, total, op=MPI.SUM)
        k = 1.1 * (size - 1) if size > 2 else 0.0
        out[name] = torch.from_numpy(k * eps * total).float()
    return out


def within(a: torch.Tensor, b: torch.Tensor, bound: torch.Tensor) -> bool:
    """|a - b| <= bound everywhere (exact equality where the bound is 0)."""
    return bool(((a.double() - b.double()).abs() <= bound.double()).all())


def make(bucket_cap_mb: float = 25.0) -> nn.parallel.DistributedDataParallel:
    torch.manual_seed(0)  # the same initial weights on every rank
    return nn.parallel.DistributedDataParallel(Net(), bucket_cap_mb=bucket_cap_mb)


def batch(step: int, rank: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's batch of ``step`` (a generator of its own, the global RNG untouched)."""
    g = torch.Generator().manual_seed(7919 * step + (WORLD.rank if rank is None else rank))
    return torch.randint(0, 64, (6, 8), generator=g), torch.randint(0, 10, (6,), generator=g)


def backward(model: nn.Module, step: int) -> None:
    x, y = batch(step)
    model.zero_grad(set_to_none=False)
    nn.functional.cross_entropy(model(x), y).backward()


def grads(model: nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.grad.detach().clone() for n, p in model.module.named_parameters()}


def train(model: nn.Module, opt: torch.optim.Optimizer, steps: range) -> None:
    for step in steps:
        backward(model, step)
        opt.step()
