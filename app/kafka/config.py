"""Translate :class:`Settings` into each Kafka client's own configuration.

Two clients are in play: confluent-kafka (librdkafka) for everything on the hot path,
and aiokafka inside Faust for consuming. Both get the same address and security; the
Faust side is :func:`app.worker.faust_config.faust_credentials`.
"""

from __future__ import annotations

from typing import Any

from app.settings import Settings

__all__ = ["confluent_common", "confluent_consumer", "confluent_producer"]


def confluent_common(settings: Settings) -> dict[str, Any]:
    """Address and security for any librdkafka client."""
    sec = settings.security
    conf: dict[str, Any] = {
        "bootstrap.servers": settings.bootstrap_servers,
        "security.protocol": sec.protocol,
    }
    if sec.sasl_mechanism:
        conf["sasl.mechanism"] = sec.sasl_mechanism
    if sec.sasl_username is not None:
        conf["sasl.username"] = sec.sasl_username
    if sec.sasl_password is not None:
        conf["sasl.password"] = sec.sasl_password
    if sec.ssl_cafile:
        conf["ssl.ca.location"] = sec.ssl_cafile
    if sec.ssl_certfile:
        conf["ssl.certificate.location"] = sec.ssl_certfile
    if sec.ssl_keyfile:
        conf["ssl.key.location"] = sec.ssl_keyfile
    return conf


def confluent_producer(settings: Settings, **extra: Any) -> dict[str, Any]:
    """Producer settings: keys hashed like Java/Faust (murmur2), per-partition order kept."""
    conf = confluent_common(settings)
    conf.update(
        {
            "partitioner": "murmur2_random",
            "acks": "all",
            "linger.ms": 2,
            # Changelog records must stay in order per partition even when a send is retried.
            "max.in.flight.requests.per.connection": 1,
            "message.timeout.ms": 30000,
            # The largest record it sends: the payload limit is derived from it.
            "message.max.bytes": settings.record_budget_bytes,
        }
    )
    conf.update(extra)
    return conf


def confluent_consumer(settings: Settings, group_id: str, **extra: Any) -> dict[str, Any]:
    """Consumer settings with short sessions (fast failover) and reading to EOF."""
    conf = confluent_common(settings)
    conf.update(
        {
            "group.id": group_id,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": int(settings.session_timeout * 1000),
            "heartbeat.interval.ms": int(settings.heartbeat_interval * 1000),
            "enable.partition.eof": True,
        }
    )
    conf.update(extra)
    return conf
