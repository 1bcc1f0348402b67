"""Every registered formula against its closed form written out once more, bit for bit.

The prices, byte counts and bus bandwidths are read from the registries' entries (dense
algorithms, sparse allreduces, compressed schemes, benchmarked collectives); the oracles
below write the same formulas as one chain per table, in the same arithmetic order, so a
formula that drifts from its documented form, or an entry that stops being consulted, fails
with the case that differs.
"""

from __future__ import annotations

import itertools
import math

import pytest

from collectives import costmodel, pricing
from collectives.algorithms import REGISTRY
from collectives.compressed import SCHEMES
from collectives.config import defaults
from collectives.sparse import ALGORITHMS as SPARSE
from compcoll_bench.commands.collective_table import COLLECTIVES

LINKS = (costmodel.Link(1e-6, 1e-10), costmodel.Link(2e-5, 8e-9))
C = [costmodel.CostParams(10e-6, 1e-9, 0.2e-9), costmodel.CostParams(3.3e-5, 7.7e-10, 1.3e-10),
     costmodel.CostParams(0.0, 1e-9, 0.0), costmodel.CostParams(1e-6, 0.0, 0.0),
     costmodel.CostParams.of_hosts(*LINKS, 1e-10, (4, 4)),  # hosts: the two-class formulas
     costmodel.CostParams.of_hosts(*LINKS, 1e-10, (3, 1))]
DENSE = ("ring", "tree", "recursive_doubling", "rabenseifner", "two_level")

rates = pricing.SchemeLoad.of_rates

