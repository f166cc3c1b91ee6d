"""Producing requests to a deployment's request topic, each on its id's owner partition."""

from __future__ import annotations

from collections.abc import Sequence

from confluent_kafka import KafkaError, Message, Producer

from app.core.routing import owner_of
from app.core.timer import Header
from app.kafka.config import confluent_producer
from app.kafka.topics import partition_count, wait_for_broker
from app.ops.requests import RequestRecord
from app.settings import Settings
from kafka_timers_client.errors import BrokerUnavailable, KafkaTimersError

__all__ = ["RequestSender"]


class RequestSender:
    """One producer to ``settings``' request topic, in order per partition.

    ``acks=all`` and one request in flight per connection (the project's producer
    settings): records sent to one partition arrive in the order they were sent, also
    across retries.
    """

    def __init__(self, settings: Settings, timeout: float = 15.0) -> None:
        wait_for_broker(settings, timeout)
        self.topic = settings.topics.requests
        count = partition_count(settings, self.topic, timeout)
        if count is None:
            raise KafkaTimersError(
                f"request topic {self.topic!r} not found at {settings.bootstrap_servers}: "
                "create the deployment's topics first (kafka-timers topics, or start it)"
            )
        #: The target's partition count: ids are placed by murmur2 over it.
        self.partitions = count
        self._producer = Producer(confluent_producer(settings))
        self._errors: list[str] = []
        #: Records queued for sending.
        self.sent = 0
        #: Of which the broker acknowledged.
        self.acknowledged = 0

    def _on_delivery(self, err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            if len(self._errors) < 10:
                self._errors.append(str(err))
        else:
            self.acknowledged += 1

    def owner(self, timer_id: str) -> int:
        return owner_of(timer_id, self.partitions)

    def send_request(self, timer_id: str, request: RequestRecord) -> None:
        """Queue ``request``, about timer ``timer_id``, for the id's owner partition."""
        self.send(
            self.owner(timer_id),
            request.key,
            request.value,
            request.headers,
            request.timestamp_ms,
        )

    def send(
        self,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[Header],
        timestamp_ms: int,
    ) -> None:
        """Queue one record for ``partition`` (raises once a delivery has failed)."""
        if self._errors:
            raise BrokerUnavailable(f"{self.topic}: a request was refused: {self._errors[0]}")
        while True:
            try:
                # Every argument by position: keywords cost a third of a produce
                # (kafka_timers_client.TimerClient._send says why).
                self._producer.produce(
                    self.topic,
                    value,
                    key,
                    partition,
                    self._on_delivery,
                    None,
                    max(timestamp_ms, 0),
                    list(headers),
                )
                break
            except BufferError:
                self._producer.poll(0.05)
        self._producer.poll(0)
        self.sent += 1

    def flush(self, timeout: float = 30.0) -> None:
        """Wait until every queued record is acknowledged; raise if any was not."""
        remaining = self._producer.flush(timeout)
        if remaining or self._errors:
            detail = self._errors[0] if self._errors else f"{remaining} unacknowledged"
            raise BrokerUnavailable(f"requests not accepted by {self.topic!r}: {detail}")
