"""Translate :class:`Settings` into each Kafka client's own configuration.

Two clients are in play: confluent-kafka (librdkafka) for everything on the hot path,
and aiokafka inside Faust for consuming. Both get the same address and security; the
Faust side is :func:`app.worker.faust_config.faust_credentials`. The librdkafka
translation is the slim client's (:mod:`kafka_timers_client.config`), so the service and
a program that installed only the client configure librdkafka identically.
"""

from __future__ import annotations

from typing import Any

from app.settings import Settings
from kafka_timers_client import config as client_config

__all__ = ["confluent_common", "confluent_consumer", "confluent_producer", "worker_output_producer"]


def confluent_common(settings: Settings) -> dict[str, Any]:
    """Address and security for any librdkafka client."""
    return client_config.confluent_common(settings.client_config())


def confluent_producer(settings: Settings, **extra: Any) -> dict[str, Any]:
    """Producer settings: keys hashed like Java/Faust (murmur2), per-partition order kept."""
    return client_config.confluent_producer(settings.client_config(), **extra)


def worker_output_producer(settings: Settings, **extra: Any) -> dict[str, Any]:
    """The worker's output producer settings (:class:`app.worker.output.OutputProducer`):
    :func:`confluent_producer`'s, with no local delivery timeout.

    Why: a record librdkafka gives up on (``message.timeout.ms``) leaves a gap that a
    later record of the same partition can land after, once the broker answers again.
    Most of what the worker writes is safe with that (the unit fails, the worker exits
    and does the unit again, in order), but not a forwarded request: its owner drops a
    copy whose origin offset is below one it has applied
    (:func:`app.core.routing.is_replayed`), so a copy timed out while a later one from
    the same partition was delivered would be dropped when forwarded again: a lost
    request. With no local
    timeout and one request in flight per connection, a partition's records reach the
    broker in the order produced or not at all, and it is the worker's own bound (the
    unit's flush, 60 s: :class:`app.worker.output_errors.DeliveryFailure`) that ends a
    wait for an absent broker, by exiting with the records unsent. Exactly-once mode
    overrides this (its records time out with their transaction, which then shows none of
    them).
    """
    conf = confluent_producer(settings, **extra)
    conf["message.timeout.ms"] = 0  # librdkafka: 0 is no limit
    return conf


def confluent_consumer(settings: Settings, group_id: str, **extra: Any) -> dict[str, Any]:
    """Consumer settings with short sessions (fast failover) and reading to EOF."""
    return client_config.confluent_consumer(settings.client_config(), group_id, **extra)
