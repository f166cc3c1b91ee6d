"""A partition's store on real RocksDB: a multi-get reads exactly what point reads read,
also while a transaction's local writes are held back (exactly-once mode), and after
they are applied or discarded."""

from __future__ import annotations

import gc
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from rocksdict import Options, Rdict

from app.core.keys import UNCONFIRMED
from app.worker.partition_store import ChangeloggedKV
from tests.support.memstores import FakeOutput

KEYS = [b"I" + bytes([c]) for c in b"abcdef"]


@contextmanager
def _store() -> Iterator[ChangeloggedKV]:
    """A partition store on a fresh RocksDB in a temporary directory, closed after."""
    with tempfile.TemporaryDirectory() as path:
        options = Options(raw_mode=True)
        options.create_if_missing(True)
        db = Rdict(path, options)
        try:
            yield ChangeloggedKV(db, FakeOutput(), "changelog", 0)  # type: ignore[arg-type]
        finally:
            db.close()


_steps = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.sampled_from(KEYS), st.binary(max_size=8)),
        st.tuples(st.just("delete"), st.sampled_from(KEYS)),
        st.tuples(st.sampled_from(["defer", "apply", "discard"])),
    ),
    max_size=30,
)


@settings(max_examples=200, deadline=None)
@given(_steps, st.lists(st.sampled_from(KEYS), max_size=8))
def test_a_multi_get_reads_what_point_reads_read(steps: list[Any], asked: list[bytes]) -> None:
    with _store() as kv:
        for step in steps:
            if step[0] == "put":
                kv.put(step[1], step[2])
            elif step[0] == "delete":
                kv.delete(step[1])
            elif step[0] == "defer":
                kv.defer_local_writes()
            elif step[0] == "apply":
                kv.apply_deferred()
            else:
                kv.discard_deferred()
            assert kv.get_many(asked) == [kv.get(key) for key in asked]


def test_a_scan_stops_at_its_bound_when_the_caller_keeps_neither_bound() -> None:
    """A tick scans ``kv.scan(bucket_floor(start), bucket_floor(second + 1))``: both
    bounds are temporaries, gone once the call returns, and the scan is read after. A
    scan that did not keep them (rocksdict's item iterator returned as is) walked past
    its upper bound: 501 keys of a second that holds 500, the next one outside it."""
    with _store() as kv:
        second = 1_767_225_600
        for i in range(500):
            kv.put(b"T%012d\x00t%09d" % (second, i), b"v" * 10)
        kv.put(b"W", b"1")  # past the second's keys
        for _ in range(20):
            scan = kv.scan(b"T%012d" % 0, b"T%012d" % (second + 1))
            gc.collect()
            assert sum(1 for _ in scan) == 500


_keys = st.lists(st.binary(min_size=1, max_size=6), max_size=40, unique=True)


@settings(max_examples=100, deadline=None)
@given(_keys, st.binary(max_size=6), st.binary(max_size=6))
def test_a_scan_reads_exactly_its_range_however_late_it_is_read(
    keys: list[bytes], low: bytes, high: bytes
) -> None:
    """Whatever the keys and bounds, a scan read after the call that made it returned
    yields the range's keys in order with their values, and nothing at or past its
    upper bound."""
    with _store() as kv:
        for key in keys:
            kv.put(key, key[::-1])
        scan = kv.scan(low, high)
        gc.collect()
        assert list(scan) == [(k, k[::-1]) for k in sorted(keys) if low <= k < high]


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(st.binary(min_size=1, max_size=6), st.none() | st.binary(max_size=4)),
        max_size=40,
    ),
    st.booleans(),
)
def test_writes_held_back_land_as_written_one_by_one(
    writes: list[tuple[bytes, bytes | None]], marking: bool
) -> None:
    """apply_deferred writes its batch in key order (RocksDB inserts sorted keys into its
    memtable for fewer comparisons): what lands is what the writes in their own order
    leave, the unconfirmed marker with them when marking."""
    with _store() as kv:
        kv.put(b"Zkept", b"1")
        if marking:
            kv.mark_unconfirmed()
        kv.defer_local_writes()
        model = {b"Zkept": b"1"}
        for key, value in writes:
            key = b"K" + key
            if value is None:
                kv.delete(key)
                model.pop(key, None)
            else:
                kv.put(key, value)
                model[key] = value
        kv.apply_deferred()
        if marking and writes:  # a batch was written: the marker is in it
            model[UNCONFIRMED] = b"1"
        assert dict(kv.scan(b"", b"\xff")) == model
