"""Bad ``root`` and ``counts`` given to the public ``broadcast`` and ``reduce_scatter``: every
rank raises the same TypeError or ValueError naming the argument, before any message (with
and without validation), and the job stays usable after.

Run: mpiexec -n P python tests/mpi/root_counts.py
"""

from __future__ import annotations

import numpy as np

import collectives

from common import WORLD, Checker

P, R = WORLD.size, WORLD.rank


def refused(chk: Checker, what: str, fn, args: tuple, kwargs: dict, kind: type,
            words: str) -> None:
    """``fn(*args, **kwargs)`` raises ``kind`` with ``words`` on every rank, and every rank's
    error is the same."""
    error = None
    try:
        fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - checked below
        error = exc
    text = f"{type(error).__name__}: {error}"
    chk.check(type(error) is kind and words in str(error), f"{what}: {text}")
    every = WORLD.allgather(text)
    chk.check(len(set(every)) == 1, f"{what}: the ranks raised differently: {every}")


def main(chk: Checker) -> None:
    x = np.arange(10, dtype=np.float32)
    even = [10 // P + (r < 10 % P) for r in range(P)]
    for validate in (None, False):
        tag = "" if validate is None else " (validate=False)"
        for root, kind, words in [
            (1.0, TypeError, f"root must be a rank in [0, {P}) given as an int, got float 1.0"),
            ("0", TypeError, "got str '0'"),
            (True, TypeError, "got bool True"),
            (None, TypeError, "got NoneType None"),
            (P, ValueError, f"root must be a rank in [0, {P}), got {P}"),
            (-1, ValueError, "got -1"),
        ]:
            refused(chk, f"broadcast root={root!r}{tag}", collectives.broadcast, (x.copy(),),
                    {"root": root, "validate": validate}, kind, words)
        for counts, kind, words in [
            ([str(c) for c in even], TypeError, "counts[0] is str"),
            ([float(c) for c in even], TypeError, "counts[0] is float"),
            ([True] * P, TypeError, "counts[0] is bool"),
            ("5" * P, TypeError, "got str"),
            (7, TypeError, "got int 7"),
            (even + [0], ValueError, f"counts must hold {P} non-negative sizes summing to 10"),
            ([11] + [0] * (P - 1), ValueError, "summing to 10, got [11"),
            ([12, -2] + [0] * (P - 2), ValueError, "got [12, -2"),
        ]:
            refused(chk, f"reduce_scatter counts={counts!r}{tag}", collectives.reduce_scatter,
                    (x,), {"counts": counts, "validate": validate}, kind, words)
    b = np.full(4, R, np.int64)
    collectives.broadcast(b, root=np.int64(P - 1))  # a numpy integer is an int
    chk.check(bool((b == P - 1).all()), f"usable after: broadcast {b.tolist()}")
    mine = collectives.reduce_scatter(np.ones(10, np.float32), counts=np.array(even))
    chk.check(mine.size == even[R] and bool((mine == P).all()),
              f"usable after: reduce_scatter {mine.tolist()}")


if __name__ == "__main__":
    checker = Checker("root counts")
    checker.run("root and counts", main, checker)
    checker.finish()
