"""What the status page and ``kafka-timers status`` show, as plain data and pure functions.

Numbers come from the worker's own Prometheus metric objects (one source of truth: the
page cannot disagree with ``/metrics``), sampled into a short history so rates and
recent percentiles need no second bookkeeping on the hot path. Pending timers by due
time come from a *bounded* scan of the wheels: a status request must never walk
millions of RocksDB keys on the worker's event loop, so past the scan limit the page
says how many timers it did not look at, and from which second on.

Nothing here touches Faust or Kafka; :mod:`app.status.views` wires it to the web server.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry

from app.status.forecast import merge_forecasts

__all__ = [
    "AHEAD_ALERT_SECONDS",
    "FAR_BUCKETS",
    "SOON_BUCKET_SECONDS",
    "SOON_WINDOW_SECONDS",
    "STORE_KEY_KINDS",
    "CounterSample",
    "PartitionScan",
    "SampleHistory",
    "histogram_quantile",
    "lateness_summary",
    "merge_snapshots",
    "merge_sorted_dues",
    "oscillator_clocks",
    "pending_by_due",
    "read_sample",
    "store_keys_summary",
]

#: The "next minutes" chart: this many seconds ahead, in bars of this many seconds.
SOON_WINDOW_SECONDS = 600
SOON_BUCKET_SECONDS = 10

#: An oscillator this far ahead of a worker's clock is flagged (the alert's threshold).
AHEAD_ALERT_SECONDS = 1.0

#: The "further out" histogram: (label, upper bound in seconds from now). Everything
#: beyond the soon window falls into the first bucket whose bound it is below.
FAR_BUCKETS: tuple[tuple[str, float], ...] = (
    ("10m-1h", 3600.0),
    ("1h-6h", 6 * 3600.0),
    ("6h-1d", 86400.0),
    ("1d-7d", 7 * 86400.0),
    ("7d-30d", 30 * 86400.0),
    ("30d-1y", 365 * 86400.0),
    (">1y", math.inf),
)


@dataclass(frozen=True)
class CounterSample:
    """The worker's counters at one instant, read from its metric registry."""

    #: Wall-clock time of the reading, epoch seconds.
    t: float
    scheduled: float = 0.0
    cancelled: float = 0.0
    pending: float = 0.0
    #: Callbacks delivered, by callback topic.
    fired_by_topic: Mapping[str, float] = field(default_factory=dict)
    #: Dead-lettered requests, by reason.
    rejected_by_reason: Mapping[str, float] = field(default_factory=dict)
    #: Cumulative lateness histogram: ``(upper bound, count <= bound)``, +Inf last.
    lateness_buckets: tuple[tuple[float, float], ...] = ()
    lateness_sum: float = 0.0
    #: Newest tick second processed, by partition.
    last_tick: Mapping[int, float] = field(default_factory=dict)
    #: How far each oscillator's clock runs ahead of this worker's, seconds, by source.
    oscillator_ahead: Mapping[str, float] = field(default_factory=dict)
    #: Ticks held until this worker's clock reached their second, by source.
    ticks_held: Mapping[str, float] = field(default_factory=dict)

    @property
    def fired(self) -> float:
        return sum(self.fired_by_topic.values())

    @property
    def rejected(self) -> float:
        return sum(self.rejected_by_reason.values())

    @property
    def lateness_count(self) -> float:
        return self.lateness_buckets[-1][1] if self.lateness_buckets else 0.0


#: The samples :func:`read_sample` reads: the registry collects only the metrics that
#: hold them (every one of the worker's took 1.7 ms, once a second: 0.17% of an idle
#: worker's core).
SAMPLED = frozenset(
    {
        "kafka_timers_scheduled_total",
        "kafka_timers_cancelled_total",
        "kafka_timers_pending",
        "kafka_timers_fired_total",
        "kafka_timers_rejected_total",
        "kafka_timers_fire_lateness_seconds_bucket",
        "kafka_timers_fire_lateness_seconds_sum",
        "kafka_timers_last_tick_seconds",
        "kafka_timers_oscillator_ahead_seconds",
        "kafka_timers_ticks_held_total",
    }
)


