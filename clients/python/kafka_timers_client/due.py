"""Due-time arithmetic: parsing ``--at``/``--in`` and rounding up to whole seconds.

A timer has one-second resolution. A due time with a fraction is rounded *up*, so a
timer never fires before the instant its creator asked for.
"""

from __future__ import annotations

import math
import re
from datetime import datetime, timezone
from decimal import Decimal, InvalidOperation

from kafka_timers_client.bounds import MAX_SECONDS, MAX_SPEC_CHARS
from kafka_timers_client.errors import InvalidTimeSpec

__all__ = ["due_second", "parse_at", "parse_duration", "parse_epoch"]

_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)?\s*$")


def due_second(epoch: float | Decimal) -> int:
    """Round an epoch time up to the whole second at which the timer may fire."""
    return math.ceil(epoch)


def parse_duration(text: str) -> float:
    """Parse ``30s``, ``5m``, ``2h``, ``3d``, ``1w``, ``250ms`` or bare seconds, up to
    :data:`~kafka_timers_client.bounds.MAX_SECONDS`."""
    match = _DURATION.match(text) if len(text) <= MAX_SPEC_CHARS else None
    if not match:
        raise InvalidTimeSpec(f"cannot read duration {text[:40]!r}: use e.g. 30s, 5m, 2h, 3d")
    amount, unit = match.groups()
    seconds = float(amount) * _UNITS[unit or "s"]
    if not seconds <= MAX_SECONDS:  # also inf: 400 digits are a float overflow
        raise InvalidTimeSpec(f"duration {text[:40]!r} is longer than {MAX_SECONDS}s")
    return seconds


def parse_epoch(text: str) -> Decimal:
    """Epoch seconds as a finite number whose magnitude is below
    :data:`~kafka_timers_client.bounds.MAX_SECONDS`, checked before any arithmetic (its exponent
    first: rounding ``1e700000`` up would build 700,001 digits)."""
    number = _decimal(text) if len(text) <= MAX_SPEC_CHARS else None
    if number is None:
        raise InvalidTimeSpec(f"{text[:40]!r} is not a number of epoch seconds")
    return _bounded_epoch(number, text)


def _decimal(text: str) -> Decimal | None:
    try:
        return Decimal(text.strip())
    except InvalidOperation:
        return None


def _bounded_epoch(number: Decimal, text: str) -> Decimal:
    """``number`` if it is finite and below
    :data:`~kafka_timers_client.bounds.MAX_SECONDS` in size."""
    if not number.is_finite():
        raise InvalidTimeSpec(f"{text[:40]!r} is not a number of epoch seconds")
    if number.adjusted() >= 12 and abs(number) > MAX_SECONDS:
        raise InvalidTimeSpec(f"epoch second {text[:40]!r} is past {MAX_SECONDS}")
    return number


def parse_at(text: str) -> Decimal:
    """Parse an absolute due time: epoch seconds (``1767225600.5``) or ISO 8601.

    An ISO time without a zone is taken as UTC, not local time, so the same command
    means the same instant on every machine. Numbers are held to :func:`parse_epoch`'s
    bounds.
    """
    if len(text) > MAX_SPEC_CHARS:
        raise InvalidTimeSpec(f"time {text[:40]!r}... is {len(text)} characters long")
    number = _decimal(text)
    if number is not None:
        return _bounded_epoch(number, text)
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError as exc:
        raise InvalidTimeSpec(
            f"cannot read time {text!r}: use epoch seconds or ISO 8601 like 2026-12-24T09:00:00Z"
        ) from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    delta = moment - datetime(1970, 1, 1, tzinfo=timezone.utc)
    return Decimal(delta.days * 86400 + delta.seconds) + Decimal(delta.microseconds) / 1_000_000
