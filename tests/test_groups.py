"""Bucket groups: fused copies, span groups, residual pieces (no process group needed)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import compressors  # noqa: E402
from collectives.ddp.groups import (  # noqa: E402
    MAX_HOLE_SHARE,
    MAX_SLOT_SHARE,
    Group,
    with_span,
    with_zero_slots,
)


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


def exact_zero(spec: str) -> bool:
    return compressors.get(spec).capabilities.exact_zero


def test_which_compressors_have_an_exact_zero() -> None:
    assert {s: exact_zero(s) for s in ("uniform:bits=8", "uniform:bits=4", "uniform:bits=2",
                                       "sign", "fp16", "none")} == {
        "uniform:bits=8": True, "uniform:bits=4": True, "uniform:bits=2": False,
        "sign": False, "fp16": False, "none": False}


# canonical order (reverse registration): w2, b, w1; the bias b lies between the weights
CANON = [("w2", 490), ("b", 10), ("w1", 500)]


def eight_bit(ranges: dict[str, tuple[int, int]]) -> list[Group]:
    return [Group("uniform:bits=8", "w2+1", [("w2", 490), ("w1", 500)],
                  [ranges["w2"], ranges["w1"]]),
            Group("fp16", "b", [("b", 10)], [ranges["b"]])]


def test_an_8_bit_group_in_the_canonical_layout_is_sent_in_place_with_zero_slots() -> None:
    span, bias = with_zero_slots(eight_bit({"w2": (0, 490), "b": (490, 500),
                                            "w1": (500, 1000)}), CANON, exact_zero)
    assert span.holes == [(490, 500)] and span.numel == 1000 and bias.copy
    buf = torch.arange(1000, dtype=torch.float32)
    views = {id(g): g.view(buf) for g in sorted((span, bias), key=lambda g: bool(g.holes))}
    assert views[id(bias)].tolist() == list(range(490, 500))
    assert views[id(span)].data_ptr() == buf.data_ptr() and not buf[490:500].any()
    assert span.pieces(np.arange(1000, dtype=np.float32))["w1"][0] == 500


def test_elsewhere_the_same_layout_is_copied_so_blocks_see_the_same_vector() -> None:
    # DDP's first bucketing put w1 first: same members, same zero slots, in a fused copy
    groups = with_zero_slots(eight_bit({"w1": (0, 500), "w2": (500, 990), "b": (990, 1000)}),
                             CANON, exact_zero)
    fused = groups[0]
    assert fused.pads == (10, 0) and not fused.holes and fused.numel == 1000
    buf = torch.arange(1000, dtype=torch.float32)
    x = fused.view(buf)
    want = torch.cat([torch.arange(500, 990), torch.zeros(10), torch.arange(0, 500)])
    assert torch.equal(x, want.float())  # the span's vector above, laid out the same
    x.mul_(2)
    fused.scatter(buf, x)
    assert torch.equal(buf[:990], torch.arange(990, dtype=torch.float32) * 2)
    res = np.arange(1000, dtype=np.float32)
    back = fused.assemble(fused.pieces(res), np.float32)
    assert np.array_equal(back[:490], res[:490]) and not back[490:500].any()


def test_no_zero_slots_past_their_share_or_for_other_compressors() -> None:
    wide = [("w2", 450), ("b", 50), ("w1", 500)]
    assert 50 / 1000 > MAX_SLOT_SHARE
    groups = [Group("uniform:bits=8", "w2+1", [("w2", 450), ("w1", 500)],
                    [(0, 450), (500, 1000)]), Group("fp16", "b", [("b", 50)], [(450, 500)])]
    assert with_zero_slots(groups, wide, exact_zero) == groups
    two_bit = [Group("uniform:bits=2", g.name, g.members, g.ranges) if g.spec != "fp16" else g
               for g in eight_bit({"w2": (0, 490), "b": (490, 500), "w1": (500, 1000)})]
    assert with_zero_slots(two_bit, CANON, exact_zero) == two_bit


def test_a_zeroed_hole_stays_zero_through_the_quantizer_and_its_residual() -> None:
    rng = np.random.default_rng(3)
    for bits in (4, 8):
        comp = compressors.get(f"uniform:bits={bits}")
        x = rng.standard_normal(3000).astype(np.float32) + 0.5
        x[1000:1040] = 0.0  # a hole, zeroed in the span
        res = rng.standard_normal(3000).astype(np.float32) * 1e-3
        res[1000:1040] = 0.0  # a hole's residual is zero from the start (assembled as zeros)
        for step in range(3):
            payload = comp.compress_feedback(x, res, name="span", step=step, rank=0)
            y = comp.decompress(payload)
            assert not y[1000:1040].any() and not res[1000:1040].any(), bits
