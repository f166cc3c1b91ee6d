"""A series' next occurrence packed from the fired one's stored bytes is exactly what
packing it anew writes: for every series the worker can store (generated), with any
next due second, number and count delivered before it."""

from __future__ import annotations

import dataclasses
from contextlib import AbstractContextManager
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.firing import next_occurrence
from app.core.stored import pack_next_occurrence, pack_timer, unpack_timer
from app.core.timer import Timer
from kafka_timers_client.recurrence import Recurrence
from kafka_timers_client.spread import MAX_SPREAD_SECONDS
from tests.unit.test_ops_jsonl import seconds, stored_timers

#: A spread, or none, and a schema id, or none: the two extensions after a layout's fields.
spreads = st.just(0) | st.integers(min_value=1, max_value=MAX_SPREAD_SECONDS)
schema_ids = st.none() | st.integers(min_value=-(2**63), max_value=2**63 - 1)


def rewritten_only() -> AbstractContextManager[object]:
    """Fails a packing anew inside: the bytes must come from rewriting the stored ones
    (a fallback would be right too, and would hide a rewrite that never happens)."""
    return mock.patch("app.core.stored.pack_timer", side_effect=AssertionError("packed anew"))


@st.composite
def stored_series(draw: st.DrawFn) -> Timer:
    """Any series occurrence the worker stores, extensions included."""
    timer = draw(stored_timers().filter(lambda t: t.recurrence is not None))
    return unpack_timer(
        pack_timer(dataclasses.replace(timer, spread=draw(spreads), schema_id=draw(schema_ids)))
    )


@settings(max_examples=500, deadline=None)
@given(
    stored_series(),
    seconds,
    st.integers(min_value=1, max_value=10**6),
    st.integers(min_value=0, max_value=10**6),
)
def test_the_next_occurrence_is_packed_as_pack_timer_packs_it(
    fired: Timer, due: int, seq: int, fired_before: int
) -> None:
    successor = dataclasses.replace(fired, due=due, seq=seq, fired_before=fired_before)
    stored, expected = pack_timer(fired), pack_timer(successor)
    with rewritten_only():
        packed = pack_next_occurrence(stored, successor)
    assert packed == expected
    assert unpack_timer(packed) == successor


@settings(max_examples=200, deadline=None)
@given(stored_series(), st.integers(min_value=1, max_value=10**6))
def test_the_successor_a_fire_makes_is_packed_as_pack_timer_packs_it(
    fired: Timer, every: int
) -> None:
    successor = next_occurrence(fired, fired.due + every)
    stored, expected = pack_timer(fired), pack_timer(successor)
    with rewritten_only():
        assert pack_next_occurrence(stored, successor) == expected


def test_bytes_not_in_layout_2_are_packed_anew() -> None:
    one_shot = Timer(id="x", due=5, topic="t", key=None, value=b"v")
    series = dataclasses.replace(one_shot, recurrence=Recurrence(every=60, start=5), seq=1)
    assert pack_timer(one_shot)[0] == 1
    assert pack_next_occurrence(pack_timer(one_shot), series) == pack_timer(series)
    assert pack_next_occurrence(b"", series) == pack_timer(series)


def test_a_recurrence_built_positionally_equals_one_built_by_keyword() -> None:
    positional = Recurrence(None, "UTC", 60, 5, None, 3)
    assert positional == Recurrence(every=60, start=5, count=3)
    assert hash(positional) == hash(Recurrence(every=60, start=5, count=3))
    assert positional.tz == "UTC" and positional.cron is None and positional.end is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        positional.every = 5  # type: ignore[misc]
