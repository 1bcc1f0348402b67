"""collectives.optim.OneBitAdam as users drive it, under mpiexec: every rank checks.

- frozen parameters (requires_grad=False) and parameters no rank has a gradient for never
  move, weight decay or not; a gradient on one rank only counts as zero on the others;
- every param group's settings are compared at construction, and add_param_group is
  collective (rank 0's weights, settings compared); a scheduler's lr is read at every step;
- a gradient whose shape is not its parameter's, or a sparse one, on one rank makes the step
  raise on every rank (no hang, nothing changed), and the next step goes on;
- the fp16 warm-up survives a finite gradient beyond fp16's range (float32 for that step);
  Inf propagates to the weights as in Adam, before and after the freeze, never clipped;
- a state whose freeze contradicts freeze_step, another rank's state or another refresh
  schedule is refused, naming both sides.
"""

from __future__ import annotations

import copy

import numpy as np
import torch

import collectives
from collectives.optim import OneBitAdam

from common import WORLD, Checker

RANK, P = WORLD.rank, WORLD.size
DEADLINE = 30.0  # a step that hangs fails here instead of at the script's timeout


class Net(torch.nn.Module):
    def __init__(self, seed: int, sparse: bool = False) -> None:
        super().__init__()
        torch.manual_seed(seed + RANK)  # different on every rank: rank 0's are broadcast
        self.emb = torch.nn.Embedding(12, 6, sparse=sparse)
        self.fc = torch.nn.Linear(6, 6)
        self.out = torch.nn.Linear(6, 1)
        self.unused = torch.nn.Linear(6, 6)  # no gradient ever reaches it

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.out(torch.tanh(self.fc(self.emb(ids).mean(dim=1))))