def read_sample(registry: CollectorRegistry, now: float) -> CounterSample:
    """Read the worker metrics (see :class:`app.worker.metrics.WorkerMetrics`) from ``registry``."""
    scheduled = cancelled = pending = lateness_sum = 0.0
    fired: dict[str, float] = {}
    rejected: dict[str, float] = {}
    buckets: list[tuple[float, float]] = []
    last_tick: dict[int, float] = {}
    ahead: dict[str, float] = {}
    held: dict[str, float] = {}
    for family in registry.restricted_registry(SAMPLED).collect():
        for s in family.samples:
            name = s.name
            if name == "kafka_timers_scheduled_total":
                scheduled += s.value
            elif name == "kafka_timers_cancelled_total":
                cancelled += s.value
            elif name == "kafka_timers_pending":
                pending += s.value
            elif name == "kafka_timers_fired_total":
                topic = s.labels.get("callback_topic", "")
                fired[topic] = fired.get(topic, 0.0) + s.value
            elif name == "kafka_timers_rejected_total":
                reason = s.labels.get("reason", "")
                rejected[reason] = rejected.get(reason, 0.0) + s.value
            elif name == "kafka_timers_fire_lateness_seconds_bucket":
                buckets.append((float(s.labels["le"]), s.value))
            elif name == "kafka_timers_fire_lateness_seconds_sum":
                lateness_sum += s.value
            elif name == "kafka_timers_last_tick_seconds":
                last_tick[int(s.labels["partition"])] = s.value
            elif name == "kafka_timers_oscillator_ahead_seconds":
                ahead[s.labels["source"]] = s.value
            elif name == "kafka_timers_ticks_held_total":
                held[s.labels["source"]] = s.value
    buckets.sort()
    return CounterSample(
        t=now,
        scheduled=scheduled,
        cancelled=cancelled,
        pending=pending,
        fired_by_topic=fired,
        rejected_by_reason=rejected,
        lateness_buckets=tuple(buckets),
        lateness_sum=lateness_sum,
        last_tick=last_tick,
        oscillator_ahead=ahead,
        ticks_held=held,
    )


def oscillator_clocks(sample: CounterSample) -> dict[str, dict[str, float | None]]:
    """Per oscillator: how far its clock runs ahead of this worker's, and ticks held."""
    sources = sorted(set(sample.oscillator_ahead) | set(sample.ticks_held))
    return {
        source: {
            "ahead_seconds": sample.oscillator_ahead.get(source),
            "ticks_held": sample.ticks_held.get(source, 0.0),
        }
        for source in sources
    }


def histogram_quantile(q: float, buckets: Sequence[tuple[float, float]]) -> float | None:
    """The ``q`` quantile of a cumulative histogram, as Prometheus computes it.

    Linear interpolation inside the bucket that holds the rank, the first bucket
    starting at 0; a rank in the +Inf bucket answers the highest finite bound. ``None``
    when the histogram is empty, so callers show "no data" rather than a made-up 0.
    """
    if not buckets or buckets[-1][1] <= 0:
        return None
    total = buckets[-1][1]
    rank = q * total
    lower_bound, lower_count = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank and count > lower_count:
            if math.isinf(bound):
                return lower_bound
            return lower_bound + (bound - lower_bound) * (rank - lower_count) / (
                count - lower_count
            )
        lower_bound, lower_count = bound, count
    return lower_bound


def _diff_buckets(
    new: Sequence[tuple[float, float]], old: Sequence[tuple[float, float]]
) -> tuple[tuple[float, float], ...]:
    old_by_bound = dict(old)
    return tuple((b, c - old_by_bound.get(b, 0.0)) for b, c in new)


def _percentiles(buckets: Sequence[tuple[float, float]]) -> dict[str, float | None]:
    return {f"p{round(q * 100)}": histogram_quantile(q, buckets) for q in (0.5, 0.9, 0.99)}


