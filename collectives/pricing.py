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
``collectives.compressed.SCHEMES``, dense algorithms in ``collectives.algorithms``. This
module, above those registries, prices a scheme by name; the shared pieces the entries use
(``SchemeLoad``, ``best_dense``, ``sparse_dense_threshold``) live in ``collectives.costmodel``
and are re-exported here.
"""

from __future__ import annotations

from .compressed import SCHEMES, hierarchical, predict_scheme, scheme_costs
from .costmodel import SchemeLoad, best_dense, sparse_dense_threshold
from .costparams import CostParams
from .sparse import modeled as sparse_modeled
from .sparse import predict as predict_sparse

__all__ = ["SchemeLoad", "best_dense", "predict_scheme", "predict_sparse", "predicted_bytes",
           "scheme_costs", "sparse_dense_threshold", "two_level_bytes", "two_level_costs"]


def __getattr__(name: str) -> tuple[str, ...]:
    if name == "SPARSE_MODELED":  # the exact sparse allreduces, from the live registry
        return sparse_modeled()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
    if scheme not in SCHEMES:
        raise ValueError(f"no byte count for scheme {scheme!r}")
    return SCHEMES[scheme].wire_bytes(p, payload_bytes, entries, entry_bytes)


def two_level_costs(scheme: str, load: SchemeLoad, c: CostParams) -> tuple[float, float]:
    """(communication, codec) seconds of a two-level compressed allreduce of ``load`` on the
    hosts ``c.layout(load.p)`` (module doc)."""
    if scheme not in SCHEMES:
        raise ValueError(f"no price for scheme {scheme!r}")
    return hierarchical.price(scheme, load, c)


def two_level_bytes(scheme: str, hosts: int, local: int, nbytes: int, shard_payload_bytes: int,
                    entries: int = 0, entry_bytes: int = 8) -> tuple[float, float]:
    """(inside, across) bytes one rank sends in a two-level compressed allreduce of ``nbytes``
    on ``hosts`` hosts of ``local`` ranks: 2(L-1)/L nbytes inside its host, and the scheme's
    ``wire_bytes`` at p = H for its shard's payload across hosts (metadata left out)."""
    if scheme not in SCHEMES:
        raise ValueError(f"no byte count for scheme {scheme!r}")
    return hierarchical.wire_bytes(scheme, hosts, local, nbytes, shard_payload_bytes, entries,
                                   entry_bytes)
