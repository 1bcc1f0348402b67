"""torch.distributed ``Work`` objects made from futures: what the compcoll backend's
collectives and the FSDP2 reduce-scatter hand back to torch.

A :class:`FutureWork` is done when its future is, and an error the future holds is raised
from ``wait()`` (and from ``get_future().wait()``), on the caller's thread: a collective that
failed on a background thread (a dead peer, a timeout, a refused argument) fails the call
that waits for it, whether that is ``dist.all_reduce(t)`` or ``work.wait()`` after
``async_op=True``. torch's own ``_create_work_from_future`` is not used for this: its
``wait()`` returns True whatever the future holds.

Example::

    >>> fut = torch.futures.Future()
    >>> work = from_future(fut)
    >>> fut.set_exception(RuntimeError("peer 2 died"))
    >>> work.wait()  # raises RuntimeError: peer 2 died
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from .config import defaults
from .transport import engine_of

__all__ = ["FutureWork", "WaitedWork", "backend_timeout", "collect", "deadline", "done",
           "failed", "from_future", "group_deadline", "comm_deadline", "then"]


class FutureWork(dist.Work):
    """A ``Work`` completed by a ``torch.futures.Future``; ``wait()`` re-raises its error."""

    def __init__(self, fut: torch.futures.Future) -> None:
        super().__init__()
        self._fut = fut

    def wait(self, timeout: timedelta | None = None) -> bool:
        """Block until the future is done (no deadline when ``timeout`` is None or zero, as
        for torch's own works); raise the future's error, or RuntimeError past ``timeout``."""
        seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else timeout
        if seconds:
            deadline = time.monotonic() + seconds
            pause = 1e-4
            while not self._fut.done():
                if time.monotonic() > deadline:
                    raise RuntimeError(f"compcoll work timed out after {seconds:g} s")
                time.sleep(pause)
                pause = min(pause * 2, 0.01)
        self._fut.wait()  # raises the future's error, with its own type
        return True

    def is_completed(self) -> bool:
        return self._fut.done()

    def is_success(self) -> bool:
        return self._fut.done() and self.exception() is None

    def exception(self) -> BaseException | None:
        """The error the work finished with (None while running or after a success)."""
        if not self._fut.done():
            return None
        try:
            self._fut.value()
        except BaseException as exc:  # noqa: BLE001 - returned, not swallowed
            return exc
        return None

    def get_future(self) -> torch.futures.Future:
        return self._fut

    def result(self) -> Any:
        """The future's value (its error raised) once done."""
        return self._fut.wait()


def from_future(fut: torch.futures.Future) -> FutureWork:
    """A ``Work`` that is done when ``fut`` is, with ``fut``'s value, or its error raised."""
    return FutureWork(fut)


def done(value: Any = None) -> FutureWork:
    """A ``Work`` already completed with ``value``."""
    fut: torch.futures.Future[Any] = torch.futures.Future()
    fut.set_result(value)
    return FutureWork(fut)


def failed(exc: BaseException) -> FutureWork:
    """A ``Work`` already finished with the error ``exc`` (raised by ``wait()``)."""
    fut: torch.futures.Future[Any] = torch.futures.Future()
    fut.set_exception(exc)
    return FutureWork(fut)


def then(work: Any, after: Callable[[], Any]) -> dist.Work:
    """A ``Work`` done once ``work`` is done and ``after()`` has run (its value is
    ``work``'s). An error of ``work`` (then ``after`` does not run) or of ``after`` is the
    new work's error, with its own type (torch's ``Future.then`` would wrap it)."""
    fut = _future(work)
    if fut is None:
        return WaitedWork([work], after)
    out: torch.futures.Future[Any] = torch.futures.Future()

    def finish(f: torch.futures.Future) -> None:
        try:
            value = f.value()
            after()
        except BaseException as exc:  # noqa: BLE001 - handed to whoever waits
            out.set_exception(exc)
        else:
            out.set_result(value)

    fut.add_done_callback(finish)
    return FutureWork(out)


def collect(works: Sequence[Any], value: Any = None) -> dist.Work:
    """A ``Work`` done once every one of ``works`` is, with ``value``; the first error among
    them (in order) is its error."""
    futures = [_future(w) for w in works]
    if any(f is None for f in futures):
        return WaitedWork(list(works), None, value)
    out: torch.futures.Future[Any] = torch.futures.Future()

    def finish(_: Any) -> None:
        try:
            for f in futures:
                f.value()  # type: ignore[union-attr]
        except BaseException as exc:  # noqa: BLE001 - handed to whoever waits
            out.set_exception(exc)
        else:
            out.set_result(value)

    if not futures:
        out.set_result(value)
    else:
        torch.futures.collect_all(futures).add_done_callback(finish)  # type: ignore[arg-type]
    return FutureWork(out)


class WaitedWork(dist.Work):
    """Works of an engine that completes some of them only inside ``wait()`` and gives them
    no future (gloo's reduce-scatter): waited in order, then ``after()``; an error of any is
    raised by this ``wait()``, and by every later one."""

    def __init__(self, works: list[Any], after: Callable[[], Any] | None = None,
                 value: Any = None) -> None:
        super().__init__()
        self._works, self._after, self._value = works, after, value
        self._lock = threading.Lock()
        self._done = False
        self._error: BaseException | None = None

    def wait(self, timeout: timedelta | None = None) -> bool:
        with self._lock:
            if not self._done:
                try:
                    for w in self._works:
                        if timeout:
                            w.wait(timeout)
                        else:
                            w.wait()
                    if self._after is not None:
                        self._after()
                except BaseException as exc:  # noqa: BLE001 - raised below, and again later
                    self._error = exc
                self._done, self._works = True, []
        if self._error is not None:
            raise self._error
        return True

    def is_completed(self) -> bool:
        return self._done or all(w.is_completed() for w in self._works)

    def exception(self) -> BaseException | None:
        return self._error

    def get_future(self) -> torch.futures.Future:
        """A future done once this work is: waits for it first (the engine gives none)."""
        out: torch.futures.Future[Any] = torch.futures.Future()
        try:
            self.wait()
        except BaseException as exc:  # noqa: BLE001 - handed over in the future
            out.set_exception(exc)
        else:
            out.set_result(self._value)
        return out


def _future(work: Any) -> torch.futures.Future | None:
    """``work``'s future, or None where the engine has none for it."""
    try:
        return work.get_future()
    except RuntimeError:
        return None


def deadline(group_timeout: timedelta) -> float | None:
    """Seconds each wait of a compressed call may go without progress: the group's timeout
    (``init_process_group(timeout=...)``, as long as gloo would wait), or None, which is
    ``collectives.defaults.timeout``, where ``COMPCOLL_TIMEOUT`` is set."""
    seconds = group_timeout.total_seconds()
    if defaults.chosen("timeout") or not 0 < seconds < float("inf"):
        return None
    return seconds


def group_deadline(group: Any) -> float | None:
    """:func:`deadline` for a torch.distributed process group: its own timeout (the one it
    was made with, gloo's or NCCL's default otherwise, this backend's too), or None (the
    defaults) where ``COMPCOLL_TIMEOUT`` or ``collectives.defaults.timeout`` was chosen or the
    group does not say."""
    for device in ("cuda", "cpu"):
        wait = backend_timeout(group, device)
        if wait is not None:
            return deadline(wait)
    return None


def backend_timeout(group: Any, device: str) -> timedelta | None:
    """The timeout of ``group``'s backend for ``device`` (gloo's, NCCL's; the compcoll
    backend's inner gloo group has its timeout), or None where it has no backend there or its
    backend keeps no timeout.

    torch 2.13 keeps a group's timeout (``init_process_group(timeout=...)``, ``new_group``)
    only in its backend's options and offers no public way to read it (``set_timeout`` only
    writes it, ``get_backend_config`` names the backends alone), so this reads the backend
    (``_get_backend``) and its options' ``_timeout``: the two private names kept here.

    Example::

        >>> from datetime import timedelta
        >>> import torch.distributed as dist
        >>> from collectives.torchwork import backend_timeout
        >>> dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1,
        ...                         timeout=timedelta(seconds=45))
        >>> assert backend_timeout(dist.group.WORLD, "cpu") == timedelta(seconds=45)
        >>> dist.destroy_process_group()
    """
    try:
        backend = group._get_backend(torch.device(device))
    except (RuntimeError, AttributeError, ValueError):
        return None
    options = getattr(backend, "options", None)
    wait = options._timeout if hasattr(options, "_timeout") else None
    return wait if isinstance(wait, timedelta) else None


def comm_deadline(comm: Any) -> float | None:
    """:func:`group_deadline` of the torch.distributed group a ``collectives.Communicator``
    wraps (what an object that takes no timeout of its own, as torch's optimizers take none,
    waits), or None (the defaults) on an MPI communicator."""
    group = engine_of(comm)
    return group_deadline(group) if isinstance(group, dist.ProcessGroup) else None
