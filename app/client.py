"""The Python client: schedule and cancel timers by producing to the request topic."""

from __future__ import annotations

import secrets
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from types import TracebackType
from typing import Any

from confluent_kafka import KafkaError, Message, Producer

from app.core import protowire
from app.core.due import due_second, parse_at, parse_duration
from app.core.errors import BrokerUnavailable, KafkaTimersError
from app.core.late import LatePolicy
from app.core.recurrence import Recurrence
from app.kafka.config import confluent_producer
from app.settings import Settings

__all__ = ["ScheduledTimer", "TimerClient"]


@dataclass(frozen=True)
class ScheduledTimer:
    """What :meth:`TimerClient.schedule` promises: keep ``token`` to cancel."""

    #: The timer's id (generated unless given); the callback carries it as ``timer-id``.
    id: str
    #: The token this version was scheduled with; cancels must present it.
    token: str
    #: Epoch second at or after which the callback is produced (a series: its first).
    due: int
    #: The series, for a recurring timer (its ``start`` is ``due``).
    recurrence: Recurrence | None = None


class TimerClient:
    """Schedules timers. Requests are keyed by timer id, so timers due in the same
    second spread over all partitions, and a cancel or reschedule of an id lands on the
    partition that holds it (murmur2, like Java and Faust)."""

    def __init__(
        self,
        settings: Settings,
        *,
        clock: Callable[[], float] = time.time,
        producer_conf: Mapping[str, Any] | None = None,
    ) -> None:
        self._topic = settings.topics.requests
        self._clock = clock
        self._producer = Producer(confluent_producer(settings, **dict(producer_conf or {})))
        self._errors: list[str] = []

    def _on_delivery(self, err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            self._errors.append(str(err))

    def _send(self, key: str, value: bytes, timestamp_ms: int | None = None) -> None:
        kwargs: dict[str, Any] = {"on_delivery": self._on_delivery}
        if timestamp_ms is not None:
            kwargs["timestamp"] = timestamp_ms
        while True:
            try:
                self._producer.produce(self._topic, value, key.encode(), **kwargs)
                break
            except BufferError:
                self._producer.poll(0.05)
        self._producer.poll(0)

    def schedule(
        self,
        topic: str,
        value: bytes,
        key: bytes | str | None = None,
        *,
        at: float | Decimal | None = None,
        delay: float | None = None,
        cron: str | None = None,
        tz: str | None = None,
        every: float | str | None = None,
        start: float | Decimal | str | None = None,
        end: float | Decimal | str | None = None,
        count: int | None = None,
        late: str | LatePolicy | None = None,
        timer_id: str | None = None,
        token: str | None = None,
        headers: Mapping[str, str | bytes] | Iterable[tuple[str, bytes]] | None = None,
    ) -> ScheduledTimer:
        """Ask for ``value`` to reach ``topic`` (with ``key``) at ``at`` or after ``delay``,
        or on every occurrence of a recurrence.

        A one-shot timer takes exactly one of ``at`` (epoch seconds) or ``delay``
        (seconds). A recurring timer takes ``cron`` (5 fields, or 6 with the seconds
        first, in time zone ``tz``, UTC by default) or ``every`` (seconds, or a duration
        such as ``"30s"``), and optionally ``start`` and ``end`` (epoch seconds or ISO
        8601) and ``count``; the first occurrence is computed here, exactly as the worker
        will, and returned as ``due``. ``late`` is the timer's late-fire policy, e.g.
        ``"skip-after 5m"`` or ``"all"`` (default: the service's).

        A due time with a fraction of a second is rounded up: a timer never fires early.
        Scheduling again with the same ``timer_id`` replaces the pending version (a whole
        series). Call :meth:`flush` (or use the client as a context manager) to be sure it
        was accepted. A bad recurrence or policy raises :class:`KafkaTimersError` here.
        """
        timer_id = timer_id or uuid.uuid4().hex
        token = token or secrets.token_hex(8)
        if isinstance(headers, Mapping):
            header_list = [(k, v.encode() if isinstance(v, str) else v) for k, v in headers.items()]
        else:
            header_list = list(headers or ())
        policy = late.text() if isinstance(late, LatePolicy) else late
        if policy:
            LatePolicy.parse(policy)  # refused here, not dead-lettered later
        future = protowire.Future(
            callback_topic=topic,
            callback_key=key.decode() if isinstance(key, bytes) else key,
            callback=value,
            id=timer_id,
            token=token,
            headers=header_list,
            late=policy or None,
        )
        if cron is None and every is None:
            if start is not None or end is not None or count is not None or tz is not None:
                raise KafkaTimersError("start, end, count and tz need cron= or every=")
            if (at is None) == (delay is None):
                raise KafkaTimersError("give exactly one of at=, delay=, cron= or every=")
            when = (
                Decimal(str(at))
                if at is not None
                else Decimal(str(self._clock())) + Decimal(str(delay))
            )
            future.due = due_second(when)
            self._send(timer_id, protowire.encode(future))
            return ScheduledTimer(id=timer_id, token=token, due=future.due)
        if at is not None or delay is not None:
            raise KafkaTimersError("a recurring timer takes start=, not at= or delay=")
        recurrence = self.build_recurrence(cron, tz, every, start, end, count)
        # The worker anchors the series at the request's timestamp: set it, and anchor
        # here from the same millisecond, so both find the same first occurrence.
        sent_ms = int(self._clock() * 1000)
        anchored = recurrence.anchored(-(-sent_ms // 1000))
        future.cron, future.every = recurrence.cron, recurrence.every
        future.tz = recurrence.tz if recurrence.cron else None
        future.start, future.end, future.count = recurrence.start, recurrence.end, count
        self._send(timer_id, protowire.encode(future), timestamp_ms=sent_ms)
        assert anchored.start is not None
        return ScheduledTimer(id=timer_id, token=token, due=anchored.start, recurrence=anchored)

    @staticmethod
    def build_recurrence(
        cron: str | None,
        tz: str | None,
        every: float | str | None,
        start: float | Decimal | str | None,
        end: float | Decimal | str | None,
        count: int | None,
    ) -> Recurrence:
        """The recurrence :meth:`schedule` sends (not yet anchored); raises
        :class:`KafkaTimersError` with one line if it is not valid."""
        if cron is not None and every is not None:
            raise KafkaTimersError("give cron= or every=, not both")
        first = None if start is None else due_second(parse_at(str(start)))
        last = None if end is None else int(parse_at(str(end)) // 1)
        if cron is not None:
            return Recurrence.cron_series(cron, tz, start=first, end=last, count=count)
        if tz is not None:
            raise KafkaTimersError("tz= applies to cron=, not to every=")
        seconds = parse_duration(every) if isinstance(every, str) else float(every or 0)
        if seconds != int(seconds):
            raise KafkaTimersError(f"every={every!r}: use whole seconds")
        return Recurrence.interval(int(seconds), start=first, end=last, count=count)

    def cancel(self, timer_id: str, token: str) -> None:
        """Ask for timer ``timer_id`` never to fire; refused unless ``token`` matches."""
        future = protowire.Future(id=timer_id, token=token, action=protowire.ACTION_CANCEL)
        self._send(timer_id, protowire.encode(future))

    def flush(self, timeout: float = 15.0) -> None:
        """Wait until every request is acknowledged; raise if the broker did not take them."""
        remaining = self._producer.flush(timeout)
        if remaining or self._errors:
            detail = self._errors[0] if self._errors else f"{remaining} requests unacknowledged"
            self._errors = []
            raise BrokerUnavailable(f"timer requests not accepted by the broker: {detail}")

    def close(self) -> None:
        """Flush what is still queued, then release the producer's connections."""
        try:
            self.flush()
        finally:
            self._producer.close()

    def __enter__(self) -> TimerClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.close()
