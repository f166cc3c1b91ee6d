"""Status snapshots, as one worker's ``/status.json`` has them, for the status unit tests."""

from __future__ import annotations

from typing import Any

__all__ = ["worker_snapshot"]


def worker_snapshot(worker: str, **fields: Any) -> dict[str, Any]:
    """The snapshot of ``worker`` at second 1000 with nothing pending, nothing ticked;
    ``fields`` are added to it (or replace its own)."""
    return {
        "worker": worker,
        "now": 1000.0,
        "totals": {},
        "last_tick": {},
        "pending_by_due": {
            "overdue": 0,
            "soon": {"start": 1000, "bucket_seconds": 10, "counts": [0] * 60},
            "far": [],
            "scanned": 0,
            "unscanned": 0,
            "exact_before": None,
        },
        **fields,
    }
