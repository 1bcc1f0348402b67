"""Every algorithm and scheme under NCCL's ordering rules (``tests/nccl_order.py``).

ProcessGroupNCCL runs a pair's sends and receives in posting order on one stream, so a rank
that posts a receive from a peer ahead of its send to that peer, while the peer does the same,
hangs: MPI and gloo progress each message on its own and never show it. Each case here runs
in threads of this process at 2, 3 and 5 ranks on a transport that enforces the rules and
fails in seconds where a real NCCL job would hang; results are checked against a numpy
oracle, or (compressed, sparse) against the same call on a transport without the rules, bit
for bit, with every rank asserting and all ranks' bits identical.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import collectives
import compressors
from collectives import costmodel
from collectives.algorithms import REGISTRY
from collectives.compressed import feasible
from collectives.costparams import CostParams
from collectives.errors import TransportError
from collectives.exchange import allgather_direct, alltoallv
from collectives.sparse import ALGORITHMS as SPARSE
from collectives.transport.base import wait_all

from .nccl_order import OrderedComm, World

RANKS = (2, 3, 5)
SIZES = (0, 1, 7, 1009)
DENSE = [name for name, a in REGISTRY.items() if a.ours]
COMPRESSORS = ("fp16", "bf16", "uniform:bits=8", "uniform:bits=4", "sign", "qsgd", "terngrad",
               "topk:ratio=0.05", "randomk:ratio=0.1", "threshold:tau=0.5", "powersgd:rank=2")
#: a fit every rank holds before "auto" decides (no probe, the same choice on every machine)
PINNED = CostParams(2e-5, 1e-9, 2e-10)


@pytest.fixture(autouse=True)
def _small_segments() -> None:
    """Segments of 64 B, so each message of the pipelined algorithms is several."""
    before = collectives.defaults.segment_bytes
    collectives.defaults.segment_bytes = 64
    yield
    collectives.defaults.segment_bytes = before


def _hosts(p: int) -> list[int]:
    """Two ranks a host (the last alone at odd p), for two-level runs."""
    return [r // 2 for r in range(p)]


def _pinned(comm: OrderedComm) -> OrderedComm:
    comm.cache.cost_params = PINNED
    return comm


def _identical(outs: list[np.ndarray]) -> None:
    raw = [np.ascontiguousarray(o).view(np.uint8).tobytes() for o in outs]
    assert all(r == raw[0] for r in raw), "ranks' results differ"


def _input(rank: int, n: int, dtype: str) -> np.ndarray:
    rng = np.random.default_rng(1000 + rank)
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal(n).astype(dtype)
    return rng.integers(-50, 50, n).astype(dtype)


@pytest.mark.parametrize("p", RANKS)
@pytest.mark.parametrize("algorithm", DENSE)
def test_dense_algorithms_run_in_nccl_order(p: int, algorithm: str) -> None:
    world = World(p, hosts=_hosts(p))
    for comm in world.comms:
        _pinned(comm)
    for n in SIZES:
        # (the messages depend on the bytes only: the MPI suite covers every dtype and op)
        for dtype, op in (("float32", "sum"), ("float64", "max"), ("int32", "sum")):
            inputs = [_input(r, n, dtype) for r in range(p)]
            oracle = {"sum": np.sum, "max": np.max, "min": np.min}[op](np.stack(inputs), axis=0)

            def run(comm: OrderedComm, inputs=inputs, op=op) -> np.ndarray:
                x = inputs[comm.rank].copy()
                out = collectives.allreduce(x, op=op, algorithm=algorithm, comm=comm)
                assert np.array_equal(x, inputs[comm.rank]), "input changed"
                inplace = inputs[comm.rank].copy()
                collectives.allreduce(inplace, op=op, algorithm=algorithm, comm=comm,
                                      out=inplace)
                assert np.array_equal(out, inplace)
                return out

            outs = world.run(run)
            _identical(outs)
            if dtype.startswith("float") and op == "sum":
                np.testing.assert_allclose(outs[0], oracle, rtol=1e-5, atol=1e-5)
            else:
                assert np.array_equal(outs[0], oracle), (n, dtype, op)


def _compressed(world: World, spec: str, scheme: str, n: int, hierarchy: str = "flat"
                ) -> list[list[np.ndarray]]:
    """Three steps with error feedback of ``spec`` through ``scheme``; each rank's results."""

    def run(comm: OrderedComm) -> list[np.ndarray]:
        comp = compressors.get(spec)
        feedback = compressors.ErrorFeedback(comp)
        outs = []
        for step in range(3):
            x = _input(comm.rank + 10 * step, n, "float32")
            outs.append(collectives.allreduce(x, comm=_pinned(comm), compressor=comp,
                                              feedback=feedback, scheme=scheme, name="g",
                                              step=step, hierarchy=hierarchy))
        return outs

    return world.run(run)


@pytest.mark.parametrize("p", RANKS)
@pytest.mark.parametrize("spec", COMPRESSORS)
def test_compressed_schemes_run_in_nccl_order(p: int, spec: str) -> None:
    for scheme in feasible(compressors.get(spec)):
        for n in (1009,):  # (several blocks, segments and a ragged last block)
            ordered = _compressed(World(p), spec, scheme, n)
            free = _compressed(World(p, ordered=False), spec, scheme, n)
            for step in range(3):
                _identical([ranks[step] for ranks in ordered])
                assert np.array_equal(ordered[0][step], free[0][step]), (scheme, n, step)


