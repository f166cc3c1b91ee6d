"""Fires asked for out of schedule: a trigger (fire a timer now) and a backfill (a
series' occurrences in a past window).

Both are requests on the request topic, named and answered like a cancel: keyed by the
timer id, refused unless they present the timer's token, answered on the fired topic at
the request's offset (``"event": "trigger"`` or ``"backfill"``). The worker that owns the
timer stores what they fire as timers due at once, so they go out on its next tick,
through the callback topic's rate limit and pause like any callback, at least once and
never before their second:

- a **trigger** of a one-shot timer fires its callback now (the callback it would have
  had at its second, ``timer-due`` included, with a ``timer-trigger`` header holding the
  second it was triggered at); the timer is then gone, as if it had fired at its second.
  A trigger of a series fires one extra occurrence, whose ``timer-id`` is
  ``<id>@trigger:<request offset>`` (so that receivers de-duplicating on ``timer-id``
  keep it), ``timer-due`` the trigger's second and no ``timer-seq``; the series keeps its
  schedule.
- a **backfill** fires each occurrence the series would have had in ``[from, to)``
  (:meth:`~kafka_timers_client.recurrence.Recurrence.slots_in`: its cron or interval and
  its calendar, its count, start and end aside), none after the worker's clock, each
  with ``timer-id`` ``<id>@backfill:<second>``, ``timer-due`` and a ``timer-backfill``
  header holding the occurrence's second. A window with more than :data:`MAX_BACKFILL`
  occurrences is refused whole (``too_many``). Backfilling a second again while the
  worker remembers its fire (its memory window) fires nothing again.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from kafka_timers_client import protowire
from kafka_timers_client.bounds import MAX_SECONDS
from kafka_timers_client.errors import KafkaTimersError
from kafka_timers_client.outcome import BackfillOutcome, TriggerOutcome
from kafka_timers_client.request_checks import check_named

__all__ = [
    "BACKFILL",
    "BACKFILL_HEADER",
    "MAX_BACKFILL",
    "TRIGGER",
    "TRIGGER_HEADER",
    "ExtraFires",
    "backfill_id",
    "checked_window",
    "extra_kind",
    "parse_extra_id",
    "trigger_id",
]

#: The header that marks a fire asked for by a trigger: the second it was triggered at.
TRIGGER_HEADER = "timer-trigger"
#: The header that marks a backfilled occurrence: its own second.
BACKFILL_HEADER = "timer-backfill"
#: Most occurrences one backfill fires; a window holding more is refused whole.
MAX_BACKFILL = 10_000

#: What a fired record's ``extra`` says of a fire a trigger asked for, and of a
#: backfilled occurrence (ordinary fires have no ``extra``).
TRIGGER, BACKFILL = "trigger", "backfill"
#: The marker header of each kind of extra fire, and the kind.
_MARKS = {TRIGGER_HEADER: TRIGGER, BACKFILL_HEADER: BACKFILL}


def trigger_id(timer_id: str, request_offset: int) -> str:
    """The ``timer-id`` of the extra occurrence a trigger of series ``timer_id`` fires."""
    return f"{timer_id}@trigger:{request_offset}"


def backfill_id(timer_id: str, second: int) -> str:
    """The ``timer-id`` of series ``timer_id``'s occurrence at ``second``, backfilled."""
    return f"{timer_id}@backfill:{second}"


def parse_extra_id(timer_id: str) -> tuple[str, str, int] | None:
    """``(series id, kind, number)`` of an id :func:`trigger_id` (kind :data:`TRIGGER`,
    number the request offset) or :func:`backfill_id` (:data:`BACKFILL`, the second)
    made; ``None`` for any other id."""
    at = timer_id.rfind("@")
    if at <= 0:
        return None
    kind, colon, number = timer_id[at + 1 :].partition(":")
    if not colon or kind not in (TRIGGER, BACKFILL) or not (number.isascii() and number.isdigit()):
        return None
    value = int(number)
    if str(value) != number:  # "007": not what trigger_id or backfill_id write
        return None
    return timer_id[:at], kind, value


def extra_kind(headers: Sequence[tuple[str, bytes]]) -> str | None:
    """:data:`TRIGGER` or :data:`BACKFILL` if ``headers`` (a timer's) mark an extra fire,
    else ``None``. The service puts its mark first, and no request may carry a
    ``timer-*`` header, so only the first is looked at: a fire costs this one check."""
    return _MARKS.get(headers[0][0]) if headers else None


def checked_window(low: int, high: int) -> tuple[int, int]:
    """``(low, high)`` if it is a backfill window: epoch seconds, ``low < high``."""
    for name, second in (("from", low), ("to", high)):
        if isinstance(second, bool) or not isinstance(second, int):
            raise KafkaTimersError(f"backfill {name} must be whole epoch seconds")
        if not 0 <= second <= MAX_SECONDS:
            raise KafkaTimersError(f"backfill {name} {second}: an epoch second from 0 to 10^12")
    if low >= high:
        raise KafkaTimersError(f"backfill window [{low}, {high}) is empty: from must be before to")
    return low, high


class ExtraFires:
    """:class:`~kafka_timers_client.TimerClient`'s trigger and backfill."""

    if TYPE_CHECKING:

        def _send(self, key: str, value: bytes | None) -> None: ...

        def _answer(self, timer_id: str, value: bytes | None, wait: float, what: str) -> str: ...

    def trigger(
        self, timer_id: str, token: str, wait: float | None = None
    ) -> TriggerOutcome | None:
        """Fire timer ``timer_id`` now (refused unless ``token`` matches): a one-shot's
        callback goes out at once and the timer is gone; a series fires one extra
        occurrence and keeps its schedule (:mod:`kafka_timers_client.extra_fires`).

        ``wait``: seconds to wait for the worker's answer, as for
        :meth:`~kafka_timers_client.TimerClient.cancel`; ``None`` (the default) queues
        the request and returns at once.
        """
        check_named(timer_id, token)
        future = protowire.Future(id=timer_id, token=token, action=protowire.ACTION_TRIGGER)
        value = protowire.encode(future)
        if wait is None:
            self._send(timer_id, value)
            return None
        return TriggerOutcome(self._answer(timer_id, value, wait, "trigger"))

    def backfill(
        self, timer_id: str, token: str, start: int, end: int, wait: float | None = None
    ) -> BackfillOutcome | None:
        """Fire the occurrences series ``timer_id`` would have had in ``[start, end)``,
        epoch seconds (refused unless ``token`` matches; at most :data:`MAX_BACKFILL`,
        none after the worker's clock), each with a ``timer-backfill`` header.

        ``wait``: as for :meth:`trigger`. :attr:`BackfillOutcome.TOO_MANY`: the window
        holds more than :data:`MAX_BACKFILL` occurrences, and nothing was fired.
        """
        check_named(timer_id, token)
        low, high = checked_window(start, end)
        future = protowire.Future(
            id=timer_id,
            token=token,
            action=protowire.ACTION_BACKFILL,
            backfill_from=low,
            backfill_to=high,
        )
        value = protowire.encode(future)
        if wait is None:
            self._send(timer_id, value)
            return None
        return BackfillOutcome(self._answer(timer_id, value, wait, "backfill"))
