"""Small pieces of the benchmark's measurement: CPU samples, idle figures, offsets, skew."""

from __future__ import annotations

import math
import os

import pytest

from bench.capacity import idle_summary
from bench.procstat import (
    cpu_between,
    thread_cpu_ns,
    thread_names,
    thread_shares,
    thread_wakeups,
)
from bench.scaleout import start_skew
from bench.scan import next_offsets


def test_cpu_between_counts_every_thread_alive_at_the_second_reading() -> None:
    before = {1: 1_000_000_000, 2: 500_000_000, 3: 7}
    after = {1: 1_010_000_000, 2: 505_000_000, 4: 2_000_000}  # 3 ended, 4 started
    assert cpu_between(before, after) == pytest.approx(0.017)


def test_thread_cpu_ns_reads_this_process() -> None:
    times = thread_cpu_ns(os.getpid())
    assert os.getpid() in times  # the main thread's id is the process id
    assert all(ns >= 0 for ns in times.values())


def test_thread_shares_are_per_thread_cpu_and_wakeups_busiest_first() -> None:
    names = {1: "python", 2: "rdk:main"}
    shares = thread_shares(
        names,
        ({1: 0, 2: 10_000_000}, {1: 20_000_000, 2: 50_000_000, 3: 1_000_000}),
        ({1: 5, 2: 0}, {1: 25, 2: 40, 3: 2}),
        2.0,
    )
    assert shares == {"2 rdk:main": (0.02, 20.0), "1 python": (0.01, 10.0), "3 ?": (0.0005, 1.0)}
    assert list(shares) == ["2 rdk:main", "1 python", "3 ?"]


def test_thread_names_and_wakeups_read_this_process() -> None:
    pid = os.getpid()
    assert pid in thread_names(pid) and pid in thread_wakeups(pid)
    assert all(n >= 0 for n in thread_wakeups(pid).values())


def test_idle_figure_is_the_median_sample() -> None:
    idle = idle_summary([0.012, 0.090, 0.011, 0.013, 0.010], wall=5.0, cpu=0.14, ticks=5.0)
    assert idle["share"] == 0.012  # a garbage collection in one sample does not count
    assert idle["mean_share"] == pytest.approx(0.028)
    assert idle["per_tick_seconds"] == pytest.approx(0.012)
    assert math.isnan(float(idle_summary([0.01], 1.0, 0.01, 0.0)["per_tick_seconds"]))


def test_next_offsets_start_after_the_last_record_read() -> None:
    assert next_offsets([(0, 5), (1, 2), (0, 9), (0, 7)]) == {0: 10, 1: 3}
    assert next_offsets([]) == {}


def test_start_skew_is_between_the_first_records_of_the_partitions() -> None:
    records = [(0, 1_000), (1, 1_400), (0, 900), (1, 2_000), (2, 3_100)]
    assert start_skew(records) == pytest.approx(2.2)  # partition 0 at 0.9 s, 2 at 3.1 s
    assert start_skew([]) == 0.0
