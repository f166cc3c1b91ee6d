"""The key layout of a partition's store (RocksDB, and the changelog that mirrors it).

Every key the worker writes, and the one Faust writes, starts with one of these
prefixes. Keys of one kind sort together, so each kind is one ordered range:

``T<due:012d>\\0<id>``
    a pending timer (value: :func:`app.core.stored.pack_timer`). Sorted by due second,
    so "everything due up to S" is one range scan.
``I<id>``
    the id index: the newest version of timer ``id`` (see :mod:`app.core.wheel`).
``W``
    the last second whose timers have all been fired and forgotten.
``R``
    the offset of the last request applied to this partition (where reading resumes).
``__faust\\0offset__``
    Faust's own: the last changelog offset applied to this RocksDB. Local only, never
    in the changelog.

Changing a layout means a new prefix, never a new meaning for an old one: stores and
changelogs outlive releases.
"""

from __future__ import annotations

__all__ = [
    "FAUST_OFFSET",
    "INDEX",
    "PENDING",
    "PENDING_END",
    "REQUEST_OFFSET",
    "WATERMARK",
    "bucket_floor",
    "index_key",
    "parse_timer_key",
    "timer_key",
]

#: Prefix of pending timers.
PENDING = b"T"
#: First key after every pending timer (the exclusive end of their range).
PENDING_END = b"U"
#: Prefix of the id index.
INDEX = b"I"
#: Key of the fired-through second.
WATERMARK = b"W"
#: Key of the last applied request offset.
REQUEST_OFFSET = b"R"
#: Faust's bookkeeping key (local RocksDB only).
FAUST_OFFSET = b"__faust\x00offset__"

#: Width of a due second in a key: 12 digits reach the year 33658.
_DUE_DIGITS = 12


def timer_key(due: int, timer_id: str) -> bytes:
    """Key of a pending timer: sorts by due second, then id."""
    return b"T%012d\x00" % due + timer_id.encode()


def parse_timer_key(key: bytes) -> tuple[int, str]:
    """``(due, id)`` of a pending timer's key (inverse of :func:`timer_key`)."""
    return int(key[1 : 1 + _DUE_DIGITS]), key[2 + _DUE_DIGITS :].decode()


def bucket_floor(second: int) -> bytes:
    """The smallest key of a timer due at ``second`` (negative seconds clamp to 0)."""
    return b"T%012d" % max(second, 0)


def index_key(timer_id: str) -> bytes:
    """Key of timer ``timer_id``'s entry in the id index."""
    return INDEX + timer_id.encode()
