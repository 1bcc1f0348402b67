"""The cost model's prices of sparse and compressed schemes (single process)."""

from __future__ import annotations

import pytest

from collectives import pricing
from collectives.costmodel import CostParams

SLOW = CostParams(alpha=50e-6, beta=8e-9, gamma=0.2e-9)  # ~1 Gbit/s links

rates = pricing.SchemeLoad.of_rates

def test_dense_threshold_is_the_byte_break_even() -> None:
    assert pricing.sparse_dense_threshold(4, 4) == 0.5
    assert pricing.sparse_dense_threshold(8, 4) == pytest.approx(1 / 3)


def test_sparse_prices_order_as_expected() -> None:
    n = 16 << 20
    # Very sparse, many ranks: recursive doubling's log p rounds win on latency.
    tiny = {a: pricing.predict_sparse(a, 64, n, 10, SLOW) for a in pricing.SPARSE_MODELED}
    assert min(tiny, key=tiny.get) == "ssar_recursive_doubling"
    # Dense-ish input: DSAR caps the allgather at the dense size.
    dense = {a: pricing.predict_sparse(a, 8, n, n // 2, SLOW) for a in pricing.SPARSE_MODELED}
    assert min(dense, key=dense.get) == "dsar"
    assert pricing.predict_sparse("gtopk", 1, n, 5, SLOW) == 0.0
    with pytest.raises(ValueError, match="no price"):
        pricing.predict_sparse("nope", 4, n, 5, SLOW)


def test_compressed_schemes_trade_bytes_for_latency() -> None:
    n, payload = 16 << 20, (16 << 20)  # 8-bit codes of 16M floats
    big = {s: pricing.predict_scheme(s, rates(16, n, 4, payload, 1e-10, 1e-10), SLOW)
           for s in ("reduce_scatter_allgather", "allgather")}
    assert big["reduce_scatter_allgather"] < big["allgather"]  # 2(p-1)/p vs (p-1) payloads
    small = {s: pricing.predict_scheme(s, rates(4, 64, 4, 64, 1e-10, 1e-10), SLOW)
             for s in ("reduce_scatter_allgather", "allgather")}
    assert small["allgather"] < small["reduce_scatter_allgather"]  # fewer message rounds
    # Compression pays on a slow link: 4x fewer bytes beats the codec time.
    plain = pricing.best_dense(4, 4 * n, SLOW)[1]
    assert pricing.predict_scheme("reduce_scatter_allgather",
                                  rates(4, n, 4, n, 1e-10, 1e-10), SLOW) < plain / 2


def test_predicted_bytes_per_scheme() -> None:
    assert pricing.predicted_bytes("dense", 4, 1000) == 1500
    assert pricing.predicted_bytes("reduce_scatter_allgather", 4, 1000) == 1500
    assert pricing.predicted_bytes("allgather", 4, 1000) == 3000
    assert pricing.predicted_bytes("sparse", 4, 0, 100, 8) == pytest.approx(0.75 * 800 * 5)
    assert pricing.predicted_bytes("dense", 1, 1000) == 0.0
