"""The worker's output producer keeps each partition's records gapless and in order.

A forwarded request's owner drops a copy older than one it has applied
(:func:`app.core.routing.is_replayed`), so a copy that librdkafka timed out while a later
one of the same partition was delivered would be lost when forwarded again. These are the
two settings that rule that out in at-least-once mode.
"""

from __future__ import annotations

from app.kafka.config import confluent_producer, worker_output_producer
from app.settings import Settings


def test_the_worker_output_has_no_local_delivery_timeout_and_one_request_in_flight() -> None:
    settings = Settings()
    conf = worker_output_producer(settings, **{"client.id": "w-1"})
    assert conf["message.timeout.ms"] == 0  # librdkafka: never times a record out
    assert conf["max.in.flight.requests.per.connection"] == 1  # retries keep the order
    assert conf["client.id"] == "w-1"
    # Only the worker's output: a command-line producer still gives up after its timeout.
    assert confluent_producer(settings)["message.timeout.ms"] > 0
