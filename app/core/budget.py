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

from app.core.timer import Timer
from kafka_timers_client.bounds import MAX_ID_CHARS, MAX_SPEC_CHARS, MAX_TOKEN_CHARS
from kafka_timers_client.errors import RejectedRequest, RejectReason

__all__ = [
    "DEFAULT_MAX_RECORD_BYTES",
    "RECORD_OVERHEAD",
    "check_fits",
    "derived_record_bytes",
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


#: The service's own headers on a callback (``timer-id``, ``-token``, ``-due``,
#: ``-fired-at``, ``-seq``, ``-coalesced``; a debounced one-shot has ``-debounced`` in
#: place of the last two) without the id and token: names and numbers.
_CALLBACK_HEADERS_BYTES = 6 * HEADER_OVERHEAD + 80 + 5 * 20
#: A stored timer's layout around its fields (:mod:`app.core.stored`): version, due,
#: length prefixes, the series numbers (or, never with them, a debounce's extension), the
#: spread; plus its changelog key's prefix and due digits.
_STORED_FRAMING_BYTES = 9 + 6 * 4 + 18 + 40 + 16 + 2 * 4 + 14


def _utf8_len(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode())


def derived_record_bytes(timer: Timer) -> int:
    """The size of the largest record storing and firing ``timer`` writes: its callback
    (key, value, its own and the service's headers) or its changelog record (the packed
    timer under its key), as :func:`record_bytes` counts them.

    Arithmetic over lengths, not a trial encoding: a microsecond per request, where
    packing twice would cost several.
    """
    id_bytes, token_bytes = _utf8_len(timer.id), _utf8_len(timer.token)
    headers = sum(HEADER_OVERHEAD + _utf8_len(n) + len(v) for n, v in timer.headers)
    payload = len(timer.key or b"") + len(timer.value or b"")
    callback = (
        RECORD_OVERHEAD + payload + headers + _CALLBACK_HEADERS_BYTES + id_bytes + token_bytes
    )
    rec = timer.recurrence
    series = 0 if rec is None else len(rec.cron or "") * 4 + len(rec.tz or "") * 4
    stored = (
        RECORD_OVERHEAD
        + _STORED_FRAMING_BYTES
        + payload
        + headers
        + 2 * id_bytes  # in the key and in the value
        + token_bytes
        + _utf8_len(timer.topic)
        + series
    )
    return max(callback, stored)


#: What a timer's records hold beyond its key, value and headers, at most: the id twice
#: and the token once (up to 4 bytes a character), the topic (249 ASCII characters),
#: cron and tz, the service's headers and the layouts' framing.
_BOUNDED_FIELDS_BYTES = (
    4 * (2 * MAX_ID_CHARS + MAX_TOKEN_CHARS + 2 * MAX_SPEC_CHARS)
    + 249
    + _CALLBACK_HEADERS_BYTES
    + _STORED_FRAMING_BYTES
    + RECORD_OVERHEAD
)


def check_fits(timer: Timer, limit: int) -> None:
    """Refuse ``timer`` (:attr:`~kafka_timers_client.errors.RejectReason.RECORD_TOO_LARGE`) if a
    record it makes the worker write would be larger than ``limit``: better a dead
    letter now than a ``produce()`` refused halfway through storing or firing it.

    Its id and token have been bounded by then (:mod:`kafka_timers_client.bounds`): a timer whose
    key, value and headers leave room for those at their largest is accepted on a few
    lengths (the whole count cost a microsecond, 5% of a request).
    """
    size = len(timer.value or b"") + len(timer.key or b"") + _BOUNDED_FIELDS_BYTES
    for name, value in timer.headers:
        size += HEADER_OVERHEAD + 4 * len(name) + len(value)
    if size <= limit:
        return
    size = derived_record_bytes(timer)
    if size > limit:
        raise RejectedRequest(
            RejectReason.RECORD_TOO_LARGE,
            f"its records would be {size} bytes (key, value, headers, id and token), "
            f"the largest the worker can write is {limit}",
        )
