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
"""

from __future__ import annotations

import math

from .costmodel import MODELED, CostParams, predict

SPARSE_MODELED = ("ssar_recursive_doubling", "ssar_split_allgather", "dsar")


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
    e = index_bytes + value_bytes
    union = min(n, p * k)
    if algorithm == "ssar_recursive_doubling":
        rounds = max(1, math.ceil(math.log2(p)))
        return sum(c.alpha + min((1 << i) * k, n) * e * c.beta for i in range(rounds))
    if algorithm in ("ssar_split_allgather", "dsar"):
        gather = union * e if algorithm == "ssar_split_allgather" else min(union * e,
                                                                          n * value_bytes)
        return 2 * (p - 1) * c.alpha + (p - 1) / p * (k * e + gather) * c.beta
    if algorithm == "gtopk":
        return 3 * (p - 1) * c.alpha + (p - 1) / p * (2 * k + p * k) * e * c.beta
    raise ValueError(f"no price for sparse algorithm {algorithm!r}")


def best_dense(p: int, nbytes: int, c: CostParams, segment: int | None = None
               ) -> tuple[str, float]:
    """The fastest dense algorithm for nbytes and its predicted time."""
    t, name = min((predict(a, p, nbytes, c, segment), a) for a in MODELED)
    return name, t


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
    if scheme == "dense":
        return best_dense(p, payload_bytes, c, segment)[1], comp + decomp
    if scheme == "reduce_scatter_allgather":
        return (2 * (p - 1) * c.alpha + 2 * (p - 1) / p * payload_bytes * c.beta,
                comp + comp / p + 2 * decomp + (p - 1) / p * n_bytes * c.gamma)
    if scheme == "allgather":
        return ((p - 1) * (c.alpha + payload_bytes * c.beta),
                comp + p * decomp + (p - 1) * n_bytes * c.gamma)
    if scheme == "sparse":
        return (min(predict_sparse(a, p, numel, sparse_k, c, 4, value_bytes)
                    for a in SPARSE_MODELED), comp + decomp)
    raise ValueError(f"no price for scheme {scheme!r}")


def predict_scheme(scheme: str, p: int, numel: int, value_bytes: int, payload_bytes: int,
                   c: CostParams, compress_s_per_byte: float, decompress_s_per_byte: float,
                   sparse_k: int = 0) -> float:
    """Predicted seconds of a compressed allreduce of ``numel`` elements (module doc)."""
    return sum(scheme_costs(scheme, p, numel, value_bytes, payload_bytes, c,
                            compress_s_per_byte, decompress_s_per_byte, sparse_k))


def predicted_bytes(scheme: str, p: int, payload_bytes: int, entries: int = 0,
                    entry_bytes: int = 8) -> float:
    """Bytes one rank sends in a compressed allreduce (metadata left out).

    dense: ring/Rabenseifner move 2(p-1)/p of the payload; reduce_scatter_allgather the same;
    allgather (ring): (p-1) payloads; sparse split-allgather: (p-1)/p of its own entries
    plus (p-1)/p of the union, at most p times its own entries.
    """
    if p <= 1:
        return 0.0
    if scheme in ("dense", "reduce_scatter_allgather"):
        return 2 * (p - 1) / p * payload_bytes
    if scheme == "allgather":
        return (p - 1) * payload_bytes
    if scheme == "sparse":
        return (p - 1) / p * entries * entry_bytes * (1 + p)
    raise ValueError(f"no byte count for scheme {scheme!r}")
