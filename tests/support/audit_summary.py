"""An audit's summary as its reports get it, without Spark, for the audit's unit tests."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from spark_audit.stats import histogram_labels
from spark_audit.summary import AuditSummary, LatenessRow, ReadCounts

__all__ = ["audit_summary"]


def audit_summary(
    violations: dict[str, int], allow_duplicates: bool = False, **changes: Any
) -> AuditSummary:
    """Eleven timers of one topic over an hour of 2026-01-01, ``violations`` found (each
    kind's count; one listed of each); ``changes`` replace any other field."""
    listed = [
        {
            "kind": kind,
            "partition": 0,
            "id": f"timer-{kind}",
            "token": "k",
            "due": 1767225600,
            "at_ms": 1767225600123,
            "detail": "<b>why</b>",
        }
        for kind in violations
    ]
    summary = AuditSummary(
        as_of_ms=1767229200000,
        grace_ms=60000,
        requests_topic="timer-request",
        fired_topic="timer-fired",
        source="python",
        allow_duplicates=allow_duplicates,
        reads=ReadCounts(12, 1, 11, 0),
        timers=11,
        statuses={"fired": 10, "cancelled": 1},
        violation_counts=violations,
        violations=listed,
        violations_limit=1000,
        lateness_overall=LatenessRow("all", 10, 40.0, 90.0, 120.0, 130.0),
        lateness_by_topic=[LatenessRow("cb", 10, 40.0, 90.0, 120.0, 130.0)],
        lateness_by_hour=[LatenessRow("2026-01-01 00:00", 10, 40.0, 90.0, 120.0, 130.0)],
        histogram=[(label, i) for i, label in enumerate(histogram_labels())],
        fires_per_minute=[(1767225600, 4), (1767225660, 6)],
        output_dir="out",
    )
    return replace(summary, **changes)
