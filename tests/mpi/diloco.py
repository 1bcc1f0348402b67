"""collectives.optim.DiLoCo under mpiexec: every rank checks, rank 0 reports.

- sync_every=1, no compressor, outer SGD lr 1 without momentum: synchronous SGD on the
  averaged gradient, within rounding;
- compressed syncs leave bit-identical global weights on every rank;
- a checkpoint at step k, resumed in a fresh optimizer, gives the uninterrupted run's weights
  bit for bit;
- settings that differ between ranks raise MismatchError on every rank; bad arguments a
  ValueError naming them (and MismatchError on the ranks that passed good ones);
- "auto" settles on the same sync_every on every rank;
- global_weights() puts the global weights in the model between syncs, and the local ones back.
"""

from __future__ import annotations

import copy

import numpy as np
import torch

import collectives
from collectives.optim import DiLoCo
from collectives.optim.diloco import NESTEROV_FROM, outer_for

from common import WORLD, Checker

RANK, P = WORLD.rank, WORLD.size


def model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed + RANK)  # different on every rank: DiLoCo loads rank 0's
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))


def batch(step: int, rank: int = RANK) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(32, 8, generator=g)
    return x, x.sum(dim=1, keepdim=True).sin()


def train(m: torch.nn.Module, opt: DiLoCo, steps: range) -> None:
    for step in steps:
        x, y = batch(step)
        torch.nn.functional.mse_loss(m(x), y).backward()
        opt.step()
        opt.zero_grad()


def flat(m: torch.nn.Module) -> np.ndarray:
    return torch.cat([p.detach().reshape(-1) for p in m.parameters()]).numpy().copy()


def synchronous_equivalence(chk: Checker) -> None:
    m = model()
    opt = DiLoCo(torch.optim.SGD(m.parameters(), lr=0.1), m, sync_every=1, compressor="none",
                 outer_lr=1.0, outer_momentum=0.0)
    ref = copy.deepcopy(m)  # rank 0's weights, loaded by DiLoCo
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    train(m, opt, range(8))
    for step in range(8):
        x, y = batch(step)
        torch.nn.functional.mse_loss(ref(x), y).backward()
        for p in ref.parameters():
            p.grad = torch.from_numpy(collectives.allreduce(p.grad.numpy(), op="avg"))
        ref_opt.step()
        ref_opt.zero_grad()
    err = np.abs(flat(m) - flat(ref)).max()
    chk.check(err < 1e-6, f"sync_every=1 is synchronous SGD (max difference {err:.2e})")
    chk.identical(flat(m), "synchronous: weights")


def compressed_syncs(chk: Checker) -> None:
    m = model()
    opt = DiLoCo(torch.optim.AdamW(m.parameters(), lr=1e-2), m, sync_every=3,
                 compressor="uniform:bits=8")
    chk.identical(flat(m), "rank 0's weights loaded at construction")
    train(m, opt, range(9))
    chk.check(opt.syncs == 3, f"three syncs in nine steps ({opt.syncs})")
    chk.identical(flat(m), "8-bit syncs: weights after the last sync")
    chk.check(opt.feedback is not None and "diloco" in opt.feedback.residuals,
              "error feedback holds the pseudo-gradient's residual")
    train(m, opt, range(9, 10))
    spread = WORLD.allgather(float(np.abs(flat(m)).sum()))
    chk.check(P == 1 or len(set(spread)) > 1, "between syncs every rank has its own weights")
    local = flat(m)
    with opt.global_weights() as g:
        chk.check(g is m and np.array_equal(flat(m), opt._master.detach().numpy()),
                  "global_weights(): the last outer step's weights in the model")
        chk.identical(flat(m), "global_weights(): the same on every rank")
    chk.check(np.array_equal(flat(m), local), "global_weights(): the local weights back after")


