"""auto's measured crossover table on live ranks: tune, pick by it, save, load, ignore.

Run: mpiexec -n P python tests/mpi/tuning.py (COMPCOLL_CACHE_DIR: a fresh directory). Every
rank asserts; the times measured here decide nothing the checks depend on, except through
the table every rank must hold alike.
"""

from __future__ import annotations

import warnings

import numpy as np

import collectives
from collectives import costmodel, tuner, tuning
from collectives.algorithms import modeled

from common import WORLD, Checker

SIZES = (64 << 10, 256 << 10)


def fresh() -> collectives.Communicator:
    return collectives.as_communicator(WORLD.Dup())


def main() -> None:
    chk = Checker("tuning")
    names = [a.name for a in modeled()]

    # tune: one table on every rank, the winners among the modeled algorithms
    comm = fresh()
    table = chk.run("tune", tuner.tune, comm, sizes=SIZES, reps=2)
    if table is None:
        chk.finish()
    everyone = WORLD.allgather((table.sizes, table.times))
    chk.check(all(e == everyone[0] for e in everyone), "every rank holds the same table")
    chk.check(set(table.times) == set(names) and set(table.best()) <= set(names),
              f"times for every modeled algorithm: {table.times}")

    # auto follows the table from its smallest size, the model below
    pinned = tuning.Crossovers(SIZES, {a: (1.0, 1.0) for a in names}
                               | {"tree": (0.5, 2.0), "recursive_doubling": (2.0, 0.5)})
    comm.cache.crossovers = pinned
    chk.check(tuning.choose(comm, SIZES[0]) == "tree", "table's winner at 64 KiB")
    chk.check(tuning.choose(comm, 1 << 30) == "recursive_doubling", "largest size's winner")
    c = costmodel.params(comm)
    below = costmodel.predicted_best(comm.size, 4096, c)
    chk.check(tuning.choose(comm, 4096) == below, "the model below the table")
    for n in (0, 1, 7, 16411, 65536 // 4 + 3, 200003):  # sizes on both sides of 64 KiB
        x = np.arange(n, dtype=np.float32) * (WORLD.rank + 1)
        got = collectives.allreduce(x, comm=comm)
        want = np.arange(n, dtype=np.float32) * sum(range(1, WORLD.size + 1))
        chk.check(np.array_equal(got, want), f"auto with a table, n={n}")
        chk.identical(got, f"auto with a table, n={n}")

    # the saved table is found by a fresh communicator's first auto pick
    later = fresh()
    picked = tuning.choose(later, SIZES[-1])
    chk.check(later.cache.crossovers == table, "saved table loaded, equal to the tuned one")
    model = costmodel.predicted_best(WORLD.size, SIZES[-1], costmodel.params(later))
    chk.check(picked == table.pick(SIZES[-1], model), f"the loaded table's pick: {picked}")

    # COMPCOLL_TUNE=0 (collectives.defaults.tune, read from it at first use): not looked for
    collectives.defaults.tune = False
    off = fresh()
    tuning.choose(off, SIZES[-1])
    chk.check(off.cache.crossovers is None, "COMPCOLL_TUNE=0 skips the saved table")
    collectives.defaults.tune = True

    # a damaged file: a warning on rank 0, the model decides, nothing hangs
    target = tuning.path(tuning.key(comm))
    if WORLD.rank == 0:
        target.write_text('{"schema": 1, "key": "x"')
    WORLD.Barrier()
    damaged = fresh()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tuning.choose(damaged, SIZES[-1])
    chk.check(damaged.cache.crossovers is None, "a damaged table is ignored")
    if WORLD.rank == 0:
        chk.check(any("ignored" in str(w.message) for w in caught),
                  f"a warning names the damaged file: {[str(w.message) for w in caught]}")
    chk.finish()


if __name__ == "__main__":
    main()
