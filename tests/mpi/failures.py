"""Failure modes: a rank that never arrives, a rank that raises, a rank killed mid-collective
(also mid two-level collective, on emulated hosts).

Run: mpiexec -n P python tests/mpi/failures.py MODE  (MODE: timeout | raise | kill |
kill-two-level | kill-two-level-compressed: on hosts of two ranks, P = 4)
"""

from __future__ import annotations

import os
import signal
import sys
import time

import numpy as np

import collectives
from collectives import CollectiveTimeout

from common import WORLD

P, R = WORLD.size, WORLD.rank
mode = sys.argv[1]

if mode == "timeout":
    # Rank 1 stays away; the others must fail within the deadline, naming what they waited for.
    if R == 1:
        time.sleep(6)
        print("LATE rank 1 done", flush=True)
        os._exit(0)
    t0 = time.monotonic()
    try:
        collectives.allreduce(np.ones(1 << 16, np.float32), algorithm="ring", timeout=2.0,
                              validate=False)
        print(f"rank {R}: NO TIMEOUT", flush=True)
        os._exit(3)
    except CollectiveTimeout as exc:
        print(f"rank {R}: TIMEOUT after {time.monotonic() - t0:.1f}s: {exc}", flush=True)
        time.sleep(max(0.0, 7.0 - (time.monotonic() - t0)))  # outlive rank 1: no early cleanup
        os._exit(0)
elif mode == "raise":
    # Rank 1 dies of an exception; the excepthook must abort the job, not leave others blocked.
    collectives.allreduce(np.ones(10, np.float32))  # installs the hook with the transport
    if R == 1:
        raise RuntimeError("deliberate failure on rank 1")
    collectives.allreduce(np.ones(10, np.float32), timeout=120)
    print(f"rank {R}: finished without rank 1?", flush=True)
elif mode == "kill":
    # Rank 1 is SIGKILLed in the middle of a large allreduce.
    x = np.ones(8 << 20, np.float32)
    collectives.allreduce(np.ones(10, np.float32))
    if R == 1:
        import threading

        threading.Timer(0.05, lambda: os.kill(os.getpid(), signal.SIGKILL)).start()
    for _ in range(50):
        collectives.allreduce(x, algorithm="ring", timeout=20, validate=False)
    print(f"rank {R}: survived the loop", flush=True)
elif mode in ("kill-two-level", "kill-two-level-compressed"):
    # Hosts of two ranks (COMPCOLL_HOST); the last rank is SIGKILLed in the middle of
    # two-level allreduces: the ranks of its host and of the other host must all fail.
    os.environ["COMPCOLL_HOST"] = f"failures/host{R // 2}"
    x = np.ones(8 << 20, np.float32)
    kw = (dict(compressor="uniform:bits=8", hierarchy="two_level")
          if mode.endswith("compressed") else dict(algorithm="two_level"))
    collectives.allreduce(np.ones(1 << 12, np.float32), **kw)  # topology, sub-communicators
    if R == P - 1:
        import threading

        threading.Timer(0.05, lambda: os.kill(os.getpid(), signal.SIGKILL)).start()
    for _ in range(50):
        collectives.allreduce(x, timeout=20, validate=False, **kw)
    print(f"rank {R}: survived the loop", flush=True)
else:
    sys.exit(f"unknown mode {mode!r}")
