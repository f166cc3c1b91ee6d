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
