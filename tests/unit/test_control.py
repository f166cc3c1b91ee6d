"""The control topic's records (app.core.control) and how a worker applies them to its
gates (app.worker.control), without a broker."""

from __future__ import annotations

import json

import pytest

from app.core.control import (
    ControlRecord,
    ControlState,
    cancel_bulk_record,
    pause_record,
    rate_record,
    read_control,
)
from app.settings import Settings
from app.worker.control import ControlFollower
from app.worker.topic_gates import TopicGates


def test_pause_and_its_tombstone() -> None:
    key, value = pause_record("reminders", by="ops@host", at_ms=1)
    assert key == b"pause/reminders"
    assert read_control(key, value) == ControlRecord("pause", "reminders")
    assert read_control(key, None) == ControlRecord("pause", "reminders", clear=True)
    assert read_control(key, b'{"paused": false}').clear


def test_rate_records() -> None:
    key, value = rate_record("billing", 50.0, by="ops", at_ms=1)
    assert read_control(key, value) == ControlRecord("rate", "billing", per_second=50.0)
    key, value = rate_record("billing", None, by="ops", at_ms=1)
    assert read_control(key, value) == ControlRecord("rate", "billing", per_second=None)
    assert read_control(key, None).clear


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (None, b"{}"),
        (b"\xff\xfe", b"{}"),
        (b"other/x", b"{}"),
        (b"pause/", b"{}"),
        (b"pause/x", b"not json"),
        (b"pause/x", b"[1]"),
        (b"pause/x", b'{"paused": "yes"}'),
        (b"rate/x", b"{}"),
        (b"rate/x", b'{"per_second": 0}'),
        (b"rate/x", b'{"per_second": -1}'),
        (b"rate/x", b'{"per_second": true}'),
        (b"rate/x", b'{"per_second": "500"}'),
        (b"rate/x", b'{"per_second": 1e300}'),
        (b"rate/x", b'{"per_second": NaN}'),
        (b"rate/x", b"[" * 100_000),
        (b"pause/" + b"x" * 1000, b"{}"),
    ],
)
def test_bad_records_are_ignored_never_raise(key: bytes | None, value: bytes) -> None:
    record = read_control(key, value)
    assert record.kind == "ignored" and record.reason


def test_state_and_the_configured_limit() -> None:
    state = ControlState()
    assert state.apply(ControlRecord("pause", "a"))
    assert not state.apply(ControlRecord("pause", "a"))
    assert state.paused == {"a"}
    assert state.apply(ControlRecord("pause", "a", clear=True))
    assert state.paused == set()
    configured = {"b": 10.0}
    assert state.limit_of("b", configured) == 10.0
    state.apply(ControlRecord("rate", "b", per_second=None))
    assert state.limit_of("b", configured) is None  # lifted at run time
    state.apply(ControlRecord("rate", "b", per_second=5.0))
    assert state.limit_of("b", configured) == 5.0
    state.apply(ControlRecord("rate", "b", clear=True))
    assert state.limit_of("b", configured) == 10.0  # back to the environment's


def test_the_follower_applies_records_to_the_gates() -> None:
    gates = TopicGates({"b": 10.0}, partitions=2)
    follower = ControlFollower(Settings(), gates, {"b": 10.0})
    follower.apply(read_control(*pause_record("a", by="x", at_ms=0)))
    assert gates.paused() == {"a"} and gates.budget(0, "a") == 0
    follower.apply(read_control(*rate_record("c", 4.0, by="x", at_ms=0)))
    assert gates.limits() == {"b": 10.0, "c": 4.0}
    follower.apply(read_control(*rate_record("b", None, by="x", at_ms=0)))
    assert gates.limits() == {"c": 4.0}
    follower.apply(read_control(b"rate/b", None))
    assert gates.limits() == {"b": 10.0, "c": 4.0}
    follower.apply(read_control(b"pause/a", None))
    assert gates.paused() == frozenset() and gates.budget(0, "a") is None
    assert json.loads(pause_record("a", by="x", at_ms=0)[1])["paused"] is True


def test_cancel_bulk_records() -> None:
    from app.core.timer_filter import TimerFilter

    flt = TimerFilter(key_prefix=b"customer-42/", topic="reminders")
    key, value = cancel_bulk_record("r1", flt, dry_run=True, by="ops", at_ms=1)
    assert key == b"cancel-bulk/r1"
    record = read_control(key, value)
    assert (record.kind, record.topic, record.filter, record.dry_run) == (
        "cancel_bulk",
        "r1",
        flt,
        True,
    )
    assert not ControlState().apply(record)  # no state: it is run, never kept
    for bad in (
        b'{"filter": {}}',  # everything: refused
        b'{"filter": {"colour": "red"}}',
        b'{"filter": {"topic": 1}}',
        b'{"filter": {"topic": "t"}, "dry_run": "no"}',
        b'{"filter": []}',
    ):
        assert read_control(b"cancel-bulk/r2", bad).kind == "ignored", bad
    assert read_control(b"cancel-bulk/r2", None).kind == "cancel_bulk"  # its tombstone
