"""Where the audit reconciles a request: on the partition whose worker applied it.

Workers route requests (:mod:`app.core.routing`): a request read on a partition other
than its id's owner (``partition_for(id, partitions)``, murmur2 like Java's default
partitioner; librdkafka's CRC32 default puts most requests elsewhere) is forwarded to the
owner, bytes, headers and timestamp unchanged, with a ``timer-hop: <origin partition>:
<origin offset>[:<signature>]`` header, and the owner applies the copy. The fires of
that timer are written from the owner's partition, so the audit follows the requests
the same way:

- an **original** (no hop) on its owner partition is reconciled there;
- an original on another partition is reconciled where its **copy** is, and not where
  it landed, when a copy naming it exists. One without a copy is reconciled where it
  landed: the worker keeps a request for an id its partition still holds pending (stored
  there before routing, or under another partition count), and one it failed to forward
  then shows as missing, where it would otherwise go unseen;
- a **copy** is reconciled on the partition it was forwarded to, unless it is a
  **replay**: a forwarding worker killed before its batch was durable forwards the same
  records again, and the owner drops a copy whose origin offset is at or below the
  highest it has seen from that origin partition (:func:`app.core.routing.is_replayed`,
  in offset order). The audit drops it too: replayed as a new schedule, it would stand
  in front of the newer version sent since.

A request without an id gets the id its landing place derives
(:func:`app.core.raw_record.derived_id`); its copy derives the same id from its hop.

Hops are taken on trust: the audit has no deployment secret, so it cannot tell a
worker's signed hop from one a producer wrote. A forged hop can make the audit drop a
copy as a replay (the worker with the secret would apply it as an original) or take an
original for forwarded; the first shows as a missing fire, the second as a fire on a
partition the audit did not expect (unrequested).

Pure logic, used by the Spark plan (:func:`spark_audit.pipeline.timer_events`, which
does the same with a window and a join) and by the in-process yardstick
(:mod:`spark_audit.baseline`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from app.core.raw_record import RawRecord
from app.core.routing import Origin, is_replayed, owner_of, split_hop

__all__ = [
    "OriginMarks",
    "Place",
    "owner",
    "reconciled_where_landed",
    "split_copy",
    "where_reconciled",
]


class Place(NamedTuple):
    """Where a request record was read, and what routing makes of it."""

    partition: int
    offset: int
    #: The partition owning its id (``None``: refused, or nothing routed).
    owner: int | None
    #: For a forwarded copy, where its original was read.
    origin: Origin | None


def split_copy(record: RawRecord, partitions: int | None) -> tuple[RawRecord, Origin | None]:
    """``record`` without its ``timer-hop`` header and the copy's :class:`Origin`, as the
    worker reads it (:func:`app.core.routing.split_hop`), without a secret: on trust."""
    if not record.headers:
        return record, None
    return split_hop(record, partitions)


def owner(timer_id: str | None, partitions: int | None) -> int | None:
    """The partition that owns ``timer_id`` (``None`` without an id or a partition count)."""
    if timer_id is None or not partitions:
        return None
    return owner_of(timer_id, partitions)


class OriginMarks:
    """The highest origin offset seen per (owner partition, origin partition): what the
    owner's worker remembers to drop replayed copies. Feed it every copy of a partition
    in offset order, refused ones too (the worker checks before it parses)."""

    def __init__(self) -> None:
        self._marks: dict[int, dict[int, int]] = {}

    def replayed(self, partition: int, origin: Origin) -> bool:
        """Whether the copy from ``origin`` read on ``partition`` is a replay."""
        return is_replayed(origin, self._marks.setdefault(partition, {}))


def reconciled_where_landed(
    partition: int,
    owner_partition: int | None,
    origin: Origin | None,
    *,
    replayed: bool,
    copied: bool,
) -> bool:
    """Whether a request read on ``partition`` is reconciled there.

    ``origin``: the copy's, or ``None`` for an original; ``replayed``: the copy is a
    replay (:class:`OriginMarks`); ``copied``: a copy naming this original exists.
    """
    if origin is not None:
        return not replayed
    return owner_partition is None or owner_partition == partition or not copied


def where_reconciled(places: Sequence[Place]) -> list[bool]:
    """For each request record (every one read, refused ones too: their copies count
    for replays), whether it is reconciled where it was read
    (:func:`reconciled_where_landed`). The records of a partition must come in offset
    order; partitions may interleave."""
    marks = OriginMarks()
    replayed = [
        place.origin is not None and marks.replayed(place.partition, place.origin)
        for place in places
    ]
    copied = {place.origin for place in places if place.origin is not None}
    return [
        reconciled_where_landed(
            place.partition,
            place.owner,
            place.origin,
            replayed=replay,
            copied=(place.partition, place.offset) in copied,
        )
        for place, replay in zip(places, replayed, strict=True)
    ]
