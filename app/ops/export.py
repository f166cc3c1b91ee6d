"""``kafka-timers export``: every pending timer of a deployment, as JSON lines.

Read from the deployment's changelog (:mod:`app.ops.snapshot`), so it works with the
workers running or stopped; see there for what the snapshot is consistent with.
"""

from __future__ import annotations

from typing import TextIO

from app.ops.jsonl import encode_line
from app.ops.snapshot import Snapshot, read_snapshot
from app.settings import Settings

__all__ = ["export_timers", "summary"]


def export_timers(settings: Settings, out: TextIO, timeout: float = 120.0) -> Snapshot:
    """Write one line per pending timer of ``settings``' deployment to ``out``."""
    snapshot = read_snapshot(settings, timeout)
    for pending in snapshot.timers:
        out.write(encode_line(pending.timer, pending.partition))
        out.write("\n")
    out.flush()
    return snapshot


def summary(snapshot: Snapshot) -> dict[str, object]:
    """What an export found, for its one line on stderr."""
    return {
        "timers": len(snapshot.timers),
        "series": snapshot.series,
        "partitions": snapshot.partitions,
        "changelog": snapshot.topic,
        "changelog_records": snapshot.records,
        "request_offsets": {str(p): o for p, o in sorted(snapshot.request_offsets.items())},
    }
