"""The fired-topic record: a cancel's answer names the request it answers."""

from __future__ import annotations

import json

from app.core.fired import FIRED_RECORD_DDL, FiredKind, FiredRecord


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
