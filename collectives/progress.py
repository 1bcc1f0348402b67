"""Drives algorithm generators: blocking (``wait``) or a step at a time (``test``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .algorithms.common import Steps
from .config import check_timeout
from .transport.base import Request, test_all, wait_all


class Handle:
    """A collective in flight, returned by ``iallreduce`` and friends.

    ``test()`` makes whatever progress is possible without blocking and says whether the
    collective has finished; ``wait()`` blocks (with the deadline) and returns the result.
    Several handles may be in flight at once; each uses its own message tag. After a
    ``CollectiveTimeout`` (or an engine error) the communicator is unusable: this handle and
    every later call on it raise ``CommunicatorUnusable`` (the abandoned buffers stay alive).

    Example::

        >>> import numpy as np, collectives
        >>> h = collectives.iallreduce(np.ones(1 << 16, np.float32))
        >>> while not h.test():
        ...     pass  # overlap other work here
        >>> assert h.wait()[0] == collectives.as_communicator().size
    """

    def __init__(self, steps: Steps, finish: Callable[[], Any], collective: str,
                 timeout: float | None) -> None:
        self._steps = steps
        self._finish = finish
        self._collective = collective
        self._timeout = check_timeout(timeout)
        self._pending: list[Request] = []
        self._done = False
        self._result: Any = None
        self._advance(block=False)  # post the first messages right away

    def _advance(self, block: bool) -> bool:
        while True:
            if self._pending:
                if block:
                    wait_all(self._pending, collective=self._collective, timeout=self._timeout)
                elif not test_all(self._pending):
                    return False
            try:
                self._pending = next(self._steps) or []
            except StopIteration:
                self._pending = []
                self._result = self._finish()
                self._done = True
                return True

    def test(self) -> bool:
        """Progress without blocking; True once the result is ready."""
        return self._done or self._advance(block=False)

    def wait(self) -> Any:
        """Block until done (raising CollectiveTimeout past the deadline); return the result."""
        if not self._done:
            self._advance(block=True)
        return self._result

    @property
    def done(self) -> bool:
        return self._done

