"""collectives.optim.DiLoCo under mpiexec: every rank checks, rank 0 reports.

- sync_every=1, no compressor, in the foreground, outer SGD lr 1 without momentum:
  synchronous SGD on the averaged gradient, within rounding;
- background syncs land one interval late on every rank at the same step: the outer step is
  the average of what the ranks sent, the local weights keep their progress since the send,
  and the global weights are bit-identical on every rank after every landing;
- compressed syncs leave bit-identical global weights on every rank;
- a checkpoint at step k (a sync in flight), resumed in a fresh optimizer, gives the
  uninterrupted run's weights bit for bit;
- settings or shapes that differ between ranks raise MismatchError on every rank; bad
  arguments a ValueError naming them; a DDP-wrapped model, another rank's state and a step
  inside global_weights() are refused;
- BatchNorm's running statistics start from rank 0's and are averaged at every sync;
- "auto" settles on the same sync_every on every rank, from the slowest step and fastest sync;
- global_weights() puts the global weights in the model between syncs, and the local ones back.
"""

from __future__ import annotations

import copy

import numpy as np
import torch

import collectives
from collectives.optim import DiLoCo
from collectives.optim.intervals import outer_for

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
                 outer_lr=1.0, outer_momentum=0.0, overlap=False)
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
    chk.check(opt.syncs == 2, f"two syncs landed in nine steps, one in flight ({opt.syncs})")
    chk.identical(opt._master.detach().numpy(), "8-bit syncs: global weights")
    opt.flush()
    chk.check(opt.syncs == 3, f"flush() lands the third ({opt.syncs})")
    chk.identical(flat(m), "8-bit syncs: weights after flush()")
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
    opt.flush()  # one step since the last sync: synced now, in the foreground
    chk.check(opt.syncs == 4 and opt._pending is None, f"flush() synced step 10 ({opt.syncs})")
    chk.check(np.array_equal(flat(m), opt._master.detach().numpy()), "flushed: local = global")
    chk.identical(flat(m), "flushed: the same weights on every rank")
    opt.flush()
    chk.check(opt.syncs == 4, "nothing left to flush: no sync")


def sparse_syncs(chk: Checker) -> None:
    """Top-k of each chunk in 2 bits, with error feedback: what a sync sends is 50x smaller
    than float32, and every rank lands on the same global weights."""
    import compressors

    m = model(7)
    spec = "chunktopk:ratio=0.02,bits=2,chunk=64"
    opt = DiLoCo(torch.optim.AdamW(m.parameters(), lr=1e-2), m, sync_every=2, compressor=spec)
    train(m, opt, range(8))
    opt.flush()
    chk.check(opt.syncs == 4, f"four syncs ({opt.syncs})")
    chk.identical(opt._master.detach().numpy(), "sparse syncs: global weights")
    n = opt._master.numel()
    wire = compressors.get(spec).payload_nbytes(n)
    chk.check(wire is not None and 4 * n / wire > 20,
              f"{n} floats in {wire} bytes (chunks of 64: offsets and scales weigh more)")
    chk.check(np.abs(opt.feedback.residuals["diloco"]).max() > 0, "a residual is kept")


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
    chk.check(opt._probe == {"step": [], "sync": []}, "the probe's times are dropped after it")
    for kwargs, want in (({"sync_every": 4}, (1.0, 0.0)),
                         ({"sync_every": 64}, outer_for(64)),
                         ({"sync_every": 4, "outer_lr": 0.5}, (0.5, 0.0)),
                         ({"sync_every": 200, "outer_momentum": 0.0}, (outer_for(200)[0], 0.0)),
                         ({"sync_every": 2, "outer_lr": 0.7, "outer_momentum": 0.9},
                          (0.7, 0.9))):
        got = DiLoCo(torch.optim.SGD(m.parameters(), lr=0.1), m, compressor="none",
                     **kwargs)
        chk.check(got.outer_settings == want and got.outer.param_groups[0]["nesterov"]
                  == (want[1] > 0), f"{kwargs}: outer step {got.outer_settings}, want {want}")
    chk.identical(np.array([opt.sync_every or 0, opt.syncs]), "auto: the same H and syncs")
    # (which one the link prices cheaper: tests/test_optim.py, on pinned links)
    chk.identical(np.frombuffer(opt.compressor.ljust(64).encode(), np.uint8),
                  f"auto: one compressor on every rank ({opt.compressor})")


def slow_rank(chk: Checker) -> None:
    """A rank 30 ms slower a step: the others' syncs hold the wait for it, and "auto" must
    not read that wait as the link's time (it used to pick intervals of 62-348)."""
    import time

    m = model()
    opt = DiLoCo(torch.optim.SGD(m.parameters(), lr=0.1), m, compressor="none")
    for step in range(8):
        x, y = batch(step)
        torch.nn.functional.mse_loss(m(x), y).backward()
        if RANK == 0:
            time.sleep(0.03)
        opt.step()
        opt.zero_grad()
    chk.check(opt.sync_every is not None and opt.sync_every <= 4,
              f"a slow rank: auto picks {opt.sync_every} for a tiny model on shared memory")


