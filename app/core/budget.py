"""How large a record the worker can write, and whether one fits.

librdkafka refuses, at ``produce()``, any record whose key, value and headers with its
framing exceed the producer's ``message.max.bytes`` (1,000,000 by default); Apache
Kafka's brokers refuse batches over ``max.message.bytes`` (1,048,588 by default). A
request the worker stores must therefore be checked whole, not its callback value
alone: an id, a token, a key or headers can make the callback, the stored timer (its
changelog record) or the cancel's answer too large to write, and a worker that finds
out at ``produce()`` has already half-handled the request.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = [
    "DEFAULT_MAX_RECORD_BYTES",
    "RECORD_OVERHEAD",
    "fits",
    "record_bytes",
]

#: librdkafka's default ``message.max.bytes``: the largest record a producer writes.
DEFAULT_MAX_RECORD_BYTES = 1_000_000
#: Framing counted on top of a record's key, value and headers: librdkafka's v2 record
#: overhead is under 100 bytes; this leaves room for it and a batch header.
RECORD_OVERHEAD = 512
#: Framing per header (its length varints), rounded up.
HEADER_OVERHEAD = 10


#: A header as either Kafka client takes it.
HeaderLike = tuple[str, bytes | str | None]


def record_bytes(key: bytes | None, value: bytes | None, headers: Iterable[HeaderLike] = ()) -> int:
    """The size a record counts against ``message.max.bytes``, with the framing rounded
    up (header names are counted in UTF-8, with any surrogate as 3 bytes)."""
    size = RECORD_OVERHEAD + len(key or b"") + len(value or b"")
    for name, header in headers:
        size += (
            HEADER_OVERHEAD
            + len(name) * 3
            + len(header or b"") * (3 if isinstance(header, str) else 1)
        )
    return size


def fits(
    limit: int,
    key: bytes | None,
    value: bytes | None,
    headers: Iterable[HeaderLike] = (),
) -> bool:
    """Whether a record of ``key``, ``value`` and ``headers`` can be produced under ``limit``."""
    return record_bytes(key, value, headers) <= limit
