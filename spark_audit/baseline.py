"""A single-process reconciliation of the same records: the yardstick the Spark audit is
measured against (``python -m spark_audit.scale --compare``).

One confluent-kafka consumer per topic, the same row-level parsing
(:func:`spark_audit.parsing.judge_request`, :func:`spark_audit.fired_parsing.read_fired`),
events kept per timer in a dict, sorted as Spark sorts them and judged by the same
:func:`spark_audit.judging.judge_arrays` path: so the two may differ in speed and
memory, never in findings. Everything is in this process's memory (about 1 KiB a
timer), which is exactly what the Spark job avoids.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from app.core.routing import Origin
from app.kafka.config import confluent_common
from app.kafka.records import to_record
from app.settings import Settings
from kafka_timers_client.extra_fires import BACKFILL, TRIGGER
from spark_audit.extras import APPLIED_OUTCOMES
from spark_audit.fired_parsing import FiredUnreadable, read_fired
from spark_audit.judging import (
    CANCEL_REPORT,
    DROPPED_ANSWER,
    EVENT_FIELDS,
    SOURCE_FIRE,
    SOURCE_REPORT,
    SOURCE_REQUEST,
    SOURCE_SKIP,
    judge_one,
)
from spark_audit.parsing import RECONCILED_KINDS, ParsedColumns, judge_request, policy_for
from spark_audit.routing import Place, where_reconciled
from spark_audit.verdicts import REFUSED_OUTCOMES, Rules

__all__ = ["BaselineResult", "reconcile_in_process"]

_Event = tuple[Any, ...]


@dataclass(frozen=True)
class BaselineResult:
    """What the single-process reconciliation found, and what it cost."""

    timers: int
    violation_counts: dict[str, int]
    read_s: float
    judge_s: float
    #: Schedule requests the workers refused, by their answer (the summary's ``refused``).
    refused: dict[str, int] = field(default_factory=dict)


def _records(settings: Settings, topic: str, batch: int = 10_000) -> Iterator[Any]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    consumer = Consumer(
        {
            **confluent_common(settings),
            "group.id": f"kafka-timers-baseline-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "fetch.wait.max.ms": 50,
        }
    )
    try:
        partitions = consumer.list_topics(topic, timeout=15).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        open_partitions = set(partitions)
        while open_partitions:
            for msg in consumer.consume(batch, 0.5):
                err = msg.error()
                if err is None:
                    yield msg
                elif err.code() == KafkaError._PARTITION_EOF:
                    open_partitions.discard(msg.partition())
                else:
                    raise RuntimeError(f"reading {topic}: {err}")
    finally:
        consumer.close()


def _sort_key(event: _Event) -> tuple[Any, ...]:
    """Spark's ``sort_array`` order on the event struct: field by field, nulls first."""
    return tuple((0,) if v is None else (1, v) for v in event)


def reconcile_in_process(settings: Settings, rules: Rules) -> BaselineResult:
    """Read both topics of ``settings`` in this process and judge every timer."""
    started = time.monotonic()
    policy = policy_for(settings)
    from spark_audit.job import partition_count  # the audit's own reading of it

    partitions = partition_count(settings, settings.topics.requests)
    events: dict[tuple[int, str], list[_Event]] = defaultdict(list)
    # As spark_audit.pipeline.routed_requests: each request where its worker applied it,
    # decided once every record (and so every copy) is read.
    places: list[Place] = []
    accepted: list[tuple[str, _Event] | None] = []
    for msg in _records(settings, settings.topics.requests):
        record = to_record(msg)
        out = ParsedColumns.empty()
        judge_request(record, policy, out, partitions)
        origin_partition, origin_offset = out.origin_partition[0], out.origin_offset[0]
        origin = None
        if origin_partition is not None and origin_offset is not None:
            origin = Origin(origin_partition, origin_offset)
        places.append(Place(record.partition, record.offset, out.owner[0], origin))
        timer_id = out.id[0]
        if out.reject[0] is not None or timer_id is None or out.kind[0] not in RECONCILED_KINDS:
            accepted.append(None)
            continue
        event = (
            SOURCE_REQUEST,
            record.offset,
            record.timestamp_ms,
            out.kind[0],
            out.token[0],
            out.due[0],
            out.check_token[0],
            out.callback_topic[0],
            None,
            None,
            out.series[0],
            None,
            None,
            out.spread[0],
            None,
        )
        accepted.append((timer_id, event))
    for place, request, here in zip(places, accepted, where_reconciled(places), strict=True):
        if request is not None and here:
            events[(place.partition, request[0])].append(request[1])
    for msg in _records(settings, settings.topics.fired):
        try:
            (event, timer_id, token, partition, worker, due, fired_at_ms, topic, outcome,
             at_ms, request_offset, seq, coalesced, reason, extra, extra_of,
             extra_n) = read_fired(msg.value())  # fmt: skip
        except FiredUnreadable:
            continue
        # As spark_audit.pipeline.timer_events: a series' extra fire under its series' id,
        # cancel outcomes, applied triggers and backfills and dropped schedules as reports.
        if event == "fired":
            timer_id = extra_of or timer_id
            ev = (SOURCE_FIRE, fired_at_ms, fired_at_ms, extra or "fired", token, due, None,
                  topic, None, worker, None, seq if extra_n is None else extra_n, coalesced,
                  None, request_offset)  # fmt: skip
        elif event == "skipped":
            ev = (SOURCE_SKIP, at_ms, at_ms, "skipped", token, due, None, topic, reason,
                  worker, None, seq, coalesced, None, None)  # fmt: skip
        elif event in ("cancel", DROPPED_ANSWER) or (
            event in (TRIGGER, BACKFILL) and outcome in APPLIED_OUTCOMES
        ):
            kind = CANCEL_REPORT if event == "cancel" else event
            ev = (SOURCE_REPORT, at_ms, at_ms, kind, token, None, None, None, outcome, worker,
                  None, request_offset, None, None, None)  # fmt: skip
        else:
            continue
        events[(partition, timer_id)].append(ev)
    read_s = time.monotonic() - started
    kinds: Counter[str] = Counter()
    refused: Counter[str] = Counter()
    for timer_events in events.values():
        timer_events.sort(key=_sort_key)
        columns = {
            name: list(col)
            for name, col in zip(EVENT_FIELDS, zip(*timer_events, strict=True), strict=True)
        }
        verdict = judge_one(columns, 0, len(timer_events), rules)
        kinds.update(v["kind"] for v in verdict["violations"])
        refused.update({name: verdict.get(f"refused_{name}") or 0 for name in REFUSED_OUTCOMES})
    judge_s = time.monotonic() - started - read_s
    counted = {name: refused[name] for name in REFUSED_OUTCOMES}
    return BaselineResult(len(events), dict(kinds), read_s, judge_s, counted)
