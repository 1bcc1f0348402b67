"""Single-process pieces: partitions, cost model, dtype and op checks, buffers, handles."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import collectives
from collectives import buffers, costmodel, ops
from collectives.algorithms import REGISTRY, common, names, tree
from collectives.errors import CollectiveTimeout
from collectives.transport.base import CommCache, Request, wait_all
from compressors import dtypes


@settings(derandomize=True, max_examples=200)
@given(n=st.integers(0, 10_000), parts=st.integers(1, 64))
def test_partition_is_balanced_and_covers(n: int, parts: int) -> None:
    blocks = common.partition(n, parts)
    assert len(blocks) == parts and blocks[0][0] == 0 and blocks[-1][1] == n
    sizes = [hi - lo for lo, hi in blocks]
    assert max(sizes) - min(sizes) <= 1
    assert all(blocks[i][1] == blocks[i + 1][0] for i in range(parts - 1))


@pytest.mark.parametrize("p", range(1, 33))
def test_binomial_tree_reaches_every_rank_once(p: int) -> None:
    seen = {0}
    frontier = [0]
    while frontier:
        v = frontier.pop()
        for c in tree._children(v, p):
            assert c not in seen and tree._parent(c) == v
            seen.add(c)
            frontier.append(c)
    assert seen == set(range(p))


def test_cost_model_formulas_and_choice() -> None:
    c = costmodel.CostParams(alpha=10e-6, beta=1e-9, gamma=0.2e-9)
    # Small messages: latency dominates, recursive doubling wins; large: bandwidth-optimal wins.
    small = {a: costmodel.predict(a, 8, 64, c) for a in costmodel.MODELED}
    large = {a: costmodel.predict(a, 8, 64 << 20, c) for a in costmodel.MODELED}
    assert min(small, key=small.get) == "recursive_doubling"
    assert min(large, key=large.get) in ("ring", "rabenseifner")
    # Ring: 2(p-1)/p * n * beta is the bandwidth term, exactly.
    c0 = costmodel.CostParams(0.0, 1e-9, 0.0)
    assert costmodel.predict("ring", 4, 1 << 20, c0) == pytest.approx(1.5 * (1 << 20) * 1e-9)
    assert costmodel.predict("ring", 1, 1 << 20, c) == 0.0
    with pytest.raises(ValueError, match="alpha"):
        costmodel.CostParams(-1.0, 0.0, 0.0)
    with pytest.raises(ValueError, match="no cost formula"):
        costmodel.predict("mpi", 4, 10, c)


def test_registries_hold_every_entry() -> None:
    """The one place that names every entry: a lost registration fails here, and every other
    test, the matrix and the benchmarks iterate the registries themselves."""
    from collectives import pricing
    from collectives.compressed import SCHEMES
    from collectives.sparse import ALGORITHMS, PARTS

    dense = ["ring", "tree", "recursive_doubling", "rabenseifner"]
    sparse = ["ssar_recursive_doubling", "ssar_split_allgather", "dsar"]
    assert {"algorithms": names(), "modeled": list(costmodel.MODELED),
            "sparse": list(ALGORITHMS), "sparse exact": list(pricing.SPARSE_MODELED),
            "sparse parts": list(PARTS), "schemes": list(SCHEMES)} == {
        "algorithms": [*dense, "two_level", "mpi", "torch"], "modeled": [*dense, "two_level"],
        "sparse": [*sparse, "gtopk"],
        "sparse exact": sparse, "sparse parts": sparse,
        "schemes": ["dense", "reduce_scatter_allgather", "allgather", "sparse"]}


@pytest.mark.parametrize("entry", REGISTRY.values(), ids=names())
def test_every_algorithm_entry_prices_itself_or_says_it_cannot(entry) -> None:
    c = costmodel.CostParams(alpha=10e-6, beta=1e-9, gamma=0.2e-9)
    if not entry.ours:  # the engines' own: no formula, "auto" never picks them
        assert entry.cost is None and entry.wire_bytes is None
        assert entry.name not in costmodel.MODELED
        with pytest.raises(ValueError, match="no cost formula"):
            costmodel.predict(entry.name, 4, 10, c)
        return
    assert entry.wire_bytes(1, 1 << 20) == 0.0
    assert entry.cost is not None and entry.name in costmodel.MODELED
    assert costmodel.predict(entry.name, 1, 1 << 20, c) == 0.0
    sizes = (0, 64, 4096, 1 << 20, 64 << 20)
    for p in (2, 3, 4, 5, 8, 13):
        times = [costmodel.predict(entry.name, p, n, c) for n in sizes]
        assert times[0] == 0.0 and times == sorted(times) and times[1] > 0, times
        sent = [entry.wire_bytes(p, n) for n in sizes]
        assert sent[0] == 0 and sent == sorted(sent) and sent[1] >= 64 * (p - 1) / p, sent
    # An algorithm moves at least what a bandwidth-optimal one does: 2(p-1)/p n.
    assert all(entry.wire_bytes(p, 1 << 20) >= 2 * (p - 1) / p * (1 << 20) - 1e-6
               for p in range(2, 33))


def test_cost_fit_takes_bandwidth_from_the_largest_probes(monkeypatch) -> None:
    """A shaped link passes its first 250 KB at line rate (the token bucket's burst), then
    8 ns/B: the fit must report the 8 ns/B, and the latency, not a line through both."""
    alpha, beta, burst = 50e-6, 8e-9, 250_000

    def probe(comm, nbytes: int, reps: int, timeout: float | None = None) -> float:
        return alpha + max(nbytes - burst, 0) * beta + min(nbytes, burst) * 0.5e-9

    class Comm:  # one host: the flat fit is the intra-host class
        size, rank, cache = 4, 0, CommCache()

        def allgather_ints(self, values, collective="", timeout=None):
            return np.stack([np.asarray(values)] * 4)

    monkeypatch.setattr(costmodel, "_probe_exchange", probe)
    c = costmodel.fit(Comm())  # type: ignore[arg-type]
    assert c.beta == pytest.approx(beta, rel=1e-6)
    assert c.alpha == pytest.approx(alpha, rel=0.05)
    assert (c.intra, c.cross, c.hosts) == (costmodel.Link(c.alpha, c.beta), None, (4,))


def test_dtype_and_op_errors_name_the_supported_values() -> None:
    with pytest.raises(ValueError, match="supported: float16, bfloat16"):
        dtypes.lookup("complex64")
    assert dtypes.lookup("torch.bfloat16").name == "bfloat16"
    with pytest.raises(ValueError, match="supported: sum, prod, min, max, avg"):
        ops.check_op("xor", dtypes.lookup("float32"))
    with pytest.raises(ValueError, match="floating-point"):
        ops.check_op("avg", dtypes.lookup("int32"))


class _Later(Request):
    """A request that completes on its n-th test."""

    def __init__(self, n: int, log: list[str], name: str) -> None:
        super().__init__(0, name)
        self.n, self.log = n, log

    def test(self) -> bool:
        self.n -= 1
        if self.n == 0:
            self.log.append(self.what)
        return self.n <= 0


def test_concurrently_runs_every_part_and_overlaps_them() -> None:
    from collectives.interleave import concurrently
    from collectives.progress import Handle

    log: list[str] = []

    def part(name: str, delays: list[int]):
        for k, d in enumerate(delays):
            log.append(f"{name} step {k}")
            yield [_Later(d, log, f"{name} msg {k}")]
        log.append(f"{name} done")

    # Completions land at every moment: during the start-up polls, between the "all done?"
    # test and the wait (the race an empty wait list once hit), and inside the wait.
    for delays in ([1, 1], [2, 3], [5, 1, 7], [3, 2]):
        log.clear()
        parts = [part("a", delays), part("b", delays[::-1]), part("c", [])]
        Handle(concurrently(parts), lambda: None, "test", 5.0).wait()
        assert {"a done", "b done", "c done"} <= set(log)
    # one part whose message completes exactly while the wait list is being built
    Handle(concurrently([part("solo", [3])]), lambda: None, "test", 5.0).wait()
    assert log[-1] == "solo done"
    # b's first step runs before a's first message completes: the parts overlap
    log.clear()
    Handle(concurrently([part("a", [9]), part("b", [1])]), lambda: None, "test", 5.0).wait()
    assert log.index("b step 0") < log.index("a msg 0")


def test_buffers_are_zero_copy_in_place_and_copy_out_of_place() -> None:
    x = np.arange(10, dtype=np.float32)
    p = buffers.prepare(x, x)
    assert np.shares_memory(p.work, x) and p.finish() is x
    p = buffers.prepare(x, None)
    assert not np.shares_memory(p.work, x) and np.array_equal(p.finish(), x)
    out = np.empty_like(x)
    p = buffers.prepare(x, out, copy_input=False)  # the input stays where it is
    assert p.source is not None and np.shares_memory(p.source, x)
    assert np.shares_memory(p.work, out)
    p.load()
    assert p.source is None and np.array_equal(out, x)
    t = torch.arange(6, dtype=torch.bfloat16)
    p = buffers.prepare(t, t)
    assert p.dtype.name == "bfloat16" and p.work.dtype == np.uint16
    assert p.work.ctypes.data == t.data_ptr()
    with pytest.raises(TypeError, match="numpy array, a torch tensor"):
        buffers.prepare([1, 2, 3])
    with pytest.raises(TypeError, match="out must be a ndarray"):
        buffers.prepare(x, torch.zeros(10))


class _Never(Request):
    def test(self) -> bool:
        return False


def test_wait_all_deadline_names_collective_step_and_peer() -> None:
    with pytest.raises(CollectiveTimeout) as info:
        wait_all([_Never(peer=3, what="ring allgather step 2")], collective="allreduce[ring]",
                 timeout=0.05)
    msg = str(info.value)
    assert "allreduce[ring]" in msg and "ring allgather step 2" in msg and "rank 3" in msg
    assert isinstance(info.value, TimeoutError) and info.value.peer == 3


def test_public_api_lists_algorithms() -> None:
    names = collectives.algorithms()
    for a in ("ring", "tree", "recursive_doubling", "rabenseifner", "mpi", "torch"):
        assert a in names
    from collectives.algorithms import get

    with pytest.raises(ValueError, match="available: auto, ring"):
        get("nope")


def _sparse_sets(n: int, counts: list[int], dtype: type, seed: int) -> list:
    rng = np.random.default_rng(seed)
    sets = []
    for c in counts:
        idx = np.sort(rng.choice(n, min(c, n), replace=False)).astype(np.int64)
        val = (rng.standard_normal(idx.size) * 10.0 ** rng.integers(-3, 4, idx.size)).astype(dtype)
        if idx.size > 2:
            val[:3] = [-0.0, np.nan, -np.inf]
        sets.append((idx, val))
    return sets


@pytest.mark.parametrize("n", [1, 7, 4099, 100_003])
@pytest.mark.parametrize("counts", [[], [0], [5], [5, 0, 9], [50_000, 50_000],
                                    [3000, 20_000, 5, 40_000]])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("offset", [0, 1])
@pytest.mark.parametrize("threads", [1, 3])
def test_to_dense_equals_merge_then_scatter(n, counts, dtype, offset, threads) -> None:
    import _compcoll

    old_threads = _compcoll.num_threads()
    _compcoll.set_num_threads(threads)
    try:
        _to_dense_case(n, counts, dtype, offset)
    finally:
        _compcoll.set_num_threads(old_threads)


def _to_dense_case(n, counts, dtype, offset) -> None:
    from collectives.sparse.merge import merge, to_dense

    sets = _sparse_sets(n, counts, dtype, n + len(counts))
    idx, val = merge(sets, np.dtype(dtype))
    want = np.zeros(n, dtype)
    want[idx] = val
    out = np.full(n + offset, 3, dtype)[offset:]  # stale contents must all go
    to_dense(sets, out, np.dtype(dtype))
    assert out.tobytes() == want.tobytes()  # sums in list order, -0.0 and NaN as they are
    # the general path (out of another dtype) agrees
    out16 = np.full(n, 3, np.float16)
    to_dense(sets, out16, np.dtype(dtype))
    np.testing.assert_array_equal(out16, want.astype(np.float16))


def test_merge_dense_refuses_unsorted_or_out_of_range_sets() -> None:
    import _compcoll

    out = np.zeros(10, np.float32)
    for bad in ([3, 3], [4, 2], [-1], [10]):
        with pytest.raises(ValueError, match="ascend strictly"):
            _compcoll.merge_dense(out, [np.array(bad, np.int64)],
                                  [np.ones(len(bad), np.float32)])
    with pytest.raises(ValueError):
        _compcoll.merge_dense(out, [np.array([1], np.int64)], [np.ones(2, np.float32)])


class _Table:
    """A communicator stand-in whose allgather returns the rows the ranks would send."""

    size = 3

    def __init__(self, rows) -> None:
        self.rows = rows
        self.sent: list[np.ndarray] = []

    def allgather_ints(self, values, collective="", timeout=None):
        self.sent.append(np.asarray(values))
        return np.stack([np.asarray(self.rows[0](values))] +
                        [np.asarray(f(values)) for f in self.rows[1:]])


def test_validation_message_has_one_layout_and_names_the_other_call() -> None:
    from collectives import MismatchError, validation

    same = _Table([lambda v: v] * 3)
    table = validation.agree(same, "allgather", {"dtype": 2}, None, shared={"count": 7})
    assert same.sent[0].shape == (validation.WIDTH,)
    assert table.tolist() == [[2, 7]] * 3
    other_call = np.zeros(validation.WIDTH, np.int64)
    other_call[:4] = [validation.PATHS["compressed allreduce"], 2, 99, 98]
    mixed = _Table([lambda v: v, lambda v: v, lambda v: other_call])
    with pytest.raises(MismatchError, match="rank 2: compressed allreduce"):
        validation.agree(mixed, "allreduce", {"element count": 10, "dtype": 2}, None)

    def bumped(v):
        v = np.array(v)
        v[3] += 1
        return v

    differ = _Table([lambda v: v, bumped, lambda v: v])
    with pytest.raises(MismatchError, match=r"disagree on dtype \(rank 0: 2, rank 1: 3"):
        validation.agree(differ, "allreduce", {"element count": 10, "dtype": 2}, None)


def test_feedback_for_another_compressor_is_refused_naming_both() -> None:
    from compressors import DGCFeedback, ErrorFeedback, NoErrorFeedback, get

    x = np.ones(16, np.float32)
    for cls in (ErrorFeedback, NoErrorFeedback, DGCFeedback):
        fb = cls(get("uniform:bits=4"))
        with pytest.raises(ValueError, match=r"built for uniform.*compresses with topk"):
            collectives.allreduce(x, compressor="topk:ratio=0.5", feedback=fb, name="w")
        with pytest.raises(ValueError, match=r"built for uniform.*'bits': 4.*'bits': 8"):
            collectives.allreduce(x, compressor="uniform:bits=8", feedback=fb, name="w")
