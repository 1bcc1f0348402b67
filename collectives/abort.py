"""Abort the whole job when one rank dies of an unhandled exception.

Without this, the other ranks sit in their next collective until the deadline. Like
``python -m mpi4py``, the excepthook prints the traceback and then aborts every rank.
Opt out with COMPCOLL_ABORT_ON_ERROR=0.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from collections.abc import Callable
from types import TracebackType

_installed = False

def install(abort: Callable[[int], None]) -> None:
    """Install an excepthook that prints the traceback, then calls ``abort(1)``."""
    global _installed
    if _installed or os.environ.get("COMPCOLL_ABORT_ON_ERROR", "1").lower() in ("0", "false", "no"):
        return

    def hook(tp: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
        # One write, then a moment for the launcher to forward it before the abort kills us.
        text = "".join(traceback.format_exception(tp, value, tb))
        sys.stderr.write(text + "compcoll: unhandled exception on this rank; aborting all ranks\n")
        sys.stderr.flush()
        time.sleep(0.2)
        abort(1)

    sys.excepthook = hook
    _installed = True