def resume(chk: Checker) -> None:
    def fresh() -> tuple[torch.nn.Module, DiLoCo]:
        m = model(5)
        return m, DiLoCo(torch.optim.AdamW(m.parameters(), lr=1e-2), m, sync_every=3,
                         compressor="uniform:bits=8", outer_momentum=0.9)
    m, opt = fresh()
    train(m, opt, range(11))
    want = flat(m)
    m, opt = fresh()
    train(m, opt, range(4))  # mid-interval: local weights differ from the global ones
    saved = copy.deepcopy((m.state_dict(), opt.state_dict()))
    m, opt = fresh()
    m.load_state_dict(saved[0])
    opt.load_state_dict(saved[1])
    train(m, opt, range(4, 11))
    chk.check(np.array_equal(flat(m), want), "resumed at step 4: the same weights bit for bit")
    bad = dict(saved[1], **{"global": torch.zeros(3)})
    chk.raises(lambda: opt.load_state_dict(bad), "global weights of shape (3,)",
               "a state of another model is refused, naming the shape")


def mismatch(chk: Checker) -> None:
    m = model()
    try:
        DiLoCo(torch.optim.SGD(m.parameters(), lr=0.1), m, sync_every=2 + (RANK == P - 1),
               compressor="none")
        chk.check(P == 1, "different sync_every raises")
    except collectives.MismatchError as exc:
        chk.check("sync_every" in str(exc), f"MismatchError names sync_every: {exc}")
    try:
        DiLoCo(torch.optim.SGD(m.parameters(), lr=0.1), m, sync_every=0 if RANK == 0 else 2)
        chk.check(False, "sync_every=0 is refused")
    except ValueError as exc:  # MismatchError is a ValueError too
        words = "sync_every must be 'auto' or an integer >= 1" if RANK == 0 else "refused"
        chk.check(words in str(exc) or isinstance(exc, collectives.MismatchError),
                  f"rank {RANK}: {type(exc).__name__}: {exc}")
    for kwargs, words in (({"outer_lr": -1.0}, "outer_lr must be"),
                          ({"outer_lr": "fast"}, "outer_lr must be 'auto' or a number"),
                          ({"outer_momentum": 1.0}, "outer_momentum must be"),
                          ({"compressor": "bogus"}, "bogus"),
                          ({"compressor": "powersgd:rank=4"}, "flat pseudo-gradient")):
        chk.raises(lambda kw=kwargs: DiLoCo(torch.optim.SGD(m.parameters(), lr=0.1), m, **kw),
                   words, f"{kwargs} is refused")
    other = torch.nn.Linear(2, 2)
    chk.raises(lambda: DiLoCo(torch.optim.SGD(other.parameters(), lr=0.1), m),
               "not the model's", "an optimizer over another model is refused")


def auto(chk: Checker) -> None:
    m = model()
    opt = DiLoCo(torch.optim.AdamW(m.parameters(), lr=1e-2), m)
    train(m, opt, range(2))
    chk.check(opt.sync_every is None and opt.outer_settings == (1.0, 0.0),
              f"auto outer step while probing: averaging, got {opt.outer_settings}")
    train(m, opt, range(2, 12))
    chk.check(opt.sync_every is not None and opt.sync_every >= 1, f"auto: {opt.sync_every}")
    chk.check(opt.outer_settings == outer_for(opt.sync_every),
              f"auto outer step for H={opt.sync_every}: {opt.outer_settings}")
    for kwargs, want in (({"sync_every": 4}, (1.0, 0.0)),
                         ({"sync_every": NESTEROV_FROM}, (0.7, 0.9)),
                         ({"sync_every": 4, "outer_lr": 0.5}, (0.5, 0.0)),
                         ({"sync_every": 200, "outer_momentum": 0.0}, (0.7, 0.0)),
                         ({"sync_every": 2, "outer_lr": 0.7, "outer_momentum": 0.9},
                          (0.7, 0.9))):
        got = DiLoCo(torch.optim.SGD(m.parameters(), lr=0.1), m, compressor="none",
                     **kwargs)
        chk.check(got.outer_settings == want and got.outer.param_groups[0]["nesterov"]
                  == (want[1] > 0), f"{kwargs}: outer step {got.outer_settings}, want {want}")
    chk.identical(np.array([opt.sync_every or 0, opt.syncs]), "auto: the same H and syncs")
    chk.check(opt.compressor in ("none", "uniform:bits=8,bucket_size=512,seed=0,"
                                 "stochastic=True") or opt.compressor.startswith("uniform"),
              f"auto compressor {opt.compressor}")


def main() -> None:
    chk = Checker("diloco")
    for fn in (synchronous_equivalence, compressed_syncs, resume, mismatch, auto):
        chk.run(fn.__name__, fn, chk)
    chk.finish()


if __name__ == "__main__":
    main()
