"""Store keys by kind in the status snapshot, merged over workers, and in the terminal."""

from __future__ import annotations

from typing import Any

from app.status.cli import render_status
from app.status.model import merge_snapshots, store_keys_summary
from tests.support.status import worker_snapshot


def snapshot(worker: str, keys: dict[int, dict[str, int]]) -> dict[str, Any]:
    return worker_snapshot(
        worker,
        totals={"pending": 1},
        fired_by_topic={},
        rejected_by_reason={},
        lateness={"buckets": []},
        **store_keys_summary(keys),
    )


def test_store_keys_add_up_over_partitions_and_workers() -> None:
    a = snapshot("a", {0: {"pending": 4, "remembered": 10, "bookkeeping": 4}})
    b = snapshot(
        "b",
        {
            1: {"pending": 2, "remembered": 0, "bookkeeping": 3},
            2: {"pending": 0, "remembered": 6, "bookkeeping": 4},
        },
    )
    assert b["store_keys"] == {"pending": 2, "remembered": 6, "bookkeeping": 7}
    merged = merge_snapshots([a, b])
    assert merged["store_keys"] == {"pending": 6, "remembered": 16, "bookkeeping": 11}
    assert set(merged["store_keys_by_partition"]) == {"0", "1", "2"}
    text = render_status(merged)
    assert "store keys (RocksDB): pending 6   remembered 16   bookkeeping 11" in text
    assert any(
        line.strip().startswith("p2") and "remembered         6" in line
        for line in text.splitlines()
    )
