"""Look inside a stopped worker's RocksDB files: how many timers did it really store?

The ingest figure counts a request as stored only if it is in RocksDB as well as in the
changelog; this opens each partition's database read-only after the worker stopped
(RocksDB allows one writer) and counts the pending-timer keys.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

from rocksdict import AccessType, Options, Rdict

from app.core.keys import PENDING
from app.core.wheel import key_kind

__all__ = ["count_keys_by_kind", "count_pending_keys"]


def count_pending_keys(data_dir: Path, prefix: bytes = PENDING) -> dict[int, int]:
    """Pending-timer keys per partition, from every ``timers-<n>.db`` under ``data_dir``
    (only those starting with ``prefix``, e.g. one due second's ``bucket_floor``)."""
    counts: dict[int, int] = {}
    for path in sorted(data_dir.glob("**/timers-*.db")):
        partition = int(path.name.removeprefix("timers-").removesuffix(".db"))
        db = Rdict(str(path), Options(raw_mode=True), access_type=AccessType.read_only())
        try:
            it = db.iter()
            it.seek(prefix)
            count = 0
            while it.valid() and it.key()[: len(prefix)] == prefix:
                count += 1
                it.next()
            del it
        finally:
            db.close()
        counts[partition] = count
    return counts


def count_keys_by_kind(data_dir: Path, partitions: Collection[int] | None = None) -> dict[str, int]:
    """Every key of the partitions' RocksDB under ``data_dir`` (all partitions found, by
    default), by kind (:func:`app.core.wheel.key_kind`); the worker must have stopped.

    A worker keeps the files of partitions it held once and gave away (Faust never
    deletes them; they are caught up, or rebuilt, if it gets the partition back): to
    count what a group holds, name the partitions each worker held last.
    """
    counts = {"pending": 0, "remembered": 0, "bookkeeping": 0}
    for path in sorted(data_dir.glob("**/timers-*.db")):
        partition = int(path.name.removeprefix("timers-").removesuffix(".db"))
        if partitions is not None and partition not in partitions:
            continue
        db = Rdict(str(path), Options(raw_mode=True), access_type=AccessType.read_only())
        try:
            it = db.iter()
            it.seek_to_first()
            while it.valid():
                counts[key_kind(it.key(), it.value())] += 1
                it.next()
            del it
        finally:
            db.close()
    return counts
