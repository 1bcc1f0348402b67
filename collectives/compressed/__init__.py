"""Compressed allreduce: the collective follows the compressor's declared capabilities.

Schemes (registry ``SCHEMES``):

    dense                     summable payloads allreduced as they are (fp16, bf16, random-k,
                              none; PowerSGD's P and Q)
    reduce_scatter_allgather  quantized payloads: owner decodes, sums in fp32, recompresses
    allgather                 any payload: everyone decodes all and sums
    sparse                    sparse payloads through a sparse allreduce

``scheme="auto"`` prices the feasible ones with the fitted cost model and the compressor's
measured speed and payload size (``pricing``); an explicit scheme the compressor cannot use
is refused with the reason and the schemes that would work.

On several hosts every scheme also runs two-level (``hierarchical``, ``hierarchy=`` of
``collectives.allreduce``): full-precision reduce-scatter inside the host, the scheme on each
local rank's shard across hosts, allgather inside the host; ``pricing.two_level_costs`` prices
it from the same registry entries.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import compressors
from compressors import Compressor

from ..algorithms.common import Steps
from ..costmodel import SchemeLoad
from ..costparams import CostParams
from . import dense, gather, rsag, sparse
from .common import Ctx


@dataclass(frozen=True)
class Scheme:
    """A compressed allreduce scheme: how it runs, its price (communication, codec) seconds
    for a ``SchemeLoad``, and the bytes one rank sends, as
    ``wire_bytes(p, payload_bytes, entries, entry_bytes)`` (p > 1)."""

    name: str
    run: Callable[[Ctx], Steps]
    price: Callable[[SchemeLoad, CostParams], tuple[float, float]]
    wire_bytes: Callable[[int, int, int, int], float]


SCHEMES: dict[str, Scheme] = {
    s.name: s for s in (Scheme("dense", dense.run, dense.price, dense.wire_bytes),
                        Scheme("reduce_scatter_allgather", rsag.run, rsag.price, rsag.wire_bytes),
                        Scheme("allgather", gather.run, gather.price, gather.wire_bytes),
                        Scheme("sparse", sparse.run, sparse.price, sparse.wire_bytes))}

__all__ = ["SCHEMES", "Scheme", "candidates", "compressor_digest", "feasible",
           "resolve_compressor"]


def resolve_compressor(compressor: Any) -> Compressor:
    """A Compressor from an instance or a spec string such as "topk:ratio=0.01"."""
    if isinstance(compressor, Compressor):
        return compressor
    if isinstance(compressor, str):
        return compressors.get(compressor)
    raise TypeError(f"compressor must be a compressors.Compressor or a spec string like "
                    f"'uniform:bits=8', got {type(compressor).__name__}")


def feasible(comp: Compressor) -> list[str]:
    """The schemes this compressor's payloads can go through."""
    caps = comp.capabilities
    out = []
    if caps.summable or caps.allreduce_steps:
        out.append("dense")
    if not caps.sparse and caps.same_size_on_all_ranks and not caps.allreduce_steps:
        out.append("reduce_scatter_allgather")
    out += ["allgather", "sparse"]
    return out


def candidates(comp: Compressor) -> list[str]:
    """The schemes ``scheme="auto"`` chooses among: the feasible ones, except that the
    identity compressor is the plain dense allreduce itself and that a dense payload is not
    sent by its non-zeros (possible when asked for, never a good guess)."""
    if comp.name == "none":
        return ["dense"]
    return [s for s in feasible(comp) if s != "sparse" or comp.capabilities.sparse]


def check_scheme(scheme: str, comp: Compressor) -> None:
    if scheme == "auto":
        return
    if scheme not in SCHEMES:
        raise ValueError(f"unknown scheme {scheme!r}; available: auto, {', '.join(SCHEMES)}")
    ok = feasible(comp)
    if scheme not in ok:
        caps = comp.capabilities
        why = {"dense": "its payloads cannot be added without decoding (summable=False)",
               "reduce_scatter_allgather": "it needs same-size dense payloads on every rank "
               f"(sparse={caps.sparse}, same_size_on_all_ranks={caps.same_size_on_all_ranks})"}
        raise ValueError(f"scheme {scheme!r} cannot carry {comp.name}{comp.params}: "
                         f"{why.get(scheme, '')}; use one of: {', '.join(ok)}")


def compressor_digest(comp: Compressor) -> int:
    """A 31-bit fingerprint of the compressor and its parameters (validation across ranks)."""
    text = f"{comp.name}:{sorted(comp.params.items())!r}"
    return zlib.crc32(text.encode()) & 0x7FFFFFFF


def scheme_costs(scheme: str, load: SchemeLoad, c: CostParams) -> tuple[float, float]:
    """(communication, codec) seconds of a compressed allreduce of ``load``
    (``collectives.pricing``); codec = encoding, decoding and summing decoded values. On
    one rank nothing is sent and the coding is all of it."""
    if load.p <= 1:
        return 0.0, load.encode_s + load.decode_s
    if scheme not in SCHEMES:
        raise ValueError(f"no price for scheme {scheme!r}")
    return SCHEMES[scheme].price(load, c)


def predict_scheme(scheme: str, load: SchemeLoad, c: CostParams) -> float:
    """Predicted seconds of a compressed allreduce of ``load`` (``collectives.pricing``)."""
    return sum(scheme_costs(scheme, load, c))
