"""A batch of held timers read with one scan (``PartitionWheel._read_clustered``) reads
exactly what point reads read: keys present or absent, in any order, close together or
spread thin among others (where the walk stops short and a multi-get reads the rest),
on the test's memory store and on real RocksDB."""

from __future__ import annotations

import tempfile

from hypothesis import given, settings
from hypothesis import strategies as st
from rocksdict import Options, Rdict

from app.core.keys import timer_key
from app.core.wheel import OrderedKV, PartitionWheel
from tests.support.memkv import MemoryKV
from tests.support.memstores import FakeOutput

DUE = 1_767_225_600

#: Timer keys of a few seconds and ids: what a partition's held timers look like.
_keys = st.builds(timer_key, st.integers(DUE, DUE + 3), st.text("abcdefgh", min_size=1, max_size=3))
#: The store's keys (each with a value), then the batch asked for: keys from the store
#: and keys absent from it, in any order, no key twice (a take reads an id once).
_cases = st.tuples(st.sets(_keys, max_size=60), st.lists(_keys, unique=True, max_size=40))


def _check(kv: OrderedKV, stored: set[bytes], asked: list[bytes]) -> None:
    for key in stored:
        kv.put(key, b"value of " + key)
    wheel = PartitionWheel(kv)
    assert wheel._read_clustered(asked) == [kv.get(key) for key in asked]


@settings(max_examples=300, deadline=None)
@given(_cases)
def test_a_clustered_read_reads_what_point_reads_read(case: tuple[set[bytes], list[bytes]]) -> None:
    stored, asked = case
    _check(MemoryKV(), stored, asked)


@settings(max_examples=60, deadline=None)
@given(_cases)
def test_a_clustered_read_on_rocksdb_reads_what_point_reads_read(
    case: tuple[set[bytes], list[bytes]],
) -> None:
    from app.worker.partition_store import ChangeloggedKV

    stored, asked = case
    with tempfile.TemporaryDirectory() as path:
        options = Options(raw_mode=True)
        options.create_if_missing(True)
        db = Rdict(path, options)
        try:
            _check(ChangeloggedKV(db, FakeOutput(), "changelog", 0), stored, asked)  # type: ignore[arg-type]
        finally:
            db.close()


def test_a_batch_spread_thin_is_read_past_where_the_walk_stops() -> None:
    """Two wanted keys with 1,000 others between them: the walk stops after four keys
    and the second wanted one is still read (by the multi-get of the rest)."""
    kv = MemoryKV()
    for n in range(1_000):
        kv.put(timer_key(DUE, f"m{n:04d}"), b"other")
    first, last = timer_key(DUE, "a"), timer_key(DUE, "z")
    kv.put(first, b"first")
    kv.put(last, b"last")
    wheel = PartitionWheel(kv)
    assert wheel._read_clustered([last, first]) == [b"last", b"first"]
