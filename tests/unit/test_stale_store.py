"""A local store older than the changelog's tombstone retention is rebuilt, not resumed.

Real RocksDB (rocksdict, as Faust opens it), no broker: the decision and the emptying
are local; the rebuild itself is the changelog catch-up, exercised by the integration
tests with moved clocks.
"""

from __future__ import annotations

from pathlib import Path

from rocksdict import Options, Rdict

from app.core.keys import CAUGHT_UP, FAUST_OFFSET, WATERMARK, index_key, timer_key
from app.worker.partition_store import empty_store, is_stale, stale_after

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