class SampleHistory:
    """The last few minutes of :class:`CounterSample` readings, one a second.

    Rates (fires per second) and "recent" lateness percentiles are differences between
    readings, so the hot path only increments the Prometheus metrics it already has.
    """

    def __init__(self, keep_seconds: int = 300) -> None:
        self._samples: deque[CounterSample] = deque(maxlen=keep_seconds + 1)

    def add(self, sample: CounterSample) -> None:
        if self._samples and sample.t <= self._samples[-1].t:
            return
        self._samples.append(sample)

    @property
    def latest(self) -> CounterSample | None:
        return self._samples[-1] if self._samples else None

    def _at_or_before(self, t: float) -> CounterSample | None:
        best = None
        for s in self._samples:
            if s.t <= t:
                best = s
            else:
                break
        return best

    def fires_per_second(self) -> list[tuple[float, float]]:
        """``(time, fires/s)`` between consecutive readings, oldest first."""
        out: list[tuple[float, float]] = []
        previous: CounterSample | None = None
        for s in self._samples:
            if previous is not None and s.t > previous.t:
                out.append((s.t, max(0.0, s.fired - previous.fired) / (s.t - previous.t)))
            previous = s
        return out

    def rate(self, window: float) -> float | None:
        """Fires per second over the last ``window`` seconds (``None`` before two readings)."""
        latest = self.latest
        if latest is None:
            return None
        old = self._at_or_before(latest.t - window) or self._samples[0]
        if latest.t <= old.t:
            return None
        return max(0.0, latest.fired - old.fired) / (latest.t - old.t)

    def recent_lateness(self, window: float) -> tuple[tuple[float, float], ...]:
        """Cumulative lateness buckets of fires in the last ``window`` seconds."""
        latest = self.latest
        if latest is None:
            return ()
        old = self._at_or_before(latest.t - window) or self._samples[0]
        if old is latest:
            return latest.lateness_buckets
        return _diff_buckets(latest.lateness_buckets, old.lateness_buckets)


@dataclass(frozen=True)
class PartitionScan:
    """The first pending due seconds of one partition, in order, and how many it holds."""

    partition: int
    #: Due seconds of the first pending timers, ascending (at most the scan limit).
    dues: Sequence[int]
    #: All pending timers of the partition (from the service's count, not the scan).
    pending: int

    @property
    def truncated(self) -> bool:
        return self.pending > len(self.dues)


def _soon_start(now: float) -> int:
    return int(now) // SOON_BUCKET_SECONDS * SOON_BUCKET_SECONDS


