"""The key prefix a wheel formats once per batch is exactly its keys' beginning.

:meth:`app.core.wheel.PartitionWheel._forget` builds a round's timer keys as a prefix
formatted once plus each id's bytes; a prefix that differed from
:func:`~app.core.keys.timer_key` by one byte would delete keys that do not exist and
leave the real ones pending forever.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from app.core.keys import timer_key, timer_key_prefix

seconds = st.integers(min_value=-(10**6), max_value=10**12 - 1)
ids = st.text(min_size=1, max_size=40)


@given(seconds, ids)
def test_a_timer_key_is_its_seconds_prefix_and_the_ids_bytes(second: int, timer_id: str) -> None:
    assert timer_key_prefix(second) + timer_id.encode() == timer_key(second, timer_id)
