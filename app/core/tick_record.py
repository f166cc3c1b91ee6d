"""What one record on the tick topic says: a total parse, bounded in time and size.

Whoever can produce to the tick topic writes these records, so nothing here may raise
or take long, whatever the bytes: the key (the tick's second, a decimal epoch second as
in the article) is read only when it is short, checked for range while it is still a
:class:`~decimal.Decimal` (``int(Decimal("1e700000"))`` would build 700,001 digits), and
a tick outside the seconds a store key can hold is ignored. The value is read only up to
:data:`MAX_VALUE_BYTES`, as JSON with the standard's constants only; nested too deep,
numbers too long, a name that is not text or a send time out of range: that part is
ignored (the source becomes :data:`UNKNOWN_SOURCE`, the send time the record's
timestamp) and the tick still counts. Source names are cut to :data:`MAX_SOURCE_CHARS`
and made encodable, since each one becomes a metric label.

Every part ignored is reported as a :class:`TickIgnored` reason for the caller to count.
"""

from __future__ import annotations

import json
from decimal import Decimal, InvalidOperation
from enum import Enum
from typing import Any, NamedTuple

from kafka_timers_client.bounds import MAX_SECONDS

__all__ = [
    "MAX_KEY_BYTES",
    "MAX_SOURCE_CHARS",
    "MAX_VALUE_BYTES",
    "UNKNOWN_SOURCE",
    "Tick",
    "TickIgnored",
    "TickParse",
    "parse_tick",
    "record_time",
    "source_name",
    "tick_second",
]

#: Longest key read as a second, in bytes: "1767225600" is 10, a fraction or an
#: exponent a few more.
MAX_KEY_BYTES = 40
#: Longest value read as JSON, in bytes (our ticks are about 80).
MAX_VALUE_BYTES = 4096
#: Longest source name kept, in characters: the rest is cut off.
MAX_SOURCE_CHARS = 64
#: The source of a tick that does not name one (the article's oscillator sends ``"1"``).
UNKNOWN_SOURCE = "unknown"
#: Largest ``sent_ms`` accepted: :data:`~kafka_timers_client.bounds.MAX_SECONDS` in milliseconds.
MAX_SENT_MS = MAX_SECONDS * 1000

_MAX_SECOND = Decimal(MAX_SECONDS)


class TickIgnored(str, Enum):
    """Why a tick record, or part of it, was ignored (``kafka_timers_ticks_ignored_total``)."""

    #: No key, or a key that is not a decimal number: the whole record is ignored.
    NO_SECOND = "no_second"
    #: A second before 1970 or past the store keys' 12 digits: the whole record is ignored.
    OUT_OF_RANGE = "out_of_range"
    #: A second further ahead of the worker's clock than it holds ticks for: ignored.
    TOO_FAR_AHEAD = "too_far_ahead"
    #: A value that is too long, nested too deep, or has a number too long to read: its
    #: source and send time are ignored, the tick counts.
    BAD_VALUE = "bad_value"
    #: A send time (``sent_ms``) that is not an integer of milliseconds since 1970 in
    #: range, or a source name that is not text: that field is ignored, the tick counts.
    BAD_FIELD = "bad_field"


class Tick(NamedTuple):
    """One usable tick."""

    #: The epoch second the tick stands for.
    second: int
    #: The oscillator that sent it, at most :data:`MAX_SOURCE_CHARS` characters.
    source: str
    #: Its clock when it sent the tick (epoch s), else the record timestamp; ``None``
    #: when neither is usable.
    sent: float | None


class TickParse(NamedTuple):
    """What :func:`parse_tick` made of one record."""

    #: The tick, ``None`` when the record is ignored as a whole.
    tick: Tick | None
    #: Every part ignored (the whole record's reason when ``tick`` is ``None``).
    ignored: tuple[TickIgnored, ...]


def _json_constant(name: str) -> None:
    raise ValueError(f"{name} is not a number")


#: JSON as the standard says (no NaN, no Infinity).
_JSON = json.JSONDecoder(parse_constant=_json_constant)


