"""A local store older than the changelog's tombstone retention is rebuilt, not resumed.

Real RocksDB (rocksdict, as Faust opens it), no broker: the decision and the emptying
are local; the rebuild itself is the changelog catch-up, exercised by the integration
tests with moved clocks.
"""

from __future__ import annotations

from pathlib import Path

from rocksdict import Options, Rdict

from app.core.keys import CAUGHT_UP, FAUST_OFFSET, WATERMARK, index_key, timer_key
from app.worker.catch_up import empty_store, is_stale, stale_after

DAY = 86400.0


def open_db(path: Path) -> Rdict:
    return Rdict(str(path), Options(raw_mode=True))


def test_the_margin_is_an_hour_or_a_tenth_of_the_retention() -> None:
    assert stale_after(DAY) == DAY - 3600
    assert stale_after(600) == 540


def test_a_store_is_stale_only_when_it_holds_data_and_is_older_than_allowed(
    tmp_path: Path,
) -> None:
    db = open_db(tmp_path / "p0")
    try:
        assert not is_stale(db, 1e9, DAY), "an empty store is read from the start anyway"
        db.put(FAUST_OFFSET, b"41")
        assert is_stale(db, 1e9, DAY), "no record of when it was caught up: rebuild"
        db.put(CAUGHT_UP, repr(1e9 - DAY + 1).encode())
        assert not is_stale(db, 1e9, DAY)
        assert is_stale(db, 1e9 + 2, DAY)
    finally:
        db.close()


def test_emptying_removes_every_key(tmp_path: Path) -> None:
    db = open_db(tmp_path / "p0")
    try:
        for key in (timer_key(5, "a"), index_key("a"), WATERMARK, FAUST_OFFSET, CAUGHT_UP):
            db.put(key, b"x")
        empty_store(db)
        assert list(db.keys()) == []
        db.put(WATERMARK, b"7")  # still usable
        assert db.get(WATERMARK) == b"7"
    finally:
        db.close()


class _Changelog:
    """Where a ChangeloggedKV's changelog records go: kept, not sent."""

    def __init__(self) -> None:
        self.records: list[tuple[bytes, bytes | None]] = []

    def changelog(self, _topic: str, _partition: int, key: bytes, value: bytes | None) -> None:
        self.records.append((key, value))


def test_a_unit_s_local_writes_are_unconfirmed_until_the_changelog_has_them(
    tmp_path: Path,
) -> None:
    """A worker stopped between a unit's local writes and their acknowledgement leaves
    the marker, and its store is rebuilt rather than caught up on top (is_unconfirmed);
    a tick's writes, which any owner would make again, leave none."""
    from app.core.keys import UNCONFIRMED
    from app.worker.catch_up import is_unconfirmed
    from app.worker.partition_store import ChangeloggedKV

    with open_db(tmp_path / "db") as db:
        kv = ChangeloggedKV(db, _Changelog(), "changelog", 0)  # type: ignore[arg-type]
        kv.defer_local_writes()  # a tick's batch
        kv.put(timer_key(100, "a"), b"v")
        kv.apply_deferred()
        assert not is_unconfirmed(db)
        kv.defer_local_writes()  # a unit of requests
        kv.mark_unconfirmed()
        kv.put(timer_key(100, "b"), b"v")
        kv.apply_deferred()  # written before the flush, as units are
        assert is_unconfirmed(db) and db.get(timer_key(100, "b")) == b"v"
        kv.defer_local_writes()  # the unit goes on after a pause: still marked
        kv.put(timer_key(101, "b"), b"v")
        kv.apply_deferred()
        kv.record_persisted(7)  # the flush was acknowledged
        assert not is_unconfirmed(db) and db.get(FAUST_OFFSET) == b"7"
        kv.defer_local_writes()
        kv.mark_unconfirmed()
        kv.put(timer_key(102, "c"), b"v")
        kv.apply_deferred()
    with open_db(tmp_path / "db") as db:  # the worker was killed here
        assert db.get(UNCONFIRMED) is not None
        assert is_unconfirmed(db)
        assert ChangeloggedKV(db, _Changelog(), "changelog", 0)._unconfirmed  # type: ignore[arg-type]
        empty_store(db)
        assert not is_unconfirmed(db)
