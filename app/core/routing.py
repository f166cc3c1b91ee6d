"""Where a request belongs: the partition that owns its timer id, whatever partition it
landed on.

A timer lives in one partition of the table, and every request about it (the schedule,
a reschedule, a cancel, a lookup) must meet it there, in order. The owner of an id is
the partition Kafka's default partitioner for Java, Faust and this project's own client
picks for the id as key: ``toPositive(murmur2(id)) % partitions``
(:func:`kafka_timers_client.partitioner.partition_for`). Producers do not all place records that
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

Anyone who may write the request topic can write a ``timer-hop`` header, and an origin
taken on trust would let them make an owner drop the real copies from that origin up to
any offset they name. With the deployment's secret (``KAFKA_TIMERS_CONTROL_SECRET``, which
every worker of a deployment shares) a worker signs the hop of each copy it forwards,
over the copy's origin and content (:func:`hop_value`), and a hop names an origin only
if its signature is right (:func:`split_hop`); without the secret, hops are taken on
trust.
"""

from __future__ import annotations

from binascii import hexlify
from collections.abc import Callable
from functools import lru_cache
from hashlib import blake2b, sha256
from hmac import compare_digest
from marshal import dumps as _dumps
from typing import NamedTuple

from app.core.budget import fits, record_bytes
from app.core.raw_record import RawRecord, with_headers
from kafka_timers_client.errors import RejectedRequest, RejectReason
from kafka_timers_client.partitioner import placement_function

__all__ = [
    "HOP_HEADER",
    "Origin",
    "check_forwardable",
    "hop_value",
    "id_placement",
    "is_replayed",
    "owner_of",
    "split_hop",
    "without_hop",
]

#: Marks a request a worker forwarded to its owner partition, naming where it was read.
#: Appended last; taken off before the request is read (a ``timer-*`` header is the
#: service's own, refused from producers as ``reserved_header`` anywhere else).
HOP_HEADER = "timer-hop"
#: Room a ``timer-hop`` value takes at most: two numbers, two colons and a signature.
_HOP_MAX = 80
#: Hex digits of a hop's signature: a 128-bit keyed BLAKE2b.
_MAC_HEX = 32
#: The ``marshal`` format a signature's message is written in: version 2, the last
#: that writes a value's bytes whatever the objects behind it (version 3 writes a
#: second occurrence of one object as a reference to the first, and an interned string
#: with its own type code, so equal records could give different messages). It tells
#: None from empty bytes and is self-delimiting (each string and tuple after its
#: length), so no two copies' origins and contents share a message; and it writes the
#: same bytes for them on every Python from 3.6 to 3.13 (checked).
_MESSAGE_FORMAT = 2
#: What a hop's signature's key is derived under, so that nothing else the deployment's
#: secret signs (control records) can pass for one.
_MAC_DOMAIN = b"kafka-timers timer-hop v3\0"
#: What every signature's message starts with (see :func:`_keyed`): one byte, so that as
#: much of a message as can fits in the block that holds it.
_MAC_PREFIX = b"\x03"


class Origin(NamedTuple):
    """Where a forwarded copy was first read: its origin partition and offset there."""

    #: The partition of the request topic the original landed on.
    partition: int
    #: The original's offset on that partition.
    offset: int


#: Builds an :class:`Origin` of a ``(partition, offset)`` tuple in C.
_new_tuple = tuple.__new__

#: :func:`~kafka_timers_client.partitioner.partition_for`'s placement, called directly.
_place = placement_function()


def owner_of(timer_id: str, partitions: int) -> int:
    """The partition that owns ``timer_id`` among ``partitions``: the partition
    :func:`~kafka_timers_client.partitioner.partition_for` gives its id (a worker asks for every
    request it reads, and twice for one it forwards)."""
    if partitions < 1:
        raise ValueError(f"a topic has at least one partition, not {partitions}")
    return _place(timer_id.encode(), partitions)


def id_placement() -> Callable[[bytes, int], int]:
    """:func:`owner_of` for a caller that places every request it reads (the worker):
    the placement itself, called with the id encoded (UTF-8) and a partition count
    already known to be at least 1, without the call of :func:`owner_of` around it."""
    return _place


def hop_value(record: RawRecord, secret: str | None = None) -> bytes:
    """The ``timer-hop`` value of a copy of ``record``: ``<partition>:<offset>``, and with
    the deployment's ``secret`` ``:<signature>`` over that and the record's topic, key,
    value and headers (:func:`split_hop` checks it)."""
    where = b"%d:%d" % (record.partition, record.offset)
    if secret is None:
        return where
    # The signature (:func:`_keyed`), here and in split_hop rather than in a function
    # both call: a tenth of its cost is a Python call's.
    mac = _keyed(secret).copy()
    message = (where, record.topic, record.key, record.value, record.headers)
    mac.update(_dumps(message, _MESSAGE_FORMAT))
    return where + b":" + hexlify(mac.digest())


