"""The worker's status page and JSON endpoints, and ``kafka-timers status``.

Served by the worker's own Faust web server (``KAFKA_TIMERS_WEB_PORT``):

``GET /status``
    the live page: pending timers by due time, fires per second, lateness
    percentiles, last tick per partition, rejects by reason (charts drawn in the
    browser from ``/status/data``; no outside resources).
``GET /status/data``
    everything the page shows, as JSON (also what ``kafka-timers status`` reads),
    including the store's keys per partition by kind (pending timers, remembered ids,
    bookkeeping): state must stay O(pending), and this is where to see that it does.
``GET /timers/next?n=N``
    the next ``N`` pending timers on this worker, in due order (``N`` <= 1000). Needs
    the operator's credential (``Authorization: Bearer <KAFKA_TIMERS_OPERATOR_TOKEN>``),
    like ``/timers/{id}``: which timers exist is not for anyone who reaches the port.
    Without a configured credential both answer 403, with a wrong or missing one 401.
``GET /timers/{id}``
    one timer's state (``pending``, ``fired``, ``cancelled``), due second and
    partition; 404 if no partition this worker holds knows it. A pending series also
    shows ``series``: its recurrence, its next occurrence (due second and number) and
    how many occurrences have fired so far; a series that has ended is ``fired``, under
    its first occurrence's second. A pending debounced timer shows ``debounce``: its
    window, max-wait, first request's time and the requests merged so far.
``GET /status/forecast``
    the due-load forecast by callback topic (per minute for 3 hours, per hour for 7
    days): the operator's credential, as for ``/timers/next``. ``/status/data`` has the
    totals over all topics (``due_forecast``) for anyone (:mod:`app.status.forecast`).

Handlers run on the worker's event loop, between ticks, so each is bounded: the
by-due histogram reads at most :data:`PENDING_SCAN_LIMIT` timers and the snapshot is
cached for a second, encoded; ``/timers/next`` serves the first :data:`NEXT_MAX` timers
read and encoded at most once a second (so a listing may be up to a second old), cut at
:data:`NEXT_MAX_BYTES`; lookups are point reads. All three spend from one
:class:`~app.status.admission.LoopBudget` (:data:`HEAVY_SHARE` of the loop): past it
they answer 503 with ``Retry-After: 1`` at once, so no number of concurrent requests
can hold the loop the timers fire on. Tokens are never shown: a token authorises a
cancel, and the page has no authentication of its own.
"""

from __future__ import annotations

import base64
import bisect
import hmac
import itertools
import json
import time
from collections.abc import Callable
from importlib import resources
from itertools import islice
from typing import Any

from app.core.timer import Timer
from app.core.timer_filter import TimerFilter
from app.settings import Settings
from app.status.admission import LoopBudget
from app.status.cli import status_main
from app.status.forecast import ForecastCollector
from app.status.listing import LIST_MAX, list_page, page_body, parse_cursor
from app.status.model import (
    PartitionScan,
    SampleHistory,
    lateness_summary,
    merge_sorted_dues,
    oscillator_clocks,
    pending_by_due,
    read_sample,
    store_keys_summary,
)
from app.worker.descriptors import exit_if_out_of_descriptors
from app.worker.metrics import WorkerMetrics
from app.worker.service import TimerService

__all__ = [
    "HEAVY_SHARE",
    "NEXT_MAX",
    "NEXT_MAX_BYTES",
    "PENDING_SCAN_LIMIT",
    "StatusCollector",
    "register_status_views",
    "status_main",
]

