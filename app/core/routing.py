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

A request without an id (JSON or protobuf) gets the id ``<topic>-<partition>-<offset>``
of where it landed (:func:`app.core.raw_record.derived_id`), and is forwarded to
that id's owner like any other: the owner reads the place it was first sent from the
copy's ``timer-hop``, derives the same id, and stores the timer there, where a ``get``
or a ``cancel`` by that id goes.

One exception stays where it lands: a request for an id that partition still holds
pending (stored there by a release before routing, or under another partition count):
it is applied where its timer is.
"""

from __future__ import annotations

from dataclasses import replace

from app.core.budget import fits
from app.core.errors import RejectedRequest, RejectReason
from app.core.partitioner import partition_for
from app.core.raw_record import RawRecord

__all__ = ["HOP_HEADER", "check_forwardable", "hop_value", "owner_of", "without_hop"]

#: Marks a request a worker forwarded to its owner partition, naming where it was read.
#: Appended last; taken off before the request is read (a ``timer-*`` header is the
#: service's own, refused from producers as ``reserved_header`` anywhere else).
HOP_HEADER = "timer-hop"


def owner_of(timer_id: str, partitions: int) -> int:
    """The partition that owns ``timer_id`` among ``partitions``."""
    return partition_for(timer_id.encode(), partitions)


def hop_value(record: RawRecord) -> bytes:
    """The ``timer-hop`` value of a copy of ``record``: ``<partition>:<offset>``."""
    return b"%d:%d" % (record.partition, record.offset)


def without_hop(record: RawRecord) -> RawRecord:
    """``record`` without the ``timer-hop`` header a forwarding worker appended, if any,
    and with the place it names as :attr:`~app.core.raw_record.RawRecord.origin`
    (None if it names none: a producer's header of that name)."""
    headers = record.headers
    if headers and headers[-1][0] == HOP_HEADER:
        return replace(record, headers=headers[:-1], origin=_hop_origin(headers[-1][1]))
    return record


def _hop_origin(value: bytes) -> tuple[int, int] | None:
    partition, sep, offset = value.partition(b":")
    # Digits only, and short: read from a header anyone may write.
    if not sep or not (partition.isdigit() and offset.isdigit()):
        return None
    if len(partition) > 10 or len(offset) > 20:
        return None
    return int(partition), int(offset)


def check_forwardable(record: RawRecord, limit: int) -> None:
    """Refuse (``record_too_large``) a request whose copy with ``timer-hop`` would be
    larger than the largest record the worker can write."""
    if not fits(limit, record.key, record.value, [*record.headers, (HOP_HEADER, b"0" * 40)]):
        raise RejectedRequest(
            RejectReason.RECORD_TOO_LARGE,
            f"read on partition {record.partition}, it belongs on another, and its copy "
            f"would be larger than {limit} bytes",
        )
