"""``collectives.torchwork``: a Work made from a future raises the future's error from
``wait()``, through chaining and collecting too (what the backend and FSDP hand to torch)."""

from __future__ import annotations

from datetime import timedelta

import pytest
import torch

from collectives import torchwork
from collectives.errors import TransportError


def test_wait_raises_the_error_of_the_future_with_its_type() -> None:
    fut = torch.futures.Future()
    work = torchwork.from_future(fut)
    assert not work.is_completed() and work.exception() is None
    fut.set_exception(TransportError("rank 2 died"))
    assert work.is_completed() and not work.is_success()
    with pytest.raises(TransportError, match="rank 2 died"):
        work.wait()
    with pytest.raises(TransportError):
        work.get_future().wait()
    assert isinstance(work.exception(), TransportError)


def test_a_successful_work_returns_true_and_its_value() -> None:
    work = torchwork.done([torch.ones(2)])
    assert work.wait() is True and work.is_success()
    assert torch.equal(work.get_future().value()[0], torch.ones(2))


def test_wait_with_a_deadline_raises_when_it_passes() -> None:
    work = torchwork.from_future(torch.futures.Future())
    with pytest.raises(RuntimeError, match="timed out"):
        work.wait(timedelta(milliseconds=20))


def test_then_runs_after_a_success_and_carries_either_error() -> None:
    ran = []
    fut = torch.futures.Future()
    work = torchwork.then(torchwork.from_future(fut), lambda: ran.append(1))
    fut.set_result([1])
    assert work.wait() and ran == [1] and work.get_future().value() == [1]
    failing = torchwork.then(torchwork.failed(TransportError("gone")), lambda: ran.append(2))
    with pytest.raises(TransportError, match="gone"):
        failing.wait()
    assert ran == [1]  # not run after a failure
    broken = torchwork.then(torchwork.done(None), lambda: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        broken.wait()


def test_collect_waits_for_all_and_raises_the_first_error() -> None:
    assert torchwork.collect([torchwork.done(1), torchwork.done(2)], "all").wait()
    work = torchwork.collect([torchwork.done(1), torchwork.failed(KeyError("second"))])
    with pytest.raises(KeyError, match="second"):
        work.wait()


class _NoFuture:
    """An engine work that completes only inside wait() and has no future (gloo's
    reduce-scatter)."""

    def __init__(self, error: BaseException | None = None) -> None:
        self.error, self.waited = error, 0

    def get_future(self) -> None:
        raise RuntimeError("Work::getFuture not implemented.")

    def is_completed(self) -> bool:
        return self.waited > 0

    def wait(self, timeout: object = None) -> bool:
        self.waited += 1
        if self.error is not None:
            raise self.error
        return True


def test_works_without_a_future_are_waited_and_their_errors_raised() -> None:
    ran = []
    inner = _NoFuture()
    work = torchwork.then(inner, lambda: ran.append(1))
    assert work.wait() and work.wait() and ran == [1] and inner.waited == 1
    failing = torchwork.collect([_NoFuture(), _NoFuture(RuntimeError("Connection closed"))])
    for _ in range(2):  # every wait raises, not only the first
        with pytest.raises(RuntimeError, match="Connection closed"):
            failing.wait()
    with pytest.raises(RuntimeError, match="Connection closed"):
        failing.get_future().wait()
