"""Arrow glue between Spark's grouped events and :func:`spark_audit.reconcile.judge`.

Spark collects every event of a timer into one sorted array (requests by offset, then
fires, then cancel reports, by time); a batch of such arrays comes in as one Arrow
``ListArray`` and a batch of verdicts goes back as one ``StructArray``. Columns are
unpacked once per batch, not once per event, which keeps the Python cost per timer low.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace
from itertools import pairwise
from typing import Any

import pyarrow as pa

from kafka_timers_client.extra_fires import BACKFILL, TRIGGER
from spark_audit.parsing import internal_error, schedule_from_json
from spark_audit.reconcile import judge
from spark_audit.verdicts import (
    CancelReport,
    DroppedAnswer,
    ExtraAnswer,
    FireEvent,
    RequestEvent,
    Rules,
    SkipEvent,
)

__all__ = [
    "CANCEL_REPORT",
    "DROPPED_ANSWER",
    "EVENT_FIELDS",
    "NOT_JUDGED",
    "SOURCE_FIRE",
    "SOURCE_REPORT",
    "SOURCE_REQUEST",
    "SOURCE_SKIP",
    "VERDICT_DDL",
    "VERDICT_TYPE",
    "judge_arrays",
    "judge_one",
]

#: ``src`` of an event: a request record, a ``fired`` record, a ``cancel`` outcome record
#: (or the answer to a trigger or a backfill the worker applied, or to a request it
#: dropped: ``kind`` says which), a ``skipped`` record.
SOURCE_REQUEST, SOURCE_FIRE, SOURCE_REPORT, SOURCE_SKIP = 0, 1, 2, 3
#: ``kind`` of a cancel's outcome record (a :data:`SOURCE_REPORT`).
CANCEL_REPORT = "cancel_report"
#: ``kind`` of the answer to a schedule request the worker did not store (a ``dropped``
#: record; a :data:`SOURCE_REPORT`, its ``occurrence`` the request's offset).
DROPPED_ANSWER = "dropped"
#: ``kind`` of a fire a trigger or a backfill asked for (its record's ``extra``), and of
#: the answer to a trigger or a backfill; a fire's ``occurrence`` is then the number its
#: derived id names (``extra_n``), an answer's the request's offset.
_EXTRA_KINDS = frozenset({TRIGGER, BACKFILL})

#: ``status`` of a timer whose judging raised (see :func:`judge_arrays`): set aside.
NOT_JUDGED = "not_judged"

#: Fields of one event, in the order Spark sorts them (``src`` first, then ``seq``).
EVENT_FIELDS = (
    "src",
    "seq",
    "ts_ms",
    "kind",
    "token",
    "due",
    "check_token",
    "topic",
    "outcome",
    "worker",
    "series",
    "occurrence",
    "coalesced",
    "spread",
    "request_offset",
)

_FIRE_TYPE = pa.struct(
    [
        ("token", pa.string()),
        ("due", pa.int64()),
        ("fired_at_ms", pa.int64()),
        ("topic", pa.string()),
        ("worker", pa.string()),
        ("lateness_ms", pa.int64()),
        ("first", pa.bool_()),
        ("extra", pa.string()),
    ]
)
_VIOLATION_TYPE = pa.struct(
    [
        ("kind", pa.string()),
        ("token", pa.string()),
        ("due", pa.int64()),
        ("at_ms", pa.int64()),
        ("detail", pa.string()),
    ]
)
#: One verdict (see :class:`spark_audit.verdicts.Verdict`).
VERDICT_TYPE = pa.struct(
    [
        ("status", pa.string()),
        ("requests", pa.int32()),
        ("final_token", pa.string()),
        ("final_due", pa.int64()),
        ("final_topic", pa.string()),
        ("final_requested_ms", pa.int64()),
        ("cancelled", pa.bool_()),
        ("cancel_at_ms", pa.int64()),
        ("fire_count", pa.int32()),
        ("fire_times", pa.list_(pa.int64())),
        ("fires", pa.list_(_FIRE_TYPE)),
        ("violations", pa.list_(_VIOLATION_TYPE)),
        ("occurrences_fired", pa.int64()),
        ("occurrences_skipped", pa.int64()),
        ("occurrences_coalesced", pa.int64()),
        ("extra_triggered", pa.int64()),
        ("extra_backfilled", pa.int64()),
        ("reached_late", pa.int64()),
        ("refused_over_quota", pa.int64()),
        ("refused_wrong_token", pa.int64()),
        ("note", pa.string()),
    ]
)
#: The same type in Spark's DDL.
VERDICT_DDL = (
    "struct<status:string,requests:int,final_token:string,final_due:bigint,"
    "final_topic:string,final_requested_ms:bigint,cancelled:boolean,cancel_at_ms:bigint,"
    "fire_count:int,fire_times:array<bigint>,"
    "fires:array<struct<token:string,due:bigint,fired_at_ms:bigint,topic:string,"
    "worker:string,lateness_ms:bigint,first:boolean,extra:string>>,"
    "violations:array<struct<kind:string,token:string,due:bigint,at_ms:bigint,detail:string>>,"
    "occurrences_fired:bigint,occurrences_skipped:bigint,occurrences_coalesced:bigint,"
    "extra_triggered:bigint,extra_backfilled:bigint,reached_late:bigint,"
    "refused_over_quota:bigint,refused_wrong_token:bigint,note:string>"
)


def judge_arrays(
    events: pa.Array,
    rules: Rules,
    partitions: pa.Array | None = None,
    incomplete: Collection[int] = (),
) -> pa.StructArray:
    """One verdict per list of events (one list per timer); total.

    ``partitions`` (the request partition of each timer) and ``incomplete`` (request
    partitions that lost records to retention) tell :func:`judge` where a missing
    request may simply have been deleted. A timer whose judging raises (a bug of the
    audit, never a record's fault: every event was checked when read) gets the status
    :data:`NOT_JUDGED` and the error's class and line in ``note``; the others are judged.
    """
    assert isinstance(events, pa.ListArray)
    incomplete_rules = replace(rules, requests_complete=False)
    timer_partitions = partitions.to_pylist() if partitions is not None else None
    offsets = events.offsets.to_pylist()
    base = offsets[0]
    flat = events.values.slice(base, offsets[-1] - base)
    columns = dict(zip(EVENT_FIELDS, (c.to_pylist() for c in flat.flatten()), strict=True))
    verdicts: list[dict[str, Any]] = []
    for n, (start, end) in enumerate(pairwise(offsets)):
        timer_rules = rules
        if timer_partitions is not None and timer_partitions[n] in incomplete:
            timer_rules = incomplete_rules
        try:
            verdicts.append(judge_one(columns, start - base, end - base, timer_rules))
        except MemoryError:
            raise
        except Exception as exc:
            reason, detail = internal_error(exc)
            verdicts.append({"status": NOT_JUDGED, "requests": 0, "note": f"{reason}: {detail}"})
    return pa.array(verdicts, VERDICT_TYPE)


def judge_one(columns: dict[str, list[Any]], lo: int, hi: int, rules: Rules) -> dict[str, Any]:
    """The verdict of the timer whose events are ``lo`` to ``hi`` of ``columns``."""
    src, seq, ts_ms = columns["src"], columns["seq"], columns["ts_ms"]
    kind, token, due = columns["kind"], columns["token"], columns["due"]
    check_token, topic = columns["check_token"], columns["topic"]
    outcome, worker = columns["outcome"], columns["worker"]
    series, occurrence, coalesced = columns["series"], columns["occurrence"], columns["coalesced"]
    spread, request_offset = columns["spread"], columns["request_offset"]
    requests: list[RequestEvent] = []
    fires: list[FireEvent] = []
    reports: list[CancelReport] = []
    skips: list[SkipEvent] = []
    answers: list[ExtraAnswer] = []
    dropped: list[DroppedAnswer] = []
    for i in range(lo, hi):
        if src[i] == SOURCE_REQUEST:
            recurrence, debounce = schedule_from_json(series[i])
            requests.append(
                RequestEvent(
                    seq[i],
                    ts_ms[i],
                    kind[i],
                    token[i] or "",
                    due[i],
                    check_token[i] is not False,
                    topic[i],
                    recurrence,
                    spread[i] or 0,
                    debounce,
                )
            )
        elif src[i] == SOURCE_FIRE:
            extra = kind[i] if kind[i] in _EXTRA_KINDS else None
            fires.append(
                FireEvent(
                    token[i] or "",
                    due[i],
                    ts_ms[i],
                    topic[i],
                    worker[i],
                    None if extra else occurrence[i],
                    coalesced[i] or 0,
                    extra,
                    occurrence[i] if extra else None,
                    request_offset[i],
                )
            )
        elif src[i] == SOURCE_SKIP:
            skips.append(
                SkipEvent(
                    token[i] or "",
                    due[i],
                    ts_ms[i],
                    outcome[i] or "",
                    occurrence[i],
                    coalesced[i] or 0,
                )
            )
        elif kind[i] == DROPPED_ANSWER:
            dropped.append(DroppedAnswer(outcome[i] or "", occurrence[i]))
        elif kind[i] in _EXTRA_KINDS:
            answers.append(
                ExtraAnswer(kind[i], token[i] or "", outcome[i] or "", ts_ms[i], occurrence[i])
            )
        else:
            reports.append(CancelReport(token[i] or "", outcome[i], ts_ms[i]))
    return judge(requests, fires, reports, rules, skips, answers, dropped).to_dict()
