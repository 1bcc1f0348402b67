"""collectives.optim.OneBitAdam under mpiexec: every rank checks, rank 0 reports.

- freeze_step past the end: torch.optim.Adam on the averaged gradient (exact with
  compressor=("none", "sign"), within fp16's rounding with the default);
- after the freeze with uncompressed momenta: Adam with v frozen at the freeze, on the averaged
  gradient (matrices' m / denominator clipped to Adam's bound, zero where v is zero);
- after the freeze: bit-identical weights on every rank, v unchanged, the loss still falling,
  rows of an embedding no sample used never move;
- at a refresh step (refresh="doubling"): Adam's step on the averaged gradient, v then frozen
  anew; bit-identical weights on every rank;
- a checkpoint at step k resumed in a fresh optimizer gives the uninterrupted run's weights,
  across a refresh too;
- settings that differ raise MismatchError on every rank; bad arguments name themselves;
- "auto" freezes every rank at the same step, when every rank voted for it.
"""

from __future__ import annotations

import copy

import numpy as np
import torch

import collectives
from collectives.optim import OneBitAdam
from collectives.optim.onebit import adam_bound

from common import WORLD, Checker

RANK, P = WORLD.rank, WORLD.size
VOCAB, USED = 64, 40  # embedding rows; samples use only the first USED


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(VOCAB, 16)
        self.fc = torch.nn.Linear(16, 16)
        self.out = torch.nn.Linear(16, 1)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.out(torch.tanh(self.fc(self.emb(ids).mean(dim=1))))


def net(seed: int = 0) -> Net:
    torch.manual_seed(seed + RANK)  # different on every rank: rank 0's are broadcast
    return Net()


def batch(step: int, rank: int = RANK) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 * step + rank)
    ids = torch.randint(0, USED, (32, 4), generator=g)
    return ids, (ids.float().mean(dim=1, keepdim=True) / USED).sin()


def loss_of(m: Net, step: int) -> torch.Tensor:
    ids, y = batch(step)
    return torch.nn.functional.mse_loss(m(ids), y)


def train(m: Net, opt: torch.optim.Optimizer, steps: range) -> list[float]:
    out = []
    for step in steps:
        loss = loss_of(m, step)
        loss.backward()
        opt.step()
        opt.zero_grad()
        out.append(float(loss))
    return out


def flat(m: torch.nn.Module) -> np.ndarray:
    return torch.cat([p.detach().reshape(-1) for p in m.parameters()]).numpy().copy()


def adam_before_the_freeze(chk: Checker) -> None:
    for warm, tol in (("none", 1e-6), ("fp16", 1e-3)):
        m = net()
        opt = OneBitAdam(m.parameters(), lr=1e-2, weight_decay=0.01, freeze_step=10_000,
                         compressor=(warm, "sign"))
        ref = copy.deepcopy(m)
        ref_opt = torch.optim.Adam(ref.parameters(), lr=1e-2, weight_decay=0.01)
        train(m, opt, range(10))
        for step in range(10):
            loss_of(ref, step).backward()
            for p in ref.parameters():
                p.grad = torch.from_numpy(collectives.allreduce(p.grad.numpy(), op="avg"))
            ref_opt.step()
            ref_opt.zero_grad()
        err = float(np.abs(flat(m) - flat(ref)).max())
        chk.check(err < tol, f"warm-up {warm}: Adam on the averaged gradient ({err:.2e})")
        chk.check(opt.frozen_at is None, "not frozen before freeze_step")


