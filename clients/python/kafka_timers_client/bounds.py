"""The bounds every field of a request is held to before any arithmetic or encoding.

A request is written by whoever can produce to the topic: every number is checked for
NaN, infinity and magnitude while it is still text (a due of ``1e700000`` would have
Python build 700,001 digits), and every text for UTF-8 and length, so that no single
record holds the worker's event loop for more than a few milliseconds and nothing it
stores can fail to encode later. Whatever fails is refused with
:attr:`~kafka_timers_client.errors.RejectReason.OUT_OF_BOUNDS` unless a more specific reason fits.
"""

from __future__ import annotations

from kafka_timers_client.errors import RejectedRequest, RejectReason

__all__ = [
    "MAX_HEADERS",
    "MAX_HEADER_NAME_CHARS",
    "MAX_ID_CHARS",
    "MAX_SECONDS",
    "MAX_SERIES_COUNT",
    "MAX_SKIP_DATES",
    "MAX_SPEC_CHARS",
    "MAX_TOKEN_CHARS",
    "RESERVED_HEADER_PREFIXES",
    "checked_text",
]

#: Longest timer id, in characters: an id is in every store key and record of its timer.
MAX_ID_CHARS = 1024
#: Longest token, in characters.
MAX_TOKEN_CHARS = 1024
#: Most headers a request may carry onto its callback.
MAX_HEADERS = 256
#: Longest header name, in characters.
MAX_HEADER_NAME_CHARS = 1024
#: Longest cron expression, time zone, late-fire policy or time text, in characters.
MAX_SPEC_CHARS = 256
#: Largest epoch second, duration or offset accepted (10^12 - 1, the year 33658): the
#: store's keys hold 12 digits of seconds.
MAX_SECONDS = 10**12 - 1
#: Most occurrences a series may ask for.
MAX_SERIES_COUNT = 10**12
#: Most excluded dates a series request may carry (``skip_dates``): about three years of
#: every day, or a few decades of a company's closing days. The request carries the
#: dates themselves (the worker reads no file), so this bounds its size (11 bytes a date
#: in JSON) and what each occurrence's check costs to store.
MAX_SKIP_DATES = 1000
#: Header names the service writes on callbacks (``timer-id``, ``timer-token``,
#: ``timer-due``, ``timer-seq``..., and etf1's ``scheduler-key``...), compared without
#: case: a request that carries one is refused (``reserved_header``).
RESERVED_HEADER_PREFIXES = ("timer-", "scheduler-")


def checked_text(text: str, name: str, limit: int) -> str:
    """``text`` if it is at most ``limit`` characters of encodable UTF-8 (no lone
    surrogate, which JSON's ``\\ud800`` escape can make); else :class:`RejectedRequest`."""
    if len(text) > limit:
        raise RejectedRequest(
            RejectReason.OUT_OF_BOUNDS, f"{name} has {len(text)} characters, at most {limit}"
        )
    if not text.isascii():
        try:
            text.encode()
        except UnicodeEncodeError as exc:
            raise RejectedRequest(
                RejectReason.OUT_OF_BOUNDS, f"{name} is not valid UTF-8 (a lone surrogate)"
            ) from exc
    return text
