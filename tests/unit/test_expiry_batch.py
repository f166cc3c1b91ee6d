"""Expiry batches (:mod:`app.core.expiry_batch`): what is packed is read back, batches
stay within their bounds, and anything else is refused rather than misread."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.core import expiry_batch

_entries = st.lists(
    st.tuples(st.binary(min_size=1, max_size=4096), st.binary(min_size=13, max_size=4109)),
    max_size=600,
)


@given(_entries)
def test_a_packed_batch_reads_back_as_it_was(entries: list[expiry_batch.Entry]) -> None:
    assert expiry_batch.unpack(expiry_batch.pack(entries)) == entries


@given(_entries)
def test_chunks_keep_every_entry_in_order_within_the_bounds(
    entries: list[expiry_batch.Entry],
) -> None:
    batches = list(expiry_batch.chunks(entries))
    assert [e for batch in batches for e in batch] == entries
    for batch in batches:
        assert 1 <= len(batch) <= expiry_batch.MAX_ENTRIES
        packed = len(expiry_batch.pack(batch))
        # closed at the entry that reaches the bound: at most one entry past it
        assert packed <= expiry_batch.MAX_BYTES + 2 * 4 + 4096 + 4109 + 5


@given(_entries.filter(bool), st.data())
def test_a_batch_cut_short_is_refused(
    entries: list[expiry_batch.Entry], data: st.DataObject
) -> None:
    packed = expiry_batch.pack(entries)
    cut = data.draw(st.integers(1, len(packed) - 1))
    with pytest.raises(ValueError):
        expiry_batch.unpack(packed[:cut])


@given(st.binary())
def test_anything_else_is_refused_or_read_as_entries(value: bytes) -> None:
    try:
        entries = expiry_batch.unpack(value)
    except ValueError:
        return
    assert expiry_batch.pack(entries) == value


def _cut_entry_by_entry(entries: list[expiry_batch.Entry]) -> list[list[expiry_batch.Entry]]:
    """The batches as the rule says, an entry at a time: closed at the entry that makes
    :data:`~app.core.expiry_batch.MAX_ENTRIES` ids or reaches ``MAX_BYTES``."""
    batches: list[list[expiry_batch.Entry]] = []
    batch: list[expiry_batch.Entry] = []
    size = 0
    for id_bytes, entry in entries:
        batch.append((id_bytes, entry))
        size += len(id_bytes) + len(entry) + 2 * 4
        if len(batch) >= expiry_batch.MAX_ENTRIES or size >= expiry_batch.MAX_BYTES:
            batches.append(batch)
            batch, size = [], 0
    if batch:
        batches.append(batch)
    return batches


_short_entries = st.lists(
    st.tuples(st.binary(min_size=1, max_size=40), st.binary(min_size=13, max_size=60)),
    max_size=1200,
)


@given(st.one_of(_entries, _short_entries))
def test_chunks_close_each_batch_where_the_rule_does(entries: list[expiry_batch.Entry]) -> None:
    """Whole runs of short entries taken at once (the usual round) or cut entry by entry
    (long ids and tokens), the batches are the same: the changelog records a round
    writes do not depend on how they were cut."""
    assert [list(batch) for batch in expiry_batch.chunks(entries)] == _cut_entry_by_entry(entries)


@given(_short_entries.filter(bool))
def test_a_batch_is_its_count_then_each_id_and_entry_after_its_length(
    entries: list[expiry_batch.Entry],
) -> None:
    expected = expiry_batch.VERSION + len(entries).to_bytes(4, "big")
    for id_bytes, entry in entries:
        expected += len(id_bytes).to_bytes(4, "big") + id_bytes
        expected += len(entry).to_bytes(4, "big") + entry
    assert expiry_batch.pack(entries) == expected


@pytest.mark.parametrize("count", [1, 255, 256, 257, 600, 1024])
@pytest.mark.parametrize("long_every", [0, 7, 100])
def test_a_round_of_ids_is_cut_where_the_rule_does(count: int, long_every: int) -> None:
    """A round's ids (a long token now and then, ``long_every``) in runs of every size
    around :data:`~app.core.expiry_batch.MAX_ENTRIES`."""
    entries = [
        (
            f"t{i:09d}".encode(),
            b"F%012d" % 1_767_225_600
            + (b"x" * 4000 if long_every and i % long_every == 0 else b"%016x" % i),
        )
        for i in range(count)
    ]
    assert [list(batch) for batch in expiry_batch.chunks(entries)] == _cut_entry_by_entry(entries)
