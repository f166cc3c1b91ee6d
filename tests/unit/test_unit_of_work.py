"""The unit of work: what reaches the store locally, and the changelog, before and after
the output commits (app.worker.unit_of_work)."""

from __future__ import annotations

import asyncio

import pytest

from app.core.keys import REQUEST_OFFSET
from app.worker.output import TransactionAborted
from app.worker.unit_of_work import Commits
from tests.support.memkv import MemoryKV
from tests.support.memstores import FakeOutput, MemoryStore


def _setup(transactional: bool) -> tuple[FakeOutput, MemoryStore, Commits]:
    output = FakeOutput(transactional=transactional)
    store = MemoryStore(0, output)
    return output, store, Commits(output, lambda: {0: store})


@pytest.mark.parametrize("transactional", [False, True])
def test_local_writes_wait_and_the_resume_offset_follows_the_unit(transactional: bool) -> None:
    output, store, commits = _setup(transactional)
    unit = commits.begin([store])
    store.put(b"k", b"v")
    unit.put_resume_offset(store, b"7")
    unit.put_after_commit(store, b"o1", b"3")
    # Held back until the unit's end: reads see them, the store does not hold them yet.
    assert store.get(b"k") == b"v"
    assert MemoryKV.get(store, b"k") is None
    assert store.get(REQUEST_OFFSET) is None
    produced = [key for _, key, _ in output.pending.changelog]
    # At least once, the resume offset is produced only once the unit is durable.
    assert (REQUEST_OFFSET in produced) is transactional
    asyncio.run(unit.commit())
    assert store.get(REQUEST_OFFSET) == b"7"
    assert store.get(b"o1") == b"3"
    assert MemoryKV.get(store, b"k") == b"v"
    assert store.persisted_offset is not None
    durable = [key for _, key, _ in output.durable.changelog]
    assert (REQUEST_OFFSET in durable) is transactional
    pending = [key for _, key, _ in output.pending.changelog]
    assert (REQUEST_OFFSET in pending) is not transactional


def test_an_aborted_unit_writes_nothing_locally() -> None:
    output, store, commits = _setup(True)
    unit = commits.begin([store])
    store.put(b"k", b"v")
    unit.put_resume_offset(store, b"7")
    output.abort_next_commit = True
    with pytest.raises(TransactionAborted):
        asyncio.run(unit.commit())
    assert store.get(b"k") is None
    assert store.get(REQUEST_OFFSET) is None
    assert store.persisted_offset is None


def test_a_paused_unit_applies_its_writes_and_goes_on_holding_back() -> None:
    _, store, commits = _setup(False)
    unit = commits.begin([store])
    store.put(b"a", b"1")
    asyncio.run(unit.pause())
    assert MemoryKV.get(store, b"a") == b"1"
    store.put(b"b", b"2")
    assert MemoryKV.get(store, b"b") is None
    asyncio.run(unit.commit(record=False))
    assert MemoryKV.get(store, b"b") == b"2"
    assert store.persisted_offset is None
