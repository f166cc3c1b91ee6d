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
from app.core.due import due_second
from app.core.errors import BrokerUnavailable, KafkaTimersError
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
    #: Epoch second at or after which the callback is produced.
    due: int


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

    def _send(self, key: str, value: bytes) -> None:
        while True:
            try:
                self._producer.produce(
                    self._topic, value, key.encode(), on_delivery=self._on_delivery
                )
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
        timer_id: str | None = None,
        token: str | None = None,
        headers: Mapping[str, str | bytes] | Iterable[tuple[str, bytes]] | None = None,
    ) -> ScheduledTimer:
        """Ask for ``value`` to reach ``topic`` (with ``key``) at ``at`` or after ``delay``.

        A due time with a fraction of a second is rounded up: a timer never fires early.
        Scheduling again with the same ``timer_id`` replaces the pending version. Call
        :meth:`flush` (or use the client as a context manager) to be sure it was accepted.
        """
        if (at is None) == (delay is None):
            raise KafkaTimersError("give exactly one of at= or delay=")
        when = (
            Decimal(str(at))
            if at is not None
            else Decimal(str(self._clock())) + Decimal(str(delay))
        )
        due = due_second(when)
        timer_id = timer_id or uuid.uuid4().hex
        token = token or secrets.token_hex(8)
        if isinstance(headers, Mapping):
            header_list = [(k, v.encode() if isinstance(v, str) else v) for k, v in headers.items()]
        else:
            header_list = list(headers or ())
        future = protowire.Future(
            callback_topic=topic,
            callback_key=key.decode() if isinstance(key, bytes) else key,
            callback=value,
            id=timer_id,
            token=token,
            due=due,
            headers=header_list,
        )
        self._send(timer_id, protowire.encode(future))
        return ScheduledTimer(id=timer_id, token=token, due=due)

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