def pending_by_due(scans: Iterable[PartitionScan], now: float) -> dict[str, Any]:
    """Pending timers bucketed by due time: overdue, the next minutes, then further out.

    Bars of the soon window start at absolute multiples of :data:`SOON_BUCKET_SECONDS`,
    so the readings of several workers add up bar by bar. Where a partition's scan was
    cut off, ``exact_before`` is the first second whose counts are lower bounds, and
    ``unscanned`` counts the timers not looked at (all due at or after it).
    """
    start = _soon_start(now)
    n_soon = SOON_WINDOW_SECONDS // SOON_BUCKET_SECONDS
    soon = [0] * n_soon
    far = [0] * len(FAR_BUCKETS)
    overdue = 0
    unscanned = 0
    exact_before: float = math.inf
    scanned = 0
    soon_end = start + SOON_WINDOW_SECONDS
    for scan in scans:
        scanned += len(scan.dues)
        if scan.truncated:
            unscanned += scan.pending - len(scan.dues)
            exact_before = min(exact_before, scan.dues[-1] if scan.dues else 0)
        for due in scan.dues:
            if due < int(now):
                # Its second is over and it has not fired: ticks are late or missing.
                overdue += 1
            elif due < soon_end:
                soon[(due - start) // SOON_BUCKET_SECONDS] += 1
            else:
                ahead = due - now
                for i, (_, bound) in enumerate(FAR_BUCKETS):
                    if ahead < bound:
                        far[i] += 1
                        break
    return {
        "overdue": overdue,
        "soon": {"start": start, "bucket_seconds": SOON_BUCKET_SECONDS, "counts": soon},
        "far": [
            {"label": label, "count": count}
            for (label, _), count in zip(FAR_BUCKETS, far, strict=True)
        ],
        "scanned": scanned,
        "unscanned": unscanned,
        "exact_before": None if math.isinf(exact_before) else int(exact_before),
    }


def lateness_summary(history: SampleHistory, window: float = 60.0) -> dict[str, Any]:
    """Lateness percentiles since start and over the last ``window`` seconds."""
    latest = history.latest
    buckets = latest.lateness_buckets if latest else ()
    recent = history.recent_lateness(window)
    previous = 0.0
    distribution = []
    for bound, count in buckets:
        distribution.append({"le": None if math.isinf(bound) else bound, "count": count - previous})
        previous = count
    return {
        "count": latest.lateness_count if latest else 0,
        "sum": latest.lateness_sum if latest else 0.0,
        **_percentiles(buckets),
        "recent_window": window,
        "recent_count": recent[-1][1] if recent else 0,
        "recent": _percentiles(recent),
        "buckets": distribution,
    }


#: Kinds of store keys, in the order they are shown.
STORE_KEY_KINDS = ("pending", "remembered", "bookkeeping")


def store_keys_summary(by_partition: Mapping[int, Mapping[str, int]]) -> dict[str, Any]:
    """The ``store_keys`` (totals by kind) and ``store_keys_by_partition`` of a snapshot.

    Pending timers take two keys each (the timer and its index entry); a cancelled id
    two (its index entry and its expiry key), a fired id its index entry and a share of
    an expiry batch (one key for up to 256, :mod:`app.core.expiry_batch`); bookkeeping
    is a few per partition. Once every remembered id's window has passed, only pending
    timers and bookkeeping remain: state is O(pending), not O(history).
    """
    totals = dict.fromkeys(STORE_KEY_KINDS, 0)
    for counts in by_partition.values():
        for kind in STORE_KEY_KINDS:
            totals[kind] += counts.get(kind, 0)
    return {
        "store_keys": totals,
        "store_keys_by_partition": {
            str(p): {kind: counts.get(kind, 0) for kind in STORE_KEY_KINDS}
            for p, counts in sorted(by_partition.items())
        },
    }


def merge_snapshots(snapshots: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Add up the ``/status/data`` snapshots of several workers into one.

    Counters and pending counts add; each partition's last tick is the newest any
    worker reports (a partition that moved reports on both until the old one forgets);
    lateness percentiles are recomputed from the summed bucket counts, never averaged.
    """
    totals: dict[str, float] = {}
    fired_by_topic: dict[str, float] = {}
    rejected_by_reason: dict[str, float] = {}
    last_tick: dict[str, float] = {}
    pending_partitions: dict[str, int] = {}
    store_keys: dict[int, dict[str, int]] = {}
    lateness: dict[float | None, float] = {}
    recent_rate = 0.0
    soon: dict[int, int] = {}
    far: dict[str, int] = {label: 0 for label, _ in FAR_BUCKETS}
    overdue = unscanned = scanned = 0
    exact_before: list[int] = []
    oscillators: dict[str, dict[str, float | None]] = {}
    held_ticks: dict[str, int] = {}
    rate_limits: dict[str, dict[str, Any]] = {}
    workers = []
    now = 0.0
    for snap in snapshots:
        workers.append(snap.get("worker"))
        now = max(now, float(snap.get("now", 0.0)))
        for k, v in snap.get("totals", {}).items():
            totals[k] = totals.get(k, 0) + v
        for k, v in snap.get("fired_by_topic", {}).items():
            fired_by_topic[k] = fired_by_topic.get(k, 0) + v
        for k, v in snap.get("rejected_by_reason", {}).items():
            rejected_by_reason[k] = rejected_by_reason.get(k, 0) + v
        for p, info in snap.get("last_tick", {}).items():
            last_tick[p] = max(last_tick.get(p, 0), info["second"])
        for p, n in snap.get("pending_by_partition", {}).items():
            pending_partitions[p] = pending_partitions.get(p, 0) + n
        for p, counts in snap.get("store_keys_by_partition", {}).items():
            mine = store_keys.setdefault(int(p), dict.fromkeys(STORE_KEY_KINDS, 0))
            for kind in STORE_KEY_KINDS:
                mine[kind] += counts.get(kind, 0)
        for b in snap.get("lateness", {}).get("buckets", []):
            lateness[b["le"]] = lateness.get(b["le"], 0) + b["count"]
        recent_rate += snap.get("fires_per_second_recent") or 0.0
        due = snap.get("pending_by_due", {})
        overdue += due.get("overdue", 0)
        unscanned += due.get("unscanned", 0)
        scanned += due.get("scanned", 0)
        if due.get("exact_before") is not None:
            exact_before.append(due["exact_before"])
        s = due.get("soon", {})
        for i, c in enumerate(s.get("counts", [])):
            key = int(s["start"]) + i * int(s["bucket_seconds"])
            soon[key] = soon.get(key, 0) + c
        for f in due.get("far", []):
            far[f["label"]] = far.get(f["label"], 0) + f["count"]
        for source, clock in snap.get("oscillators", {}).items():
            seen = oscillators.setdefault(source, {"ahead_seconds": None, "ticks_held": 0.0})
            ahead = clock.get("ahead_seconds")
            if ahead is not None:  # the worker that sees it furthest ahead
                seen["ahead_seconds"] = max(ahead, seen["ahead_seconds"] or -math.inf)
            seen["ticks_held"] = (seen["ticks_held"] or 0.0) + clock.get("ticks_held", 0.0)
        for p, second in snap.get("held_ticks", {}).items():
            held_ticks[p] = max(held_ticks.get(p, second), second)
        for topic, gate in snap.get("rate_limits", {}).items():
            # Backlogs add up; the delay shown is the worst worker's.
            seen = rate_limits.setdefault(
                topic,
                {"limit_per_second": gate.get("limit_per_second"), "paused": False, "backlog": 0}
                | {"delay_p50": None, "delay_p99": None, "delayed": 0},
            )
            seen["paused"] = bool(seen["paused"] or gate.get("paused"))
            seen["backlog"] += gate.get("backlog", 0)
            seen["delayed"] += gate.get("delayed", 0)
            for q in ("delay_p50", "delay_p99"):
                if gate.get(q) is not None:
                    seen[q] = max(seen[q] or 0.0, gate[q])
    cumulative: list[tuple[float, float]] = []
    running = 0.0
    for le in sorted(lateness, key=lambda b: math.inf if b is None else b):
        running += lateness[le]
        cumulative.append((math.inf if le is None else le, running))
    # Workers read a second or so apart: cover every bar any of them reported.
    start = min(soon, default=_soon_start(now))
    end = max(soon, default=start + SOON_WINDOW_SECONDS - SOON_BUCKET_SECONDS)
    return {
        "workers": workers,
        "now": now,
        "totals": totals,
        "fired_by_topic": fired_by_topic,
        "rejected_by_reason": rejected_by_reason,
        "fires_per_second_recent": recent_rate,
        "lateness": {"count": running, **_percentiles(cumulative)},
        "last_tick": {p: {"second": s, "age": now - s} for p, s in last_tick.items()},
        "pending_by_partition": pending_partitions,
        **store_keys_summary(store_keys),
        "oscillators": dict(sorted(oscillators.items())),
        "held_ticks": held_ticks,
        "rate_limits": dict(sorted(rate_limits.items())),
        "pending_by_due": {
            "overdue": overdue,
            "soon": {
                "start": start,
                "bucket_seconds": SOON_BUCKET_SECONDS,
                "counts": [soon.get(t, 0) for t in range(start, end + 1, SOON_BUCKET_SECONDS)],
            },
            "far": [{"label": k, "count": v} for k, v in far.items()],
            "scanned": scanned,
            "unscanned": unscanned,
            "exact_before": min(exact_before) if exact_before else None,
        },
        "due_forecast": merge_forecasts([s.get("due_forecast") or {} for s in snapshots]),
    }


def merge_sorted_dues(partitions: Mapping[int, Iterator[Any]], n: int) -> list[tuple[int, Any]]:
    """The first ``n`` items of several due-ordered iterators, as ``(partition, item)``.

    Lazy: each partition's iterator is advanced only as far as the merge needs, so the
    cost is about ``n`` reads however many timers are pending.
    """

    def tagged(p: int, it: Iterator[Any]) -> Iterator[tuple[int, int, Any]]:
        for item in it:
            yield item.due, p, item

    merged = heapq.merge(
        *(tagged(p, it) for p, it in partitions.items()),
        key=lambda triple: (triple[0], triple[1]),
    )
    out: list[tuple[int, Any]] = []
    for _, p, item in merged:
        out.append((p, item))
        if len(out) >= n:
            break
    return out
