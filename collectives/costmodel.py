"""Alpha-beta-gamma cost model of the allreduce algorithms, fitted on the live communicator.

Notation (Thakur, Rabenseifner & Gropp 2005; Ben-Nun & Hoefler 2018, arXiv:1802.09941):
p ranks, n bytes, alpha = latency per message (s), beta = transfer time per byte (s/B),
gamma = reduction time per byte (s/B), s = pipeline segment (bytes), L = ceil(log2 p),
p' = largest power of two <= p, and a fold cost F = 2*(alpha + n*beta) + n*gamma when
p != p' (the extra ranks hand their vector over and get the result back). Each formula
is the ``cost`` of its module, registered with the algorithm in ``collectives.algorithms``:

    ring                2(p-1)*alpha + 2(p-1)/p * n*beta + (p-1)/p * n*gamma
                        (+ alpha per extra segment of a block: ceil(n/(p*s)) messages a step)
    recursive_doubling  log2(p')*(alpha + n*beta + n*gamma) + F
    rabenseifner        2*log2(p')*alpha + 2(p'-1)/p' * n*beta + (p'-1)/p' * n*gamma + F
    tree                reduce + broadcast pipelined over k = ceil(n/s) segments, each step
                        paced by the root, whose one link carries a segment per child:
                        (L + k - 1)*(alpha + L*s*beta) + k*L*s*gamma    (reduce, L children)
                        + (L + k - 1)*(alpha + L*s*beta)                (broadcast)
    two_level           per link class, on the hosts the parameters describe (see
                        ``collectives.algorithms.two_level.cost``)

Two link classes (``collectives.costparams``): inside a host and across hosts. The flat
algorithms pay the flat link (alpha, beta), the slowest hop of their steps; the two-level
algorithm pays each class for its own steps. alpha and beta come from a probe: every rank
exchanges messages of several sizes with its ring neighbours at once (so links are loaded as
during a collective); beta is the marginal time per byte between the two largest sizes and
alpha the time of the smallest (8 bytes). On a communicator of several hosts with several
ranks on some host, the same probe runs once more inside the hosts (every host at once) and
once across them (each rank with the ranks of its local index on the other hosts, every local
index at once, so ranks that share a host's uplink share it in the probe too). gamma times the
C++ reduction kernel. The per-rank values are combined (maximum: the slowest link paces a
collective) so every rank holds the same model and "auto" picks the same algorithm everywhere.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from compressors.dtypes import BY_NAME

from .algorithms import REGISTRY, modeled
from .config import check_timeout, defaults
from .costparams import CostParams, Link
from .ops import combine
from .topology import host_comms, topology
from .transport.base import Communicator, wait_all

#: Message sizes of the probe of each link class (a second and third probe, kept short).
CLASS_SIZES = (8, 1 << 20, 4 << 20)


def predict(algorithm: str, p: int, nbytes: int, c: CostParams,
            segment: int | None = None) -> float:
    """Predicted seconds of one allreduce of ``nbytes`` over ``p`` ranks (the registered
    algorithm's ``cost`` formula)."""
    if p <= 1 or nbytes <= 0:
        return 0.0
    entry = REGISTRY.get(algorithm)
    if entry is None or entry.cost is None:
        raise ValueError(f"no cost formula for algorithm {algorithm!r}; "
                         f"have: {', '.join(a.name for a in modeled())}")
    return entry.cost(p, float(nbytes), c, float(segment or defaults.segment_bytes))


def __getattr__(name: str) -> tuple[str, ...]:
    if name == "MODELED":  # the algorithms with a cost formula, read from the live registry
        return tuple(a.name for a in modeled())
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _probe_exchange(comm: Communicator, nbytes: int, reps: int,
                    timeout: float | None = None, *, sync: Communicator | None = None) -> float:
    """Median seconds of one exchange of ``nbytes`` with both ring neighbours on ``comm``.

    ``sync``: the communicator whose barrier starts every repetition and whose sequence gives
    the tags (default ``comm``); a sub-communicator's probe syncs on the communicator it was
    split from, so that every host's (or every local index's) probe runs at once, and a rank
    alone on its sub-communicator only takes part in the barriers."""
    sync = sync or comm
    p, r = comm.size, comm.rank
    # Both buffers written before timing: a zero-filled buffer is mapped to the kernel's one
    # zero page until written, and sending it reads one cached page, not nbytes of memory
    # (beta would miss what memory bandwidth costs a real collective's large messages).
    send = np.arange(nbytes, dtype=np.uint8)
    recv = np.ones(nbytes, dtype=np.uint8)
    times = []
    for _ in range(reps):
        tag = sync.next_tag()
        sync.barrier(timeout=timeout)
        t0 = time.perf_counter()
        if p > 1:
            with comm.grouped():  # with p = 2 both go to the same peer
                reqs = [comm.irecv(recv, (r - 1) % p, tag, "cost-model probe"),
                        comm.isend(send, (r + 1) % p, tag, "cost-model probe")]
            wait_all(reqs, collective="cost-model probe", timeout=timeout)
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def _line(comm: Communicator, sizes: tuple[int, ...], reps: int, timeout: float | None,
          sync: Communicator | None = None) -> list[float]:
    """This rank's [alpha, beta] of the probe on ``comm``: beta is the marginal time per byte
    between the two largest probes (a rate limiter's burst allowance, or caches, make the
    first megabyte cheaper than the rest, and a line through all sizes took that for
    bandwidth), alpha the time of the smallest exchange. [0, 0] on a rank alone."""
    # Small exchanges get more repeats: where ranks share cores their time is bimodal (all
    # scheduled: microseconds; one waiting for a time slice: ~100x that) and the median of a
    # few lands anywhere between.
    kw = {} if sync is None else {"sync": sync}
    t = np.array([_probe_exchange(comm, m, reps if m >= 1 << 20 else 5 * reps, timeout, **kw)
                  for m in sizes])
    if comm.size == 1:
        return [0.0, 0.0]
    m = np.array(sizes, dtype=np.float64)
    beta = (t[-1] - t[-2]) / (m[-1] - m[-2])
    if not beta > 0:  # noise swamped the difference: fall back to the largest probe's rate
        beta = t[-1] / m[-1]
    alpha = float(t[0] - beta * m[0])  # the smallest exchange: all latency
    return [max(alpha, 1e-7), max(beta, 1e-12)]


def measure_gamma(nbytes: int = 32 << 20, reps: int = 3) -> float:
    """Seconds per byte of the float32 sum kernel (the reduction in every algorithm), on
    arrays larger than the caches, as the large reductions that gamma prices stream them."""
    f32 = BY_NAME["float32"]
    a = np.ones(nbytes // 4, dtype=np.float32)
    b = np.ones_like(a)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        combine(a, b, f32, "sum")
        times.append(time.perf_counter() - t0)
    return float(np.median(times)) / nbytes


def fit(comm: Communicator, sizes: tuple[int, ...] = (8, 1 << 12, 1 << 16, 4 << 20, 16 << 20),
        reps: int = 5, *, timeout: float | None = None) -> CostParams:
    """Fit alpha, beta (probe of ``comm``), the link classes and gamma (kernel timing);
    collective, the same on all ranks.

    ``timeout`` bounds each of the probe's waits (None: ``collectives.defaults.timeout``).
    Every rank ends with the same parameters: each rank's values are gathered and the
    slowest taken, so "auto" decides the same on every rank. The hosts come from
    ``collectives.topology``: on one host the flat fit is the intra-host class, with one rank
    per host the cross-host class; otherwise each class is probed on the intra-host and
    cross-host sub-communicators (``CLASS_SIZES``), every rank taking part alike."""
    if comm.size == 1:
        return CostParams(0.0, 0.0, measure_gamma())
    topo = topology(comm, timeout=timeout)
    mine = [*_line(comm, sizes, reps, timeout), measure_gamma()]
    both = 1 < topo.n_hosts < comm.size
    if both:
        subs = host_comms(comm, timeout=timeout)
        for sub in (subs.intra, subs.cross):
            mine += _line(sub, CLASS_SIZES, reps, timeout, sync=comm)
    table = comm.allgather_ints(np.array(mine, dtype=np.float64).view(np.int64),
                                collective="cost-model fit", timeout=timeout)
    worst = [float(v) for v in table.view(np.float64).max(axis=0)]  # slowest rank paces it
    flat = Link(worst[0], worst[1])
    if both:
        intra, cross = Link(*worst[3:5]), Link(*worst[5:7])
    elif topo.n_hosts == 1:  # one host: the flat link is the intra-host class
        intra, cross = flat, None
    else:  # one rank per host: the flat link is the cross-host class
        intra, cross = None, flat
    return CostParams(*worst[:3], intra=intra, cross=cross, hosts=topo.sizes)


def params(comm: Communicator, *, timeout: float | None = None) -> CostParams:
    """The communicator's fitted parameters, probing on first use (collective; ``timeout``
    bounds each wait of the probe)."""
    cached = comm.cache.cost_params
    if cached is None:
        check_timeout(timeout)  # before the first message, so no rank starts the probe alone
        cached = comm.cache.cost_params = fit(comm, timeout=timeout)
    return cached


def level_params(sub: Communicator, c: CostParams, level: str) -> CostParams:
    """The parameters of ``sub``, a sub-communicator of one link class of a communicator
    whose parameters are ``c`` ("intra": the ranks of one host; "cross": one rank per host):
    that class as its flat link. Kept on ``sub`` where it has none, so that choosing an
    algorithm there reads them instead of probing midway through a two-level call."""
    if sub.cache.cost_params is None:
        hosts = (sub.size,) if level == "intra" else (1,) * sub.size
        sub.cache.cost_params = c.on(level, hosts)
    return sub.cache.cost_params


def predicted_best(p: int, nbytes: int, c: CostParams) -> str:
    """The modeled algorithm with the least predicted time (ties: the first name; on one host
    two_level ties with the ring it runs there, and "ring" comes first)."""
    return min((a.name for a in modeled()), key=lambda a: (predict(a, p, nbytes, c), a))


def sparse_dense_threshold(index_bytes: int, value_bytes: int) -> float:
    """Density above which a range is cheaper sent dense: V / (I + V).

    Both representations go in one message per peer, so alpha cancels and only the bytes
    (beta) decide: nnz (I+V) > width V  <=>  nnz / width > V / (I+V)."""
    return value_bytes / (index_bytes + value_bytes)


def best_dense(p: int, nbytes: int, c: CostParams, segment: int | None = None
               ) -> tuple[str, float]:
    """The fastest dense algorithm for nbytes and its predicted time."""
    t, name = min((predict(a.name, p, nbytes, c, segment), a.name) for a in modeled())
    return name, t


@dataclass(frozen=True)
class SchemeLoad:
    """What one compressed allreduce moves and codes, as its scheme's price reads it: p > 1
    ranks, ``numel`` elements of ``value_bytes``, a payload of ``payload_bytes`` per rank
    (``sparse_k`` entries for a sparse one), ``encode_s`` and ``decode_s`` seconds to encode
    and decode the whole input once, and the dense algorithms' pipeline ``segment``."""

    p: int
    numel: int
    value_bytes: int
    payload_bytes: int
    encode_s: float
    decode_s: float
    sparse_k: int = 0
    segment: int | None = None

    @classmethod
    def of_rates(cls, p: int, numel: int, value_bytes: int, payload_bytes: int,
                 compress_s_per_byte: float, decompress_s_per_byte: float, sparse_k: int = 0,
                 segment: int | None = None) -> SchemeLoad:
        """The load whose coding runs at the measured rates (seconds per input byte)."""
        n_bytes = numel * value_bytes
        return cls(p, numel, value_bytes, payload_bytes, compress_s_per_byte * n_bytes,
                   decompress_s_per_byte * n_bytes, sparse_k, segment)

    @property
    def n_bytes(self) -> int:
        return self.numel * self.value_bytes
