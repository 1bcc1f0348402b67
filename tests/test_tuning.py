"""auto's measured crossover table (collectives.tuning): its rules, its file, live ranks."""

from __future__ import annotations

import pytest

from collectives.algorithms import modeled
from collectives.tuning import Crossovers
from tests.mpirun import LAUNCHES, Script, passed

MB = 1 << 20
NAMES = [a.name for a in modeled()]


def table(**winner_at: int) -> Crossovers:
    """Sizes 1, 4 and 16 MB; each named algorithm fastest at the size index given."""
    times = {a: [2.0, 2.0, 2.0] for a in NAMES}
    for name, i in winner_at.items():
        times[name][i] = 1.0
    return Crossovers((MB, 4 * MB, 16 * MB), {a: tuple(t) for a, t in times.items()})


def test_the_table_picks_the_winner_at_the_nearest_size_on_a_log_scale() -> None:
    t = table(ring=0, tree=1, rabenseifner=2)
    assert t.best() == ("ring", "tree", "rabenseifner")
    assert t.pick(MB - 1) is None  # below the table: the model decides
    assert [t.pick(n) for n in (MB, 2 * MB - 1, 2 * MB + 1, 4 * MB, 9 * MB, 1 << 40)] == [
        "ring", "ring", "tree", "tree", "rabenseifner", "rabenseifner"]


def test_the_models_pick_stays_unless_the_table_times_it_clearly_slower() -> None:
    t = Crossovers((MB,), {a: (1.0,) for a in NAMES} | {"ring": (0.95,), "tree": (1.2,)})
    assert t.best() == ("ring",)
    assert t.pick(MB, model="rabenseifner") == "rabenseifner"  # 1.053x: a near-tie
    assert t.pick(MB, model="tree") == "ring"  # 1.26x slower: overruled
    assert t.pick(MB, model=None) == "ring"
    assert t.pick(MB, model="unknown") == "ring"


def test_ties_go_to_the_first_name_so_every_rank_picks_alike() -> None:
    t = Crossovers((MB,), {a: (1.0,) for a in NAMES})
    assert t.best() == (min(NAMES),)


@pytest.mark.parametrize("sizes,times", [((), {}), ((4, 2), {"ring": (1.0, 1.0)}),
                                         ((1,), {"ring": (float("nan"),)}),
                                         ((1,), {"ring": (1.0, 2.0)}), ((1,), {})])
def test_a_malformed_table_is_refused(sizes, times) -> None:
    with pytest.raises(ValueError):
        Crossovers(sizes, times)


def test_the_file_round_trips_and_refuses_another_key_or_algorithm_set() -> None:
    t = table(tree=0)
    assert Crossovers.from_json(t.to_json("k"), "k") == t
    with pytest.raises(ValueError, match="key differs"):
        Crossovers.from_json(t.to_json("k"), "other")
    fewer = Crossovers(t.sizes, {"ring": t.times["ring"]})
    with pytest.raises(ValueError, match="the algorithms are"):
        Crossovers.from_json(fewer.to_json("k"), "k")


@pytest.mark.parametrize("kwargs,match", [({"sizes": ()}, "sizes"), ({"sizes": (0,)}, "sizes"),
                                          ({"sizes": (4 << 20, MB)}, "increasing"),
                                          ({"reps": 0}, "reps"), ({"timeout": -1}, "timeout")])
def test_tune_refuses_bad_arguments_before_communicating(kwargs, match) -> None:
    from collectives import tune

    with pytest.raises(ValueError, match=match):
        tune(comm=object(), **kwargs)  # not a communicator: it would fail if reached


LAUNCHES.add(Script("tuning.py", 3, timeout=240))


@pytest.mark.mpi
@pytest.mark.parametrize("np_", [3])
def test_tuning_on_live_ranks(np_: int) -> None:
    passed(LAUNCHES.result("tuning.py", np_), "tuning")
