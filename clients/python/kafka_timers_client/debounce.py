"""Debounce: the requests for one id that come within a quiet window fire once.

A debounced request (``"debounce": "30s"``, optionally ``"max_wait": "5m"``) names no
due time. If no timer of its id is pending, it is stored to fire one debounce after the
request's time (its record timestamp, as for ``in``). Each later debounced request for
the id while it is pending moves its fire to one debounce after *that* request's time,
but never past the first request's time plus the max-wait, when one is given; the
callback becomes the last request's (topic, key, value, headers), and it carries a
``timer-debounced: <n>`` header: the number of requests merged into it. Once it has
fired, the next request starts a new debounce.

The rules here are the client's and the worker's alike: what the worker would refuse
(``invalid_debounce``) the client and the CLI refuse before sending.
"""

from __future__ import annotations

from kafka_timers_client.due import parse_duration
from kafka_timers_client.errors import InvalidTimeSpec, RejectedRequest, RejectReason

__all__ = ["DEBOUNCED_HEADER", "checked_debounce", "debounce_seconds", "debounced_due"]

#: The callback header holding how many requests a debounced timer merged.
DEBOUNCED_HEADER = "timer-debounced"


def _refused(detail: str) -> RejectedRequest:
    return RejectedRequest(RejectReason.INVALID_DEBOUNCE, detail)


def debounce_seconds(value: float | str, name: str = "debounce") -> int:
    """``value`` (a duration such as ``"30s"``, or seconds) in whole seconds, at least 1.

    Raises :class:`RejectedRequest` (``invalid_debounce``) otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise _refused(f'{name} must be a duration such as "30s" or seconds')
    try:
        seconds = parse_duration(str(value))
    except InvalidTimeSpec as exc:
        raise _refused(f"{name}: {exc}") from exc
    if seconds != int(seconds) or seconds < 1:
        raise _refused(
            f"{name} {str(value)[:40]!r}: whole seconds, at least 1s (the service's resolution)"
        )
    return int(seconds)


def checked_debounce(debounce: int | None, max_wait: int | None) -> tuple[int, int | None] | None:
    """``(debounce, max_wait)`` if they make a debounce (``None``: neither is given).

    Refused (``invalid_debounce``): a debounce below 1 second, a max-wait without a
    debounce, or a max-wait shorter than the debounce (it would cut every wait short).
    """
    if debounce is None:
        if max_wait is not None:
            raise _refused("max_wait needs a debounce")
        return None
    if debounce < 1:
        raise _refused(f"debounce {debounce}s: at least 1s")
    if max_wait is not None and max_wait < debounce:
        raise _refused(f"max_wait {max_wait}s is shorter than the debounce ({debounce}s)")
    return debounce, max_wait


def debounced_due(request_ms: int, seconds: int) -> int:
    """The second a debounce of ``seconds`` after a request at ``request_ms`` (epoch ms)
    ends, rounded up as every due time is: never early."""
    return -(-(request_ms + 1000 * seconds) // 1000)
