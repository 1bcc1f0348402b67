"""Every ``Example::`` in collectives' public docstrings runs as written on every rank.

Run: mpiexec -n 2 python tests/mpi/examples.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import collectives  # noqa: E402

from common import Checker  # noqa: E402
from examples_util import example, public, run  # noqa: E402

chk = Checker("docstring examples")
for name, obj in sorted(public(collectives).items()):
    code = example(obj)
    if code is not None:
        chk.run(name, run, code)
        chk.check(True, name)
chk.finish()
