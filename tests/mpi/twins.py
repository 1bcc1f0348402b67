"""Identity twins are drop-ins: every feedback class (none, ErrorFeedback, NoErrorFeedback,
DGCFeedback) through every scheme of every registered compressor that supports it.
NoErrorFeedback gives the bits of no feedback at all; on the first step (nothing kept yet)
every feedback compresses the gradient itself; every rank holds the same bits.
Run: mpiexec -n P python tests/mpi/twins.py"""

from __future__ import annotations

from typing import Any

import numpy as np

import collectives
import compressors
from collectives.compressed import feasible

from common import WORLD, Checker

P, R = WORLD.size, WORLD.rank
SHAPE = (8, 12)  # a matrix, so low-rank methods take their own steps
FEEDBACKS: dict[str, Any] = {
    "none": None,
    "ErrorFeedback": compressors.ErrorFeedback,
    "NoErrorFeedback": compressors.NoErrorFeedback,
    "DGCFeedback": compressors.DGCFeedback,
}
SPECS = {"randomk": "randomk:ratio=0.25", "topk": "topk:ratio=0.25",
         "threshold": "threshold:tau=0.5", "powersgd": "powersgd:rank=2"}


def grad(step: int) -> np.ndarray:
    rng = np.random.default_rng(100 * step + R)
    return rng.standard_normal(SHAPE).astype(np.float32)


def run(chk: Checker, what: str, spec: str, scheme: str, fb: Any, step: int) -> Any:
    return chk.run(what, collectives.allreduce, grad(step), compressor=spec, feedback=fb,
                   scheme=scheme, name="w", step=step, algorithm="ring",
                   sparse_algorithm="ssar_split_allgather", timeout=60)


def main() -> None:
    chk = Checker("twins")
    for cname in compressors.available():
        spec = SPECS.get(cname, cname)
        comp = compressors.get(spec)
        for scheme in feasible(comp):
            base = run(chk, f"{spec} {scheme} none", spec, scheme, None, 0)
            for fname, cls in FEEDBACKS.items():
                if cls is None:
                    continue
                fb = cls(compressors.get(spec))  # an equal compressor, not the same object
                what = f"{spec} {scheme} {fname}"
                first = run(chk, f"{what} step 0", spec, scheme, fb, 0)
                second = run(chk, f"{what} step 1", spec, scheme, fb, 1)
                if first is None or second is None or base is None:
                    continue
                chk.identical(first, f"{what} step 0")
                chk.identical(second, f"{what} step 1")
                if fname == "NoErrorFeedback":
                    chk.check(np.array_equal(first, base), f"{what}: differs from no feedback")
                else:
                    chk.check(np.allclose(first, base, rtol=1e-5, atol=1e-6),
                              f"{what}: first step differs from no feedback by "
                              f"{np.abs(first - base).max()}")
                chk.check(bool(np.isfinite(second).all()), f"{what} step 1: non-finite")
    chk.finish()


if __name__ == "__main__":
    main()
