"""A store records the changelog offset it holds only while it is the changelog's only writer.

Real RocksDB (rocksdict, as Faust opens it), no broker: two workers' stores of one
partition write one changelog (a list here, its index the offset, every record
acknowledged at once), and a store is caught up by applying the records after its
persisted offset, as :mod:`app.worker.catch_up` does.

The case, from the nemesis on Apache Kafka: a worker frozen by SIGSTOP while it held a
partition applied a request batch as it woke, after the group had given the partition
to another worker. Each store then recorded its own newest offset as the one it held;
when the frozen worker got the partition back, its catch-up started after the other's
records, and the series occurrences they held never fired.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rocksdict import Options, Rdict

from app.core.keys import FAUST_OFFSET, timer_key
from app.worker.catch_up import persisted_offset
from app.worker.changelog_repair import foreign_offsets
from app.worker.partition_store import ChangeloggedKV

Log = list[tuple[bytes, bytes | None]]


class _Writer:
    """One worker's output: appends to the shared changelog; acknowledged at once
    unless ``held`` (then by :meth:`acknowledge`), as librdkafka reports deliveries."""

    transactional = False

    def __init__(self, log: Log) -> None:
        self._log = log
        self.changelog_acked: dict[int, int] = {}
        self.changelog_counted: dict[int, list[int]] = {}
        self.held = False
        self._unacknowledged: list[int] = []
        self._own: list[int] = []

    def changelog(self, _topic: str, partition: int, key: bytes, value: bytes | None) -> None:
        self._log.append((key, value))
        self._unacknowledged.append(len(self._log) - 1)
        if not self.held:
            self.acknowledge()

    def acknowledge(self) -> None:
        """The delivery reports, as OutputProducer._changelog_delivered takes them."""
        for offset in self._unacknowledged:
            self.changelog_acked[0] = max(offset, self.changelog_acked.get(0, -1))
            counted = self.changelog_counted.get(0)
            if counted is not None and offset > counted[0]:
                counted[1] += 1
                self._own.append(offset)
        self._unacknowledged = []

    def count_changelog_after(self, partition: int, offset: int) -> None:
        self.changelog_counted[partition] = [offset, 0]
        self._own = []

    def take_own_changelog(self, _partition: int, through: int) -> list[int]:
        taken = [o for o in self._own if o <= through]
        self._own = [o for o in self._own if o > through]
        return taken

    async def flush(self) -> None:
        self.acknowledge()


class _Repairs:
    """A :class:`~app.worker.changelog_repair.ChangelogRepairer` without a broker or a
    thread: reads the keys at the offsets from the list and writes over them at once."""

    def __init__(self, log: Log) -> None:
        self._log = log
        self.submitted: list[list[int]] = []

    def submit(self, store: ChangeloggedKV, offsets: list[int]) -> None:
        self.submitted.append(offsets)
        store.write_over({self._log[o][0] for o in offsets})


@contextmanager
def _db(path: Path) -> Iterator[Rdict]:
    options = Options(raw_mode=True)
    options.create_if_missing(True)
    db = Rdict(str(path), options)
    try:
        yield db
    finally:
        db.close()


def _catch_up(db: Rdict, log: Log) -> None:
    """Apply every record after the store's persisted offset (app.worker.catch_up)."""
    start = persisted_offset(db)
    for offset in range(0 if start is None else start + 1, len(log)):
        key, value = log[offset]
        if value is None:
            db.delete(key)
        else:
            db.put(key, value)
        db.put(FAUST_OFFSET, str(offset).encode())


def _open(db: Rdict, log: Log, out: _Writer) -> ChangeloggedKV:
    """Catch the store up, then open it as RocksDBStores.open does."""
    _catch_up(db, log)
    return ChangeloggedKV(db, out, "changelog", 0, check_writers=True)  # type: ignore[arg-type]


def _persisted(kv: ChangeloggedKV, out: _Writer) -> None:
    """What Commits.record_persisted tells each held store after a flush."""
    kv.record_persisted(out.changelog_acked[0], out.changelog_counted[0][1])


def test_a_store_resumes_before_records_another_worker_wrote_meanwhile(tmp_path: Path) -> None:
    log: Log = [(timer_key(10, "old"), b"v")]  # what an earlier owner wrote
    stale, owner = _Writer(log), _Writer(log)
    with _db(tmp_path / "stale") as stale_db, _db(tmp_path / "owner") as owner_db:
        kv = _open(stale_db, log, stale)
        kv.put(timer_key(20, "a"), b"v")  # offset 1: the stale worker's, while it owned
        _persisted(kv, stale)
        assert persisted_offset(stale_db) == 1, "its only writer: the offset follows"
        # Frozen; the group gives the partition to another worker, which stores the
        # next occurrence of a series.
        theirs = _open(owner_db, log, owner)
        theirs.put(timer_key(41, "series"), b"next")  # offset 2
        _persisted(theirs, owner)
        # The frozen worker wakes and applies a batch before it learns it lost the
        # partition: its record lands after the owner's.
        kv.put(timer_key(30, "b"), b"v")  # offset 3
        _persisted(kv, stale)
        assert persisted_offset(stale_db) == 1, "offset 2 is not in this store"
        # The owner's next record: the stale worker's record is not in its store either.
        theirs.put(timer_key(42, "c"), b"v")  # offset 4
        _persisted(theirs, owner)
        assert persisted_offset(owner_db) == 2
        # The group gives the partition back to the worker that was frozen: its
        # catch-up reads the owner's records it never applied.
        _open(stale_db, log, stale)
        assert stale_db.get(timer_key(41, "series")) == b"next"
        assert stale_db.get(timer_key(42, "c")) == b"v"
        assert persisted_offset(stale_db) == 4


