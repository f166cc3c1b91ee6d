"""The key layout of a partition's store (RocksDB, and the changelog that mirrors it).

Every key the worker writes, and the one Faust writes, starts with one of these
prefixes. Keys of one kind sort together, so each kind is one ordered range:

``T<due:012d>\\0<id>``
    a pending timer (value: :func:`app.core.stored.pack_timer`). Sorted by due second,
    so "everything due up to S" is one range scan.
``I<id>``
    the id index: the newest version of timer ``id`` (see :mod:`app.core.wheel`). Its
    value is ``<state:1><second:012d><token>`` (:class:`IndexEntry`): the state ``P``
    pending, ``F`` fired or ``C`` cancelled; for a pending timer the second its key is
    stored under (its slot), for a terminal one its version's due second (0: a cancel
    that came before its timer, "in advance"); then the token's UTF-8 bytes (empty: none).
    ``X`` and ``V`` keys hold such values, and ``L`` keys pending ones.
``X<expiry:012d>\\0<id>``
    when a fired or cancelled id is forgotten: the value is the exact index entry it
    expires. Sorted by expiry second, so forgetting is a range scan swept as ticks
    advance, like firing; the index entry goes only if it still equals the value (a
    reschedule since then changed it, and it must stay).
``V<expiry:012d>\\0<first id>``
    many fired ids forgotten at one expiry second, with the exact index entry each
    expires (value: :func:`app.core.expiry_batch.pack`). The first id makes the key
    unique; where it is taken, a zero byte more. What a round's fired timers write
    instead of an ``X`` key each; swept like them. A release before these keys leaves
    them in place: those ids stay remembered until a release that knows them sweeps.
``L<seq:012d>``
    timers a rate-limited topic's round delivered and left to forget later, up to 256
    (value: :func:`app.core.expiry_batch.pack` of each id with the pending index entry
    it was delivered as). Numbered in the order rounds wrote them. A reload (a restart,
    the next owner) finds them, so a stop or a crash does not deliver those timers
    again; the key goes once every one of them is forgotten
    (:meth:`app.core.wheel.PartitionWheel.forget_behind`). A release before these keys
    ignores them: it delivers those timers again (at least once), and the keys stay
    until a release that knows them loads them.
``S<id>``
    timer ``id`` is paused by its owner (value empty): while the key is there, its
    occurrences wait when due (:meth:`app.core.wheel.PartitionWheel.pause`). Only for
    pending timers: the key goes with the timer.
``O<origin partition:06d>``
    the highest offset of origin partition ``origin`` whose forwarded copy this
    partition has applied (value: the offset in digits): a copy that arrives again
    (a forwarding worker killed before its batch was durable forwards it twice) is
    dropped, so an older version never replaces a newer one (:mod:`app.core.routing`).
    One per origin partition, whatever the history: bookkeeping.
``A``
    the offset of the last request of the unit of work being applied (at-least-once
    mode): written before anything the unit changes, to the changelog as to the store,
    so a store (or changelog) holding any of a unit's effects holds it too. Requests up
    to it read again after a crash (past ``R``) are a re-read: their effects may be in
    the store already, so one whose second has passed is stored for the next tick
    rather than fired at once (a later request of the same re-read may replace it).
``W``
    the last second whose timers have all been fired and forgotten.
``R``
    the offset of the last request applied to this partition (where reading resumes).
``__faust\\0offset__``
    Faust's own: the last changelog offset applied to this RocksDB. Local only, never
    in the changelog.
``__kafka_timers\\0caught_up__``
    when (epoch seconds, this worker's clock) the local store was last known to hold
    everything its changelog held. Local only, never in the changelog: a store older
    than the changelog's ``delete.retention.ms`` may have missed tombstones that
    compaction has since removed, so it is rebuilt from scratch
    (:mod:`app.worker.partition_store`).

Changing a layout means a new prefix, never a new meaning for an old one: stores and
changelogs outlive releases.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "APPLYING",
    "BOOKKEEPING",
    "CAUGHT_UP",
    "DELIVERED",
    "DELIVERED_END",
    "EXPIRY",
    "EXPIRY_BATCH",
    "EXPIRY_BATCH_END",
    "EXPIRY_END",
    "FAUST_OFFSET",
    "INDEX",
    "INDEX_CANCELLED",
    "INDEX_END",
    "INDEX_FIRED",
    "INDEX_PENDING",
    "IN_ADVANCE_PREFIX",
    "ORIGIN",
    "ORIGIN_END",
    "PAUSED",
    "PAUSED_END",
    "PENDING",
    "PENDING_END",
    "REQUEST_OFFSET",
    "UNCONFIRMED",
    "WATERMARK",
    "IndexEntry",
    "bucket_floor",
    "delivered_batch_key",
    "delivered_batch_seq",
    "expiry_batch_key",
    "expiry_batch_second",
    "expiry_floor",
    "expiry_key",
    "fired_index_entry",
    "index_key",
    "origin_key",
    "parse_expiry_key",
    "parse_timer_key",
    "paused_key",
    "pending_index_entry",
    "pending_index_prefix",
    "timer_key",
    "timer_key_prefix",
    "timer_key_second",
]

#: Prefix of pending timers.
PENDING = b"T"
#: First key after every pending timer (the exclusive end of their range).
PENDING_END = b"U"
#: Prefix of the id index.
INDEX = b"I"
#: First key after the id index.
INDEX_END = b"J"
#: Prefix of the expiry keys of remembered (fired or cancelled) ids.
EXPIRY = b"X"
#: First key after every expiry key.
EXPIRY_END = b"Y"
#: Prefix of batches of timers delivered and left to forget.
DELIVERED = b"L"
#: First key after every such batch.
DELIVERED_END = b"M"
#: Prefix of the expiry batches of fired ids.
EXPIRY_BATCH = b"V"
#: First key after every expiry batch (the watermark's key is past the range).
EXPIRY_BATCH_END = b"W"
#: Prefix of the keys of paused timers.
PAUSED = b"S"
#: First key after every paused timer's key.
PAUSED_END = b"T"
#: Prefix of the highest origin offset applied per origin partition (forwarded copies).
ORIGIN = b"O"
#: First key after every such key.
ORIGIN_END = b"P"
#: Key of the fired-through second.
WATERMARK = b"W"
#: Key of the last applied request offset.
REQUEST_OFFSET = b"R"
#: Key of the last request offset of the unit being applied (at-least-once mode).
APPLYING = b"A"
#: Faust's bookkeeping key (local RocksDB only).
FAUST_OFFSET = b"__faust\x00offset__"
#: When the local store was last caught up with its changelog (local RocksDB only).
CAUGHT_UP = b"__kafka_timers\x00caught_up__"
#: Present while the local store holds writes not yet known to be in the changelog
#: (local RocksDB only): a store found with it after a crash is rebuilt from the
#: changelog (app.worker.catch_up.is_unconfirmed).
UNCONFIRMED = b"__kafka_timers\x00unconfirmed__"
#: Every key that is neither a timer nor a remembered id: one of each per partition.
BOOKKEEPING = (WATERMARK, REQUEST_OFFSET, APPLYING, FAUST_OFFSET, CAUGHT_UP)

#: Width of a second in a key: 12 digits reach the year 33658.
_SECOND_DIGITS = 12


#: How many seconds' formatted key prefixes each cache below keeps (then it starts over).
_SECONDS_CACHED = 4096
#: :func:`timer_key_prefix` and :func:`pending_index_prefix` of recent seconds: a
#: second's ``%012d`` costs four times a dict look-up, and a batch of requests stores
#: many timers under few seconds.
_timer_prefixes: dict[int, bytes] = {}
_pending_prefixes: dict[int, bytes] = {}


def _remember(cache: dict[int, bytes], second: int, prefix: bytes) -> bytes:
    """``prefix``, kept in ``cache`` under ``second`` (emptied first when full)."""
    if len(cache) >= _SECONDS_CACHED:
        cache.clear()
    cache[second] = prefix
    return prefix


def timer_key(due: int, timer_id: str) -> bytes:
    """Key of a pending timer: sorts by due second, then id."""
    prefix = _timer_prefixes.get(due)
    if prefix is None:
        prefix = _remember(_timer_prefixes, due, b"T%012d\x00" % due)
    return prefix + timer_id.encode()


def timer_key_prefix(due: int) -> bytes:
    """What every :func:`timer_key` of ``due`` starts with (the id's bytes follow): for
    code that builds many keys of one second."""
    return b"T%012d\x00" % due


def parse_timer_key(key: bytes) -> tuple[int, str]:
    """``(due, id)`` of a pending timer's key (inverse of :func:`timer_key`)."""
    return int(key[1 : 1 + _SECOND_DIGITS]), key[2 + _SECOND_DIGITS :].decode()


def timer_key_second(key: bytes) -> int:
    """The second of a pending timer's key, without decoding its id (a tick's scan reads
    it for every series occurrence)."""
    return int(key[1 : 1 + _SECOND_DIGITS])


def bucket_floor(second: int) -> bytes:
    """The smallest key of a timer due at ``second`` (negative seconds clamp to 0)."""
    return b"T%012d" % max(second, 0)


def index_key(timer_id: str) -> bytes:
    """Key of timer ``timer_id``'s entry in the id index."""
    return INDEX + timer_id.encode()


#: States of an index entry (its first byte): pending, fired, cancelled.
INDEX_PENDING, INDEX_FIRED, INDEX_CANCELLED = b"P", b"F", b"C"
#: How the index entry of a cancel in advance (no timer seen yet) starts: cancelled, 0.
IN_ADVANCE_PREFIX = b"C%012d" % 0


@dataclass(frozen=True)
class IndexEntry:
    """An id index entry's value, decoded: where the newest version of an id stands."""

    #: :data:`INDEX_PENDING`, :data:`INDEX_FIRED` or :data:`INDEX_CANCELLED`.
    state: bytes
    #: Pending: the second its key is stored under. Terminal: its version's due second.
    due: int
    #: The version's token ("" for none).
    token: str

    def encode(self) -> bytes:
        return self.state + b"%012d" % self.due + self.token.encode()

    @classmethod
    def decode(cls, raw: bytes) -> IndexEntry:
        return cls(state=raw[:1], due=int(raw[1:13]), token=raw[13:].decode())


def pending_index_prefix(slot: int) -> bytes:
    """What every pending index entry of ``slot`` starts with: for code that builds many
    entries of one second (the token's bytes follow)."""
    return b"P%012d" % slot


def pending_index_entry(slot: int, token: str) -> bytes:
    """``IndexEntry(INDEX_PENDING, slot, token).encode()`` without building the dataclass:
    the hot paths write and compare these bytes once a timer."""
    prefix = _pending_prefixes.get(slot)
    if prefix is None:
        prefix = _remember(_pending_prefixes, slot, b"P%012d" % slot)
    return prefix + token.encode()


def fired_index_entry(version_due: int, token: str) -> bytes:
    """``IndexEntry(INDEX_FIRED, version_due, token).encode()``, likewise."""
    return b"F%012d" % version_due + token.encode()


def origin_key(partition: int) -> bytes:
    """Key of the highest offset of origin ``partition`` applied here (forwarded copies)."""
    return b"O%06d" % partition


def paused_key(timer_id: str) -> bytes:
    """Key saying that timer ``timer_id`` is paused."""
    return PAUSED + timer_id.encode()


def expiry_key(expiry: int, timer_id: str) -> bytes:
    """Key that forgets ``timer_id`` at tick ``expiry``: sorts by expiry second, then id."""
    return b"X%012d\x00" % max(expiry, 0) + timer_id.encode()


def parse_expiry_key(key: bytes) -> tuple[int, str]:
    """``(expiry, id)`` of an expiry key (inverse of :func:`expiry_key`)."""
    return int(key[1 : 1 + _SECOND_DIGITS]), key[2 + _SECOND_DIGITS :].decode()


def expiry_floor(second: int) -> bytes:
    """The smallest expiry key for ``second`` (negative seconds clamp to 0)."""
    return b"X%012d" % max(second, 0)


def expiry_batch_key(expiry: int, first_id: bytes) -> bytes:
    """Key of a batch of ids forgotten at tick ``expiry`` whose first id (UTF-8) is
    ``first_id``: sorts by expiry second."""
    return b"V%012d\x00" % max(expiry, 0) + first_id


def delivered_batch_key(seq: int) -> bytes:
    """Key of the ``seq``-th batch of timers delivered and left to forget: in write order."""
    return b"L%012d" % seq


def delivered_batch_seq(key: bytes) -> int:
    """The number of a batch from its key (``ValueError`` if it is not one)."""
    return int(key[1:])


def expiry_batch_second(key: bytes) -> int:
    """The expiry second of an expiry batch's key."""
    return int(key[1 : 1 + _SECOND_DIGITS])
