"""Many remembered ids that expire in the same second, under one store key.

A fired one-shot timer is remembered for the window (:mod:`app.core.wheel`): its index
entry becomes terminal, and something must remove that entry when the window ends.
That was one expiry key per id (``X<expiry>\\0<id>``, its value the entry it expires):
one of the three writes, changelog records and memtable inserts of every fired timer,
and a read to learn whether it existed. A round forgets its fired timers together, and
they all expire in the same second, so the round writes them in batches instead: one
key (:func:`app.core.keys.expiry_batch_key`) for up to :data:`MAX_ENTRIES` ids.
Counted by callgrind (RocksDB stores), forgetting a timer went from 52,069 to 40,043
instructions, and a fired timer with no rate limit from 95,855 to 85,292.

A batch's value is :data:`VERSION` and the number of ids, then for each id its UTF-8
bytes and the exact index entry it expires, each after its length (every number four
bytes, big-endian): a value cut short anywhere is refused, never read as fewer ids. A
batch is at most :data:`MAX_ENTRIES` ids and about :data:`MAX_BYTES` (ids and tokens can
be 1,024 characters each), far below the 1 MB a Kafka record may have by default.

The sweep removes an id's index entry only if it still equals the one in the batch (a
new version since then has its own), as for the per-id keys, which cancels still write.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import chain

__all__ = ["MAX_BYTES", "MAX_ENTRIES", "VERSION", "Entry", "chunks", "pack", "unpack"]

#: The first byte of every batch this layout writes.
VERSION = b"\x01"
#: Most ids in one batch: a sweep takes whole batches, so this bounds how far a tick's
#: sweep can go past its budget.
MAX_ENTRIES = 256
#: A batch is closed once its packed size reaches this many bytes.
MAX_BYTES = 64 * 1024
_LENGTH = 4

#: An id's UTF-8 bytes and the index entry it expires.
Entry = tuple[bytes, bytes]


class _Lengths(dict[int, bytes]):
    """Four big-endian bytes of each length asked, made once: a round's ids and index
    entries have few lengths between them."""

    def __missing__(self, length: int) -> bytes:
        encoded = self[length] = length.to_bytes(_LENGTH, "big")
        return encoded


#: :class:`_Lengths` of every batch packed in this process.
_LENGTHS = _Lengths()


def pack(entries: Sequence[Entry]) -> bytes:
    """The value of a batch holding ``entries``.

    Its lengths are looked up, not encoded (``int.to_bytes``, a method call, four times
    an id), and an id's four parts go in with one ``extend``: a round writes one entry
    for every timer it forgets (3,300 to 1,300 instructions an entry, callgrind)."""
    lengths = _LENGTHS
    parts = [VERSION, lengths[len(entries)]]
    extend = parts.extend
    for id_bytes, entry in entries:
        extend((lengths[len(id_bytes)], id_bytes, lengths[len(entry)], entry))
    return b"".join(parts)


def unpack(value: bytes) -> list[Entry]:
    """The entries of a batch's value; :class:`ValueError` if it is not one."""
    if value[:1] != VERSION:
        raise ValueError(f"not an expiry batch of version {VERSION!r}: {value[:1]!r}")
    entries: list[Entry] = []
    at, end = 1 + _LENGTH, len(value)
    if at > end:
        raise ValueError("an expiry batch cut short")
    for _ in range(int.from_bytes(value[1:at], "big")):
        fields: list[bytes] = []
        for _ in range(2):
            size = int.from_bytes(value[at : at + _LENGTH], "big")
            at += _LENGTH
            if at + size > end:
                raise ValueError("an expiry batch cut short")
            fields.append(value[at : at + size])
            at += size
        entries.append((fields[0], fields[1]))
    if at != end:
        raise ValueError("an expiry batch with bytes after its last id")
    return entries


def chunks(entries: Sequence[Entry]) -> Iterator[Sequence[Entry]]:
    """``entries`` cut into batches of at most :data:`MAX_ENTRIES` ids and about
    :data:`MAX_BYTES` bytes (a batch closes at the entry that reaches it), in order.

    The next :data:`MAX_ENTRIES` entries are one batch when all of them together stay
    under :data:`MAX_BYTES` (their sizes added up in C, no step of Python an entry:
    ids and tokens are short); only a run that reaches it is cut entry by entry."""
    start, end = 0, len(entries)
    while start < end:
        batch = entries[start : start + MAX_ENTRIES]
        if sum(map(len, chain.from_iterable(batch))) + 2 * _LENGTH * len(batch) < MAX_BYTES:
            yield batch
            start += len(batch)
            continue
        size, at = 0, start
        for at in range(start, end):
            id_bytes, entry = entries[at]
            size += len(id_bytes) + len(entry) + 2 * _LENGTH
            if at + 1 - start >= MAX_ENTRIES or size >= MAX_BYTES:
                break
        yield entries[start : at + 1]
        start = at + 1
