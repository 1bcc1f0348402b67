"""One collective at a time on a thread of its own, so that training goes on meanwhile.

The calls it runs block (with their deadline) inside the thread; the caller learns of a
failure at its next :meth:`Background.failure` or :meth:`Background.wait`, on every rank
whose call failed or timed out. Collectives started here run in the order they were given on
every rank (one at a time), as the ranks' own order requires.
"""

from __future__ import annotations

import threading
from collections.abc import Callable


class Background:
    """Run ``fn()`` on a daemon thread; :meth:`wait` joins it and raises what it raised.

    Example::

        >>> bg = Background(lambda: None, "sync 0")
        >>> bg.wait()
        >>> bg.done()
        True
    """

    def __init__(self, fn: Callable[[], None], what: str) -> None:
        self.what = what
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(fn,), daemon=True,
                                        name=f"compcoll {what}")
        self._thread.start()

    def _run(self, fn: Callable[[], None]) -> None:
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller by wait()
            self._error = exc

    def done(self) -> bool:
        """Whether the call has ended (finished or failed)."""
        return not self._thread.is_alive()

    def failure(self) -> BaseException | None:
        """What the call raised, once it has ended (None while it runs or if it succeeded)."""
        return self._error if self.done() else None

    def wait(self) -> None:
        """Block until the call ends; raise what it raised. The call's own deadline bounds
        the wait: a collective that cannot complete raises ``CollectiveTimeout`` in it."""
        self._thread.join()
        if self._error is not None:
            raise self._error