@lru_cache(maxsize=8)
def _keyed(secret: str) -> blake2b:
    """A keyed BLAKE2b state (RFC 7693's keyed mode, a MAC by design) for a deployment
    secret, its key block already hashed, to copy per signature.

    A copy's signature is the digest of this state after its message: the hop's
    ``<partition>:<offset>`` as written, the record's topic, key, value and headers, in
    ``marshal`` format :data:`_MESSAGE_FORMAT`. Every forwarded request pays for one
    twice (signed, then checked), so it is as few C calls as it can be: one
    ``marshal.dumps`` for the whole message (a frame of lengths joined in Python, with a
    loop over the headers, cost as much again as the hash); BLAKE2b, whose 128-byte
    blocks take a request of a few hundred bytes in half the time BLAKE2s's 64-byte
    blocks do; and no key block per copy: BLAKE2 holds back the last block it has been
    given until more comes, so the state is handed :data:`_MAC_PREFIX` after its key,
    which makes it compress the key block here, once per secret.
    """
    mac = blake2b(key=_mac_key(secret), digest_size=_MAC_HEX // 2)
    mac.update(_MAC_PREFIX)
    return mac


@lru_cache(maxsize=8)
def _mac_key(secret: str) -> bytes:
    """The MAC key of a deployment secret: a hash of it under this MAC's own domain, so
    the secret's other uses (control records) never share a key with it."""
    return sha256(_MAC_DOMAIN + secret.encode()).digest()


def without_hop(record: RawRecord) -> RawRecord:
    """``record`` without the ``timer-hop`` header a forwarding worker appended, if any,
    and with the place it names as :attr:`~app.core.raw_record.RawRecord.origin`
    (None if it names none: a producer's header of that name)."""
    headers = record.headers
    if headers and headers[-1][0] == HOP_HEADER:
        return with_headers(record, headers[:-1], _hop_origin(headers[-1][1]))
    return record


def split_hop(
    record: RawRecord, partitions: int | None, secret: str | None = None
) -> tuple[RawRecord, Origin | None]:
    """``record`` without its ``timer-hop`` header, and the :class:`Origin` of the copy.

    As :func:`without_hop`, the place the hop names becomes the record's
    :attr:`~app.core.request_format.RawRecord.origin` (where its derived id comes from),
    and is returned as the copy's origin, if it names one: a hop that is not
    ``<partition>:<offset>[:<signature>]`` in digits (and hex), that names the record's
    own partition or none of the topic's ``partitions``, names nothing. With the
    deployment's ``secret`` it names something only if it is signed with it over this
    very record (:func:`hop_value`): a forgery, or a copy signed before the secret was
    rotated, is read as a request that landed here, never as a copy. With
    ``partitions`` None (nothing routed), nothing is a copy.
    """
    headers = record.headers
    if not headers:
        return record, None
    hop = headers[-1]
    if hop[0] != HOP_HEADER:
        return record, None
    value, headers = hop[1], headers[:-1]
    signature = b""
    if secret is None:
        fields = value.split(b":")
        where = b":".join(fields[:2]) if len(fields) in (2, 3) else b""
    else:
        where, _, signature = value.rpartition(b":")
        if len(signature) != _MAC_HEX:
            where = b""
    origin = _hop_origin(where)
    if (
        origin is None
        or partitions is None
        or origin[0] >= partitions
        or origin[0] == record.partition
    ):
        return with_headers(record, headers, None), None
    if secret is not None:
        mac = _keyed(secret).copy()  # the signature of hop_value, over this copy
        message = (where, record.topic, record.key, record.value, headers)
        mac.update(_dumps(message, _MESSAGE_FORMAT))
        if not compare_digest(signature, hexlify(mac.digest())):
            return with_headers(record, headers, None), None
    # The Origin from the tuple at hand: NamedTuple's own __new__ is a Python call.
    return with_headers(record, headers, origin), _new_tuple(Origin, origin)


def is_replayed(origin: Origin, applied: dict[int, int]) -> bool:
    """Whether a copy from ``origin`` is one its owner has applied already (or older than
    one it has), given the highest origin offset ``applied`` per origin partition; if it
    is not, it becomes the highest."""
    partition, offset = origin
    if offset <= applied.get(partition, -1):
        return True
    applied[partition] = offset
    return False


def _hop_origin(value: bytes) -> tuple[int, int] | None:
    partition, sep, offset = value.partition(b":")
    # Digits only, and short: read from a header anyone may write.
    if not sep or not (partition.isdigit() and offset.isdigit()):
        return None
    if len(partition) > 10 or len(offset) > 20:
        return None
    return int(partition), int(offset)


#: A ``timer-hop`` at its largest, as :func:`check_forwardable` counts a copy's.
_LARGEST_HOP = (HOP_HEADER, b"0" * _HOP_MAX)
#: :func:`~app.core.budget.record_bytes` of a copy with no key, no value and no header
#: but its ``timer-hop``: the size of a copy of a request without headers, less its key
#: and value (the count is a sum over the parts).
_BARE_COPY_BYTES = record_bytes(None, None, (_LARGEST_HOP,))


def check_forwardable(record: RawRecord, limit: int) -> None:
    """Refuse (``record_too_large``) a request whose copy with ``timer-hop`` would be
    larger than the largest record the worker can write."""
    if not record.headers:  # most requests: the same count, from two lengths
        key, value = record.key, record.value
        if len(key or b"") + len(value or b"") + _BARE_COPY_BYTES <= limit:
            return
    if not fits(limit, record.key, record.value, [*record.headers, _LARGEST_HOP]):
        raise RejectedRequest(
            RejectReason.RECORD_TOO_LARGE,
            f"read on partition {record.partition}, it belongs on another, and its copy "
            f"would be larger than {limit} bytes",
        )
