"""A peer that dies while DiLoCo's sync is exchanged in the background, under torchrun on 3
ranks over gloo (the group's timeout 10 s).

Every rank trains with ``sync_every=2``: each sync is exchanged on its own thread while the
next two steps run, and lands two steps after it was sent. Rank 2 SIGKILLs itself right after
step 4, which landed the first sync and sent the second (its payload, past the first sync's
comparison of the call).
The survivors must raise from a ``step()`` (at the latest the landing one, within the
deadline), never land an outer step that rank 2 did not take, and never hang. Rank 2 may
still finish the small second exchange on its thread before the signal lands (a loaded
machine schedules the main thread late); its part then reached every rank, and that sync may
land: the survivors then raise from the third. Never a later one.

Run: torchrun --standalone --nproc-per-node 3 tests/torchrun/diloco_dead_peer.py
"""

from __future__ import annotations

import os
import signal
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from collectives.optim import DiLoCo

from torchrun_checks import Checks, P, R

TIMEOUT = 10.0
checks = Checks("torchrun diloco dead peer")
check = checks.check


def main() -> None:
    dist.init_process_group("gloo", timeout=timedelta(seconds=TIMEOUT))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.Tanh(),
                                torch.nn.Linear(256, 64))
    opt = DiLoCo(torch.optim.SGD(model.parameters(), lr=0.01), model, sync_every=2,
                 compressor="uniform:bits=8")
    check(opt.timeout == TIMEOUT, f"waits as long as the group ({opt.timeout})")
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # report first
    t0 = None
    try:
        for step in range(8):
            x = torch.randn(16, 64)
            model(x).square().mean().backward()
            opt.step()
            opt.zero_grad()
            if step == 3:  # the sync of step 4 is in flight
                if R == P - 1:
                    os.kill(os.getpid(), signal.SIGKILL)
                t0 = time.monotonic()
        check(False, f"8 steps returned although rank {P - 1} died mid-sync "
                     f"(syncs landed: {opt.syncs})")
    except Exception as exc:  # noqa: BLE001 - any error is right; landing is wrong
        waited = time.monotonic() - (t0 or time.monotonic())
        check(opt.syncs in (1, 2), f"no outer step landed without rank {P - 1} ({opt.syncs})")
        check(waited < 3 * TIMEOUT, f"raised {waited:.1f} s after the sync was sent")
        print(f"rank {R} raised {type(exc).__name__} after {waited:.1f} s: {str(exc)[:200]}",
              flush=True)


if __name__ == "__main__":
    checks.guarded("diloco dead peer", main)
    checks.finish()
