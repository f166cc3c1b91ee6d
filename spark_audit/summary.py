"""The audit's findings as plain data: what the console, JSON and HTML reports show.

Everything here is small (counts, percentiles, a capped list of violations) and lives on
the driver; the full per-timer and per-violation tables stay in Spark and go to Parquet.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from spark_audit.judging import NOT_JUDGED
from spark_audit.verdicts import ViolationKind

__all__ = ["AuditSummary", "LatenessRow", "ReadCounts"]


@dataclass(frozen=True)
class LatenessRow:
    """Lateness of first fires in one group (a callback topic, an hour, or everything)."""

    #: The topic, the hour (``YYYY-MM-DD HH:00`` UTC) or ``all``.
    group: str
    fires: int
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float


@dataclass(frozen=True)
class ReadCounts:
    """How many records the audit read, and how many it could not use."""

    request_records: int
    #: Requests the worker would refuse (dead-lettered): not timers.
    rejected_requests: int
    fired_records: int
    #: Records on the fired topic that are not the worker's JSON (ignored).
    unreadable_fired_records: int


@dataclass
class AuditSummary:
    """Everything the reports need; :attr:`exit_code` gates a deploy."""

    as_of_ms: int
    grace_ms: int
    requests_topic: str
    fired_topic: str
    source: str
    allow_duplicates: bool
    reads: ReadCounts
    timers: int
    #: Timers per :class:`spark_audit.verdicts.Status` value.
    statuses: dict[str, int]
    #: Violations per :class:`spark_audit.verdicts.ViolationKind` value.
    violation_counts: dict[str, int]
    #: The first violations (by kind, then timer id), at most ``violations_limit``.
    violations: list[dict[str, Any]]
    violations_limit: int
    lateness_overall: LatenessRow | None
    lateness_by_topic: list[LatenessRow]
    lateness_by_hour: list[LatenessRow]
    #: ``(bin label, first fires)`` in bin order.
    histogram: list[tuple[str, int]]
    #: ``(minute as epoch seconds, fires)`` in time order.
    fires_per_minute: list[tuple[int, int]]
    elapsed_s: float = 0.0
    output_dir: str = ""
    #: Start of the audit window (``None``: the whole history).
    since_ms: int | None = None
    #: Occurrences (a one-shot timer is one) ``fired``, ``skipped`` by ``skip-after`` and
    #: ``coalesced`` by a series' ``coalesce`` policy: counted, not violations.
    occurrences: dict[str, int] = field(default_factory=dict)
    #: Extra fires: ``triggered`` (a trigger's: a one-shot's own fire, a series' extra
    #: occurrence) and ``backfilled`` (a backfill's occurrences), each extra id once;
    #: judged by what they are, counted apart from the occurrences.
    extra_fires: dict[str, int] = field(default_factory=dict)
    #: Accepted requests by where they were reconciled (:mod:`spark_audit.routing`):
    #: ``owner`` (read on their owner), ``forwarded`` (originals judged where their copy
    #: is), ``copy``, ``replayed`` (copies a forwarder sent again, dropped), ``stayed``
    #: (originals off their owner without a copy, judged where they landed); and
    #: ``reached_late``: fires of a version whose reschedule or cancel reached the worker
    #: only after it fired (the fire's ``request_offset``), a race, not a violation.
    routing: dict[str, int] = field(default_factory=dict)
    #: Schedule requests the worker refused and answered ``dropped`` on the fired topic,
    #: by its answer: ``over_quota`` (a pending-timer quota), ``wrong_token`` (a pending
    #: version protected by another token). Never stored, so never expected to fire: the
    #: worker's work, counted, not violations.
    refused: dict[str, int] = field(default_factory=dict)
    #: The first records refused or set aside for each (disposition, topic, reason):
    #: disposition, topic, partition, offset, ts_ms, reason, detail.
    set_aside: list[dict[str, Any]] = field(default_factory=list)
    #: Records set aside (and timers not judged) beyond which the audit fails.
    max_set_aside: int = 100
    #: ``{callback topic: {status or violation kind: count}}``.
    by_topic: dict[str, dict[str, int]] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def total_violations(self) -> int:
        return sum(self.violation_counts.values())

    @property
    def set_aside_count(self) -> int:
        """Evidence the audit could not use: fired records unread, timers not judged."""
        return self.reads.unreadable_fired_records + self.statuses.get(NOT_JUDGED, 0)

    @property
    def too_much_set_aside(self) -> bool:
        return self.set_aside_count > self.max_set_aside

    @property
    def gating_violations(self) -> int:
        """Violations that fail the audit (duplicates are excused by ``--allow-duplicates``)."""
        return sum(
            count
            for kind, count in self.violation_counts.items()
            if not (self.allow_duplicates and kind == ViolationKind.DUPLICATE.value)
        )

    @property
    def exit_code(self) -> int:
        """0 when clean; 1 when a gating violation was found, or more was set aside than
        ``max_set_aside`` allows (2, the audit could not run, is never a summary's)."""
        return 1 if self.gating_violations or self.too_much_set_aside else 0

    def to_json(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["histogram"] = [{"bin": b, "fires": n} for b, n in self.histogram]
        doc["fires_per_minute"] = [{"minute": m, "fires": n} for m, n in self.fires_per_minute]
        doc["total_violations"] = self.total_violations
        doc["gating_violations"] = self.gating_violations
        doc["set_aside_count"] = self.set_aside_count
        doc["exit_code"] = self.exit_code
        return doc
