"""Waiting on requests with a deadline; a failed wait makes their communicators unusable."""

from __future__ import annotations

import os
import time
from typing import Any, Protocol

from ..config import resolve_timeout
from ..errors import CollectiveTimeout, CommunicationError


class Request(Protocol):
    """What waiting reads of a request (``transport.base.Request``, written on this module)."""

    owner: Any  # its Communicator (check_usable, fail), or None
    what: str
    peer: int | None
    blocking: bool

    def test(self) -> bool: ...

    def block(self, seconds: float) -> bool: ...

#: Polling: a wait spins on the engine for its first ``COMPCOLL_POLL_SPINS`` polls, then
#: yields the core until poll ``COMPCOLL_POLL_YIELDS``, then sleeps with back-off (long waits).
POLL_DEFAULTS = {"COMPCOLL_POLL_SPINS": 32, "COMPCOLL_POLL_YIELDS": 2000}
_poll: tuple[int, int] | None = None  # (spins, yields), once read


def poll_settings() -> tuple[int, int]:
    """(spins, yields) of a wait's polling (see ``POLL_DEFAULTS``), each a whole number >= 0
    read from its environment variable on first use, never at import (``import torch`` loads
    compcoll's backend entry point): a bad value raises ValueError naming the variable when a
    communicator is created, and every call until it is fixed."""
    global _poll
    if _poll is None:
        values = []
        for env, default in POLL_DEFAULTS.items():
            raw = os.environ.get(env, "").strip()
            if raw and not (raw.isascii() and raw.isdigit()):
                raise ValueError(f"{env}={os.environ[env]!r}: use a whole number >= 0 (polls "
                                 f"of a wait; unset, {default})")
            values.append(int(raw) if raw else default)
        _poll = (values[0], values[1])
    return _poll


def wait_all(requests: list[Request], *, collective: str, timeout: float | None = None) -> None:
    """Wait for every request, raising CollectiveTimeout if one makes no progress in time.

    Polls with a short spin, then sched_yield (a peer rank sharing the core gets to run at
    once), then an exponential sleep back-off capped at 0.5 ms for long waits. A timeout or an
    engine error leaves the requests' communicators unusable (see ``Communicator.fail``).
    """
    seconds = resolve_timeout(timeout)
    _check_owners(requests)
    try:
        _wait(requests, collective, seconds)
    except CommunicationError as exc:
        _fail_owners(requests, exc)
        raise


def test_all(requests: list[Request]) -> bool:
    """Drive progress on every request without blocking; True when all have completed."""
    _check_owners(requests)
    try:
        return all([r.test() for r in requests])  # a list: test every one, not up to the first
    except CommunicationError as exc:
        _fail_owners(requests, exc)
        raise


def _owners(requests: list[Request]) -> list[Any]:
    first = requests[0].owner if requests else None
    if all(r.owner is first for r in requests):  # the usual case: one communicator
        return [] if first is None else [first]
    return list({id(r.owner): r.owner for r in requests if r.owner is not None}.values())


def _check_owners(requests: list[Request]) -> None:
    for owner in _owners(requests):
        owner.check_usable()


def _fail_owners(requests: list[Request], cause: CommunicationError) -> None:
    for owner in _owners(requests):
        owner.fail(cause)


def _wait(requests: list[Request], collective: str, timeout: float) -> None:
    pending = [r for r in requests if not r.test()]
    if not pending:
        return
    deadline = time.monotonic() + timeout
    most_spins, most_yields = poll_settings()
    spins, sleep = 0, 2e-6
    while pending:
        if pending[0].blocking:
            r = pending[0]
            if not r.block(max(deadline - time.monotonic(), 1e-3)):
                raise CollectiveTimeout(collective, r.what, r.peer, timeout)
            pending.pop(0)
            continue
        pending = [r for r in pending if not r.test()]
        if not pending:
            return
        spins += 1
        if spins % 16 == 0 and time.monotonic() > deadline:
            r = pending[0]
            raise CollectiveTimeout(collective, r.what, r.peer, timeout)
        if spins > most_spins:
            if spins > most_yields:
                time.sleep(sleep)
                sleep = min(sleep * 2, 5e-4)
            else:
                os.sched_yield()  # lets a peer rank sharing this core run, without a timer
