"""Prices of the sparse and compressed schemes in the alpha-beta-gamma model.

Same notation as ``costmodel``: p ranks, alpha per message, beta per byte on the wire. A
sparse entry costs I + V bytes (index and value), a dense element V. For a sparse
allreduce, k = the largest per-rank non-zero count and U = min(n, p*k) the worst-case size of
the union (disjoint supports):

    ssar_recursive_doubling  sum over rounds i < log2 p of alpha + min(2^i k, n)(I+V) beta
    ssar_split_allgather     2(p-1) alpha + (p-1)/p (k + U)(I+V) beta
    dsar                     as split-allgather, the allgather at min(U(I+V), nV) bytes
    gtopk                    3(p-1) alpha + (p-1)/p (2k + p*k)(I+V) beta   (k = result size)

A compressed allreduce adds compression and decompression time (measured throughput, s/B of
input) to the communication of its payload of B bytes (for n elements of V bytes):

    dense                    allreduce of B bytes with the best dense algorithm
    reduce_scatter_allgather 2(p-1) alpha + 2(p-1)/p B beta; the owner decodes p blocks of
                             n/p, adds them ((p-1)/p nV gamma) and re-encodes one; everyone
                             decodes the gathered n
    allgather                (p-1) alpha + (p-1) B beta + p decodes of n + (p-1) nV gamma
    sparse                   the sparse allreduce of the payload's k entries

A two-level compressed allreduce (H hosts of L ranks, ``compressed.hierarchical``) pays the
ring reduce-scatter and allgather of the whole buffer inside the host on the intra-host link
class, and the scheme's price of one shard (n/L elements, B/L bytes, 1/L of the coding) over
H ranks on the cross-host class: only the bytes that cross hosts meet the cross-host link.

Each formula is the ``price`` of its registry entry, beside the code it prices: sparse
allreduces in ``collectives.sparse.ALGORITHMS``, compressed schemes in
``collectives.compressed.SCHEMES``, dense algorithms in ``collectives.algorithms``. The
functions here look the entry up by name.
"""

from __future__ import annotations

from dataclasses import dataclass

from .algorithms import modeled
from .costmodel import CostParams, predict

# The registries (``sparse``, ``compressed``) import this module for its helpers, so they are
# imported where a price is looked up, not here.


def __getattr__(name: str) -> tuple[str, ...]:
    if name == "SPARSE_MODELED":  # the exact sparse allreduces, from the live registry
        from .sparse import modeled as sparse_modeled

        return sparse_modeled()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def sparse_dense_threshold(index_bytes: int, value_bytes: int) -> float:
    """Density above which a range is cheaper sent dense: V / (I + V).

    Both representations go in one message per peer, so alpha cancels and only the bytes
    (beta) decide: nnz (I+V) > width V  <=>  nnz / width > V / (I+V)."""
    return value_bytes / (index_bytes + value_bytes)


def predict_sparse(algorithm: str, p: int, n: int, k: int, c: CostParams,
                   index_bytes: int = 4, value_bytes: int = 4) -> float:
    """Predicted seconds of a sparse allreduce (see the module doc)."""
    if p <= 1:
        return 0.0
    from .sparse import ALGORITHMS

    if algorithm not in ALGORITHMS:
        raise ValueError(f"no price for sparse algorithm {algorithm!r}")
    return ALGORITHMS[algorithm].price(p, n, k, c, index_bytes, value_bytes)


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

    @property
    def n_bytes(self) -> int:
        return self.numel * self.value_bytes


def scheme_costs(scheme: str, p: int, numel: int, value_bytes: int, payload_bytes: int,
                 c: CostParams, compress_s_per_byte: float, decompress_s_per_byte: float,
                 sparse_k: int = 0, segment: int | None = None) -> tuple[float, float]:
    """(communication, codec) seconds of a compressed allreduce of ``numel`` elements
    (module doc); codec = encoding, decoding and summing decoded values."""
    n_bytes = numel * value_bytes
    comp = compress_s_per_byte * n_bytes
    decomp = decompress_s_per_byte * n_bytes
    if p <= 1:
        return 0.0, comp + decomp
    from .compressed import SCHEMES

    if scheme not in SCHEMES:
        raise ValueError(f"no price for scheme {scheme!r}")
    load = SchemeLoad(p, numel, value_bytes, payload_bytes, comp, decomp, sparse_k, segment)
    return SCHEMES[scheme].price(load, c)


def predict_scheme(scheme: str, p: int, numel: int, value_bytes: int, payload_bytes: int,
                   c: CostParams, compress_s_per_byte: float, decompress_s_per_byte: float,
                   sparse_k: int = 0) -> float:
    """Predicted seconds of a compressed allreduce of ``numel`` elements (module doc)."""
    return sum(scheme_costs(scheme, p, numel, value_bytes, payload_bytes, c,
                            compress_s_per_byte, decompress_s_per_byte, sparse_k))


def predicted_bytes(scheme: str, p: int, payload_bytes: int, entries: int = 0,
                    entry_bytes: int = 8) -> float:
    """Bytes one rank sends in a compressed allreduce (metadata left out): the scheme's
    ``wire_bytes``.

    dense: ring/Rabenseifner move 2(p-1)/p of the payload; reduce_scatter_allgather the same;
    allgather (ring): (p-1) payloads; sparse split-allgather: (p-1)/p of its own entries
    plus (p-1)/p of the union, at most p times its own entries.
    """
    if p <= 1:
        return 0.0
    from .compressed import SCHEMES

    if scheme not in SCHEMES:
        raise ValueError(f"no byte count for scheme {scheme!r}")
    return SCHEMES[scheme].wire_bytes(p, payload_bytes, entries, entry_bytes)


def two_level_costs(scheme: str, p: int, numel: int, value_bytes: int, payload_bytes: int,
                    c: CostParams, compress_s_per_byte: float, decompress_s_per_byte: float,
                    sparse_k: int = 0, segment: int | None = None) -> tuple[float, float]:
    """(communication, codec) seconds of a two-level compressed allreduce of ``numel``
    elements on the hosts ``c.layout(p)`` (module doc); arguments as ``scheme_costs``."""
    from .compressed import SCHEMES, hierarchical

    if scheme not in SCHEMES:
        raise ValueError(f"no price for scheme {scheme!r}")
    n_bytes = numel * value_bytes
    load = SchemeLoad(p, numel, value_bytes, payload_bytes, compress_s_per_byte * n_bytes,
                      decompress_s_per_byte * n_bytes, sparse_k, segment)
    return hierarchical.price(scheme, load, c)


def two_level_bytes(scheme: str, hosts: int, local: int, nbytes: int, shard_payload_bytes: int,
                    entries: int = 0, entry_bytes: int = 8) -> tuple[float, float]:
    """(inside, across) bytes one rank sends in a two-level compressed allreduce of ``nbytes``
    on ``hosts`` hosts of ``local`` ranks: 2(L-1)/L nbytes inside its host, and the scheme's
    ``wire_bytes`` at p = H for its shard's payload across hosts (metadata left out)."""
    from .compressed import SCHEMES, hierarchical

    if scheme not in SCHEMES:
        raise ValueError(f"no byte count for scheme {scheme!r}")
    return hierarchical.wire_bytes(scheme, hosts, local, nbytes, shard_payload_bytes, entries,
                                   entry_bytes)