@pytest.mark.parametrize("p", (4, 6))  # hosts of two ranks (two-level needs equal hosts)
def test_two_level_compressed_runs_in_nccl_order(p: int) -> None:
    for spec in ("uniform:bits=8", "topk:ratio=0.05"):
        for scheme in feasible(compressors.get(spec)):
            ordered = _compressed(World(p, hosts=_hosts(p)), spec, scheme, 1009, "two_level")
            free = _compressed(World(p, ordered=False, hosts=_hosts(p)), spec, scheme, 1009,
                               "two_level")
            for step in range(3):
                _identical([ranks[step] for ranks in ordered])
                assert np.array_equal(ordered[0][step], free[0][step]), (spec, scheme, step)


@pytest.mark.parametrize("p", RANKS)
@pytest.mark.parametrize("algorithm", sorted(SPARSE))
def test_sparse_algorithms_run_in_nccl_order(p: int, algorithm: str) -> None:
    size = 1009

    def run(comm: OrderedComm) -> np.ndarray:
        rng = np.random.default_rng(comm.rank)
        idx = np.sort(rng.choice(size, 40, replace=False)).astype(np.int64)
        vals = rng.standard_normal(40).astype(np.float32)
        return collectives.sparse_allreduce(idx, vals, size, comm=_pinned(comm),
                                            algorithm="gtopk:k=40" if algorithm == "gtopk"
                                            else algorithm)

    ordered, free = World(p).run(run), World(p, ordered=False).run(run)
    _identical(ordered)
    assert np.array_equal(ordered[0], free[0])


def _drive(steps: Any) -> Any:
    """Run an exchange generator to its end, waiting on each step; its return value."""
    try:
        reqs = next(steps)
        while True:
            wait_all(reqs or [], collective="exchange", timeout=10.0)
            reqs = steps.send(None)
    except StopIteration as stop:
        return stop.value


@pytest.mark.parametrize("p", RANKS)
def test_variable_size_exchanges_and_the_probe_run_in_nccl_order(p: int) -> None:
    def run(comm: OrderedComm) -> tuple:
        r = comm.rank
        parts = [np.full(16 + r + j, r, np.uint8) for j in range(p)]
        expect = [bytes([s]) * (16 + s + r) for s in range(p)]
        received = _drive(alltoallv(comm, comm.next_tag(), parts))
        assert [bytes(b) for b in received] == expect
        # sizes announced: all but rank 0 send a longer part behind the size marker
        marked = _drive(alltoallv(comm, comm.next_tag(), parts, sizes=[16 + j for j in range(p)]))
        assert [bytes(b) for b in marked] == expect
        arrived: dict[int, bytes] = {}
        data = np.full(16 + r, r, np.uint8)
        sizes = [16] * p
        _drive(allgather_direct(comm, comm.next_tag(), data, sizes,
                                lambda src, b: arrived.__setitem__(src, b.tobytes())))
        seconds = costmodel._probe_exchange(comm, 4096, 2, 10.0)
        return arrived, seconds

    for arrived, seconds in World(p).run(run):
        assert arrived == {s: bytes([s]) * (16 + s) for s in range(p)}
        assert seconds >= 0


def test_a_receive_posted_alone_before_a_send_to_the_same_peer_hangs() -> None:
    """The transport enforces the rule: both ranks post [recv, send] to each other outside a
    group and neither message moves; grouped, the same posts complete."""

    def exchange(comm: OrderedComm, grouped: bool) -> bytes:
        peer, tag = 1 - comm.rank, comm.next_tag()
        theirs, mine = np.zeros(8, np.uint8), np.full(8, comm.rank, np.uint8)
        if grouped:
            with comm.grouped():
                reqs = [comm.irecv(theirs, peer, tag), comm.isend(mine, peer, tag)]
        else:
            reqs = [comm.irecv(theirs, peer, tag), comm.isend(mine, peer, tag)]
        wait_all(reqs, collective="exchange", timeout=30.0)
        return theirs.tobytes()

    with pytest.raises(TransportError, match="no message moved"):
        World(2, stall=0.5).run(lambda c: exchange(c, grouped=False))
    assert World(2).run(lambda c: exchange(c, grouped=True)) == [bytes([1]) * 8, bytes(8)]


def test_sizes_that_disagree_in_posting_order_are_reported() -> None:
    def run(comm: OrderedComm) -> None:
        peer, tag = 1 - comm.rank, comm.next_tag()
        with comm.grouped():
            reqs = [comm.irecv(np.zeros(8 if comm.rank else 4, np.uint8), peer, tag),
                    comm.isend(np.zeros(8, np.uint8), peer, tag)]
        wait_all(reqs, collective="exchange", timeout=30.0)

    with pytest.raises(TransportError, match="send of 8 B to rank 0 met rank 0's receive of 4 B"):
        World(2).run(run)


def test_a_round_of_equal_parts_is_one_engine_allgather(monkeypatch) -> None:
    """On a pair-ordered engine, the allgather scheme's payloads (one size on every rank) go
    through the engine's own allgather, once per call, not p - 1 rounds of messages."""
    calls: list[int] = []
    gather = OrderedComm.iallgather_bytes

    def spy(self: OrderedComm, data: np.ndarray, out: np.ndarray) -> Any:
        calls.append(data.nbytes)
        return gather(self, data, out)

    monkeypatch.setattr(OrderedComm, "iallgather_bytes", spy)
    spec, x = "uniform:bits=8", np.arange(1009, dtype=np.float32)
    outs = World(3).run(lambda c: collectives.allreduce(x * (c.rank + 1), comm=_pinned(c),
                                                        compressor=spec, scheme="allgather"))
    free = World(3, ordered=False).run(
        lambda c: collectives.allreduce(x * (c.rank + 1), comm=_pinned(c), compressor=spec,
                                        scheme="allgather"))
    assert len(calls) == 3 and len(set(calls)) == 1  # one per rank, equal blocks
    _identical(outs)
    assert np.array_equal(outs[0], free[0])
