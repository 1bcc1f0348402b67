"""The benchmark's collective table: every entry runs on the benchmark's inputs and its
closed-form check finds no wrong element, and finds the one element a corruption flips.
Run: mpiexec -n P python tests/mpi/bench_table.py
"""

from __future__ import annotations

import collectives
from compcoll_bench.commands import bench_data as data
from compcoll_bench.commands.collective_table import COLLECTIVES
from compressors import dtypes

from common import WORLD, Checker

P, R = WORLD.size, WORLD.rank


def main() -> None:
    chk = Checker("bench table")
    comm = collectives.as_communicator()
    for entry in COLLECTIVES.values():
        for name in ("float32", "int32", "float16", "bfloat16"):
            dtype = dtypes.BY_NAME[name]
            for op in ("sum", "max", "avg") if dtype.is_float else ("sum", "max"):
                for count in sorted({1, P, P + 1, 1009}):
                    what = f"{entry.name} {name} {op} count={count}"
                    buf = data.empty(dtype, count)
                    data.fill(buf, R, dtype)
                    res = chk.run(what, entry.run, comm, buf, op)
                    if res is None:
                        continue
                    wrong = WORLD.allreduce(entry.check(res, P, R, count, dtype, op))
                    chk.check(wrong == 0, f"{what}: {wrong} wrong elements")
                    if data.bits(res).size:
                        data.corrupt(res)
                        caught = entry.check(res, P, R, count, dtype, op)
                        chk.check(caught == 1, f"{what}: a corrupted element counted {caught}")
    chk.finish()


if __name__ == "__main__":
    main()
