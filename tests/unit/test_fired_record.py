"""The fired-topic record: a cancel's answer names the request it answers."""

from __future__ import annotations

import hashlib
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.core.fired import (
    FIRED_RECORD_DDL,
    Audit,
    FiredKind,
    FiredRecord,
    extra_json,
    fired_json,
    fired_jsons,
    json_string,
    token_digest,
)
from app.core.timer import Timer
from kafka_timers_client.extra_fires import (
    BACKFILL_HEADER,
    TRIGGER_HEADER,
    backfill_id,
    parse_extra_id,
    trigger_id,
)


def cancel(**changes: object) -> FiredRecord:
    values: dict[str, object] = {
        "partition": 3,
        "worker": "w1",
        "at_ms": 1_767_225_600_000,
        "request_offset": 42,
    }
    values.update(changes)
    return FiredRecord.cancel("t1", "tok", "cancelled", **values)  # type: ignore[arg-type]


def test_a_cancel_record_carries_its_request_offset_through_json() -> None:
    record = cancel()
    doc = json.loads(record.to_json())
    assert doc["request_offset"] == 42 and doc["partition"] == 3 and doc["event"] == "cancel"
    assert FiredRecord.from_json(record.to_json()) == record


def test_records_written_before_the_offset_existed_still_parse() -> None:
    old = b'{"event": "cancel", "id": "t1", "token": "tok", "partition": 3, "worker": "w1",'
    old += b' "outcome": "cancelled", "at_ms": 1}'
    record = FiredRecord.from_json(old)
    assert record.event is FiredKind.CANCEL and record.request_offset is None
    assert not record.answers("t1", 3, 42)


def test_only_the_record_of_that_request_answers_it() -> None:
    assert cancel().answers("t1", 3, 42)
    assert not cancel().answers("t1", 3, 41)  # an earlier cancel of the same timer
    assert not cancel().answers("t1", 4, 42)
    assert not cancel().answers("t2", 3, 42)
    fired = FiredRecord(FiredKind.FIRED, "t1", "tok", 3, "w1", due=1, fired_at_ms=1000)
    assert not fired.answers("t1", 3, 42)


def test_the_spark_schema_has_the_offset_as_a_bigint() -> None:
    assert "request_offset bigint" in FIRED_RECORD_DDL
    assert "partition int" in FIRED_RECORD_DDL
    assert "coalesced bigint, extra string, reason string" in FIRED_RECORD_DDL


def test_a_fire_says_it_was_triggered_or_backfilled_and_an_ordinary_one_says_nothing() -> None:
    base = Timer(id="s", due=5, topic="cb", key=None, value=b"v", token="t")
    marked = {
        "trigger": Timer("s", 5, "cb", None, b"v", "t", ((TRIGGER_HEADER, b"9"), ("h", b"1"))),
        "backfill": Timer("s@backfill:5", 5, "cb", None, b"v", "t", ((BACKFILL_HEADER, b"5"),)),
        None: Timer("s", 5, "cb", None, b"v", "t", (("h", b"1"), (TRIGGER_HEADER, b"9"))),
    }
    for extra, timer in marked.items():
        record = FiredRecord.fired(timer, partition=1, worker="w", fired_at_ms=7)
        assert record.extra == extra
        assert json.loads(record.to_json()).get("extra") == extra
        assert FiredRecord.from_json(record.to_json()) == record
    ordinary = FiredRecord.fired(base, partition=1, worker="w", fired_at_ms=7).to_json()
    assert ordinary == (
        b'{"event": "fired", "id": "s", "token": "' + token_digest("t").encode() + b'", '
        b'"partition": 1, "worker": "w", "due": 5, "fired_at_ms": 7, "topic": "cb"}'
    ), "an ordinary fire's record is what it always was"


def test_an_extra_fires_id_is_parsed_back_to_its_series() -> None:
    assert parse_extra_id(trigger_id("hb", 42)) == ("hb", "trigger", 42)
    assert parse_extra_id(backfill_id("a@b", 1_767_225_600)) == ("a@b", "backfill", 1_767_225_600)
    assert parse_extra_id(trigger_id("x@trigger:1", 0)) == ("x@trigger:1", "trigger", 0)
    for other in (
        "hb",
        "@trigger:1",
        "hb@trigger:",
        "hb@trigger:01",
        "hb@trigger:-1",
        "hb@trigger:\u0661",
        "hb@pause:1",
        "hb@trigger1",
        "hb@backfill:1x",
    ):
        assert parse_extra_id(other) is None, other