def frozen_is_adam_with_v_frozen(chk: Checker) -> None:
    """compressor="none": after the freeze, each step is Adam's with v as it was at the freeze,
    and at a refresh step (8 and 16 after a freeze at 4) Adam's own step on the averaged
    gradient, v first standing in for the steps since it was last updated; written out here
    from the formula (not from the optimizer's own arithmetic)."""
    for refresh in ("never", "doubling:until=16"):
        lr, wd, freeze, b1, b2, eps = 1e-2, 0.01, 4, 0.9, 0.999, 1e-8
        m = net(5)
        opt = OneBitAdam(m.parameters(), lr=lr, weight_decay=wd, freeze_step=freeze,
                         compressor=("none", "none"), refresh=refresh)
        ref = copy.deepcopy(m)
        ref_opt = torch.optim.Adam(ref.parameters(), lr=lr, weight_decay=wd)
        train(m, opt, range(20))
        for step in range(freeze):
            loss_of(ref, step).backward()
            for p in ref.parameters():
                p.grad = torch.from_numpy(collectives.allreduce(p.grad.numpy(), op="avg"))
            ref_opt.step()
            ref_opt.zero_grad()
        bound = adam_bound(b1, b2)
        state = {p: (ref_opt.state[p]["exp_avg"].clone(), ref_opt.state[p]["exp_avg_sq"].clone())
                 for p in ref.parameters()}
        v_at = freeze
        for step in range(freeze, 20):
            loss_of(ref, step).backward()
            t = step + 1
            with torch.no_grad():
                for p in ref.parameters():
                    grad = torch.from_numpy(collectives.allreduce(p.grad.numpy(), op="avg"))
                    grad = grad + wd * p
                    mom, v = state[p]
                    mom.mul_(b1).add_(grad, alpha=1 - b1)
                    if refresh != "never" and t in (8, 16):  # Adam's step at t
                        v.mul_((1 - b2 ** (t - 1)) / (1 - b2 ** v_at))
                        v.mul_(b2).addcmul_(grad, grad, value=1 - b2)
                        units = mom / ((v / (1 - b2 ** t)).sqrt() + eps)
                    else:
                        denom = v.sqrt() / (1 - b2 ** v_at) ** 0.5 + eps
                        units = mom / denom
                        if p.dim() >= 2:  # matrices: Adam's units, clipped, zero where v is 0
                            units = torch.where(v > 0, units.clamp(-bound, bound), 0.0)
                            mom.copy_(units * torch.where(v > 0, denom, 0.0))
                    p.sub_(units, alpha=lr / (1 - b1 ** t))
                    p.grad = None
                if refresh != "never" and t in (8, 16):
                    v_at = t
        err = float(np.abs(flat(m) - flat(ref)).max())
        chk.check(opt.frozen_at == freeze, f"frozen at step {freeze} ({opt.frozen_at})")
        chk.check(err < 1e-5, f"refresh {refresh}: Adam with v frozen, refreshed ({err:.2e})")


def after_the_freeze(chk: Checker) -> None:
    m = net(1)
    opt = OneBitAdam(m.parameters(), lr=1e-2, freeze_step=8, refresh="never")
    start = flat(m)
    losses = train(m, opt, range(8))
    v = {n: opt.state[p]["exp_avg_sq"].clone() for n, p in m.named_parameters()}
    rows = m.emb.weight.detach()[USED:].clone()
    chk.check(opt.frozen_at == 8, f"frozen at step 8 ({opt.frozen_at})")
    losses += train(m, opt, range(8, 40))
    chk.identical(flat(m), "compressed momenta: weights")
    chk.check(all(torch.equal(opt.state[p]["exp_avg_sq"], v[n])
                  for n, p in m.named_parameters()), "v is frozen")
    chk.check(torch.equal(m.emb.weight.detach()[USED:], rows), "unused rows never move")
    chk.check(not np.array_equal(flat(m), start), "the weights moved")
    early, late = np.mean(losses[:5]), np.mean(losses[-5:])
    chk.check(late < early, f"the loss falls after the freeze ({early:.4f} -> {late:.4f})")
    chk.check("onebit" in opt.feedback.residuals, "error feedback holds the momentum's residual")


def resume(chk: Checker) -> None:
    """Saved at step 9, between the freeze (5) and a refresh (10; then 20): bit for bit."""
    def fresh() -> tuple[Net, OneBitAdam]:
        m = net(2)
        return m, OneBitAdam(m.parameters(), lr=1e-2, freeze_step=5)
    m, opt = fresh()
    train(m, opt, range(22))
    want = flat(m)
    chk.identical(want, "refreshed at steps 10 and 20: weights")
    m, opt = fresh()
    train(m, opt, range(9))  # past the freeze: residuals and the frozen v in the state
    v = {p: opt.state[p]["exp_avg_sq"].clone() for p in m.parameters()}
    saved = copy.deepcopy((m.state_dict(), opt.state_dict()))
    train(m, opt, range(9, 10))
    chk.check(not all(torch.equal(opt.state[p]["exp_avg_sq"], v[p]) for p in m.parameters()),
              "step 10 refreshed v")
    m, opt = fresh()
    m.load_state_dict(saved[0])
    opt.load_state_dict(saved[1])
    train(m, opt, range(9, 22))
    chk.check(np.array_equal(flat(m), want), "resumed at step 9: the same weights bit for bit")
    plain = torch.optim.Adam(m.parameters()).state_dict()
    chk.raises(lambda: opt.load_state_dict(plain), "not a OneBitAdam state_dict",
               "an Adam state is refused")


