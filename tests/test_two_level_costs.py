"""The cost model's two link classes with pinned parameters (no timing of this machine): the
two-level formulas written out by hand, auto's choice between flat and two-level, the
two-level compressed prices, and the parameters' backward-compatible shape."""

from __future__ import annotations

import dataclasses
import math

import pytest

from collectives import costmodel, pricing
from collectives.algorithms import two_level
from collectives.costparams import CostParams, Link

MB = 1 << 20
SEG = 1 << 40  # one message per block: the formulas below leave segments out
INTRA = Link(1e-6, 0.1e-9)  # shared memory: ~10 GB/s
NIC = Link(20e-6, 0.8e-9)  # ~10 Gbit/s per host
G = 0.1e-9

rates = pricing.SchemeLoad.of_rates

def test_the_flat_parameters_keep_their_shape() -> None:
    c = CostParams(1e-5, 1e-9, 2e-10)
    assert (c.intra, c.cross, c.hosts) == (None, None, ())
    assert dataclasses.asdict(c) == {"alpha": 1e-5, "beta": 1e-9, "gamma": 2e-10}
    assert c == CostParams(alpha=1e-5, beta=1e-9, gamma=2e-10) and hash(c) == hash(
        CostParams(1e-5, 1e-9, 2e-10))
    assert repr(c) == "CostParams(alpha=1e-05, beta=1e-09, gamma=2e-10)"
    h = CostParams(1e-5, 1e-9, 2e-10, intra=INTRA, hosts=(2, 2))
    assert h != c and dataclasses.asdict(h) == dataclasses.asdict(c)  # a saved fit: flat
    assert "intra=Link(" in repr(h) and "hosts=(2, 2)" in repr(h)
    with pytest.raises(dataclasses.FrozenInstanceError):
        h.hosts = (4,)  # type: ignore[misc]
    for bad in (dict(intra=Link(0.0, 1.0), hosts=(2, 0)), dict(alpha=-1.0)):
        with pytest.raises(ValueError, match="hosts|alpha"):
            CostParams(**{"alpha": 1.0, "beta": 1.0, "gamma": 1.0, **bad})
    with pytest.raises(ValueError, match="beta"):
        Link(1.0, float("nan"))


def test_layouts_and_the_classes_seen_alone() -> None:
    c = CostParams(1.0, 2.0, 3.0, intra=Link(4.0, 5.0), cross=Link(6.0, 7.0), hosts=(3, 3))
    assert c.layout(6) == (3, 3) and c.layout(7) == (3, 3, 1) and c.layout(9) == (3, 3, 3)
    assert CostParams(1.0, 2.0, 3.0).layout(5) == (5,)
    assert c.on("intra") == CostParams(4.0, 5.0, 3.0, intra=Link(4.0, 5.0))
    assert c.on("cross", (1, 1)) == CostParams(6.0, 7.0, 3.0, cross=Link(6.0, 7.0), hosts=(1, 1))
    assert CostParams(1.0, 2.0, 3.0).on("cross") == CostParams(1.0, 2.0, 3.0,
                                                               cross=Link(1.0, 2.0))


def test_hosts_sharing_a_nic_share_it_across_hosts_but_not_in_a_flat_ring() -> None:
    c = CostParams.of_hosts(INTRA, NIC, G, (4, 4))
    assert c.cross == Link(NIC.alpha, 4 * NIC.beta)  # 4 local ranks cross at once
    assert (c.alpha, c.beta) == (NIC.alpha, NIC.beta)  # a contiguous ring: one flow per uplink
    assert CostParams.of_hosts(INTRA, NIC, G, (4, 4), shared_nic=False).cross == NIC
    one = CostParams.of_hosts(INTRA, NIC, G, (4,))
    assert (one.alpha, one.beta, one.intra, one.cross) == (*dataclasses.astuple(INTRA), INTRA,
                                                           None)
    apart = CostParams.of_hosts(INTRA, NIC, G, (1, 1, 1))
    assert (apart.alpha, apart.beta, apart.intra, apart.cross) == (NIC.alpha, NIC.beta, None,
                                                                   NIC)


