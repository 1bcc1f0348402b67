"""The hook's per-step phases from its timeline (``collectives.ddp.overlap``)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from collectives.ddp import overlap


def rec(step, bucket, start, launched, done, **phases):
    return {"step": step, "bucket": bucket, "start": start, "launched": launched, "done": done,
            **phases}


def test_phases_are_per_step_means_and_the_wire_is_what_the_codecs_leave() -> None:
    timeline = []
    for step in range(3):
        t = 10.0 * step
        timeline += [rec(step, 0, t, t + 0.1, t + 1.0, encode_s=0.2, decode_s=0.1, copy_s=0.05),
                     rec(step, 1, t + 0.5, t + 0.6, t + 2.0, encode_s=0.3, decode_s=0.2)]
    ov = overlap(SimpleNamespace(timeline=timeline), steps=2)
    assert ov["steps"] == 2
    assert ov["hook_s"] == pytest.approx(0.2)  # 0.1 + 0.1 inside the hook
    assert ov["comm_s"] == pytest.approx(1.9)  # 0.1 -> 1.0, then 1.0 -> 2.0
    assert (ov["encode_s"], ov["decode_s"], ov["copy_s"]) == pytest.approx((0.5, 0.3, 0.05))
    assert ov["wire_s"] == pytest.approx(1.9 - 0.85)
    assert ov["exposed_s"] == pytest.approx(1.4) and ov["overlap"] == pytest.approx(0.5 / 1.9)


def test_a_timeline_without_phases_or_steps_reads_as_zero() -> None:
    empty = overlap(SimpleNamespace(timeline=[]))
    assert empty["steps"] == 0 and empty["wire_s"] == empty["encode_s"] == 0.0
    old = overlap(SimpleNamespace(timeline=[rec(0, 0, 0.0, 0.1, 0.5)]))
    assert old["encode_s"] == 0.0 and old["wire_s"] == pytest.approx(0.4)