def test_the_fired_template_writes_exactly_what_the_record_writes() -> None:
    odd = ["plain", 'quo"te', "back\\slash", "new\nline\ttab", "ünï-çødé", "雪", "emoji 🎉", ""]
    cases = [
        (Timer(id=text, due=1_767_225_600, topic=f"t{n}", key=None, value=b"v", token=text), 0)
        for n, text in enumerate(odd)
    ]
    cases += [
        (Timer(id="s", due=5, topic="cb", key=b"k", value=None, token="t", seq=3), 0),
        (Timer(id="s", due=5, topic="cb", key=b"k", value=None, token="t", seq=7), 4),
        (Timer(id="x", due=0, topic="a.b-c_d", key=None, value=b"", token="tok"), 0),
        (Timer("t", 5, "cb", None, b"v", "t", ((TRIGGER_HEADER, b"4"), ("h", b"1"))), 0),
        (Timer("t@trigger:3", 4, "cb", None, b"v", "t", ((TRIGGER_HEADER, b"4"),)), 0),
        (Timer("t@backfill:2", 2, "cb", None, b"v", "", ((BACKFILL_HEADER, b"2"),)), 0),
        (Timer("u", 5, "cb", None, b"v", "t", (("h", b"1"), (BACKFILL_HEADER, b"4"))), 0),
    ]
    for worker in ("worker-1", 'w"é'):
        for timer, coalesced in cases:
            expected = FiredRecord.fired(
                timer,
                partition=11,
                worker=worker,
                fired_at_ms=1_767_225_600_123,
                coalesced=coalesced,
            ).to_json()
            got = fired_json(
                timer,
                partition=11,
                worker_json=json_string(worker),
                fired_at_ms=1_767_225_600_123,
                coalesced=coalesced,
            )
            assert got == expected, (timer, coalesced)
    with pytest.raises(AssertionError):  # the test can fail: a different record differs
        assert (
            fired_json(cases[0][0], partition=1, worker_json=json_string("w"), fired_at_ms=1)
            == FiredRecord.fired(cases[0][0], partition=2, worker="w", fired_at_ms=1).to_json()
        )


_texts = st.text(max_size=12)
_timers = st.builds(
    Timer,
    id=_texts,
    due=st.integers(0, 2**40),
    topic=st.sampled_from(["cb", "t\u00e9", 'q"t', "other"]) | _texts,
    key=st.none(),
    value=st.just(b"v"),
    token=st.sampled_from(["", "tok"]) | _texts,
    seq=st.integers(0, 5),
    schema_id=st.none() | st.integers(0, 2**31 - 1),
    headers=st.lists(
        st.tuples(
            st.sampled_from([TRIGGER_HEADER, BACKFILL_HEADER, "h", "timer-due"]), st.just(b"1")
        ),
        max_size=2,
    ).map(tuple),
)
#: Fires in runs that share a partition, a fire time and a topic, and runs that change
#: them: ``(timer, partition, fired_at_ms, coalesced)``; a trigger's or a backfill's fire
#: (its marker first of its headers) is never coalesced.
_fires = st.lists(
    st.tuples(
        _timers,
        st.sampled_from([0, 3, 11]),
        st.sampled_from([0, 7, 1_767_225_600_123]),
        st.integers(0, 3),
    ).map(lambda a: (*a[:3], 0 if extra_json(a[0].headers) else a[3])),
    max_size=12,
)


def audit_of(timer: Timer, partition: int, fired_at_ms: int, coalesced: int) -> Audit:
    """The audit the worker's callback keeps for this fire (OutputProducer.callback)."""
    return (timer, partition, fired_at_ms, extra_json(timer.headers) or coalesced)


@given(
    _fires,
    st.sampled_from(["worker-1", 'w"\u00e9']),
    st.dictionaries(st.sampled_from([0, 3, 11]), st.integers(0, 2**62)),
)
def test_a_units_audits_are_each_what_the_record_writes(
    fires: list[tuple[Timer, int, int, int]], worker: str, offsets: dict[int, int]
) -> None:
    got = fired_jsons([audit_of(*fire) for fire in fires], json_string(worker), offsets)
    expected = [
        FiredRecord.fired(
            timer,
            partition=partition,
            worker=worker,
            fired_at_ms=fired_at,
            coalesced=coalesced,
            request_offset=offsets.get(partition),
        ).to_json()
        for timer, partition, fired_at, coalesced in fires
    ]
    assert got == expected
    assert got == [
        fired_json(
            t,
            partition=p,
            worker_json=json_string(worker),
            fired_at_ms=f,
            coalesced=c,
            request_offset=offsets.get(p),
        )
        for t, p, f, c in fires
    ]
    for record in got:  # the offset a record names is its partition's
        doc = json.loads(record)
        assert doc.get("request_offset") == offsets.get(doc["partition"])


@given(st.text())
def test_the_token_digest_is_sha256s_whatever_constructor_computes_it(token: str) -> None:
    expected = "h1:" + hashlib.sha256(token.encode()).hexdigest()[:24] if token else ""
    assert token_digest(token) == expected


def test_a_dropped_request_is_answered_with_a_digest_and_read_back() -> None:
    from app.core.timer import Timer

    timer = Timer(id="t9", due=1_767_225_600, topic="cb", key=None, value=b"v", token="secret")
    record = FiredRecord.dropped(
        timer, "duplicate", partition=2, worker="w1", at_ms=5, request_offset=7
    )
    back = FiredRecord.from_json(record.to_json())
    assert back.event is FiredKind.DROPPED and back.outcome == "duplicate"
    assert back.request_offset == 7 and back.due == timer.due
    assert b"secret" not in record.to_json()


_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(["event", "id", "token", "due", "partition", "outcome"])
            | st.text(max_size=6),
            inner,
            max_size=4,
        )
    ),
    max_leaves=10,
)


@given(
    st.one_of(
        _JSON_VALUES.map(lambda doc: json.dumps(doc).encode()),
        st.binary(max_size=64),
        st.just(b"[" * 100_000),
    )
)
def test_any_value_is_a_fired_record_or_a_value_error(data: bytes) -> None:
    """Whatever the fired topic holds: a record, or ValueError, never another error (a
    reader waiting for an answer skips exactly those)."""
    try:
        record = FiredRecord.from_json(data)
    except ValueError:
        return
    assert isinstance(record.event, FiredKind)
