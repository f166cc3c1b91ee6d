"""The control topic's records (app.core.control) and how a worker applies them to its
gates (app.worker.control), without a broker."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.core.control import (
    INTERNAL_ERROR,
    MAX_CONTROL_RATE,
    ControlRecord,
    ControlState,
    cancel_bulk_record,
    pause_record,
    rate_record,
    read_control,
)
from app.core.timer_filter import TimerFilter
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
        b'{"filter": {"id_prefix": ""}}',  # an empty prefix is everything too
        b'{"filter": {"key_prefix": ""}}',
        b'{"filter": {"key_prefix": "", "id_prefix": ""}}',
        b'{"filter": {"colour": "red"}}',
        b'{"filter": {"topic": 1}}',
        b'{"filter": {"topic": "t"}, "dry_run": "no"}',
        b'{"filter": []}',
    ):
        refused = read_control(b"cancel-bulk/r2", bad)
        # Refused, answered with a reason by the workers: never a filter to run.
        assert (refused.kind, refused.topic, refused.filter) == ("cancel_bulk", "r2", None), bad
        assert refused.reason and not refused.clear, bad
    tombstone = read_control(b"cancel-bulk/r2", None)
    assert (tombstone.kind, tombstone.clear) == ("cancel_bulk", True)


# -- totality, by generated records ---------------------------------------------------

#: JSON leaves a hostile writer of the control topic can send: numbers past any float
#: (a 400-digit integer), NaN and infinities (json.dumps writes them), strings with lone
#: surrogates (JSON's "\ud800"), and every other kind of value.
_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=10**300, max_value=10**400),
    st.integers(min_value=-(10**400), max_value=-(10**300)),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(st.characters(codec=None, exclude_categories=())),
)
#: The fields a bulk cancel's filter reads (app.core.timer_filter).
_FILTER_FIELDS = ("topic", "key", "key_prefix", "id_prefix", "due_from", "due_to", "series")
_FIELDS = st.sampled_from(
    [*("per_second", "paused", "filter", "dry_run", "by", "at_ms"), *_FILTER_FIELDS]
)
_JSON = st.recursive(
    _LEAVES,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(_FIELDS | st.text(max_size=8), inner, max_size=5)
    ),
    max_leaves=12,
)
_TOPICS = st.text(st.characters(codec="utf-8"), min_size=1, max_size=20)
_KEYS = st.one_of(
    # Mostly a key every reader takes for a control record, so that the generated values
    # reach each kind's own checks; also anything at all.
    st.builds(
        lambda prefix, topic: prefix + topic.encode(),
        st.sampled_from([b"pause/", b"rate/", b"cancel-bulk/"]),
        _TOPICS,
    ),
    st.none(),
    st.binary(max_size=600),
)
#: A record's value: a JSON object of the fields readers look at, each there or not (a
#: filter of the fields a bulk cancel reads among them), any JSON at all, or bytes that
#: are not JSON.
_FILTERS = st.fixed_dictionaries(
    {}, optional={name: _LEAVES | st.text(max_size=12) for name in _FILTER_FIELDS}
) | st.dictionaries(st.text(max_size=8), _LEAVES, max_size=3)
_OBJECTS = st.fixed_dictionaries(
    {},
    optional={
        "per_second": _LEAVES,
        "paused": _LEAVES,
        "filter": _FILTERS | _LEAVES,
        "dry_run": _LEAVES,
        "by": _LEAVES,
    },
).map(lambda doc: json.dumps(doc).encode())
_VALUES = st.one_of(
    _OBJECTS,
    st.none(),
    _JSON.map(lambda doc: json.dumps(doc).encode()),
    st.binary(max_size=200),
)


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(key=_KEYS, value=_VALUES)
def test_any_control_record_is_read_or_ignored_with_a_reason(
    key: bytes | None, value: bytes | None
) -> None:
    """A control record of any shape is read as what it sets, or ignored with a reason;
    nothing escapes. The topic is read from the start by every worker as it starts, so
    a record that raised would stop every worker, each time it started."""
    record = read_control(key, value)
    assert record.kind in ("pause", "rate", "cancel_bulk", "ignored")
    if record.kind == "ignored":
        assert record.reason and not record.reason.startswith(INTERNAL_ERROR), record.reason
        return
    assert record.topic
    if record.kind == "rate" and not record.clear and record.per_second is not None:
        assert 0 < record.per_second <= MAX_CONTROL_RATE
    if record.kind == "cancel_bulk" and not record.clear:
        assert (record.filter is None) == bool(record.reason)
        if record.filter is not None:  # never a filter that matches every timer
            assert record.filter != TimerFilter()
            assert record.filter.id_prefix != "" and record.filter.key_prefix != b""


@pytest.mark.parametrize(
    "rate", [b"1" + b"0" * 400, b"-1" + b"0" * 400, b"1e400", b"Infinity", b"-Infinity"]
)
def test_a_rate_past_any_float_is_ignored(rate: bytes) -> None:
    record = read_control(b"rate/x", b'{"per_second": ' + rate + b"}")
    assert record.kind == "ignored" and "per_second" in record.reason


def test_a_bulk_cancel_answer_counts_only_with_whole_numbers() -> None:
    from app.kafka.control import bulk_answer

    good = {"event": "bulk_cancel", "request": "r1", "partition": 3, "matched": 2}
    assert bulk_answer(json.dumps(good).encode(), "r1") == good
    assert bulk_answer(json.dumps(good).encode(), "r2") is None  # another request's
    for bad in (
        {**good, "matched": 1e400},  # json.dumps writes Infinity
        {**good, "cancelled": "7"},
        {**good, "partition": True},
        {key: value for key, value in good.items() if key != "partition"},
    ):
        assert bulk_answer(json.dumps(bad).encode(), "r1") is None, bad
    for value in (None, b"", b"\xff", b"[" * 100_000, b"[1]"):
        assert bulk_answer(value, "r1") is None


@given(doc=_OBJECTS | _JSON.map(lambda doc: json.dumps(doc).encode()) | st.binary())
def test_any_fired_record_is_an_answer_or_not_never_an_error(doc: bytes) -> None:
    """Whatever the fired topic holds, reading it as an answer returns or declines."""
    from app.kafka.control import bulk_answer

    answer = bulk_answer(doc, "r1")
    if answer is not None:
        assert all(type(answer.get(n, 0)) is int for n in ("partition", "matched", "cancelled"))


def test_a_bug_in_reading_ignores_the_record_and_names_the_exception(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import app.core.control as control

    def broken(key: bytes | None, value: bytes | None) -> ControlRecord:
        raise KeyError("the record's bytes, never shown")

    monkeypatch.setattr(control, "_read_control", broken)
    record = read_control(b"pause/x", b"{}")
    assert record.kind == "ignored"
    assert record.reason == f"{INTERNAL_ERROR}: KeyError (please report)"

    def out_of_memory(key: bytes | None, value: bytes | None) -> ControlRecord:
        raise MemoryError

    monkeypatch.setattr(control, "_read_control", out_of_memory)
    with pytest.raises(MemoryError):  # the process's, not the record's
        read_control(b"pause/x", b"{}")