@pytest.mark.parametrize(("hosts", "local"), [(2, 2), (2, 3), (4, 8)])
def test_two_level_is_the_ring_inside_plus_the_ring_across_on_a_shard(hosts: int,
                                                                        local: int) -> None:
    c = CostParams.of_hosts(INTRA, NIC, G, (local,) * hosts)
    p, n = hosts * local, 64 * MB
    b_cross = local * NIC.beta  # the L local ranks share the host's NIC

    def inside(m: float) -> float:  # the host's ring reduce-scatter and allgather of m bytes
        return (2 * (local - 1) * INTRA.alpha + 2 * (local - 1) / local * m * INTRA.beta
                + (local - 1) / local * m * G)

    def across(m: float) -> float:  # the ring across hosts on a shard of m bytes
        return (2 * (hosts - 1) * NIC.alpha + 2 * (hosts - 1) / hosts * (m / local) * b_cross
                + (hosts - 1) / hosts * (m / local) * G)

    small = MB  # one chunk: the steps one after another
    assert two_level.pieces(small) == 1
    assert costmodel.predict("two_level", p, small, c, SEG) == pytest.approx(
        inside(small) + across(small), rel=1e-12)
    # 64 MB in 8 chunks: the first reduce-scatter and last allgather alone, each chunk's
    # crossing alongside the host's steps on its neighbours
    k = two_level.pieces(n)
    assert k == two_level.PIECES == 8
    i, x = inside(n / k), across(n / k)
    want = i + 2 * max(x, i / 2) + (k - 2) * max(x, i)
    assert costmodel.predict("two_level", p, n, c, SEG) == pytest.approx(want, rel=1e-12)
    assert want < inside(n) + across(n)
    # The flat ring pays the slowest hop, the NIC, on every step (one flow per uplink).
    flat = 2 * (p - 1) * NIC.alpha + 2 * (p - 1) / p * n * NIC.beta + (p - 1) / p * n * G
    assert costmodel.predict("ring", p, n, c, SEG) == pytest.approx(flat, rel=1e-12)
    # A host's uplink carries 2(H-1)/H n each way in the two-level call: fewer bytes than the
    # flat ring's 2(p-1)/p n, and 2(H-1) latencies across instead of 2(p-1).
    assert 2 * (hosts - 1) / hosts * n < 2 * (p - 1) / p * n


def test_unequal_hosts_pay_the_tree_inside_and_the_whole_vector_across() -> None:
    c = CostParams.of_hosts(INTRA, NIC, G, (3, 1))
    n, lg = 8 * MB, 2  # ceil(log2 3)
    inside = 2 * lg * n * INTRA.beta + lg * n * G + 2 * (lg + 1 - 1) * INTRA.alpha
    across = 2 * NIC.alpha + n * 3 * NIC.beta + 0.5 * n * G  # ring over 2 leaders
    assert costmodel.predict("two_level", 4, n, c, SEG) == pytest.approx(inside + across,
                                                                          rel=1e-12)


def test_the_cross_step_is_priced_by_the_cross_algorithm(monkeypatch) -> None:
    c = CostParams.of_hosts(INTRA, NIC, G, (2, 2, 2, 2))
    ring = costmodel.predict("two_level", 8, MB, c, SEG)
    monkeypatch.setattr(two_level, "CROSS", "recursive_doubling")
    rd = costmodel.predict("two_level", 8, MB, c, SEG)
    inside = costmodel.predict("ring", 2, MB, c.on("intra"), SEG)
    assert rd == pytest.approx(inside + costmodel.predict("recursive_doubling", 4, MB / 2,
                                                          c.on("cross"), SEG), rel=1e-12)
    assert rd != ring
    monkeypatch.setattr(two_level, "CROSS", "mpi")  # unmodeled: priced as the ring
    assert costmodel.predict("two_level", 8, MB, c, SEG) == ring
    monkeypatch.setattr(two_level, "CROSS", "two_level")
    with pytest.raises(ValueError, match="flat algorithm"):
        costmodel.predict("two_level", 8, MB, c, SEG)