def mismatch(chk: Checker) -> None:
    m = net()
    try:
        OneBitAdam(m.parameters(), lr=1e-2 * (1 + (RANK == P - 1)))
        chk.check(P == 1, "different lr raises")
    except collectives.MismatchError as exc:
        chk.check("lr" in str(exc), f"MismatchError names lr: {exc}")
    try:
        OneBitAdam(m.parameters(), refresh="never" if RANK == P - 1 else "doubling")
        chk.check(P == 1, "different refresh raises")
    except collectives.MismatchError as exc:
        chk.check("refresh" in str(exc), f"MismatchError names refresh: {exc}")
    for kwargs, words in (({"lr": 0.0}, "lr must be"), ({"betas": (0.9, 1.0)}, "betas must"),
                          ({"freeze_step": 0}, "freeze_step must"),
                          ({"compressor": "bogus"}, "bogus"),
                          ({"compressor": ("int8", "sign")}, "warm-up compressor"),
                          ({"compressor": ("fp16", "sign", "x")}, "a pair"),
                          ({"refresh": "sometimes"}, "refresh must be"),
                          ({"refresh": "doubling:until=0"}, "'doubling:until=N'")):
        chk.raises(lambda kw=kwargs: OneBitAdam(m.parameters(), **kw), words,
                   f"{kwargs} is refused")


def auto_freeze(chk: Checker) -> None:
    m = net(3)
    opt = OneBitAdam(m.parameters(), lr=1e-2)
    train(m, opt, range(80))
    chk.identical(np.array([opt.frozen_at or 0]), "auto: every rank froze at the same step")
    chk.check(opt.frozen_at is not None, f"auto froze within 80 steps ({opt.vnorms[-3:]})")
    chk.identical(flat(m), "auto: weights")
    # the ranks freeze on the sum of their votes, never on their own reading of v
    for settled, want in ((lambda: RANK == 0, None), (lambda: True, 1)):
        m = net(3)
        opt = OneBitAdam(m.parameters(), lr=1e-2)
        opt._settled = settled  # type: ignore[method-assign]
        train(m, opt, range(4))
        chk.check(opt.frozen_at == want or (P == 1 and want is None),
                  f"votes: frozen at {opt.frozen_at}, want {want}")
        chk.identical(flat(m), "votes: weights")


def rare_feature(chk: Checker) -> None:
    """A feature near zero through the warm-up (tiny frozen v) and large after it: Adam's
    step on it stays within a few times Adam's own bound instead of |m| / sqrt(tiny v)."""
    torch.manual_seed(4 + RANK)
    m = torch.nn.Linear(8, 1)
    lr, freeze = 1e-2, 8
    opt = OneBitAdam(m.parameters(), lr=lr, freeze_step=freeze)
    worst = 0.0
    for step in range(40):
        g = torch.Generator().manual_seed(1000 * step + RANK)
        x = torch.randn(32, 8, generator=g)
        x[:, 7] *= 1e-6 if step < freeze else 1.0
        before = flat(m)
        torch.nn.functional.mse_loss(m(x), x.sum(dim=1, keepdim=True)).backward()
        opt.step()
        opt.zero_grad()
        if step >= freeze:
            worst = max(worst, float(np.abs(flat(m) - before).max()) / lr)
    bound = adam_bound(0.9, 0.999)
    chk.check(opt.frozen_at == freeze, f"frozen at step {freeze}")
    chk.check(np.isfinite(flat(m)).all() and worst <= 4 * bound,
              f"largest step after the freeze {worst:.2f} lr <= 4 x Adam's bound {bound:.2f}")
    chk.identical(flat(m), "rare feature: weights")


def main() -> None:
    chk = Checker("onebit")
    for fn in (adam_before_the_freeze, frozen_is_adam_with_v_frozen, after_the_freeze, resume,
               mismatch, auto_freeze, rare_feature):
        chk.run(fn.__name__, fn, chk)
    chk.finish()


if __name__ == "__main__":
    main()
