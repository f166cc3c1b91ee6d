"""The due-load forecast's worker side (app.status.forecast): the metric holds totals,
never a topic (the counts by topic are the operator's), and the documents of several
workers add up aligned on absolute minutes and hours."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from app.core.forecast import PartitionForecast
from app.core.timer import Timer
from app.core.wheel import PartitionWheel
from app.status.forecast import ForecastCollector, merge_forecasts
from app.worker.metrics import WorkerMetrics
from tests.support.memkv import MemoryKV

START = 1_767_225_600


def wheel_with(plan: dict[str, list[int]]) -> PartitionWheel:
    wheel = PartitionWheel(MemoryKV(), clock=lambda: START, forecast=PartitionForecast())
    wheel.recount()
    n = 0
    for topic, offsets in plan.items():
        for offset in offsets:
            wheel.schedule(Timer(id=f"t{n}", due=START + offset, topic=topic, key=None, value=b""))
            n += 1
    return wheel


def gauge(metrics: WorkerMetrics, window: str) -> float | None:
    return metrics.registry.get_sample_value("kafka_timers_due_forecast", {"window": window})


def test_the_metric_shows_totals_and_never_a_topic() -> None:
    wheel = wheel_with({"a": [30, 120], "b": [90], "c": [4000]})
    metrics = WorkerMetrics(CollectorRegistry())
    assert wheel.forecast is not None
    collector = ForecastCollector(
        lambda: [wheel.forecast] if wheel.forecast else [], metrics, "w1", lambda: START
    )
    collector.export()
    windows = {w: gauge(metrics, w) for w in ("next_1m", "next_5m", "next_1h", "next_24h")}
    assert windows == {"next_1m": 1, "next_5m": 3, "next_1h": 3, "next_24h": 4}
    exposed = generate_latest(metrics.registry).decode().splitlines()
    shown = [line for line in exposed if line.startswith("kafka_timers_due_forecast{")]
    assert len(shown) == 4 and not any("callback_topic" in line for line in shown), shown
    fired = wheel.begin_tick(START + 200)  # a and b fire
    assert fired is not None and len(fired) == 3
    wheel.finish_tick(START + 200, fired)
    collector._cached = None  # past its 5 s
    collector.export()
    assert gauge(metrics, "next_24h") == 1


def test_documents_of_two_workers_add_up_aligned_on_the_minute() -> None:
    one = {
        "overdue": 1,
        "minute_start": START,
        "minutes": [1, 2, 3],
        "hour_start": START,
        "hours": [6, 0],
        "windows": {"next_1m": 1},
        "now": START + 59,
        "complete": True,
    }
    two = {
        "overdue": 0,
        "minute_start": START + 60,
        "minutes": [10, 20, 30],
        "hour_start": START,
        "hours": [60, 1],
        "windows": {"next_1m": 10},
        "now": START + 61,
        "complete": False,
    }
    merged = merge_forecasts([one, two])
    assert merged is not None
    assert merged["minute_start"] == START + 60  # the later worker's current minute
    assert merged["minutes"] == [2 + 10, 3 + 20, 30]
    assert merged["hours"] == [66, 1] and merged["overdue"] == 1
    assert merged["complete"] is False and merged["windows"]["next_1m"] == 11
    by_topic = merge_forecasts(
        [
            {"worker": "w1", "now": START, "complete": True, "total": one, "topics": {"x": one}},
            {"worker": "w2", "now": START, "complete": True, "total": two, "topics": {"y": two}},
        ]
    )
    assert by_topic is not None and set(by_topic["topics"]) == {"x", "y"}
    assert by_topic["workers"] == ["w1", "w2"]
    assert merge_forecasts([]) is None