@pytest.mark.parametrize("n", [8, 4096, MB, 64 * MB])
def test_auto_picks_flat_on_one_host_and_with_one_rank_per_host(n: int) -> None:
    for c in (CostParams(10e-6, 1e-9, G), CostParams.of_hosts(INTRA, NIC, G, (8,)),
              CostParams.of_hosts(INTRA, NIC, G, (1,) * 8)):
        best = costmodel.predicted_best(8, n, c)
        assert best != "two_level"  # it runs the ring there, and ties with it
        assert costmodel.predict("two_level", 8, n, c) == costmodel.predict("ring", 8, n, c)
        assert pricing.best_dense(8, n, c)[0] == best


def test_auto_picks_two_level_across_a_slow_link_and_flat_where_links_are_alike() -> None:
    slow = CostParams.of_hosts(INTRA, NIC, G, (4, 4))
    for n in (8, 4096, MB, 64 * MB):  # fewer latencies and fewer bytes across
        assert costmodel.predicted_best(8, n, slow) == "two_level", n
    alike = CostParams.of_hosts(NIC, NIC, G, (2, 2))  # a shared NIC as fast as inside
    assert costmodel.predicted_best(4, MB, alike) != "two_level"  # (one chunk)
    # In one chunk (1 MB) at 2 x 2 the two-level call moves n + n bytes one after the other
    # against the flat ring's 1.5 n: it wins once the NIC is more than twice as slow as the
    # links inside the host.
    for ratio, wins in ((1.5, False), (3.0, True)):
        c = CostParams.of_hosts(Link(0.0, 1e-9), Link(0.0, ratio * 1e-9), 0.0, (2, 2))
        assert (costmodel.predicted_best(4, MB, c) == "two_level") == wins, ratio
    # Pipelined (64 MB in 8 chunks, I and X a chunk's steps inside and across, X = ratio I)
    # the host's steps hide under the crossing: at most 8 max(I, X) against the flat ring's
    # 12 max(I, X) (it pays the slowest hop), whatever the ratio.
    for ratio in (0.25, 1.0, 1.5):
        c = CostParams.of_hosts(Link(0.0, 1e-9), Link(0.0, ratio * 1e-9), 0.0, (2, 2))
        assert costmodel.predicted_best(4, 64 * MB, c) == "two_level", ratio


