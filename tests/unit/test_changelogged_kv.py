"""A partition's store on real RocksDB: a multi-get reads exactly what point reads read,
also while a transaction's local writes are held back (exactly-once mode), and after
they are applied or discarded."""

from __future__ import annotations

import tempfile
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from rocksdict import Options, Rdict

from app.worker.partition_store import ChangeloggedKV
from tests.support.memstores import FakeOutput

KEYS = [b"I" + bytes([c]) for c in b"abcdef"]

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
    with tempfile.TemporaryDirectory() as path:
        options = Options(raw_mode=True)
        options.create_if_missing(True)
        db = Rdict(path, options)
        try:
            kv = ChangeloggedKV(db, FakeOutput(), "changelog", 0)  # type: ignore[arg-type]
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
        finally:
            db.close()
