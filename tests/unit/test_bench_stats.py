"""The benchmark's arithmetic and table: percentiles by nearest rank, rates, rendering."""

from __future__ import annotations

import math

import pytest

from bench.report import Figure, render, render_markdown
from bench.stats import percentile, rate, summarize


def test_percentile_is_an_observed_value_by_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]  # 1..100
    assert percentile(values, 50) == 50
    assert percentile(values, 99) == 99
    assert percentile(values, 100) == 100
    assert percentile([3.0, 1.0, 2.0], 50) == 2  # unsorted input


def test_percentile_of_few_values_takes_the_rank_above() -> None:
    assert percentile([10.0, 20.0], 50) == 10
    assert percentile([10.0, 20.0], 51) == 20
    assert percentile([7.0], 99) == 7


def test_percentile_refuses_nonsense() -> None:
    with pytest.raises(ValueError):
        percentile([], 50)
    with pytest.raises(ValueError):
        percentile([1.0], 0)


def test_summary() -> None:
    s = summarize([0.2, 0.1, 0.4, 0.3])
    assert (s.count, s.p50, s.p99, s.max, s.min) == (4, 0.2, 0.4, 0.4, 0.1)


def test_rate_never_divides_by_zero() -> None:
    assert rate(10, 2.0) == 5.0
    assert rate(0, 0.0) == 0.0
    assert math.isinf(rate(5, 0.0))


def test_table_groups_by_scenario_and_marks_verdicts() -> None:
    figures = [
        Figure("ingest", "requests stored/s", "12,000/s", "Faust 4,000/s", "≥ 10,000/s", True),
        Figure("ingest", "changelog records", "24,000"),
        Figure("fire", "callbacks/s", "9,000/s", "Faust 4,000/s", "≥ 20,000/s", False),
    ]
    lines = render(figures).splitlines()
    assert lines[0].split()[:2] == ["scenario", "figure"]
    assert lines[2].startswith("ingest ") and lines[2].endswith("met")
    assert lines[3].startswith(" ")  # the scenario name is not repeated
    assert lines[4].startswith("fire ") and lines[4].endswith("MISSED")
    widths = {len(line) for line in lines[2:]}
    assert len(lines[1]) >= max(widths) - len("MISSED")


def test_markdown_escapes_pipes() -> None:
    text = render_markdown([Figure("a", "x | y", "1")])
    assert "x \\| y" in text
    assert text.splitlines()[1].startswith("|---")


def test_non_finite_values_become_null_in_json() -> None:
    assert Figure("a", "b", "c", value=math.inf).as_dict()["value"] is None