def test_two_level_compressed_prices_only_the_crossing_bytes_on_the_cross_link() -> None:
    c = CostParams.of_hosts(Link(0.0, 0.0), Link(0.0, 1e-9), 0.0, (4, 4))  # free inside
    numel, payload = 1 << 20, 1 << 18  # 4 bytes per element in, 1 byte out
    comm, codec = pricing.two_level_costs("reduce_scatter_allgather",
                                          rates(8, numel, 4, payload, 1e-9, 2e-9), c)
    shard = payload / 4  # each rank sends its shard's payload; the 4 share the NIC
    assert comm == pytest.approx(2 * (2 - 1) / 2 * shard * 4e-9, rel=1e-12)
    # each rank codes only its shard: a quarter of the flat call's encode and decodes
    flat = pricing.scheme_costs("reduce_scatter_allgather",
                                rates(2, numel // 4, 4, payload // 4, 1e-9, 2e-9), c.on("cross"))
    assert codec == pytest.approx(flat[1], rel=1e-12)
    inside, across = pricing.two_level_bytes("reduce_scatter_allgather", 2, 4, numel * 4,
                                             math.ceil(shard))
    assert (inside, across) == (2 * 3 / 4 * numel * 4, shard)
    one = CostParams.of_hosts(Link(1e-6, 1e-10), NIC, 0.0, (8,))
    assert pricing.two_level_costs("dense", rates(8, numel, 4, payload, 1e-9, 1e-9), one)[1] == 0.0


def test_auto_crosses_hosts_two_level_only_where_the_model_prices_it_cheaper() -> None:
    """``hierarchy="auto"`` of a compressed call: 8-bit with its codec time goes two-level
    over a fast host link (1/L of the coding per rank, and each uplink carries the payload
    once where a flat ring carries it 1.5 times); top-k 1% stays flat when the host link is
    no faster than the network (the two-level call moves the full-precision buffer inside
    the host). Each side is priced with its cheapest scheme."""
    from collectives.compressed import hierarchical

    n = 16 * MB // 4
    fast = CostParams.of_hosts(INTRA, NIC, G, (2, 2))
    slow = CostParams.of_hosts(NIC, NIC, G, (2, 2))
    int8 = costmodel.SchemeLoad(4, n, 4, n, 0.006, 0.003)
    assert hierarchical.cheaper(int8, fast, ["reduce_scatter_allgather", "allgather"])
    k = n // 100
    topk = costmodel.SchemeLoad(4, n, 4, 8 * k, 0.004, 0.0, k)
    schemes = ["sparse", "allgather"]
    assert not hierarchical.cheaper(topk, slow, schemes)
    per_byte = 0.004 / (4 * n)
    flat = min(sum(pricing.scheme_costs(s, rates(4, n, 4, 8 * k, per_byte, 0.0, k), slow))
               for s in schemes)
    two = min(sum(pricing.two_level_costs(s, rates(4, n, 4, 8 * k, per_byte, 0.0, k), slow))
              for s in schemes)
    assert two >= flat  # the same prices, through the public pricing functions


def test_the_policy_prices_a_layer_by_what_crosses_hosts() -> None:
    """On hosts of several ranks the per-layer policy takes the cheaper of the flat and the
    two-level call (as the call's auto hierarchy does): 8 bits with its codec time costs
    less two-level (1/L of the coding, the payload once over each uplink); one host, or one
    rank per host, leaves the flat price; PowerSGD stays flat."""
    import numpy as np

    import compressors
    from collectives.compressed import feasible
    from collectives.policy import Layer, plan

    int8 = feasible(compressors.get("uniform:bits=8"))

    n = 4 * MB
    layer = Layer("fc.weight", n, (2048, 2048), "linear")
    col = np.array([0.0, 0.0, 0.02, 0.01, float(n), float(n)])  # 8 bits: n bytes
    hosts = CostParams.of_hosts(INTRA, NIC, G, (2, 2))
    load = rates(4, n, 4, n, 0.02 / (4 * n), 0.01 / (4 * n), n)
    flat = min(pricing.predict_scheme(s, load, hosts) for s in int8)
    priced = plan.price(4, layer, "uniform:bits=8", col, hosts)
    assert priced < 0.8 * flat
    two = min(sum(pricing.two_level_costs(s, load, hosts)) for s in int8)
    assert math.isclose(priced, two)
    # the hook's hierarchy: "flat" calls pay the flat price, "two_level" ones the other
    assert plan.price(4, layer, "uniform:bits=8", col, hosts, "flat") == flat
    assert math.isclose(plan.price(4, layer, "uniform:bits=8", col, hosts, "two_level"), two)
    with pytest.raises(ValueError, match="hierarchy must be one of auto, flat, two_level"):
        plan.price(4, layer, "uniform:bits=8", col, hosts, "hosts")
    for layout in ((4,), (1, 1, 1, 1)):
        c = CostParams.of_hosts(INTRA, NIC, G, layout)
        assert plan.price(4, layer, "uniform:bits=8", col, c) == min(
            pricing.predict_scheme(s, load, c) for s in int8)
    low_rank = np.array([0.0, 0.0, 0.01, 0.01, 8 * 2048 * 4.0, float(n)])
    assert plan.price(4, layer, "powersgd:rank=4", low_rank, hosts) == min(
        pricing.predict_scheme(s, rates(4, n, 4, 8 * 2048 * 4, 0.01 / (4 * n),
                                        0.01 / (4 * n), n), hosts)
        for s in feasible(compressors.get("powersgd:rank=4")))
