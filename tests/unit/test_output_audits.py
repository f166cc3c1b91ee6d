"""A tick's callbacks go out first; their audit records follow in the same unit.

The record timestamps of the callbacks are their lateness, so OutputProducer holds each
callback's audit record back until the unit's flush or commit. These pin the order, that
the audit record is still the one FiredRecord describes, and that no unit ends (flush,
blocking flush, commit, transaction) without them.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace

import pytest

from app.core.fired import FiredRecord
from app.core.timer import Timer
from app.worker.output import OutputProducer
from kafka_timers_client.extra_fires import BACKFILL_HEADER, TRIGGER_HEADER
from tests.support.recording_producer import RecordingProducer


def _output(*, transactional: bool = False) -> tuple[OutputProducer, RecordingProducer]:
    out = OutputProducer(
        {"bootstrap.servers": "127.0.0.1:1"},
        worker_id="w-1",
        fired_topic="fired",
        dlq_topic="dlq",
    )
    recorder = RecordingProducer()
    out._producer = recorder  # type: ignore[assignment]
    out.transactional = transactional
    return out, recorder


def _timers(n: int) -> list[Timer]:
    return [
        Timer(id=f"t{i}", due=100, topic="cb", key=b"k", value=b"v", token="tok") for i in range(n)
    ]


def test_callbacks_are_produced_before_any_audit_record_and_the_flush_waits_for_both() -> None:
    out, recorder = _output()
    timers = _timers(3)
    for t in timers:
        out.callback(t, partition=2, fired_at_ms=100_004)
    assert [c[0] for c in recorder.calls] == ["cb", "cb", "cb"]
    asyncio.run(out.flush())
    assert [c[0] for c in recorder.calls] == ["cb"] * 3 + ["fired"] * 3 + ["flush"]
    expected = [
        FiredRecord.fired(t, partition=2, worker="w-1", fired_at_ms=100_004).to_json()
        for t in timers
    ]
    assert [c[1] for c in recorder.calls[3:6]] == expected
    assert [c[2] for c in recorder.calls[3:6]] == [b"t0", b"t1", b"t2"]


def test_a_triggered_or_backfilled_callbacks_audit_record_says_so() -> None:
    out, recorder = _output()
    plain, user, triggered, backfilled = _timers(4)
    user = replace(user, headers=(("h", b"1"), (TRIGGER_HEADER, b"9")))  # not first: no mark
    triggered = replace(triggered, headers=((TRIGGER_HEADER, b"9"), ("h", b"1")))
    backfilled = replace(backfilled, headers=((BACKFILL_HEADER, b"5"),))
    timers = [plain, user, triggered, backfilled]
    for t in timers:
        out.callback(t, partition=2, fired_at_ms=100_004)
    asyncio.run(out.flush())
    audits = [c[1] for c in recorder.calls if c[0] == "fired"]
    assert audits == [
        FiredRecord.fired(t, partition=2, worker="w-1", fired_at_ms=100_004).to_json()
        for t in timers
    ]
    assert [json.loads(a).get("extra") for a in audits] == [None, None, "trigger", "backfill"]


@pytest.mark.parametrize("transactional", [False, True])
def test_a_commit_produces_the_audit_records_inside_the_unit(transactional: bool) -> None:
    out, recorder = _output(transactional=transactional)
    out.begin()
    out.callback(_timers(1)[0], partition=0, fired_at_ms=1)
    asyncio.run(out.commit())
    ended = "commit" if transactional else "flush"
    assert [c[0] for c in recorder.calls] == ["cb", "fired", ended]


def test_a_blocking_flush_produces_them_too_and_each_only_once() -> None:
    out, recorder = _output()
    out.callback(_timers(1)[0], partition=0, fired_at_ms=1)
    out.flush_blocking(1.0)
    out.flush_blocking(1.0)
    assert [c[0] for c in recorder.calls] == ["cb", "fired", "flush", "flush"]
