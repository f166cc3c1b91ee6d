"""The tick agent's intake: garbage counted, far-ahead ticks dropped, sources bounded and
forgotten with their labels, batches judged whole parsing each event once."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from prometheus_client import generate_latest

from app.core.fetch_pacing import TickWatch
from app.worker.metrics import WorkerMetrics
from app.worker.tick_intake import TickIntake

NOW = 1_767_225_600


@dataclass
class Message:
    key: bytes | None
    partition: int
    timestamp: float | None = NOW + 0.01
    topic: str = "ticks"
    offset: int = 0


@dataclass
class Event:
    message: Message
    value: object


def tick(
    second: int | bytes, partition: int = 0, source: str = "osc", value: object = None
) -> Event:
    key = second if isinstance(second, bytes) else str(second).encode()
    if value is None:
        value = json.dumps({"oscillator": source, "sent_ms": NOW * 1000}).encode()
    return Event(Message(key, partition), value)


class Clock:
    def __init__(self) -> None:
        self.now = NOW + 0.5

    def __call__(self) -> float:
        return self.now


def intake(**kw: float) -> tuple[TickIntake, WorkerMetrics, TickWatch, Clock]:
    metrics, watch, clock = WorkerMetrics(), TickWatch(), Clock()
    options = {"max_ahead": 3600.0, "max_sources": 3, "silence": 300.0, **kw}
    made = TickIntake(
        metrics,
        watch,
        max_ahead=options["max_ahead"],
        max_sources=int(options["max_sources"]),
        silence=options["silence"],
        clock=clock,
    )
    return made, metrics, watch, clock


def ignored(metrics: WorkerMetrics, reason: str) -> float:
    value = metrics.registry.get_sample_value(
        "kafka_timers_ticks_ignored_total", {"reason": reason}
    )
    return value or 0.0


def test_garbage_is_counted_by_reason_and_good_ticks_pass() -> None:
    reader, metrics, _, _ = intake()
    events = [
        tick(NOW),
        tick(b"not a second"),
        tick(b"1e700000"),
        tick(b"253402300799"),  # the year 9999: not held, ignored
        tick(NOW, value=b"[" * 5000),
        tick(NOW, value=b""),
        tick(NOW, value=json.dumps({"oscillator": "o", "sent_ms": 10**500}).encode()),
        tick(NOW, value=12345),  # not bytes: Faust gave something else
    ]
    ticks = reader.read(events)
    # One tick per partition and source: what the clock checks and the gate need.
    assert sorted((p, s, src) for p, s, _, src in ticks) == [
        (0, NOW, "o"),
        (0, NOW, "osc"),
        (0, NOW, "unknown"),
    ]
    assert ignored(metrics, "no_second") == 1
    assert ignored(metrics, "out_of_range") == 1
    assert ignored(metrics, "too_far_ahead") == 1
    assert ignored(metrics, "bad_value") == 1
    assert ignored(metrics, "bad_field") == 1


def test_a_burst_is_one_tick_per_partition_and_source_with_the_newest_second_and_send() -> None:
    reader, _, _, _ = intake()
    burst = [tick(NOW - 60, 0) for _ in range(1000)] + [tick(NOW - 59, 0), tick(NOW - 70, 1)]
    burst.append(
        tick(
            NOW - 80,
            0,
            value=json.dumps({"oscillator": "osc", "sent_ms": NOW * 1000 + 400}).encode(),
        )
    )
    assert sorted(reader.read(burst)) == [
        (0, NOW - 59, NOW + 0.4, "osc"),
        (1, NOW - 70, NOW, "osc"),
    ]


def test_sources_are_bounded_and_forgotten_labels_included() -> None:
    reader, metrics, _, clock = intake()
    names = [f"osc-{i}" for i in range(10_000)]
    ticks = reader.read([tick(NOW, source=n) for n in names])
    assert {src for _, _, _, src in ticks} == {"osc-0", "osc-1", "osc-2", "other"}
    for _, _, _, src in ticks[:5]:  # what the service does with held ticks
        metrics.ticks_held.labels(source=src).inc()
        metrics.clock_skew.labels(source=src).set(0.01)
    text = generate_latest(metrics.registry)
    assert len(text) < 100_000
    assert metrics.registry.get_sample_value("kafka_timers_tick_sources") == 4
    assert metrics.registry.get_sample_value("kafka_timers_tick_sources_other_total") == 9_997
    clock.now += 301
    reader.read([tick(NOW + 301, source="fresh")])
    assert metrics.registry.get_sample_value("kafka_timers_tick_sources") == 1
    text = generate_latest(metrics.registry).decode()
    assert "osc-0" not in text and 'source="other"' not in text


def test_a_batch_is_whole_once_every_partition_has_the_newest_second() -> None:
    reader, _, watch, _ = intake()
    watch.assigned([0, 1])
    batch: list[Event] = []
    calls = 0
    for event in (tick(NOW, 0), tick(b"junk", 1), tick(NOW, 1)):
        batch.append(event)
        calls += 1
        whole = reader.whole(batch)
    assert whole and calls == 3
    assert not reader.whole([tick(NOW + 1, 0)])  # a new batch starts afresh
    assert reader.whole([tick(NOW + 1, 0), tick(NOW + 1, 1)])


def test_a_batch_of_a_burst_is_judged_in_linear_time() -> None:
    reader, _, watch, _ = intake()
    watch.assigned(range(8))
    started = time.thread_time()
    for _ in range(400):  # 102,400 ticks, each batch one list growing as the take loop's
        events: list[Event] = []
        for _ in range(256):
            events.append(tick(NOW - 60, 0))
            assert not reader.whole(events)
    assert time.thread_time() - started < 20  # parsing the batch so far each time: minutes
