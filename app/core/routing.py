"""Where a request belongs: the partition that owns its timer id, whatever partition it
landed on.

A timer lives in one partition of the table, and every request about it (the schedule,
a reschedule, a cancel, a lookup) must meet it there, in order. The owner of an id is
the partition Kafka's default partitioner for Java, Faust and this project's own client
picks for the id as key: ``toPositive(murmur2(id)) % partitions``
(:func:`app.core.partitioner.partition_for`). Producers do not all place records that
way: librdkafka's default (confluent-kafka for Python, Go, .NET) hashes with CRC32,
Sarama with FNV-1a, a producer may key by a business key or name a partition. So the
worker that reads a request on another partition forwards it, bytes, headers and
timestamp unchanged, to the owner, with ``timer-hop: <partition>:<offset>`` naming where
it was read, as Kafka Streams and Faust repartition. The owner is then the only one that
answers a cancel, and a request already on its owner pays one hash.

A forwarded copy is applied on its owner at most once, and never after what its origin
partition forwarded later. A worker killed after its copies reached the owner and before
its batch's offset was durable reads the batch again after a restart (or its next owner
does) and forwards the same records once more; those second copies land after anything
newer the owner has applied since, so applying them would put an older version back in
place of a newer one (a lost update, not a duplicate). The owner therefore remembers, in
its changelogged store, the highest origin offset it has applied per origin partition
(``O<origin>`` keys, :func:`app.core.keys.origin_key`: one number per origin partition,
however many requests pass) and drops a copy at or below it (:func:`is_replayed`). That
holds because one origin partition's records are forwarded in offset order, by one
producer that keeps per-partition order, so the owner receives each origin's copies in
order: a copy at or below the highest applied one is a copy of something already
applied (or of something the newest copy was read after). The number is written to the
changelog with the owner's batch and locally only once the batch is durable, as the
owner's own resume offset is: a batch replayed on the owner after a failed flush is
applied again, not dropped.

A request read directly on its owner needs no such number: after a crash the owner reads
its partition again from the last durable offset, the same records in the same order
(one partition is one ordered log, and nothing else writes the ids it owns), so each id
goes through the same versions in the same order and ends on its newest one; nothing
older lands after something newer. (The first copies of forwarded requests are such
records too, on the owner's own partition.) One thing may differ on the re-read: time.
A version whose second passed while the worker was down would fire at once before the
newer version after it in the re-read replaced it again, so the records of the unit that
was under way at the crash (the ``A`` key) are re-read with "fire at once" turned into
"store for the next tick" (:meth:`app.core.wheel.PartitionWheel.schedule`, ``reread``).

Two exceptions stay where they land: a JSON request without an id (its id is derived
from where it landed, so it belongs there), and a request for an id that partition
still holds pending (stored there by a release before routing, or under another
partition count): it is applied where its timer is.
"""

from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

from app.core.budget import fits
from app.core.errors import RejectedRequest, RejectReason
from app.core.partitioner import partition_for
from app.core.request_format import RawRecord

__all__ = [
    "HOP_HEADER",
    "Origin",
    "check_forwardable",
    "hop_value",
    "is_replayed",
    "owner_of",
    "split_hop",
    "without_hop",
]

#: Marks a request a worker forwarded to its owner partition, naming where it was read.
#: Appended last; taken off before the request is read (a ``timer-*`` header is the
#: service's own, refused from producers as ``reserved_header`` anywhere else).
HOP_HEADER = "timer-hop"
#: Longest ``timer-hop`` value read: two numbers of at most 19 digits and a colon.
_HOP_MAX = 40


class Origin(NamedTuple):
    """Where a forwarded copy was first read: its origin partition and offset there."""

    #: The partition of the request topic the original landed on.
    partition: int
    #: The original's offset on that partition.
    offset: int


def owner_of(timer_id: str, partitions: int) -> int:
    """The partition that owns ``timer_id`` among ``partitions``."""
    return partition_for(timer_id.encode(), partitions)


def hop_value(record: RawRecord) -> bytes:
    """The ``timer-hop`` value of a copy of ``record``: ``<partition>:<offset>``."""
    return b"%d:%d" % (record.partition, record.offset)


def without_hop(record: RawRecord) -> RawRecord:
    """``record`` without the ``timer-hop`` header a forwarding worker appended, if any."""
    headers = record.headers
    if headers and headers[-1][0] == HOP_HEADER:
        return replace(record, headers=headers[:-1])
    return record


def split_hop(record: RawRecord, partitions: int | None) -> tuple[RawRecord, Origin | None]:
    """``record`` without its ``timer-hop`` header, and the :class:`Origin` it names.

    The origin is None for a record without the header, and when nothing is routed
    (``partitions`` None: the header is only taken off). A hop that names no partition
    of the topic's ``partitions`` other than the record's own, or is not
    ``<partition>:<offset>`` in digits, was not written by a worker: refused
    ``reserved_header``.
    """
    headers = record.headers
    if not headers or headers[-1][0] != HOP_HEADER:
        return record, None
    value = headers[-1][1]
    record = replace(record, headers=headers[:-1])
    if partitions is None:
        return record, None
    where, colon, offset = value.partition(b":")
    if (
        len(value) > _HOP_MAX
        or not colon
        or not where.isdigit()
        or not offset.isdigit()
        or int(where) >= partitions
        or int(where) == record.partition
    ):
        raise RejectedRequest(
            RejectReason.RESERVED_HEADER,
            f"a {HOP_HEADER} header that no worker wrote: {value[:_HOP_MAX]!r}",
        )
    return record, Origin(int(where), int(offset))


def is_replayed(origin: Origin, applied: dict[int, int]) -> bool:
    """Whether a copy from ``origin`` is one its owner has applied already (or older than
    one it has), given the highest origin offset ``applied`` per origin partition; if it
    is not, it becomes the highest."""
    highest = applied.get(origin.partition)
    if highest is not None and origin.offset <= highest:
        return True
    applied[origin.partition] = origin.offset
    return False


def check_forwardable(record: RawRecord, limit: int) -> None:
    """Refuse (``record_too_large``) a request whose copy with ``timer-hop`` would be
    larger than the largest record the worker can write."""
    if not fits(limit, record.key, record.value, [*record.headers, (HOP_HEADER, b"0" * 40)]):
        raise RejectedRequest(
            RejectReason.RECORD_TOO_LARGE,
            f"read on partition {record.partition}, it belongs on another, and its copy "
            f"would be larger than {limit} bytes",
        )
