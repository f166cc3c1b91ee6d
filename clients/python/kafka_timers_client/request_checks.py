"""What the client refuses before sending, as the worker would refuse it (dead-letter)
later: a callback key that is not UTF-8, a request naming a timer without an id or with
an id or token too long, and headers the worker would not take."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from kafka_timers_client.bounds import (
    MAX_HEADER_NAME_CHARS,
    MAX_HEADERS,
    MAX_ID_CHARS,
    MAX_TOKEN_CHARS,
    RESERVED_HEADER_PREFIXES,
    checked_text,
)
from kafka_timers_client.errors import KafkaTimersError

__all__ = ["check_named", "checked_headers", "key_text"]


def key_text(key: bytes | str | None) -> str | None:
    """The callback key as the protobuf request carries it: text (``callBackKey`` is a
    protobuf string), so bytes must be UTF-8."""
    if isinstance(key, bytes):
        try:
            return key.decode()
        except UnicodeDecodeError:
            raise KafkaTimersError(
                f"key {key[:20]!r}...: a callback key must be UTF-8 (the request carries text)"
            ) from None
    if key is not None:
        checked_text(key, "the key", len(key))  # UTF-8 only: the size budget bounds it
    return key


def check_named(timer_id: str, token: str) -> None:
    """Refuse here what the worker would dead-letter about a request that names a timer
    (a cancel, pause or resume): no id, or an id or token that is too long or not
    UTF-8 (which failed to encode with a traceback)."""
    if not timer_id:
        raise KafkaTimersError("a timer id is needed to name the timer")
    checked_text(timer_id, "the id", MAX_ID_CHARS)
    checked_text(token, "the token", MAX_TOKEN_CHARS)


def checked_headers(
    headers: Mapping[str, str | bytes] | Iterable[tuple[str, bytes]] | None,
) -> list[tuple[str, bytes]]:
    """``headers`` as the request's list, refused here as the worker would refuse them
    (too many, a name too long or not UTF-8, a service header's name), not
    dead-lettered later."""
    pairs = list(headers.items()) if isinstance(headers, Mapping) else list(headers or ())
    if len(pairs) > MAX_HEADERS:
        raise KafkaTimersError(f"{len(pairs)} headers, at most {MAX_HEADERS}")
    out = []
    for name, value in pairs:
        checked_text(name, "a header name", MAX_HEADER_NAME_CHARS)
        if name[:10].lower().startswith(RESERVED_HEADER_PREFIXES):
            raise KafkaTimersError(
                f"header {name[:80]!r}: timer-* and scheduler-* are the service's own"
            )
        if isinstance(value, str):
            value = checked_text(value, "a header value", len(value)).encode()
        out.append((name, value))
    return out
