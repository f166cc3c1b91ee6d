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

__all__ = ["confluent_common", "confluent_consumer", "confluent_producer"]


def confluent_common(settings: Settings) -> dict[str, Any]:
    """Address and security for any librdkafka client."""
    return client_config.confluent_common(settings.client_config())


def confluent_producer(settings: Settings, **extra: Any) -> dict[str, Any]:
    """Producer settings: keys hashed like Java/Faust (murmur2), per-partition order kept."""
    return client_config.confluent_producer(settings.client_config(), **extra)


def confluent_consumer(settings: Settings, group_id: str, **extra: Any) -> dict[str, Any]:
    """Consumer settings with short sessions (fast failover) and reading to EOF."""
    return client_config.confluent_consumer(settings.client_config(), group_id, **extra)
