"""Look inside a stopped worker's RocksDB files: how many timers did it really store?

The ingest figure counts a request as stored only if it is in RocksDB as well as in the
changelog; this opens each partition's database read-only after the worker stopped
(RocksDB allows one writer) and counts the pending-timer keys.
"""

from __future__ import annotations

from pathlib import Path

from rocksdict import AccessType, Options, Rdict

from app.core.keys import PENDING

__all__ = ["count_pending_keys"]


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
