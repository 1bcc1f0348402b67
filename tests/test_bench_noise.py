"""The benchmarks' spread of repeated timings, and the rule that flags a ratio within it."""

from __future__ import annotations

import doctest

import numpy as np
import pytest

from compcoll_bench.commands import bench_report as report
from compcoll_bench.commands import noise
from compcoll_bench.commands.benchlib import Timing


def test_a_ratio_is_flagged_when_either_spread_is_wider_than_its_difference() -> None:
    medians = [100.0, 90.0, 110.0, 50.0, 100.0, 95.0]
    spreads = [0.05, 0.02, 0.20, 0.30, 0.0, None]
    # ratios 1.11 (both spreads < 0.11), 0.91 (its own 0.20 > 0.09), 2.0 (0.30 < 1.0),
    # 1.0 (any spread > 0: the baseline's 0.05), 1.05 (no spread: not judged)
    assert noise.flags(medians, spreads) == [None, False, True, False, True, None]


def test_the_baselines_spread_flags_rows_whose_own_is_narrow() -> None:
    assert noise.flags([100.0, 80.0, 125.0], [0.3, 0.0, 0.01]) == [None, True, True]
    assert noise.flags([100.0, 80.0], [0.2, 0.0]) == [None, False]  # 1.25: 0.25 > 0.2


def test_the_rule_is_strict_and_symmetric_in_the_two_spreads() -> None:
    assert noise.within_noise(1.5, 0.5, 0.0) is False  # as wide as the difference: not flagged
    assert noise.within_noise(1.5, 0.51, 0.0) is noise.within_noise(1.5, 0.0, 0.51) is True
    assert noise.within_noise(0.5, 0.49, 0.1) is False  # |0.5 - 1| = 0.5
    assert noise.within_noise(None, 0.1, 0.1) is None
    assert noise.within_noise(1.0, 0.1, None) is None


def test_the_base_row_may_be_any_and_a_zero_time_is_not_judged() -> None:
    assert noise.flags([80.0, 100.0, 0.0], [0.01, 0.01, 0.5], base=1) == [False, None, None]


def test_spread_is_the_interquartile_range_over_the_median() -> None:
    assert noise.spread([1.0, 2.0, 3.0, 4.0, 5.0]) == pytest.approx((4.0 - 2.0) / 3.0)
    assert noise.spread(np.full(7, 2.5)) == 0.0
    assert noise.spread([3.0]) is None  # one call: the spread is unknown, not zero
    timing = Timing.of(np.array([1.0, 2.0, 3.0, 4.0, 5.0]))
    assert (timing.calls, timing.p25, timing.median, timing.p75) == (5, 2.0, 3.0, 4.0)
    assert timing.spread == noise.spread([1.0, 2.0, 3.0, 4.0, 5.0])


def test_cells_fit_their_columns_and_keep_the_digits_aligned() -> None:
    assert [noise.percent(v) for v in (0.0042, 0.0996, 0.37, 9.99, 12.0)] == [
        "0.4", "10", "37", "999", ">999"]
    assert noise.ratio_cell(1.234, True) == "1.23~"
    assert noise.ratio_cell(1.234, False) == noise.ratio_cell(1.234, None) == "1.23 "
    assert noise.ratio_cell(None, None) == "- "


def test_a_table_line_shows_both_spreads_and_the_flag() -> None:
    lay = report.layout([False, True], algo=4, max_size=1024, itemsize=4)
    half = {"time_us": 50.0, "algbw_GBps": 0.02, "busbw_GBps": 0.02, "wrong": 0}
    rows = [{"size": 1024, "count": 256, "op": "sum", "algo": "ring", **half, "spread": 0.25,
             "ratio_vs_mpi": 0.9, "noisy": True, "model_us": None},
            {**half, "spread": None}]
    head = report.header(lay)[1].split()
    assert head.count("iqr%") == 2 and head.index("iqr%") == head.index("time(us)") + 1
    cells = report.format_line(rows, lay).split()
    assert cells[4:7] == ["50.0", "25", "0.020"] and cells[9:11] == ["50.0", "-"]
    assert cells[-2:] == ["0.90~", "-"]


def test_the_summary_counts_the_judged_ratios() -> None:
    rows = [{"noisy": None}, {"noisy": True}, {"noisy": False}, {"noisy": True}]
    assert noise.summary(rows, "vs MPI") == "# ~ within the noise: 2 of 3 'vs MPI' ratios"


def test_the_modules_examples_hold() -> None:
    assert doctest.testmod(noise).failed == 0