def test_a_sole_writer_records_its_offsets_and_a_reopened_store_keeps_its_own(
    tmp_path: Path,
) -> None:
    log: Log = [(timer_key(10, "old"), b"v")] * 3
    out = _Writer(log)
    with _db(tmp_path / "db") as db:
        kv = _open(db, log, out)
        for second in (20, 21, 22):
            kv.put(timer_key(second, "a"), b"v")
            _persisted(kv, out)
            assert persisted_offset(db) == len(log) - 1
        log.append((timer_key(50, "other"), b"v"))  # the next owner's
        kv = _open(db, log, out)
        _persisted(kv, out)  # nothing of this worker's since: the offset stays
        assert persisted_offset(db) == 6


def test_an_empty_changelog_gives_the_first_offsets_to_compare_with(tmp_path: Path) -> None:
    log: Log = []
    mine, other = _Writer(log), _Writer(log)
    with _db(tmp_path / "db") as db:
        kv = _open(db, log, mine)
        kv.put(timer_key(20, "a"), b"v")
        kv.put(timer_key(21, "a"), b"v")
        _persisted(kv, mine)
        assert persisted_offset(db) == 1
        other.changelog("changelog", 0, timer_key(22, "x"), b"v")
        kv.put(timer_key(23, "a"), b"v")
        _persisted(kv, mine)
        assert persisted_offset(db) == 1


def test_a_record_acknowledged_after_the_store_reopened_is_not_another_writer_s(
    tmp_path: Path,
) -> None:
    """Delivery reports come when the producer is polled: the last record of the store's
    previous load (a resume offset, produced after its unit's flush) may be reported
    only after the store was caught up past it and opened again."""
    log: Log = [(timer_key(10, "old"), b"v")]
    out = _Writer(log)
    with _db(tmp_path / "db") as db:
        kv = _open(db, log, out)
        out.held = True
        kv.put(b"R", b"41")  # offset 1, its report not yet taken
        kv = _open(db, log, out)  # the partition given back: caught up through 1
        out.acknowledge()
        out.held = False
        kv.put(timer_key(20, "a"), b"v")  # offset 2
        _persisted(kv, out)
        assert persisted_offset(db) == 2


def test_without_the_check_the_offset_is_recorded_as_before(tmp_path: Path) -> None:
    """Exactly-once mode (transaction markers take offsets too) records the
    acknowledged offset itself."""
    log: Log = [(timer_key(10, "old"), b"v")]
    out = _Writer(log)
    with _db(tmp_path / "db") as db:
        _catch_up(db, log)
        kv = ChangeloggedKV(db, out, "changelog", 0)  # type: ignore[arg-type]
        log.append((timer_key(11, "other"), b"v"))
        kv.put(timer_key(20, "a"), b"v")
        kv.record_persisted(out.changelog_acked[0], None)
        assert persisted_offset(db) == 2


def test_the_owner_writes_over_a_stale_owners_late_records(tmp_path: Path) -> None:
    """The nemesis's four lost reschedules: the stale owner's records of an older version
    land after the owner's newer one; the owner's next flush finds them and writes what
    it holds over them, so a store rebuilt from the changelog holds the newer version."""
    log: Log = []
    stale, owner = _Writer(log), _Writer(log)
    repairs = _Repairs(log)
    with _db(tmp_path / "stale") as stale_db, _db(tmp_path / "owner") as owner_db:
        kv = _open(stale_db, log, stale)
        kv.put(b"Iorder", b"v1")  # offset 0, acknowledged
        _persisted(kv, stale)
        stale.held = True  # cut off: its next records are held in the network
        kv.put(b"Iorder", b"v2")
        kv.put(timer_key(20, "order"), b"v2")
        _catch_up(owner_db, log[:1])  # the takeover read the changelog before they land
        del log[1:]
        theirs = ChangeloggedKV(
            owner_db, owner, "changelog", 0, check_writers=True, repairer=repairs
        )  # type: ignore[arg-type]
        theirs.put(b"Iorder", b"v3")  # offset 1
        theirs.put(timer_key(30, "order"), b"v3")  # offset 2
        _persisted(theirs, owner)
        assert repairs.submitted == [], "nobody else wrote yet"
        # The network heals: the stale records land after the owner's.
        log.extend([(b"Iorder", b"v2"), (timer_key(20, "order"), b"v2")])  # offsets 3, 4
        theirs.put(timer_key(40, "other"), b"v")  # offset 5: the owner's next flush
        _persisted(theirs, owner)
        assert repairs.submitted == [[3, 4]]
        # Rebuilt from the changelog (a restart, the next owner): the newer version.
        with _db(tmp_path / "rebuilt") as rebuilt:
            _catch_up(rebuilt, log)
            assert rebuilt.get(b"Iorder") == b"v3"
            assert rebuilt.get(timer_key(20, "order")) is None
            assert rebuilt.get(timer_key(30, "order")) == b"v3"


def test_foreign_offsets_are_the_ones_this_worker_did_not_write() -> None:
    assert foreign_offsets(4, 10, [5, 6, 9, 10, 11]) == [7, 8]
    assert foreign_offsets(4, 10, range(5, 11)) == []
    assert foreign_offsets(10, 10, []) == []
    assert foreign_offsets(-1, 2, [3]) == [0, 1, 2]
