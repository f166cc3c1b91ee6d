"""Prometheus metrics of a worker, on a registry of its own.

A registry per process object (not prometheus-client's global one) keeps tests and
several services in one interpreter from counting into each other.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from app.core.fired import SkipReason
from app.core.tick_record import TickIgnored
from kafka_timers_client.errors import RejectReason

__all__ = ["LATENESS_BUCKETS", "WorkerMetrics", "observe_many"]


def observe_many(histogram: Histogram, amount: float, count: int) -> None:
    """``count`` observations of the same ``amount``, at the cost of one.

    A tick fires many timers due at one second: they share their lateness. prometheus
    client has no weighted observe, so this adds to the histogram's private ``_sum`` and
    (non-cumulative) ``_buckets`` the way ``observe`` does (a unit test pins that the
    result is the same), and falls back to one ``observe`` each should they be gone.
    """
    try:
        bounds = histogram._upper_bounds
        buckets = histogram._buckets
        total = histogram._sum
    except AttributeError:
        for _ in range(count):
            histogram.observe(amount)
        return
    total.inc(amount * count)
    for i, bound in enumerate(bounds):
        if amount <= bound:
            buckets[i].inc(count)
            break


#: Fire-lateness buckets (seconds): fine below a second, where the targets are.
LATENESS_BUCKETS = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.15,
    0.2,
    0.25,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    1.5,
    2.0,
    3.0,
    5.0,
    10.0,
    30.0,
    60.0,
    300.0,
)


class WorkerMetrics:
    """Counters and gauges a worker exports."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.scheduled = Counter(
            "kafka_timers_scheduled", "Timer requests accepted and stored.", registry=r
        )
        self.fired = Counter(
            "kafka_timers_fired", "Callbacks delivered.", ["callback_topic"], registry=r
        )
        self.cancelled = Counter("kafka_timers_cancelled", "Timers cancelled.", registry=r)
        self.timer_pauses = Counter(
            "kafka_timers_timer_pauses",
            "Pause and resume requests of timers' owners, by what they did.",
            ["action", "outcome"],
            registry=r,
        )
        self.timers_paused = Gauge(
            "kafka_timers_timers_paused",
            "Timers paused by their owners on this worker's partitions (due or not).",
            registry=r,
        )
        self.rejected = Counter(
            "kafka_timers_rejected", "Requests dead-lettered.", ["reason"], registry=r
        )
        # Every reason exported from 0 on: Prometheus's increase() cannot see the first
        # dead letter of a series that appears already at 1, so the DLQ alert would miss it.
        for reason in RejectReason:
            self.rejected.labels(reason=reason.value)
        self.skipped = Counter(
            "kafka_timers_skipped",
            "Fires not delivered by the late-fire policy: later than skip-after (late), "
            "or series occurrences folded into one fire (coalesced).",
            ["reason"],
            registry=r,
        )
        for skip in SkipReason:
            self.skipped.labels(reason=skip.value)
        self.pending = Gauge("kafka_timers_pending", "Timers waiting to fire.", registry=r)
        self.lateness = Histogram(
            "kafka_timers_fire_lateness_seconds",
            "Fire time minus due second.",
            buckets=LATENESS_BUCKETS,
            registry=r,
        )
        self.last_tick = Gauge(
            "kafka_timers_last_tick_seconds",
            "Newest tick second processed, per partition.",
            ["partition"],
            registry=r,
        )
        self.store_keys = Gauge(
            "kafka_timers_store_keys",
            "Keys in a partition's store (RocksDB; the changelog holds the same minus the "
            "local ones), by kind: pending (a pending timer and its index entry), "
            "remembered (a fired or cancelled id's index entry; a cancelled id's expiry "
            "key; an expiry batch of up to 256 fired ids), bookkeeping.",
            ["partition", "kind"],
            registry=r,
        )
        self.dropped = Counter(
            "kafka_timers_dropped",
            "Requests accepted but not stored: a version that already fired (duplicate), or "
            "one a cancel had already stopped (cancelled_earlier).",
            ["reason"],
            registry=r,
        )
        for dropped in ("duplicate", "cancelled_earlier"):
            self.dropped.labels(reason=dropped)
        self.forwarded = Counter(
            "kafka_timers_requests_forwarded",
            "Requests read on a partition other than their timer id's owner and forwarded "
            "there (a producer whose partitioner is not murmur2 of the id, or that keys by "
            "something else).",
            registry=r,
        )
        self.changelog_repairs = Counter(
            "kafka_timers_changelog_repairs",
            "Changelog records this worker wrote over another writer's: a stale owner's "
            "records that reached the broker after this worker took the partition over "
            "(app.worker.changelog_repair).",
            registry=r,
        )
        self.forwards_replayed = Counter(
            "kafka_timers_requests_forward_replays",
            "Forwarded requests dropped on their owner partition as copies it had applied "
            "already (a forwarding worker stopped before its batch was durable forwards it "
            "again): applying one would put an older version back.",
            registry=r,
        )
        self.cancels_in_advance = Gauge(
            "kafka_timers_cancels_in_advance",
            "Cancels remembered for ids with no timer yet, per partition: capped (see "
            "kafka_timers_cancels_not_remembered_total).",
            ["partition"],
            registry=r,
        )
        self.cancels_not_remembered = Counter(
            "kafka_timers_cancels_not_remembered",
            "Cancels in advance not kept (answered not_remembered): their partition already "
            "remembered as many as it may.",
            registry=r,
        )
        self.clock_skew = Gauge(
            "kafka_timers_clock_skew_seconds",
            "Local clock minus the send time of the newest tick, per tick source.",
            ["source"],
            registry=r,
        )
        self.ticks_held = Counter(
            "kafka_timers_ticks_held",
            "Ticks that arrived before this worker's clock reached their second, per "
            "oscillator: held until it does.",
            ["source"],
            registry=r,
        )
        self.ticks_ignored = Counter(
            "kafka_timers_ticks_ignored",
            "Tick records, or parts of them, ignored: no second in the key (no_second), a "
            "second out of range (out_of_range) or further ahead of this worker's clock "
            "than it holds ticks for (too_far_ahead): the record; a value too long or too "
            "deep (bad_value) or a field out of range (bad_field): that part.",
            ["reason"],
            registry=r,
        )
        for ignored in TickIgnored:
            self.ticks_ignored.labels(reason=ignored.value)
        self.control_ignored = Counter(
            "kafka_timers_control_records_ignored",
            "Control-topic records ignored (no known key, a value that is no record of its "
            "kind): each is logged with its offset and reason. Every worker reads the "
            "whole topic as it starts, so the count starts with what is there already.",
            registry=r,
        )
        self.ticks_skipped = Counter(
            "kafka_timers_ticks_skipped",
            "Old tick records never read: a tick partition far behind its end skips to its "
            "newest tick (app.worker.tick_backlog), which covers every second before it.",
            registry=r,
        )
        self.ticks_unowned = Counter(
            "kafka_timers_ticks_unowned",
            "Ticks not fired because no heartbeat had been answered for a whole session "
            "timeout (a frozen or cut-off worker may have lost its partitions: "
            "app.worker.group_lease); a later tick or the new owner fires their seconds.",
            registry=r,
        )
        self.tick_sources = Gauge(
            "kafka_timers_tick_sources",
            "Tick sources (oscillators) this worker tells apart now: at most "
            "KAFKA_TIMERS_TICK_MAX_SOURCES, plus other; a source silent for "
            "KAFKA_TIMERS_TICK_SOURCE_SILENCE_SECONDS is forgotten.",
            registry=r,
        )
        self.tick_sources_other = Counter(
            "kafka_timers_tick_sources_other",
            "Ticks counted under the source other: every place for a source of its own was taken.",
            registry=r,
        )
        self.oscillator_ahead = Gauge(
            "kafka_timers_oscillator_ahead_seconds",
            "How far each oscillator's clock runs ahead of this worker's: tick second minus "
            "this worker's clock at arrival, the maximum over 10 s (negative: the delay).",
            ["source"],
            registry=r,
        )
        # Request lag (app/worker/request_progress.py): the held partitions, live...
        self.request_lag_records = Gauge(
            "kafka_timers_request_lag_records",
            "Requests not yet applied, per partition this worker holds.",
            ["partition"],
            registry=r,
        )
        self.request_lag_seconds = Gauge(
            "kafka_timers_request_lag_seconds",
            "Age of the newest request applied while others wait (0 when caught up), "
            "per partition this worker holds.",
            ["partition"],
            registry=r,
        )
        # ...and every partition, from the informational group's committed offsets.
        self.request_group_lag = Gauge(
            "kafka_timers_request_group_lag_records",
            "High watermark minus the offset committed to the <app id>-requests group, "
            "per partition of the request topic (every worker exports every partition).",
            ["partition"],
            registry=r,
        )
        # Recovery that cannot finish (app.worker.catch_up.catch_up_until_done):
        # the worker stays up, not ready, and retries with backoff.
        self.recovery_stalled = Gauge(
            "kafka_timers_recovery_stalled",
            "1 while a recovery step of this worker could not finish and is being retried "
            "with backoff (step changelog_catch_up: the changelog catch-up of newly "
            "assigned partitions reached no partition's end within "
            "KAFKA_TIMERS_CATCHUP_STALL_SECONDS, or failed; faust_recovery: a broker request "
            "of Faust's table recovery after it got no answer); 0 otherwise.",
            ["step"],
            registry=r,
        )
        self.recovery_retries = Counter(
            "kafka_timers_recovery_retries",
            "Attempts of a recovery step that did not complete and were retried, by step.",
            ["step"],
            registry=r,
        )
        for step in ("changelog_catch_up", "faust_recovery"):
            self.recovery_stalled.labels(step=step).set(0)
            self.recovery_retries.labels(step=step)
        # Rate limits and pauses per callback topic (app.worker.topic_gates).
        self.rate_limit_delay = Histogram(
            "kafka_timers_rate_limit_delay_seconds",
            "Delay a rate limit or a pause added to a callback of a gated topic: from when "
            "its timer was due and held back to when it was delivered (0 when the bucket "
            "had room), per callback topic.",
            ["callback_topic"],
            buckets=LATENESS_BUCKETS,
            registry=r,
        )
        self.rate_limit_backlog = Gauge(
            "kafka_timers_rate_limit_backlog",
            "Due timers held back by a rate limit or a pause on this worker's partitions, "
            "per callback topic: pending, delivered as the limit allows.",
            ["callback_topic"],
            registry=r,
        )
        self.forget_behind = Gauge(
            "kafka_timers_forget_behind",
            "Held timers delivered (their callbacks acknowledged) but not yet forgotten on "
            "this worker's partitions: a limited topic's rounds deliver at the limit and "
            "forget in their spare time (at-least-once mode). A crash delivers these "
            "again (a rebalance or an orderly stop forgets them first).",
            registry=r,
        )
        self.due_forecast = Gauge(
            "kafka_timers_due_forecast",
            "Pending timers on this worker's partitions due in the window, all callback "
            "topics together (by topic: /status/forecast, with the operator's credential): "
            "next_1m, next_5m and next_1h from the start of the current minute (UTC); "
            "next_24h to the start of the hour 24 hours after the current one. Counted as "
            "timers are stored, cancelled and fired (app.core.forecast), refreshed every 10 s.",
            ["window"],
            registry=r,
        )
        self.not_ready_seconds = Gauge(
            "kafka_timers_not_ready_seconds",
            "Seconds since this worker was last ready (/readyz), since it started if never; "
            "0 while ready. A rebalance takes seconds: minutes mean a recovery or a wait on "
            "the broker that does not finish.",
            registry=r,
        )