def layout(p: int, hosts: tuple[int, ...]) -> tuple[int, ...]:
    """Ranks per host of p ranks: the fitted hosts, else hosts as large as the largest."""
    if not hosts:
        return (p,)
    if sum(hosts) == p:
        return hosts
    per = max(hosts)
    return (per,) * (p // per) + ((p % per,) if p % per else ())


def on(c: costmodel.CostParams, link: costmodel.Link | None) -> costmodel.CostParams:
    """The parameters of one link class (the flat link where it is None)."""
    link = link or costmodel.Link(c.alpha, c.beta)
    return costmodel.CostParams(link.alpha, link.beta, c.gamma)
PS = [1, 2, 3, 4, 5, 7, 8, 12, 17, 64]
SIZES = [0, 1, 7, 1000, 65536, 3_000_001, 64 << 20]


def dense_oracle(a: str, p: int, nbytes: float, c: costmodel.CostParams,
                 segment: int | None) -> float:
    if p <= 1 or nbytes <= 0:
        return 0.0
    s, n = float(segment or defaults.segment_bytes), float(nbytes)
    if a == "two_level":
        sizes = layout(p, c.hosts)
        inside, across = on(c, c.intra), on(c, c.cross)
        if len(sizes) == 1:
            return dense_oracle("ring", p, nbytes, c, segment)
        if len(sizes) == p:
            return dense_oracle("ring", p, nbytes, across, segment)
        if len(set(sizes)) == 1:  # pipelined in k chunks: the host's steps under the crossing
            k = int(max(1, min(8, n // (1 << 20))))
            i = dense_oracle("ring", sizes[0], n / k, inside, segment)
            x = dense_oracle("ring", len(sizes), n / sizes[0] / k, across, segment)
            return i + x if k == 1 else i + 2 * max(x, i / 2) + (k - 2) * max(x, i)
        return (dense_oracle("tree", max(sizes), nbytes, inside, segment)
                + dense_oracle("ring", len(sizes), n, across, segment))
    pof2 = 1 << (p.bit_length() - 1)
    fold = 0.0 if p == pof2 else 2 * (c.alpha + n * c.beta) + n * c.gamma
    if a == "ring":
        msgs = max(1, math.ceil(n / p / s))
        return (2 * (p - 1) * msgs * c.alpha + 2 * (p - 1) / p * n * c.beta
                + (p - 1) / p * n * c.gamma)
    if a == "recursive_doubling":
        return (p.bit_length() - 1) * (c.alpha + n * c.beta + n * c.gamma) + fold
    if a == "rabenseifner":
        lg = pof2.bit_length() - 1
        return (2 * lg * c.alpha + 2 * (pof2 - 1) / pof2 * n * c.beta
                + (pof2 - 1) / pof2 * n * c.gamma + fold)
    assert a == "tree"
    L, k = max(0, (p - 1).bit_length()), max(1, math.ceil(n / s))
    return 2 * (L + k - 1) * c.alpha + 2 * L * n * c.beta + L * n * c.gamma


def sparse_oracle(a: str, p: int, n: int, k: int, c: costmodel.CostParams, ib: int,
                  vb: int) -> float:
    if p <= 1:
        return 0.0
    e, union = ib + vb, min(n, p * k)
    if a == "ssar_recursive_doubling":
        rounds = max(1, math.ceil(math.log2(p)))
        return sum(c.alpha + min((1 << i) * k, n) * e * c.beta for i in range(rounds))
    if a in ("ssar_split_allgather", "dsar"):
        gather = union * e if a == "ssar_split_allgather" else min(union * e, n * vb)
        return 2 * (p - 1) * c.alpha + (p - 1) / p * (k * e + gather) * c.beta
    assert a == "gtopk"
    return 3 * (p - 1) * c.alpha + (p - 1) / p * (2 * k + p * k) * e * c.beta


def scheme_oracle(s: str, p: int, numel: int, vb: int, payload: int, c: costmodel.CostParams,
                  cs: float, ds: float, k: int, segment: int | None) -> tuple[float, float]:
    n_bytes = numel * vb
    return coded_oracle(s, p, numel, vb, payload, c, cs * n_bytes, ds * n_bytes, k, segment)


def coded_oracle(s: str, p: int, numel: int, vb: int, payload: int, c: costmodel.CostParams,
                 comp: float, decomp: float, k: int, segment: int | None
                 ) -> tuple[float, float]:
    n_bytes = numel * vb
    if p <= 1:
        return 0.0, comp + decomp
    if s == "dense":
        return min(dense_oracle(a, p, payload, c, segment) for a in DENSE), comp + decomp
    if s == "reduce_scatter_allgather":
        return (2 * (p - 1) * c.alpha + 2 * (p - 1) / p * payload * c.beta,
                comp + comp / p + 2 * decomp + (p - 1) / p * n_bytes * c.gamma)
    if s == "allgather":
        return ((p - 1) * (c.alpha + payload * c.beta),
                comp + p * decomp + (p - 1) * n_bytes * c.gamma)
    assert s == "sparse"
    return (min(sparse_oracle(a, p, numel, k, c, 4, vb) for a in
                ("ssar_recursive_doubling", "ssar_split_allgather", "dsar")), comp + decomp)


def two_level_oracle(s: str, p: int, numel: int, vb: int, payload: int,
                     c: costmodel.CostParams, cs: float, ds: float, k: int,
                     segment: int | None) -> tuple[float, float]:
    """The ring inside the host on the intra class; the scheme on one shard (n/L elements,
    B/L bytes, k/L entries, 1/L of the coding) over the H hosts on the cross class; from
    2 MB of payload, a dense payload (not k < n entries) pipelined in m chunks of at least
    1 MB of it (up to 8), a chunk's steps inside the host under another's crossing."""
    sizes = layout(p, c.hosts)
    hosts, local = len(sizes), sizes[0]
    m = int(max(1, min(8, payload // (1 << 20)))) \
        if hosts > 1 and local > 1 and not 0 < k < numel else 1
    inside = dense_oracle("ring", local, numel * vb / m, on(c, c.intra), segment)
    if hosts == 1:
        return inside, 0.0
    part = local * m
    comm, codec = coded_oracle(s, hosts, math.ceil(numel / part), vb,
                               math.ceil(payload / part), on(c, c.cross),
                               cs * (numel * vb) / part, ds * (numel * vb) / part,
                               math.ceil(k / part), segment)
    if m == 1:
        return inside + comm, codec
    return inside + 2 * max(comm, inside / 2) + (m - 2) * max(comm, inside), m * codec


def bytes_oracle(s: str, p: int, payload: int, entries: int, eb: int) -> float:
    if p <= 1:
        return 0.0
    if s in ("dense", "reduce_scatter_allgather"):
        return 2 * (p - 1) / p * payload
    if s == "allgather":
        return (p - 1) * payload
    return (p - 1) / p * entries * eb * (1 + p)


def test_dense_costs_are_the_formulas_and_auto_picks_the_cheapest() -> None:
    assert costmodel.MODELED == tuple(a for a, e in REGISTRY.items() if e.cost is not None)
    for c, p, n, seg in itertools.product(C, PS, SIZES, (None, 4096)):
        want = {a: dense_oracle(a, p, n, c, seg) for a in costmodel.MODELED}
        got = {a: costmodel.predict(a, p, n, c, seg) for a in costmodel.MODELED}
        assert got == want, (c, p, n, seg)
        t, name = min((t, a) for a, t in want.items())
        assert pricing.best_dense(p, n, c, seg) == (name, t)


def test_sparse_prices_are_the_formulas() -> None:
    for a, c, p, n, k, (ib, vb) in itertools.product(SPARSE, C, PS, SIZES, (0, 1, 1000),
                                                     ((4, 4), (8, 4), (4, 2))):
        assert pricing.predict_sparse(a, p, n, k, c, ib, vb) == sparse_oracle(
            a, p, n, k, c, ib, vb), (a, c, p, n, k, ib, vb)


def test_scheme_prices_and_bytes_are_the_formulas() -> None:
    grid = itertools.product(SCHEMES, C, PS, SIZES[:-1], (2, 4), ((0.0, 0.0), (1e-10, 3e-10)),
                             (0, 17), (None, 4096))
    for s, c, p, n, vb, (cs, ds), k, seg in grid:
        for payload in (0, 100, n // 3 + 1):
            want = scheme_oracle(s, p, n, vb, payload, c, cs, ds, k, seg)
            load = rates(p, n, vb, payload, cs, ds, k, seg)
            assert pricing.scheme_costs(s, load, c) == want
            assert pricing.predict_scheme(s, load, c) == sum(want)
    for s, p, payload, (e, eb) in itertools.product(SCHEMES, PS, (0, 1, 12345),
                                                    ((0, 8), (100, 8), (77, 6))):
        assert pricing.predicted_bytes(s, p, payload, e, eb) == bytes_oracle(s, p, payload, e, eb)


def test_two_level_scheme_prices_and_bytes_are_the_formulas() -> None:
    uniform = [c for c in C if len(set(c.hosts)) <= 1]
    grid = itertools.product(SCHEMES, uniform, (1, 2, 4, 8, 12, 64), SIZES[:-1], (2, 4),
                             ((0.0, 0.0), (1e-10, 3e-10)), (0, 17), (None, 4096))
    for s, c, p, n, vb, (cs, ds), k, seg in grid:
        for payload in (0, 100, n // 3 + 1):
            want = two_level_oracle(s, p, n, vb, payload, c, cs, ds, k, seg)
            load = rates(p, n, vb, payload, cs, ds, k, seg)
            assert pricing.two_level_costs(s, load, c) == want, \
                (s, c, p, n, vb, payload, k, seg)
    for s, hosts, local, payload, (e, eb) in itertools.product(
            SCHEMES, (1, 2, 3), (1, 2, 4), (0, 1, 12345), ((0, 8), (100, 8))):
        inside = 2 * (local - 1) / local * 4096 if local > 1 else 0.0
        assert pricing.two_level_bytes(s, hosts, local, 4096, payload, e, eb) == (
            inside, bytes_oracle(s, hosts, payload, e, eb))
    with pytest.raises(ValueError, match="hosts of the same size"):
        pricing.two_level_costs("dense", rates(4, 100, 4, 100, 0.0, 0.0), C[-1])


@pytest.mark.parametrize("p", PS)
def test_bus_bandwidth_factors_are_nccl_tests(p: int) -> None:
    from compcoll_bench.commands.benchlib import bus_bandwidth

    for algbw in (0.0, 1.0, 3.0, 12.345e9):
        assert bus_bandwidth(algbw, p) == algbw * 2 * (p - 1) / p
        assert COLLECTIVES["allreduce"].busbw(algbw, p) == algbw * 2 * (p - 1) / p
        assert COLLECTIVES["reduce_scatter"].busbw(algbw, p) == algbw * (p - 1) / p
        assert COLLECTIVES["allgather"].busbw(algbw, p) == algbw * (p - 1) / p
        assert COLLECTIVES["broadcast"].busbw(algbw, p) == algbw
