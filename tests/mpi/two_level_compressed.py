"""Two-level compressed allreduce on hosts emulated through COMPCOLL_HOST ("HxL": H hosts of
L consecutive ranks). Checked on every rank: the identity compressor through every scheme
equals the plain two_level allreduce bit for bit (order-free inputs); lossy compressors stay
within their error and give identical bits everywhere; error feedback keyed on the shard
conserves the sum; the bytes sent inside and across hosts are the model's; pipelined chunks;
hierarchy "auto" and the refusals; the cost model's link classes fitted on the emulated hosts
(--fit); set-up bounded by the call's timeout (--timeout).
Run: mpiexec -n P python tests/mpi/two_level_compressed.py HxL [--fit] [--timeout]
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np
import torch

import collectives
import compressors
from collectives import MismatchError, costmodel, pricing
from collectives.algorithms import two_level
from collectives.algorithms.common import partition
from collectives.compressed import SCHEMES, candidates, hierarchical, resolve_compressor, rsag
from collectives.errors import CollectiveTimeout
from collectives.topology import topology

from common import WORLD, Checker

P, R = WORLD.size, WORLD.rank
FLAT = {"algorithm": "ring", "sparse_algorithm": "ssar_split_allgather"}  # nothing to fit
LOSSY = [("uniform:bits=8", "reduce_scatter_allgather", 0.02), ("fp16", "dense", 1e-3),
         ("topk:ratio=0.1", "sparse", None), ("topk:ratio=0.1", "allgather", None)]


def emulate(layout: str) -> collectives.Communicator:
    """A fresh communicator whose ranks believe they sit on the layout's hosts ("3x2"; or
    "3+1": consecutive hosts of 3 and 1 ranks)."""
    sizes = [int(x) for x in layout.split("+")] if "+" in layout else \
        [int(layout.split("x")[1])] * int(layout.split("x")[0])
    labels = [h for h, n in enumerate(sizes) for _ in range(n)]
    assert len(labels) == P, f"layout {layout} is for {len(labels)} ranks, not {P}"
    os.environ["COMPCOLL_HOST"] = f"compressed {layout}/host{labels[R]}"
    return collectives.as_communicator(WORLD.Dup())


def ints(n: int, dtype: str, seed: int):
    """Multiples of p: sums and averages are exact in any order."""
    x = np.random.default_rng([seed, R]).integers(-4, 5, n).astype(np.float32) * P
    return torch.from_numpy(x).to(torch.bfloat16) if dtype == "bfloat16" else x.astype(dtype)


def same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a.view(torch.int16),
                                                           b.view(torch.int16))
    return type(a) is type(b) and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def none_is_two_level(chk: Checker, comm) -> None:
    """The identity compressor through every scheme is the plain two_level allreduce."""
    seed = 0
    for dtype in ("float32", "float16", "bfloat16"):
        for n in (0, 1, P + 1, 1009) if dtype == "float32" else (P + 1, 1009):
            seed += 1
            x = ints(n, dtype, seed)
            for op in ("sum", "avg"):
                plain = collectives.allreduce(x, op=op, algorithm="two_level", comm=comm)
                for scheme in SCHEMES:
                    what = f"none {scheme} {dtype} n={n} {op}"
                    stats: dict = {}
                    y = chk.run(what, collectives.allreduce, x, op=op, compressor="none",
                                scheme=scheme, hierarchy="two_level", comm=comm, stats=stats,
                                **FLAT)
                    chk.check(y is not None and same(y, plain), f"{what}: differs")
                    chk.check(stats.get("hierarchy") == "two_level", f"{what}: {stats}")
            if dtype == "float32" and n:  # in place, through hierarchy "auto"
                buf = x.copy()
                y = collectives.allreduce(buf, out=buf, compressor="none", comm=comm, **FLAT)
                want = collectives.allreduce(x, algorithm="two_level", comm=comm)
                chk.check(y is buf and same(y, want), f"none in place n={n}")


def oracle_topk(comp, x: np.ndarray, layout: tuple[int, int], every: np.ndarray) -> np.ndarray:
    """Each host's shard sum compressed by the shard's owner, summed across hosts."""
    hosts, local = layout
    want = np.zeros(x.size)
    for i, (lo, hi) in enumerate(partition(x.size, local)):
        for h in range(hosts):
            part = every[h * local:(h + 1) * local, lo:hi].sum(axis=0).astype(np.float32)
            pl = comp.compress(part, name=f"w@shard{i}", step=0)
            want[lo:hi] += np.asarray(comp.decompress(pl), np.float64).reshape(-1)
    return want


def lossy(chk: Checker, comm, layout: tuple[int, int]) -> None:
    """Close to the exact sum (within the compressor's error), identical everywhere."""
    x = np.random.default_rng([7, R]).standard_normal(2003).astype(np.float32)
    every = np.stack(WORLD.allgather(x.astype(np.float64)))
    exact = every.sum(axis=0)
    for spec, scheme, bound in LOSSY:
        comp = compressors.get(spec)
        for fb in (None, compressors.ErrorFeedback(comp)):
            what = f"{spec} {scheme} feedback={fb is not None}"
            stats: dict = {}
            y = chk.run(what, collectives.allreduce, x, compressor=comp, scheme=scheme,
                        feedback=fb, name="w", hierarchy="two_level", comm=comm, stats=stats,
                        **FLAT)
            if y is None:
                continue
            chk.identical(y, what)
            if bound is not None:
                err = np.linalg.norm(y - exact) / np.linalg.norm(exact)
                chk.check(err < bound, f"{what}: relative error {err:.3g} >= {bound}")
            else:  # top-k of each host's shard sum: the shard's owner selects
                want = oracle_topk(comp, x, layout, every)
                chk.check(np.allclose(y, want, rtol=1e-5, atol=1e-5), f"{what}: not top-k of "
                          f"the host sums (max gap {np.abs(y - want).max():.3g})")
            chk.check(stats.get("scheme") == scheme and stats.get("cross_bytes_sent", 0) > 0,
                      f"{what}: stats {stats}")
            if fb is not None:
                local = topology(comm).local_rank
                chk.check(set(fb.residuals) <= {f"w@shard{local}", f"w@shard{local}@owner"}
                          and f"w@shard{local}" in fb.residuals, f"{what}: {set(fb.residuals)}")


def conservation(chk: Checker, comm, layout: tuple[int, int], what: str = "conservation"
                 ) -> None:
    """Sum of outputs + every rank's residuals (mapped to their elements) == sum of inputs
    (chunk by chunk where the call is pipelined: ``hierarchical.pieces``)."""
    hosts, local = layout
    n, steps = 999, 10
    for spec, scheme in (("uniform:bits=2", "reduce_scatter_allgather"), ("fp16", "dense"),
                         ("topk:ratio=0.05", "sparse"), ("topk:ratio=0.05", "allgather")):
        comp = compressors.get(spec)
        chunks = partition(n, hierarchical.pieces(comp.capabilities.sparse, 4 * n,
                                                  comp.payload_nbytes(n)))
        fb = compressors.ErrorFeedback(comp)
        out_sum, true_sum, scale = np.zeros(n), np.zeros(n), 0.0
        for t in range(steps):
            g = np.random.default_rng([t, R, 3]).standard_normal(n).astype(np.float32)
            out_sum += collectives.allreduce(g, compressor=comp, scheme=scheme, feedback=fb,
                                             name="g", step=t, hierarchy="two_level",
                                             comm=comm, **FLAT)
            every = np.stack(WORLD.allgather(g.astype(np.float64)))
            true_sum += every.sum(axis=0)
            scale = max(scale, float(np.abs(every).sum(axis=0).max()))
        held = np.zeros(n)
        for r, res in enumerate(WORLD.allgather({k: v.astype(np.float64)
                                                 for k, v in fb.residuals.items()})):
            i, h = r % local, r // local
            for k, (clo, chi) in enumerate(chunks):
                key = f"g@shard{i}" + (f"/{k}" if len(chunks) > 1 else "")
                lo, hi = (clo + x for x in partition(chi - clo, local)[i])
                held[lo:hi] += res.get(key, 0.0)
                owner = res.get(f"{key}@owner")
                if owner is not None:  # the owner's ranges of the shard, segment by segment
                    at = 0
                    count = rsag.segment_count(hi - lo, hosts, True)
                    for a, b in rsag.owned_ranges(hi - lo, hosts, h, count):
                        held[lo + a:lo + b] += owner[at:at + b - a]
                        at += b - a
        gap = np.abs(out_sum + held - true_sum).max()
        # fp16 payloads are summed in fp16 across hosts: H - 1 roundings a step that no
        # residual keeps, each within 2^-11 of a partial sum (bounded by the magnitudes)
        tol = steps * (1e-5 + (hosts - 1) * 2 ** -11 * scale * (spec == "fp16"))
        chk.check(gap < tol, f"{what} {spec} {scheme}: gap {gap:.3g} >= {tol:.3g}")


def pipelined(chk: Checker, comm, layout: tuple[int, int]) -> None:
    """Chunks of 256 bytes (up to 8 of them): each chunk's shard crosses hosts while the
    host reduces and gathers its neighbours. The identity through every scheme is the plain
    (pipelined) two_level allreduce; lossy calls give identical bits within their error;
    error feedback, one residual per chunk's shard, conserves the sum."""
    saved = two_level.PIECE_BYTES
    two_level.PIECE_BYTES = 256
    try:
        x = ints(1009, "float32", 11)
        plain = collectives.allreduce(x, algorithm="two_level", comm=comm)
        for scheme in SCHEMES:
            y = chk.run(f"pipelined none {scheme}", collectives.allreduce, x,
                        compressor="none", scheme=scheme, hierarchy="two_level", comm=comm,
                        **FLAT)
            chk.check(y is not None and same(y, plain), f"pipelined none {scheme}: differs")
        g = np.random.default_rng([8, R]).standard_normal(2003).astype(np.float32)
        exact = np.stack(WORLD.allgather(g.astype(np.float64))).sum(axis=0)
        for spec, scheme, bound in LOSSY[:2]:
            fb = compressors.ErrorFeedback(compressors.get(spec))
            y = chk.run(f"pipelined {spec}", collectives.allreduce, g, compressor=spec,
                        scheme=scheme, feedback=fb, name="w", hierarchy="two_level",
                        comm=comm, **FLAT)
            if y is None:
                continue
            chk.identical(y, f"pipelined {spec}")
            err = np.linalg.norm(y - exact) / np.linalg.norm(exact)
            chk.check(err < bound, f"pipelined {spec}: relative error {err:.3g} >= {bound}")
            local = topology(comm).local_rank
            comp = compressors.get(spec)  # chunked by its payload's bytes: 7 and 8 chunks
            last = hierarchical.pieces(False, g.nbytes, comp.payload_nbytes(g.size)) - 1
            chk.check(last >= 6 and f"w@shard{local}/{last}" in fb.residuals,
                      f"pipelined {spec}: residuals {sorted(fb.residuals)}")
        conservation(chk, comm, layout, "pipelined conservation")
    finally:
        two_level.PIECE_BYTES = saved


def wire(chk: Checker, comm, layout: tuple[int, int]) -> None:
    """Bytes inside and across hosts are what the model counts (shards divisible by H)."""
    hosts, local = layout
    subs = comm.cache.host_comms
    n = 840 * P
    m = n // local
    x = np.random.default_rng([9, R]).standard_normal(n).astype(np.float32)
    for spec, scheme, _ in LOSSY:
        comp = compressors.get(spec)
        entries = eb = 0
        if scheme == "dense":
            payload = m * 2  # the fp16 values are allreduced as they are
        elif scheme == "reduce_scatter_allgather":  # one chunk payload per host
            payload = hosts * comp.wire_nbytes((m // hosts,), "float32")
        else:
            payload = comp.wire_nbytes((m,), "float32")
            entries = comp.compress(x[:m], name="probe").buffers["values"].size
            eb = 8  # int32 index + float32 value
        inside, across = pricing.two_level_bytes(scheme, hosts, local, n * 4, payload,
                                                 entries, eb)
        before = subs.intra.bytes_sent, subs.cross.bytes_sent
        collectives.allreduce(x, compressor=comp, scheme=scheme, hierarchy="two_level",
                              comm=comm, validate=False, **FLAT)
        sent_in = subs.intra.bytes_sent - before[0]
        sent_across = subs.cross.bytes_sent - before[1]
        what = f"bytes {spec} {scheme}: inside {sent_in} want {inside}, across " \
               f"{sent_across} want {across}"
        chk.check(sent_in == inside, what)
        if scheme == "sparse":  # the model spreads a rank's entries evenly over the ranges
            chk.check(abs(sent_across - across) <= 0.1 * across, what)
        else:
            chk.check(sent_across == across, what)


def decisions(chk: Checker, comm) -> None:
    """hierarchy "auto" and "flat", and every refusal, on every rank alike."""
    x = np.ones(64, np.float32)
    # "auto" on hosts of several ranks: two-level where the model fitted here prices it
    # cheaper (``hierarchical.pays``: the same answer on every rank), else flat
    priced = "two_level" if hierarchical.pays(comm, resolve_compressor("fp16"), 64, 4,
                                              ["dense"], None) else "flat"
    chk.check(len(set(WORLD.allgather(priced))) == 1, "ranks priced auto differently")
    for hierarchy, spec, want in (("auto", "fp16", priced), ("flat", "fp16", "flat"),
                                  ("auto", "powersgd:rank=1", "flat")):
        stats: dict = {}
        chk.run(f"{hierarchy} {spec}", collectives.allreduce, x.reshape(8, 8), compressor=spec,
                hierarchy=hierarchy, comm=comm, stats=stats, scheme="dense", **FLAT)
        chk.check(stats.get("hierarchy") == want, f"hierarchy {hierarchy} {spec}: {stats}")
    for kwargs, needle, exc in (
            (dict(compressor="fp16", hierarchy="levels"), "unknown hierarchy", ValueError),
            (dict(hierarchy="two_level"), "without a compressor", ValueError),
            (dict(compressor="powersgd:rank=1", hierarchy="two_level"), "matrices", ValueError),
            (dict(compressor="fp16", hierarchy="two_level" if R else "flat"), "hierarchy",
             MismatchError),
            (dict(compressor="fp16", hierarchy="two_level", scheme="dense",
                  algorithm="two_level"), "two_level.CROSS", MismatchError),
            (dict(algorithm="two_level"), "two_level.CROSS", MismatchError)):
        if kwargs.get("algorithm") == "two_level":
            two_level.CROSS = "tree" if R == 0 else "ring"
        try:
            collectives.allreduce(x.reshape(8, 8), comm=comm, **kwargs)
            chk.check(False, f"accepted {kwargs}")
        except exc as e:
            chk.check(needle in str(e), f"{needle!r} not in {e}")
        finally:
            two_level.CROSS = "ring"
    y = collectives.allreduce(x, compressor="fp16", comm=comm, hierarchy="two_level", **FLAT)
    chk.check(bool((y == P).all()), "usable after the refusals")


def unequal(chk: Checker) -> None:
    """Hosts of 3 and 1 ranks: "auto" is flat, "two_level" refused on every rank."""
    comm = emulate("3+1")
    stats: dict = {}
    y = collectives.allreduce(np.ones(50, np.float32), compressor="fp16", comm=comm,
                              stats=stats, **FLAT)
    chk.check(stats.get("hierarchy") == "flat" and bool((y == P).all()), f"3+1 auto: {stats}")
    try:
        collectives.allreduce(np.ones(50, np.float32), compressor="fp16", comm=comm,
                              hierarchy="two_level", **FLAT)
        chk.check(False, "3+1: two_level accepted")
    except ValueError as e:
        chk.check("same size" in str(e), str(e))


def fitted(chk: Checker, comm, layout: tuple[int, int]) -> None:
    """The link classes fitted on the emulated hosts, the same on every rank; all-"auto"
    calls (algorithm, scheme, sparse algorithm, hierarchy) then run on them."""
    hosts, local = layout
    c = costmodel.params(comm)
    chk.check(c.intra is not None and c.cross is not None and c.hosts == (local,) * hosts,
              f"fit: {c!r}")
    chk.check(len(set(WORLD.allgather(repr(c)))) == 1, "fit differs between ranks")
    x = np.random.default_rng([11, R]).standard_normal(4099).astype(np.float32)
    for spec in ("uniform:bits=8", "fp16", "topk:ratio=0.1"):
        stats: dict = {}
        y = chk.run(f"auto {spec}", collectives.allreduce, x, compressor=spec, comm=comm,
                    stats=stats)
        if y is not None:
            chk.identical(y, f"auto {spec}")
            comp = resolve_compressor(spec)
            want = "two_level" if hierarchical.pays(comm, comp, x.size, 4, candidates(comp),
                                                    None) else "flat"
            chk.check(stats["hierarchy"] == want, f"auto {spec}: {stats}, priced {want}")
            chk.check(len(set(WORLD.allgather(stats["hierarchy"]))) == 1,
                      f"auto {spec}: ranks took different hierarchies")
    cross = comm.cache.host_comms.cross
    chk.check(cross.cache.cost_params == c.on("cross", (1,) * hosts),
              f"cross-host params {cross.cache.cost_params!r}")
    y = collectives.allreduce(x, comm=comm)  # plain auto: flat or two_level, alike everywhere
    chk.identical(y, "plain auto on emulated hosts")


def timeouts(chk: Checker, layout: str) -> None:
    """On a fresh communicator the last rank stays away: the set-up of each kind of call
    times out within the call's timeout, not the default's."""
    cases = {"plain two_level": dict(algorithm="two_level"),
             "compressed, dense on two_level": dict(compressor="fp16", scheme="dense",
                                                    algorithm="two_level", hierarchy="flat"),
             "two-level compressed": dict(compressor="fp16", scheme="dense",
                                          hierarchy="two_level", algorithm="ring")}
    for what, kwargs in cases.items():
        comm = emulate(layout)
        WORLD.Barrier()
        if R == P - 1:
            time.sleep(2.5)
        else:
            t0 = time.perf_counter()
            try:
                collectives.allreduce(np.ones(64, np.float32), comm=comm, timeout=1.0,
                                      validate=False, **kwargs)
                chk.check(False, f"{what}: no timeout without rank {P - 1}")
            except CollectiveTimeout:
                took = time.perf_counter() - t0
                chk.check(took < 2.4, f"{what}: timed out after {took:.1f} s")
        WORLD.Barrier()


def main() -> None:
    args = sys.argv[1:]
    name = next(a for a in args if not a.startswith("--"))
    hosts, local = map(int, name.split("x"))
    chk = Checker("two-level compressed")
    comm = emulate(name)
    for part in (none_is_two_level, lossy, conservation, wire, pipelined):
        chk.run(part.__name__, part, chk, comm, *(() if part is none_is_two_level
                                                   else ((hosts, local),)))
    chk.run("decisions", decisions, chk, comm)
    if P == 4:
        chk.run("unequal", unequal, chk)
    if "--fit" in args:
        chk.run("fitted", fitted, chk, comm, (hosts, local))
    if "--timeout" in args:
        chk.run("timeouts", timeouts, chk, name)
    chk.finish()


if __name__ == "__main__":
    main()
