"""The key prefix a wheel formats once per batch is exactly its keys' beginning.

:meth:`app.core.wheel.PartitionWheel._forget` builds a round's timer keys as a prefix
formatted once plus each id's bytes; a prefix that differed from
:func:`~app.core.keys.timer_key` by one byte would delete keys that do not exist and
leave the real ones pending forever.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from app.core import keys
from app.core.keys import _SECONDS_CACHED, pending_index_entry, timer_key, timer_key_prefix

seconds = st.integers(min_value=-(10**6), max_value=10**12 - 1)
ids = st.text(min_size=1, max_size=40)


@given(seconds, ids)
def test_a_timer_key_is_its_seconds_prefix_and_the_ids_bytes(second: int, timer_id: str) -> None:
    assert timer_key_prefix(second) + timer_id.encode() == timer_key(second, timer_id)


@given(st.lists(st.tuples(seconds, ids), min_size=1, max_size=20))
def test_keys_from_the_cached_prefixes_are_the_formatted_ones(
    keyed: list[tuple[int, str]],
) -> None:
    """timer_key and pending_index_entry keep recent seconds' prefixes: the same bytes as
    formatting them, before and after the cache is emptied (full) and filled again."""
    for _ in range(2):
        for second, text in keyed:
            assert timer_key(second, text) == b"T%012d\x00" % second + text.encode()
            assert pending_index_entry(second, text) == b"P%012d" % second + text.encode()
        for second in range(_SECONDS_CACHED + 1):  # more than the cache keeps
            timer_key(second, "x")
            pending_index_entry(second, "x")
    assert len(keys._timer_prefixes) <= _SECONDS_CACHED
    assert len(keys._pending_prefixes) <= _SECONDS_CACHED