def tick_second(key: bytes | None) -> int | TickIgnored:
    """The second a tick's key stands for (a decimal epoch second; a fraction is cut
    off), or why there is none. Never raises; bounded by :data:`MAX_KEY_BYTES`."""
    if not key or len(key) > MAX_KEY_BYTES:
        return TickIgnored.NO_SECOND
    try:
        number = Decimal(key.decode("ascii"))
    except (UnicodeDecodeError, InvalidOperation, ValueError):
        return TickIgnored.NO_SECOND
    if not number.is_finite():
        return TickIgnored.NO_SECOND
    # Compared while a Decimal: an exponent costs nothing here, only in int().
    if number < 0 or number > _MAX_SECOND:
        return TickIgnored.OUT_OF_RANGE
    return int(number)


def source_name(name: str) -> str:
    """``name`` as a label: at most :data:`MAX_SOURCE_CHARS` characters of valid UTF-8
    (a lone surrogate, which JSON's ``\\ud800`` makes, would break ``/metrics``)."""
    name = name[:MAX_SOURCE_CHARS]
    if not name.isascii():
        name = name.encode("utf-8", "replace").decode("utf-8", "replace")
    return name or UNKNOWN_SOURCE


def record_time(timestamp: float | None) -> float | None:
    """A record timestamp (epoch s) if it is one: a number from 1970 to the horizon."""
    if isinstance(timestamp, bool) or not isinstance(timestamp, int | float):
        return None
    # Compared as it came (NaN and the infinities fail it too): math.isfinite raised
    # OverflowError for an int past any float.
    if not 0 < timestamp <= MAX_SECONDS:
        return None
    return float(timestamp)


def _document(value: bytes | None) -> tuple[dict[str, Any] | None, TickIgnored | None]:
    """The value as a JSON object, ``None`` if it is something else (the article's
    ``"1"``, or not JSON at all: no reason), or the reason it could not be read."""
    if not value:
        return None, None
    if len(value) > MAX_VALUE_BYTES:
        return None, TickIgnored.BAD_VALUE
    try:
        doc = _JSON.decode(value.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None, None
    except (ValueError, RecursionError):  # NaN, Infinity, 4,300 digits, deep nesting
        return None, TickIgnored.BAD_VALUE
    return (doc, None) if isinstance(doc, dict) else (None, None)


def parse_tick(
    key: bytes | None, value: bytes | None, timestamp: float | None, latest: int = MAX_SECONDS
) -> TickParse:
    """What one tick record says; never raises, whatever the bytes.

    Args:
        key: The record's key: the tick's second.
        value: The record's value: our ticks carry ``{"oscillator": name, "sent_ms":
            epoch ms}``; anything else leaves the source :data:`UNKNOWN_SOURCE`.
        timestamp: The record timestamp (epoch s), the send time of ticks that do not say.
        latest: The newest second accepted (the worker's clock plus how far ahead it
            holds ticks); a later tick is ignored as :attr:`TickIgnored.TOO_FAR_AHEAD`.
    """
    second = tick_second(key)
    if isinstance(second, TickIgnored):
        return TickParse(None, (second,))
    if second > latest:
        return TickParse(None, (TickIgnored.TOO_FAR_AHEAD,))
    ignored: list[TickIgnored] = []
    sent = record_time(timestamp)
    source = UNKNOWN_SOURCE
    doc, bad = _document(value)
    if bad is not None:
        ignored.append(bad)
    if doc is not None:
        name = doc.get("oscillator")
        if isinstance(name, str):
            source = source_name(name)
        elif name is not None:
            ignored.append(TickIgnored.BAD_FIELD)
        sent_ms = doc.get("sent_ms")
        if (
            isinstance(sent_ms, int)
            and not isinstance(sent_ms, bool)
            and 0 < sent_ms <= MAX_SENT_MS
        ):
            sent = sent_ms / 1000
        elif sent_ms is not None:
            ignored.append(TickIgnored.BAD_FIELD)
    return TickParse(Tick(second, source, sent), tuple(ignored))
