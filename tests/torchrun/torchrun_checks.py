"""What every script under torchrun shares: per-rank checks, and a report that reaches
torchrun's exit code.

Each rank keeps its own failures and prints them with the summary line
``NAME: np=P cases=N FAILURES F`` that tests/mpirun.py ``passed`` reads; the exit status is
the rank's verdict. The process leaves without interpreter finalization: gloo's worker
threads may still hold finished work objects whose tensors get released after Python is torn
down, and torch then aborts the process ("terminate called without an active exception"), an
upstream teardown race that has nothing to do with what was checked.
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable
from typing import Any, NoReturn

R, P = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])


class Checks:
    """This rank's checks and failures."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.cases = 0
        self.failures: list[str] = []

    def check(self, cond: bool, what: str) -> None:
        self.cases += 1
        if not cond:
            self.failures.append(f"rank {R}: {what}")

    def guarded(self, what: str, fn: Callable[[], object]) -> None:
        """Run ``fn``; an exception counts as a failure of ``what``, with its traceback."""
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - reported as a failure of ``what``
            self.check(False, f"{what}: {type(exc).__name__}: {exc}\n"
                              f"{traceback.format_exc(limit=6)}")

    def finish(self) -> NoReturn:
        for f in self.failures:
            print("FAIL", f, flush=True)
        print(f"{self.name}: np={P} cases={self.cases} FAILURES {len(self.failures)}",
              flush=True)
        sys.stderr.flush()
        os._exit(1 if self.failures else 0)


def train(model: Any, data: tuple[Any, Any], steps: int, batch: int) -> list[float]:
    """Adam (3e-3) on the same batches on every run: each rank its slice of a seeded draw of
    ``P * batch`` training examples per step. Returns the per-step losses."""
    import torch

    opt = torch.optim.Adam(model.parameters(), 3e-3)
    x, y = data
    g = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(steps):
        idx = torch.randint(0, len(x), (P * batch,), generator=g)[R * batch:(R + 1) * batch]
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x[idx]), y[idx])
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses
