"""OpenMP's wait policy for the kernels, chosen before the OpenMP runtime loads.

libgomp's default makes a thread that has finished its share of a parallel loop spin for
milliseconds waiting for more work. On cores shared with other processes (MPI ranks, other
jobs) the spinning takes the CPU from the threads still working: on two shared cores a 1M-value
``uniform`` round trip took 25-38 ms with 2 threads against 1.1 ms with 1. Passive waiting puts
idle threads to sleep at once (1.1-1.3 ms with 2 threads). The runtime reads the setting when it
loads, so this module runs before the extension is first imported; a value already set is kept.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "passive")
