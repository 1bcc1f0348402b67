"""torchrun's rank variables gone bad on one rank (``GROUP_RANK``, ``RANK``, ``LOCAL_RANK``,
which place a rank on its host): every rank raises a ValueError at once, the bad rank's
naming the variable and its value, instead of that rank raising and the others waiting out
the timeout.

* a compressed ``collectives.allreduce`` on a gloo group (the host of each rank is agreed
  on its first call);
* ``init_process_group("compcoll")`` (the backend reads them when the group is made, and
  every rank's refusal reaches every rank); the group is made after the variable is fixed.

Run: torchrun --standalone --nproc-per-node 2 tests/torchrun/backend_env.py
"""

from __future__ import annotations

import os
from datetime import timedelta

import torch
import torch.distributed as dist

import collectives
import collectives.backend  # noqa: F401  (where torch's autoloading is off)

from torchrun_checks import Checks, P, R

BAD = [("GROUP_RANK", "x"), ("RANK", "1e3"), ("LOCAL_RANK", "-1")]
checks = Checks("torchrun backend env")
check = checks.check


def spoiled(var: str, value: str) -> dict[str, str | None]:
    """Set ``var`` to ``value`` on the last rank (RANK and LOCAL_RANK are read where
    GROUP_RANK is unset); returns what to put back."""
    names = (var, "GROUP_RANK") if var != "GROUP_RANK" else (var,)
    saved = {n: os.environ.get(n) for n in names}
    if R == P - 1:
        if var != "GROUP_RANK":
            os.environ["GROUP_RANK"] = ""
        os.environ[var] = value
    return saved


def restore(saved: dict[str, str | None]) -> None:
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def refused(exc: BaseException | None, var: str, value: str, what: str) -> None:
    text = f"{type(exc).__name__}: {exc}"
    check(isinstance(exc, ValueError), f"{what}: a ValueError, got {text}")
    if R == P - 1:
        check(f"{var}={value!r} is not a rank" in str(exc), f"{what}: names {var}: {text}")
    else:
        check(f"rank(s) [{P - 1}]" in str(exc) or f"{var}={value!r}" in str(exc),
              f"{what}: names rank {P - 1}: {text}")


def on_a_gloo_group() -> None:
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    for var, value in BAD:
        saved = spoiled(var, value)
        error = None
        try:
            collectives.allreduce(torch.ones(50_000), compressor="uniform:bits=8")
        except Exception as exc:  # noqa: BLE001 - checked below
            error = exc
        restore(saved)
        refused(error, var, value, f"gloo group, {var}")
    x = torch.ones(50_000)
    collectives.allreduce(x, out=x, compressor="uniform:bits=8")
    check(bool((x == P).all()), "the group works once the variables are fixed")
    dist.destroy_process_group()


def on_the_backend() -> None:
    for var, value in BAD:
        saved = spoiled(var, value)
        error = None
        try:
            dist.init_process_group("compcoll", rank=R, world_size=P,
                                    timeout=timedelta(seconds=60))
        except Exception as exc:  # noqa: BLE001 - checked below
            error = exc
        restore(saved)
        refused(error, var, value, f"compcoll group, {var}")
        if error is None:
            dist.destroy_process_group()
    dist.init_process_group("compcoll", timeout=timedelta(seconds=60))
    x = torch.full((50_000,), float(R + 1))
    dist.all_reduce(x)
    check(bool((x == P * (P + 1) / 2).all()), "the backend's group is made once fixed")
    dist.destroy_process_group()


def main() -> None:
    os.environ["COMPCOLL_TIMEOUT"] = "20"  # a rank left waiting fails the run in time
    on_a_gloo_group()
    on_the_backend()


if __name__ == "__main__":
    checks.guarded("env", main)
    checks.finish()