#: Most pending timers one refresh of the by-due histogram reads, over all partitions
#: (about 6 µs each: ~30 ms of the event loop at most, once a second at most).
PENDING_SCAN_LIMIT = 5000
#: Fewest read per partition, so one busy partition cannot hide the others.
PARTITION_SCAN_FLOOR = 200
#: Largest ``n`` accepted by ``/timers/next``.
NEXT_MAX = 1000
#: How long a computed snapshot is served again (several open pages cost one scan).
SNAPSHOT_TTL = 1.0
#: How long the next-due listing is served again before the wheels are read anew.
NEXT_TTL = 1.0
#: Largest ``/timers/next`` body: a listing is cut short there (``"truncated": true``).
#: A timer's key is up to the payload limit, so 1,000 of them could be a gigabyte.
NEXT_MAX_BYTES = 1024**2
#: Share of the event loop the store-reading views may take (50 ms a second), and the
#: most they may save up while idle.
HEAVY_SHARE = 0.02
HEAVY_BURST = 0.02
#: Loop time charged per byte of a heavy view's body, for writing it after the view
#: returns (aiohttp and the socket: a 152 kB listing cost ~0.15 ms more than its
#: handler): without it 2,000 concurrent listings wrote 300 MB a second past the budget.
WRITE_SECONDS_PER_BYTE = 1e-9
#: The page's files, in ``app/status/static/``, with the content type each is served as.
STATIC_FILES = {
    "status.html": "text/html",
    "status.css": "text/css",
    "status.js": "text/javascript",
}
#: Counters are sampled this often, for the fires-per-second history.
SAMPLE_INTERVAL = 1.0
#: The forecast metric is set this often.
FORECAST_EXPORT_INTERVAL = 10.0


def _text_or_b64(data: bytes | None, name: str) -> dict[str, Any]:
    if data is None:
        return {name: None}
    try:
        return {name: data.decode()}
    except UnicodeDecodeError:
        return {f"{name}_b64": base64.b64encode(data).decode()}


def timer_json(partition: int, timer: Timer) -> dict[str, Any]:
    """What the endpoints say about a pending timer: never its token, nor its payload."""
    doc: dict[str, Any] = {
        "id": timer.id,
        "due": timer.due,
        "partition": partition,
        "topic": timer.topic,
        **_text_or_b64(timer.key, "key"),
        "value_bytes": None if timer.value is None else len(timer.value),
        "headers": [name for name, _ in timer.headers],
    }
    if timer.late is not None:
        doc["late"] = timer.late.text()
    if timer.spread:
        doc.update(spread=timer.spread, fires_at=timer.fire_at)
    if timer.debounce is not None:
        debounce = timer.debounce
        doc["debounce"] = {
            "seconds": debounce.seconds,
            "max_wait": debounce.max_wait,
            "first_request_ms": debounce.first_ms,
            "merged": debounce.merged,
        }
    if timer.recurrence is not None:
        rec = timer.recurrence
        doc["series"] = {
            "recurrence": rec.describe(),
            "cron": rec.cron,
            "tz": rec.tz if rec.cron else None,
            "every": rec.every,
            "first_due": rec.start,
            "end": rec.end,
            "count": rec.count,
            "next_due": timer.due,
            "next_seq": timer.seq,
            #: delivered; the rest of seq - 1 were skipped or coalesced by the policy
            "fired": timer.fired_before,
            "occurrences_before": timer.seq - 1,
        }
    return doc


def _by_partition(metrics: WorkerMetrics, name: str) -> dict[str, float]:
    """The value of gauge ``name`` for each ``partition`` label it has."""
    return {
        sample.labels["partition"]: sample.value
        for family in metrics.registry.collect()
        if family.name == name
        for sample in family.samples
    }


def request_lag(metrics: WorkerMetrics) -> dict[str, Any]:
    """Requests waiting to be applied: per held partition (records and seconds, live),
    and per partition of the topic from the informational group's committed offsets."""
    records = _by_partition(metrics, "kafka_timers_request_lag_records")
    seconds = _by_partition(metrics, "kafka_timers_request_lag_seconds")
    group = _by_partition(metrics, "kafka_timers_request_group_lag_records")
    order = sorted(records, key=int)
    return {
        "request_lag": {p: {"records": records[p], "seconds": seconds.get(p, 0.0)} for p in order},
        "request_group_lag": {p: group[p] for p in sorted(group, key=int)},
    }