def loss_of(m: Net, step: int, scale: float = 1.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(1000 * step + RANK)
    ids = torch.randint(0, 12, (16, 3), generator=g)
    y = (ids.float().mean(dim=1, keepdim=True) / 12).sin()
    return torch.nn.functional.mse_loss(m(ids), y) * scale


def train(m: Net, opt: torch.optim.Optimizer, steps: range) -> None:
    for step in steps:
        loss_of(m, step).backward()
        opt.step()
        opt.zero_grad()


def flat(m: torch.nn.Module) -> np.ndarray:
    return torch.cat([p.detach().reshape(-1) for p in m.parameters()]).numpy().copy()


def averaged(m: torch.nn.Module) -> None:
    for p in m.parameters():
        if p.grad is not None:
            p.grad = torch.from_numpy(collectives.allreduce(p.grad.numpy(), op="avg"))


def frozen_parameters_stay(chk: Checker) -> None:
    m = Net(0)
    m.fc.requires_grad_(False)
    opt = OneBitAdam(m.parameters(), lr=1e-2, weight_decay=0.5, freeze_step=6)
    fc, unused = flat(m.fc), flat(m.unused)
    train(m, opt, range(14))
    chk.check(np.array_equal(flat(m.fc), fc), "requires_grad=False never moves")
    chk.check(np.array_equal(flat(m.unused), unused), "no gradient on any rank: never moves")
    chk.identical(flat(m), "frozen parameters: weights")
    chk.check(m.fc.weight not in opt.state, "a frozen parameter holds no state")
    # a gradient on one rank only: a zero gradient on the others, the same step everywhere
    opt = OneBitAdam(m.parameters(), lr=1e-2, freeze_step=100)
    m.unused.weight.grad = torch.ones_like(m.unused.weight) if RANK == 0 else None
    opt.step()
    chk.identical(flat(m), "a gradient on rank 0 only: weights")
    chk.check(not np.array_equal(flat(m.unused), unused), "it moves on every rank")


def groups_compared(chk: Checker) -> None:
    m = Net(1)
    groups = [{"params": m.fc.parameters(), "lr": 1e-2 * (1 + (RANK == P - 1))},
              {"params": m.out.parameters()}]
    try:
        OneBitAdam(groups, lr=1e-2)
        chk.check(P == 1, "a group's lr differing on one rank raises")
    except collectives.MismatchError as exc:
        chk.check("param groups" in str(exc) and "lr=" in str(exc), f"names the group: {exc}")
    chk.raises(lambda: OneBitAdam([{"params": m.fc.parameters(), "eps": -1.0}]),
               "param group 0: eps must", "a bad group setting is refused")
    opt = OneBitAdam(m.fc.parameters(), lr=1e-2, freeze_step=3)
    opt.timeout = DEADLINE
    train(m, opt, range(4))
    opt.add_param_group({"params": m.out.parameters(), "lr": 5e-3})  # rank 0's weights
    chk.identical(flat(m.out), "add_param_group loads rank 0's weights")
    train(m, opt, range(4, 8))
    chk.identical(np.concatenate([flat(m.fc), flat(m.out)]), "after add_param_group: weights")
    try:
        opt.add_param_group({"params": m.emb.parameters(), "lr": 1e-3 * (1 + RANK)})
        chk.check(P == 1, "add_param_group with an lr differing on one rank raises")
    except collectives.MismatchError as exc:
        chk.check("new param group" in str(exc), f"names the new group: {exc}")
        chk.check(len(opt.param_groups) == 2, "the refused group is not kept")
    train(m, opt, range(8, 10))
    chk.identical(np.concatenate([flat(m.fc), flat(m.out)]),
                  "after a refused add_param_group: weights")


def scheduler_lr(chk: Checker) -> None:
    """The lr a scheduler sets is read at every step: Adam with the same scheduler."""
    m = Net(2)
    opt = OneBitAdam(m.parameters(), lr=1e-2, freeze_step=100, compressor=("none", "sign"))
    ref = copy.deepcopy(m)
    ref_opt = torch.optim.Adam(ref.parameters(), lr=1e-2)
    scheds = [torch.optim.lr_scheduler.LambdaLR(o, lambda s: 1.0 / (1 + s))
              for o in (opt, ref_opt)]
    for step in range(6):
        for mm, o, s in ((m, opt, scheds[0]), (ref, ref_opt, scheds[1])):
            loss_of(mm, step).backward()
            if o is ref_opt:
                averaged(mm)
            o.step()
            o.zero_grad()
            s.step()
    err = float(np.abs(flat(m) - flat(ref)).max())
    chk.check(err < 1e-6, f"a scheduler's lr: Adam's weights ({err:.2e})")


def bad_gradients(chk: Checker) -> None:
    for freeze in (100, 2):  # in the warm-up, and after the freeze
        m = Net(3)
        opt = OneBitAdam(m.parameters(), lr=1e-2, freeze_step=freeze)
        opt.timeout = DEADLINE
        train(m, opt, range(3))
        before, t = flat(m), opt.t
        loss_of(m, 3).backward()
        if RANK == P - 1:
            m.fc.weight.grad.data = torch.zeros(7)
        try:
            opt.step()
            chk.check(False, f"freeze {freeze}: a gradient of another shape raises")
        except collectives.MismatchError as exc:  # the other ranks
            chk.check(RANK != P - 1 and "other rank" in str(exc), f"others: {exc}")
        except ValueError as exc:
            chk.check(RANK == P - 1 and "(7,)" in str(exc) and "(6, 6)" in str(exc),
                      f"the rank names the parameter and both shapes: {exc}")
        chk.check(np.array_equal(flat(m), before) and opt.t == t, "nothing changed")
        opt.zero_grad()
        train(m, opt, range(4, 6))
        chk.identical(flat(m), f"freeze {freeze}: the next steps go on alike")
    m = Net(4, sparse=True)
    opt = OneBitAdam([{"params": m.emb.parameters()}, {"params": m.fc.parameters()}],
                     lr=1e-2, freeze_step=100)
    opt.timeout = DEADLINE
    loss_of(m, 0).backward()
    chk.raises(opt.step, "sparse=False", "a sparse gradient is refused, naming the way out")


def non_finite(chk: Checker) -> None:
    # a finite gradient past fp16's range on one rank: Adam's step (float32 for it)
    m = Net(5)
    opt = OneBitAdam(m.parameters(), lr=1e-2, freeze_step=100)
    ref = copy.deepcopy(m)
    ref_opt = torch.optim.Adam(ref.parameters(), lr=1e-2)
    for step in range(4):
        for mm, o in ((m, opt), (ref, ref_opt)):
            loss_of(mm, step).backward()
            if step == 1 and RANK == 0:
                mm.out.bias.grad.fill_(1e6)
            if o is ref_opt:
                averaged(mm)
            o.step()
            o.zero_grad()
    err = float(np.abs(flat(m) - flat(ref)).max())
    chk.check(np.isfinite(flat(m)).all() and err < 1e-3, f"1e6 in the fp16 warm-up ({err:.2e})")
    for freeze, at in ((100, 1), (2, 4)):  # Inf in the warm-up, and after the freeze
        m = Net(6)
        opt = OneBitAdam(m.parameters(), lr=1e-2, freeze_step=freeze)
        for step in range(at + 1):
            loss_of(m, step).backward()
            if step == at and RANK == 0:
                m.fc.weight.grad[0, 0] = float("inf")
            opt.step()
            opt.zero_grad()
        bad = ~np.isfinite(flat(m.fc))
        chk.check(bool(bad.any()), f"freeze {freeze}: Inf at step {at + 1} reaches the weights")


def states_refused(chk: Checker) -> None:
    m = Net(7)
    opt = OneBitAdam(m.parameters(), lr=1e-2, freeze_step=3)
    train(m, opt, range(7))  # frozen at 3, refreshed at 6
    frozen = opt.state_dict()
    for kwargs, words in (({"freeze_step": 4}, "froze v at step 3"),
                          ({"freeze_step": 4}, "freeze_step=4"),
                          ({"freeze_step": 3, "refresh": "never"}, "refresh='doubling'")):
        chk.raises(lambda kw=kwargs: OneBitAdam(m.parameters(), **kw).load_state_dict(frozen),
                   words, f"{kwargs} refuses a state frozen at 3")
    early = OneBitAdam(m.parameters(), freeze_step=50)
    train(m, early, range(5))
    chk.raises(lambda: OneBitAdam(m.parameters(), freeze_step=4).load_state_dict(
        early.state_dict()), "would have frozen it at step 4", "unfrozen past freeze_step")
    OneBitAdam(m.parameters(), freeze_step="auto").load_state_dict(frozen)
    chk.check(True, "'auto' loads a state frozen at 3")
    states = WORLD.allgather(frozen)
    other = states[(RANK + 1) % P]
    if P > 1:
        chk.raises(lambda: OneBitAdam(m.parameters(), freeze_step=3).load_state_dict(other),
                   f"saved by rank {(RANK + 1) % P}, this is rank {RANK}",
                   "another rank's state is refused")
    old = copy.deepcopy(frozen)
    del old["onebit"]["rank"], old["onebit"]["refresh"]
    old["onebit"]["version"] = 1
    OneBitAdam(m.parameters(), freeze_step=3, refresh="never").load_state_dict(old)
    chk.check(True, "a version 1 state (no rank, never refreshed) loads")
    chk.raises(lambda: OneBitAdam(m.parameters(), freeze_step=3).load_state_dict(old),
               "refreshed it at [6]", "a version 1 state past a refresh step is refused")


def main() -> None:
    chk = Checker("onebit_refusals")
    for fn in (frozen_parameters_stay, groups_compared, scheduler_lr, bad_gradients,
               non_finite, states_refused):
        chk.run(fn.__name__, fn, chk)
    chk.finish()


if __name__ == "__main__":
    main()
