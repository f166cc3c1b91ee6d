"""The due-load forecast over HTTP, in ``kafka-timers status`` and as a metric.

Each partition's :class:`~app.core.forecast.PartitionForecast` keeps pending timers per
(callback topic, minute) for the next 3 hours and per (topic, hour) for the next 7 days;
this module adds the partitions of a worker up (at most once every
:data:`FORECAST_TTL` seconds: the cost is the counters, never what is pending), and the
workers of a deployment (``kafka-timers status``).

Who may see what. Totals per minute and per hour are served to anyone who reaches the
web port, in ``/status/data`` (``due_forecast``), like the pending counts by due time
the page already shows. Counts **by callback topic** say which timers exist, so
``/status/forecast`` needs the operator's credential (``Authorization: Bearer
<KAFKA_TIMERS_OPERATOR_TOKEN>``), like ``/timers/next``. The metric
``kafka_timers_due_forecast{window}`` on the metrics port, which asks for no credential,
holds the totals only, like ``/status/data``: the counts by topic are the operator's.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from app.core.forecast import (
    DEFAULT_HOUR_SECONDS,
    DEFAULT_MINUTE_SECONDS,
    HOUR,
    MINUTE,
    ForecastRows,
    PartitionForecast,
    forecast_rows,
)
from app.worker.metrics import WorkerMetrics

__all__ = [
    "FORECAST_TTL",
    "FORECAST_WINDOWS",
    "ForecastCollector",
    "merge_forecasts",
    "rows_json",
]

#: How long a worker's summed forecast is served again (it moves by the minute).
FORECAST_TTL = 5.0
#: The metric's windows (see :meth:`app.core.forecast.ForecastRows.windows`).
FORECAST_WINDOWS = ("next_1m", "next_5m", "next_1h", "next_24h")


def rows_json(rows: ForecastRows) -> dict[str, Any]:
    return {
        "overdue": rows.overdue,
        "windows": rows.windows(),
        "minute_start": rows.minute_start,
        "minutes": rows.minutes,
        "hour_start": rows.hour_start,
        "hours": rows.hours,
    }


def _total(rows: Iterable[ForecastRows], now: float) -> ForecastRows:
    m0, h0 = int(now) // MINUTE * MINUTE, int(now) // HOUR * HOUR
    total = ForecastRows(
        m0, h0, 0, [0] * (DEFAULT_MINUTE_SECONDS // MINUTE), [0] * (DEFAULT_HOUR_SECONDS // HOUR)
    )
    for r in rows:
        total.overdue += r.overdue
        total.minutes = [a + b for a, b in zip(total.minutes, r.minutes, strict=True)]
        total.hours = [a + b for a, b in zip(total.hours, r.hours, strict=True)]
    return total


class ForecastCollector:
    """One worker's forecast: its partitions' counters added up, cached."""

    def __init__(
        self,
        forecasts: Callable[[], Iterable[PartitionForecast]],
        metrics: WorkerMetrics,
        worker_id: str,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._forecasts = forecasts
        self._metrics = metrics
        self._worker = worker_id
        self._clock = clock
        self._cached: tuple[float, dict[str, ForecastRows], bool, float] | None = None
        self._topics_body: tuple[float, bytes] | None = None

    def _rows(self) -> tuple[dict[str, ForecastRows], bool, float]:
        mono = time.monotonic()
        if self._cached is None or mono - self._cached[0] >= FORECAST_TTL:
            now = self._clock()
            rows, complete = forecast_rows(self._forecasts(), now)
            self._cached = (mono, rows, complete, now)
        _, rows, complete, now = self._cached
        return rows, complete, now

    def public(self) -> dict[str, Any]:
        """Totals over every callback topic: what ``/status/data`` shows to anyone."""
        rows, complete, now = self._rows()
        return {
            "now": now,
            "complete": complete,
            **rows_json(_total(rows.values(), now)),
        }

    def by_topic_body(self) -> bytes:
        """``/status/forecast`` (operator only): the totals and each topic's rows."""
        rows, complete, now = self._rows()
        cached = self._topics_body
        if cached is None or cached[0] != now:
            doc = {
                "worker": self._worker,
                "now": now,
                "complete": complete,
                "total": rows_json(_total(rows.values(), now)),
                "topics": {topic: rows_json(r) for topic, r in sorted(rows.items())},
            }
            cached = self._topics_body = (now, json.dumps(doc).encode())
        return cached[1]

    def cached_body(self, max_age: float | None = FORECAST_TTL) -> bytes | None:
        """The last ``/status/forecast`` body if computed less than ``max_age`` seconds
        ago (``None``: however old), else None."""
        cached, body = self._cached, self._topics_body
        if cached is None or body is None or body[0] != cached[3]:
            return None
        if max_age is not None and time.monotonic() - cached[0] >= max_age:
            return None
        return body[1]

    def export(self) -> None:
        """Set ``kafka_timers_due_forecast{window}``: totals over every callback topic
        (a Faust timer). The counts by topic stay behind the credential."""
        rows, _, now = self._rows()
        windows = _total(rows.values(), now).windows()
        gauge = self._metrics.due_forecast
        for window in FORECAST_WINDOWS:
            gauge.labels(window=window).set(windows.get(window, 0))


def _merge_rows(docs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Add up row documents of several workers, aligned on absolute minutes and hours
    (workers read a second or so apart, maybe either side of a minute)."""
    overdue = 0
    minutes: dict[int, int] = {}
    hours: dict[int, int] = {}
    windows: dict[str, int] = dict.fromkeys(FORECAST_WINDOWS, 0)
    for doc in docs:
        overdue += doc.get("overdue", 0)
        for i, n in enumerate(doc.get("minutes", [])):
            at = int(doc["minute_start"]) + i * MINUTE
            minutes[at] = minutes.get(at, 0) + n
        for i, n in enumerate(doc.get("hours", [])):
            at = int(doc["hour_start"]) + i * HOUR
            hours[at] = hours.get(at, 0) + n
        for window, n in doc.get("windows", {}).items():
            windows[window] = windows.get(window, 0) + n
    m0 = max((int(d["minute_start"]) for d in docs), default=0)
    h0 = max((int(d["hour_start"]) for d in docs), default=0)
    n_min = max((len(d.get("minutes", [])) for d in docs), default=0)
    n_hour = max((len(d.get("hours", [])) for d in docs), default=0)
    return {
        "overdue": overdue,
        "windows": windows,
        "minute_start": m0,
        "minutes": [minutes.get(m0 + i * MINUTE, 0) for i in range(n_min)],
        "hour_start": h0,
        "hours": [hours.get(h0 + i * HOUR, 0) for i in range(n_hour)],
    }


def merge_forecasts(docs: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """Add up several workers' ``due_forecast`` (or ``/status/forecast``) documents.

    A document with ``topics`` (the operator's) merges topic by topic as well.
    """
    docs = [d for d in docs if d]
    if not docs:
        return None
    if "total" in docs[0]:
        topics: dict[str, list[Mapping[str, Any]]] = {}
        for doc in docs:
            for topic, rows in doc.get("topics", {}).items():
                topics.setdefault(topic, []).append(rows)
        return {
            "workers": [d.get("worker") for d in docs],
            "now": max(float(d.get("now", 0.0)) for d in docs),
            "complete": all(d.get("complete", False) for d in docs),
            "total": _merge_rows([d["total"] for d in docs]),
            "topics": {t: _merge_rows(r) for t, r in sorted(topics.items())},
        }
    return {
        "now": max(float(d.get("now", 0.0)) for d in docs),
        "complete": all(d.get("complete", False) for d in docs),
        **_merge_rows(docs),
    }
