"""Bucket groups: fused copies, span groups, residual pieces (no process group needed)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from collectives.ddp.groups import MAX_HOLE_SHARE, Group, with_span  # noqa: E402


def sparse(spec: str) -> bool:
    return spec.startswith("topk")


def bucket_groups() -> list[Group]:
    # bucket of 100: a [0,40) topk, b [40,45) none, c [45,90) topk, d [90,100) uniform
    return [Group("topk", "a+1", [("a", 40), ("c", 45)], [(0, 40), (45, 90)]),
            Group("none", "b", [("b", 5)], [(40, 45)]),
            Group("uniform", "d", [("d", 10)], [(90, 100)])]


def test_span_group_goes_first_and_copies_what_lies_inside() -> None:
    out = with_span(bucket_groups(), sparse)
    span, b, d = out
    assert span.name == "a+1~span" and span.holes == [(40, 45)] and span.numel == 90
    assert b.copy and not b.contiguous  # inside the span: copied, never a view
    assert not d.copy and d.contiguous  # outside: still a view


def test_span_send_in_place_and_holes_come_back() -> None:
    buf = torch.arange(100, dtype=torch.float32)
    span, b, d = with_span(bucket_groups(), sparse)
    views = {id(g): g.view(buf) for g in sorted((span, b, d), key=lambda g: bool(g.holes))}
    xb, xs = views[id(b)], views[id(span)]
    assert xb.tolist() == [40, 41, 42, 43, 44]  # copied before the span zeroed it
    assert xs.data_ptr() == buf.data_ptr() and not buf[40:45].any()
    xs.mul_(2)  # the span's collective writes all of it, holes included
    xb.add_(1000)
    span.scatter(buf, xs)
    b.scatter(buf, xb)  # after the span: the hole gets its own result
    want = torch.arange(100, dtype=torch.float32) * 2
    want[40:45] = torch.arange(40, 45) + 1000
    want[90:] = torch.arange(90, 100)  # d untouched here
    assert torch.equal(buf, want)


def test_residual_pieces_round_trip_through_both_layouts() -> None:
    fused = bucket_groups()[0]
    span = with_span(bucket_groups(), sparse)[0]
    res = np.arange(90, dtype=np.float32)  # span layout: a at 0, hole 40..45, c at 45
    pieces = span.pieces(res)
    assert pieces["a"].tolist() == list(range(40)) and pieces["c"].tolist() == list(range(45, 90))
    back = fused.assemble(dict(pieces), np.float32)  # fused layout: a then c
    assert back.tolist() == list(range(40)) + list(range(45, 90))
    again = span.assemble(fused.pieces(back), np.float32)
    assert np.array_equal(again[:40], res[:40]) and np.array_equal(again[45:], res[45:])
    assert not again[40:45].any()  # nothing kept for the hole
    assert span.assemble({"x": np.ones(3)}, np.float32) is None


def test_no_span_for_big_holes_dense_compressors_or_shaped_groups() -> None:
    assert with_span(bucket_groups(), lambda s: False) == bucket_groups()
    big = [Group("topk", "a+1", [("a", 10), ("c", 10)], [(0, 10), (40, 50)]),
           Group("none", "b", [("b", 30)], [(10, 40)])]
    assert 30 / 50 > MAX_HOLE_SHARE and with_span(big, sparse) == big
    adjacent = [Group("topk", "a+1", [("a", 10), ("c", 10)], [(0, 10), (10, 20)])]
    assert with_span(adjacent, sparse) == adjacent  # already a view


def test_padding_between_gradients_is_zeroed_too() -> None:
    groups = [Group("topk", "a+1", [("a", 40), ("c", 40)], [(0, 40), (50, 90)]),
              Group("none", "b", [("b", 5)], [(40, 45)])]
    span = with_span(groups, sparse)[0]
    assert span.holes == [(40, 45), (45, 50)]
    buf = torch.ones(90)
    span.view(buf)
    assert not buf[40:50].any() and buf[:40].all() and buf[50:].all()
