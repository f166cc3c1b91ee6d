"""Tick sources: a bounded number told apart, the rest as other, the silent forgotten."""

from __future__ import annotations

import pytest

from app.core.tick_sources import OTHER, TickSources


def test_the_first_sources_are_told_apart_and_the_rest_count_as_other() -> None:
    sources = TickSources(limit=2, silence=300)
    assert sources.name("a", 0) == "a"
    assert sources.name("b", 0) == "b"
    assert sources.name("c", 0) == OTHER
    assert sources.name("d", 0) == OTHER
    assert sources.name("a", 1) == "a"  # known ones keep their place
    assert sources.overflowed == 2
    assert len(sources) == 3  # a, b and other


def test_a_silent_source_is_forgotten_and_frees_its_place() -> None:
    sources = TickSources(limit=2, silence=300)
    sources.name("a", 0)
    sources.name("b", 100)
    assert sources.sweep(299) == []
    assert sources.sweep(301) == ["a"]
    assert sources.name("c", 302) == "c"
    assert sources.sweep(1000) == ["b", "c"]
    assert len(sources) == 0


def test_sweeps_look_at_most_once_a_second() -> None:
    sources = TickSources(limit=10, silence=5)
    sources.name("b", 10)
    assert sources.sweep(14.9) == []
    assert sources.sweep(15.5) == []  # silent long enough, but looked 0.6 s ago
    assert sources.sweep(16) == ["b"]
    sources.name("c", 20)
    assert sources.sweep(2) == []  # a clock stepped back looks at once (nothing silent)


def test_ten_thousand_names_keep_the_limit() -> None:
    sources = TickSources(limit=64, silence=300)
    named = {sources.name(f"osc-{i}", i / 1000) for i in range(10_000)}
    assert len(named) == 65 and OTHER in named
    assert len(sources) == 65


def test_nonsense_limits_are_refused() -> None:
    with pytest.raises(ValueError):
        TickSources(limit=0, silence=1)
    with pytest.raises(ValueError):
        TickSources(limit=1, silence=0)