class StatusCollector:
    """Builds the status snapshot of one worker from its metrics and wheels."""

    def __init__(
        self,
        service: TimerService,
        metrics: WorkerMetrics,
        settings: Settings,
        held_partitions: Callable[[], list[int]],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._service = service
        self._metrics = metrics
        self._settings = settings
        self._held = held_partitions
        self._clock = clock
        self.history = SampleHistory()
        self._cached: tuple[float, dict[str, Any]] | None = None
        self._cached_body: bytes | None = None
        #: When read, each timer's JSON, and where each ends in a joined listing.
        self._next: tuple[float, list[bytes], list[int]] | None = None
        #: The due-load forecast (None: not shown).
        self.forecast: ForecastCollector | None = None
        self.sample()

    def sample(self) -> None:
        """Read the counters into the history (once a second, from a Faust timer)."""
        self.history.add(read_sample(self._metrics.registry, self._clock()))

    def _scans(self) -> list[PartitionScan]:
        wheels = self._service.wheels()
        pending = self._service.pending_by_partition()
        per_partition = max(PARTITION_SCAN_FLOOR, PENDING_SCAN_LIMIT // max(1, len(wheels)))
        return [
            PartitionScan(
                partition=p,
                dues=[due for due, _ in islice(wheel.iter_due(0), per_partition)],
                pending=pending.get(p, 0),
            )
            for p, wheel in sorted(wheels.items())
        ]

    def snapshot(self) -> dict[str, Any]:
        """Everything the page shows (cached for :data:`SNAPSHOT_TTL` seconds)."""
        mono = time.monotonic()
        if self._cached is not None and mono - self._cached[0] < SNAPSHOT_TTL:
            return self._cached[1]
        now = self._clock()
        current = read_sample(self._metrics.registry, now)
        self.history.add(current)
        data = {
            "worker": self._settings.worker_id,
            "now": now,
            "partitions_held": self._held(),
            "totals": {
                "pending": current.pending,
                "scheduled": current.scheduled,
                "fired": current.fired,
                "cancelled": current.cancelled,
                "rejected": current.rejected,
            },
            "fired_by_topic": dict(current.fired_by_topic),
            "rejected_by_reason": {r: n for r, n in current.rejected_by_reason.items() if n},
            "fires_per_second": [[t, r] for t, r in self.history.fires_per_second()],
            "fires_per_second_recent": self.history.rate(10.0),
            "lateness": lateness_summary(self.history),
            "last_tick": {
                str(p): {"second": s, "age": now - s} for p, s in sorted(current.last_tick.items())
            },
            "pending_by_partition": {
                str(p): n for p, n in sorted(self._service.pending_by_partition().items())
            },
            "oscillators": oscillator_clocks(current),
            "held_ticks": {str(p): s for p, s in sorted(self._service.held_ticks().items())},
            "rate_limits": self._service.rate_limits(),
            "pending_by_due": pending_by_due(self._scans(), now),
            **store_keys_summary(self._service.store_keys_by_partition()),
            **request_lag(self._metrics),
            "due_forecast": None if self.forecast is None else self.forecast.public(),
        }
        self._cached = (mono, data)
        self._cached_body = None
        return data

    def snapshot_body(self) -> bytes:
        """:meth:`snapshot`, JSON-encoded once per snapshot."""
        data = self.snapshot()
        if self._cached_body is None:
            self._cached_body = json.dumps(data).encode()
        return self._cached_body

    def next_due(self, n: int) -> list[dict[str, Any]]:
        """The next ``n`` pending timers of this worker, in due order (reads about ``n``)."""
        iterators = {p: wheel.iter_pending(0) for p, wheel in self._service.wheels().items()}
        return [timer_json(p, t) for p, t in merge_sorted_dues(iterators, n)]

    def next_due_body(self, n: int) -> bytes:
        """``/timers/next?n=``: the next ``n`` pending timers as JSON, from a listing of
        the first :data:`NEXT_MAX` read at most every :data:`NEXT_TTL` seconds, cut at
        :data:`NEXT_MAX_BYTES`."""
        mono = time.monotonic()
        if self._next is None or mono - self._next[0] >= NEXT_TTL:
            parts = [json.dumps(doc).encode() for doc in self.next_due(NEXT_MAX)]
            ends = list(itertools.accumulate(len(part) + 1 for part in parts))
            self._next = (mono, parts, ends)
        _, parts, ends = self._next
        wanted = min(n, len(parts))
        fits = bisect.bisect_right(ends, NEXT_MAX_BYTES, hi=wanted)
        head = {"worker": self._settings.worker_id, "truncated": fits < wanted}
        return b"".join(
            (json.dumps(head)[:-1].encode(), b', "timers": [', b",".join(parts[:fits]), b"]}")
        )

    def lookup(self, timer_id: str) -> dict[str, Any] | None:
        """State of ``timer_id`` on the partitions this worker holds, or ``None``."""
        for p, wheel in sorted(self._service.wheels().items()):
            found = wheel.lookup(timer_id)
            if found is None:
                continue
            state, due, _token = found
            result: dict[str, Any] = {"id": timer_id, "state": state, "partition": p}
            if state == "cancelled" and due == 0:
                result["state"] = "cancelled_in_advance"
            else:
                result["due"] = due
            if state == "pending":
                timer = wheel.get_pending(timer_id)
                if timer is not None:
                    result.update(timer_json(p, timer))
            result["worker"] = self._settings.worker_id
            return result
        return None


def _held_partitions(app: Any, service: TimerService, topic: str) -> Callable[[], list[int]]:
    def held() -> list[int]:
        try:
            assigned = app.assignor.assigned_actives()
        except Exception:  # no assignment yet, or Faust internals moved: use what is loaded
            return sorted(service.wheels())
        return sorted(tp.partition for tp in assigned if tp.topic == topic)

    return held


def register_status_views(
    app: Any, service: TimerService, metrics: WorkerMetrics, settings: Settings
) -> StatusCollector:
    """Add the status page and JSON endpoints to the worker's Faust web server."""
    collector = StatusCollector(
        service, metrics, settings, _held_partitions(app, service, settings.topics.ticks)
    )
    collector.forecast = forecast = ForecastCollector(
        lambda: [w.forecast for w in service.wheels().values() if w.forecast is not None],
        metrics,
        settings.worker_id,
    )
    budget = LoopBudget(HEAVY_SHARE, HEAVY_BURST)

    def busy(view: Any) -> Any:
        return view.json(
            {"error": "busy: this worker's web views are at their share of its event loop"},
            status=503,
            headers={"Retry-After": "1"},
        )

    def heavy(view: Any, work: Callable[[], bytes]) -> Any:
        """``work``'s JSON body, if the loop budget admits it; else 503 at once."""
        if not budget.admit():
            return busy(view)
        try:
            with budget.spend():
                body = work()
        except Exception as exc:
            exit_if_out_of_descriptors(exc, "a web view")
            raise
        budget.charge(len(body) * WRITE_SECONDS_PER_BYTE)
        return view.bytes(body, content_type="application/json")

    @app.timer(SAMPLE_INTERVAL, name="kafka_timers_status_sample")  # type: ignore[untyped-decorator,misc]
    async def sample_counters() -> None:
        collector.sample()

    @app.timer(FORECAST_EXPORT_INTERVAL, name="kafka_timers_forecast_export")  # type: ignore[untyped-decorator,misc]
    async def export_forecast() -> None:
        forecast.export()  # counters, bounded by topics x windows: no store is read

    static = {
        name: (resources.files("app.status").joinpath("static", name).read_text(), kind)
        for name, kind in STATIC_FILES.items()
    }

    def serve(name: str) -> Any:
        body, kind = static[name]

        async def handler(view: Any, request: Any) -> Any:
            return view.text(body, content_type=kind)

        return handler

    status_page = serve("status.html")

    async def status_data(view: Any, request: Any) -> Any:
        return heavy(view, collector.snapshot_body)

    def refused(view: Any, request: Any) -> Any | None:
        """The answer refusing ``request`` if it lacks the operator's credential."""
        token = settings.operator_token
        if token is None:
            return view.json(
                {
                    "error": "listing and looking up timers is off on this worker: set "
                    "KAFKA_TIMERS_OPERATOR_TOKEN and send it as 'Authorization: Bearer <token>'"
                },
                status=403,
            )
        given = request.headers.get("Authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
            return view.json(
                {"error": "needs the operator's credential: 'Authorization: Bearer <token>'"},
                status=401,
                headers={"WWW-Authenticate": 'Bearer realm="kafka-timers"'},
            )
        return None

    async def status_forecast(view: Any, request: Any) -> Any:
        if (answer := refused(view, request)) is not None:
            return answer
        # Counters, not the stores: a body computed in the last FORECAST_TTL seconds is
        # served like a static page; a new one is computed within the loop budget, and
        # past it the last one is served, older (503 only before the first).
        cached = forecast.cached_body()
        if cached is not None:
            return view.bytes(cached, content_type="application/json")
        if not budget.admit():
            stale = forecast.cached_body(max_age=None)
            return (
                busy(view) if stale is None else view.bytes(stale, content_type="application/json")
            )
        with budget.spend():
            body = forecast.by_topic_body()
        return view.bytes(body, content_type="application/json")

    async def timers_next(view: Any, request: Any) -> Any:
        if (answer := refused(view, request)) is not None:
            return answer
        raw = request.query.get("n", "20")
        try:
            n = int(raw)
        except ValueError:
            return view.json({"error": f"n must be a whole number, got {raw!r}"}, status=400)
        if not 1 <= n <= NEXT_MAX:
            return view.json({"error": f"n must be between 1 and {NEXT_MAX}"}, status=400)
        return heavy(view, lambda: collector.next_due_body(n))

    async def timer_by_id(view: Any, request: Any, timer_id: str) -> Any:
        if (answer := refused(view, request)) is not None:
            return answer
        if not budget.admit():
            return busy(view)
        try:
            with budget.spend():
                found = collector.lookup(timer_id)
        except Exception as exc:
            exit_if_out_of_descriptors(exc, "a web view")
            raise
        if found is None:
            return view.json(
                {
                    "id": timer_id,
                    "error": "not found on this worker",
                    "worker": settings.worker_id,
                    "partitions_held": sorted(service.wheels()),
                },
                status=404,
            )
        return view.json(found)

    async def timers_list(view: Any, request: Any) -> Any:
        # kafka-timers list: one bounded page of matching timers (app.status.listing).
        if (answer := refused(view, request)) is not None:
            return answer
        query = dict(request.query)
        try:
            limit = int(query.pop("limit", LIST_MAX))
            cursor = parse_cursor(query.pop("cursor", None))
            flt = TimerFilter.from_query(query)
        except ValueError as exc:
            return view.json({"error": str(exc)}, status=400)
        if not 1 <= limit <= LIST_MAX:
            return view.json({"error": f"limit must be between 1 and {LIST_MAX}"}, status=400)
        return heavy(
            view,
            lambda: page_body(
                settings.worker_id,
                list_page(service.wheels(), flt, limit=limit, cursor=cursor, describe=timer_json),
            ),
        )

    app.page("/timers", name="kafka_timers_list")(timers_list)
    # ``next`` before ``{timer_id}``: a literal route must win over the pattern.
    app.page("/status", name="kafka_timers_status")(status_page)
    app.page("/status/", name="kafka_timers_status_slash")(status_page)
    app.page("/status/static/status.css", name="kafka_timers_status_css")(serve("status.css"))
    app.page("/status/static/status.js", name="kafka_timers_status_js")(serve("status.js"))
    app.page("/status/data", name="kafka_timers_status_data")(status_data)
    app.page("/status/forecast", name="kafka_timers_status_forecast")(status_forecast)
    app.page("/timers/next", name="kafka_timers_next")(timers_next)
    app.page("/timers/{timer_id}", name="kafka_timers_timer")(timer_by_id)
    return collector
