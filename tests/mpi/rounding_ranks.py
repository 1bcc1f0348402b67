"""Stochastic rounding draws from (seed, name, step, rank): every rank still ends with the
same bits, and the rounding errors of the ranks average out.

* every stochastic compressor, through the allgather and the compressed reduce-scatter/
  allgather schemes, with and without error feedback, over several steps: the result is
  bit-identical on every rank;
* every rank passes the same tensor at 2 bits through the allgather scheme: the error of the
  average is at most 0.75x the error of one rank's quantization (1/sqrt(3) = 0.58 expected;
  1 if every rank drew alike).

Run: mpiexec -n P python tests/mpi/rounding_ranks.py  (P >= 2)
"""

from __future__ import annotations

import numpy as np

import collectives
import compressors

from common import WORLD, Checker

P, R = WORLD.size, WORLD.rank
T = 60.0


def identical_results(chk: Checker) -> None:
    specs = ["uniform:bits=8", "uniform:bits=2", "qsgd", "terngrad", "randomk:ratio=0.25"]
    for spec in specs:
        comp = compressors.get(spec)
        schemes = ["dense"] if comp.capabilities.summable else \
            ["allgather", "reduce_scatter_allgather"]
        for scheme in schemes:
            for fb in (False, True):
                feedback = compressors.ErrorFeedback(comp) if fb else None
                for step in range(3):
                    x = np.random.default_rng(100 * R + step).standard_normal(5000).astype(
                        np.float32)
                    what = f"{spec} {scheme} feedback={fb} step {step}"
                    y = chk.run(what, collectives.allreduce, x, compressor=comp, scheme=scheme,
                                feedback=feedback, name="w", step=step, timeout=T)
                    if y is not None:
                        chk.identical(y, what)


def errors_average_out(chk: Checker) -> None:
    comp = compressors.get("uniform:bits=2")
    x = np.random.default_rng(5).standard_normal(1 << 16).astype(np.float32)  # every rank's
    y = chk.run("2-bit average", collectives.allreduce, x.copy(), compressor=comp,
                scheme="allgather", op="avg", name="w", step=0, timeout=T)
    if y is None:
        return
    chk.identical(y, "2-bit average")
    one = comp.decompress(comp.compress(x, name="w", step=0, rank=R))
    e_avg = float(np.sqrt(np.mean(np.square(y.astype(np.float64) - x))))
    e_one = float(np.sqrt(np.mean(np.square(one.astype(np.float64) - x))))
    chk.check(e_one > 0 and e_avg <= 0.75 * e_one,
              f"the average of {P} ranks' 2-bit roundings has error {e_avg:.4g}, one rank's "
              f"{e_one:.4g}: the ranks' rounding errors do not average out")


def main() -> None:
    chk = Checker("rounding_ranks")
    identical_results(chk)
    errors_average_out(chk)
    chk.finish()


if __name__ == "__main__":
    main()