def widening(chk: Checker) -> None:
    """In the background, "auto" doubles the interval while steps run slower than compute
    alone: with compute alone pinned at almost nothing, every check widens it, 1 -> 2 -> 4 ->
    8 (the foreground rule's, pinned at 8), at the same sync on every rank; a sync sent before
    a widening lands at the next sync, none is lost."""
    m = model(11)
    opt = DiLoCo(torch.optim.SGD(m.parameters(), lr=0.05), m, compressor="none")
    train(m, opt, range(6))
    opt.sync_every, opt._adapt = 1, (1e-12, 8)
    opt._set_outer(1)
    seen = []
    for step in range(6, 70):
        train(m, opt, range(step, step + 1))
        seen.append(opt.sync_every)
    chk.check(opt.sync_every == 8 and opt._adapt is None,
              f"widened to the foreground rule's 8 ({opt.sync_every})")
    chk.check(sorted(set(seen)) == [1, 2, 4, 8] and seen == sorted(seen), f"doubled: {seen}")
    chk.identical(np.array(seen), "every rank widened at the same step")
    opt.flush()
    chk.identical(flat(m), "flushed after widening: the same weights on every rank")
    chk.check(np.array_equal(flat(m), opt._master.detach().numpy()), "flushed: local = global")


def background(chk: Checker) -> None:
    """With averaging, no compressor and syncs in the background: at each landing the global
    weights move by the ranks' average pseudo-gradient (within rounding), the local weights
    become them plus the progress since the send, all ranks land at the same step and hold
    the same global weights."""
    m = model(3)
    opt = DiLoCo(torch.optim.SGD(m.parameters(), lr=0.05), m, sync_every=2, compressor="none",
                 outer_lr=1.0, outer_momentum=0.0)
    sent = None
    for step in range(9):
        x, y = batch(step)
        torch.nn.functional.mse_loss(m(x), y).backward()
        was, g_before = opt._pending, opt._master.detach().numpy().copy()
        opt.step()
        opt.zero_grad()
        if was is not None and opt._pending is not was:  # the sync sent earlier landed
            avg = WORLD.allreduce(sent) / P
            err = np.abs(opt._master.detach().numpy() - g_before + avg).max()
            chk.check(err < 1e-6, f"step {step}: the outer step is the average ({err:.1e})")
            chk.identical(opt._master.detach().numpy(), f"step {step}: global weights")
        if opt._pending is not None and opt._pending is not was:  # sent at this step
            sent = opt._master.detach().numpy() - opt._pending.snapshot.numpy()
            chk.check(opt._pending.due == opt.steps + 2, "it lands one interval later")
    chk.check(opt.syncs == 3 and opt.steps == 9, f"landed at 4, 6, 8 ({opt.syncs})")


def buffers(chk: Checker) -> None:
    torch.manual_seed(RANK)
    m = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.BatchNorm1d(4))
    with torch.no_grad():
        m[1].running_mean.fill_(float(RANK))
    opt = DiLoCo(torch.optim.SGD(m.parameters(), lr=0.1), m, sync_every=2, compressor="none",
                 overlap=False)
    chk.check(float(m[1].running_mean.sum()) == 0.0, "rank 0's running statistics loaded")
    for step in range(4):
        x, _ = batch(step)
        m(x * (1 + RANK)).sum().backward()  # different statistics on every rank
        opt.step()
        opt.zero_grad()
    chk.identical(m[1].running_var.numpy(), "running statistics averaged at the sync")
    with opt.global_weights() as g:
        chk.identical(g[1].running_mean.numpy(), "global_weights(): the same buffers")


def refusals(chk: Checker) -> None:
    # the same number of elements in other shapes: refused, not poured into them
    shape = (4, 6) if RANK == P - 1 and P > 1 else (6, 4)
    m = torch.nn.Linear(*shape)
    try:
        DiLoCo(torch.optim.SGD(m.parameters(), lr=0.1), m, compressor="none")
        chk.check(P == 1, "different parameter shapes raise")
    except collectives.MismatchError as exc:
        chk.check("parameters" in str(exc), f"MismatchError names the parameters: {exc}")
    m = model()

    class Wrapped(torch.nn.parallel.DistributedDataParallel):  # what accelerate returns
        def __init__(self, inner: torch.nn.Module) -> None:
            torch.nn.Module.__init__(self)
            self.module = inner

    wrapped = Wrapped(m)
    chk.raises(lambda: DiLoCo(torch.optim.SGD(m.parameters(), lr=0.1), wrapped),
               "DiLoCo takes the plain model", "a DDP-wrapped model is refused", TypeError)
    opt = DiLoCo(torch.optim.SGD(m.parameters(), lr=0.1), m, sync_every=2, compressor="none")
    train(m, opt, range(3))
    with opt.global_weights():
        chk.raises(opt.step, "inside global_weights()", "step() inside global_weights()",
                   RuntimeError)
    state = opt.state_dict()
    other = dict(state, rank=(RANK + 1) % max(P, 2))
    chk.raises(lambda: opt.load_state_dict(other), "saved by rank",
               "another rank's state is refused")
    # the constructor's interval is kept over a saved one; a probing state into a fixed one
    kept = DiLoCo(torch.optim.SGD(m.parameters(), lr=0.1), m, sync_every=5, compressor="none")
    probing = DiLoCo(torch.optim.SGD(m.parameters(), lr=0.1), m, compressor="none")
    train(m, probing, range(2))
    kept.load_state_dict(probing.state_dict())
    chk.check(kept.sync_every == 5, f"sync_every=5 kept over a probing state ({kept.sync_every})")
    train(m, kept, range(2, 6))
    chk.check(kept.syncs == 2 and kept._pending is not None and kept._pending.due == 10,
              f"a sync sent at step 5 after loading, not every step ({kept.syncs})")


def main() -> None:
    chk = Checker("diloco")
    for fn in (synchronous_equivalence, compressed_syncs, sparse_syncs, resume, mismatch, auto,
               slow_rank, widening, background, buffers, refusals):
        chk.run(fn.__name__, fn, chk)
    chk.finish()


if __name__ == "__main__":
    main()
