"""Where the service is and how to talk to it: the client's whole configuration.

The service builds one of these from its own settings (``Settings.client_config()``), so
the worker's CLI and a program that installed only this package talk to Kafka with the
same librdkafka configuration, translated in one place.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

__all__ = [
    "DEFAULT_MESSAGE_MAX_BYTES",
    "SASL_MECHANISMS",
    "SECURITY_PROTOCOLS",
    "ClientConfig",
    "ClientConfigSource",
    "confluent_common",
    "confluent_consumer",
    "confluent_producer",
]

#: librdkafka's own ``message.max.bytes`` default: the largest request sent.
DEFAULT_MESSAGE_MAX_BYTES = 1_000_000
#: The ``security.protocol`` values both of the service's Kafka clients accept.
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
#: The ``sasl.mechanism`` values both of the service's Kafka clients accept.
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


@dataclass(frozen=True)
class ClientConfig:
    """The broker, the service's topics and the credentials to reach them.

    The defaults are the service's defaults (``KAFKA_TIMERS_REQUEST_TOPIC``,
    ``KAFKA_TIMERS_FIRED_TOPIC``): a service deployed with other topic names needs the
    same names here.
    """

    #: Kafka bootstrap address, ``host:port[,host:port]``.
    bootstrap_servers: str = "127.0.0.1:9092"
    #: The topic timer requests (schedule, cancel) are produced to.
    request_topic: str = "timer-request"
    #: The topic the workers write what they did to (a cancel's answer among them).
    fired_topic: str = "timer-fired"
    #: One of :data:`SECURITY_PROTOCOLS`.
    security_protocol: str = "PLAINTEXT"
    #: One of :data:`SASL_MECHANISMS` (with a SASL protocol).
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = None
    #: CA bundle that signs the brokers' certificates.
    ssl_cafile: str | None = None
    #: Client certificate and key for mutual TLS.
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    #: The largest record the producer sends (librdkafka ``message.max.bytes``).
    message_max_bytes: int = DEFAULT_MESSAGE_MAX_BYTES
    #: Consumer session and heartbeat, seconds: short, so a reader that dies leaves fast.
    session_timeout: float = 6.0
    heartbeat_interval: float = 1.0


class ClientConfigSource(Protocol):
    """Anything that can say where the service is (the service's ``Settings`` can)."""

    def client_config(self) -> ClientConfig: ...


def confluent_common(config: ClientConfig) -> dict[str, Any]:
    """Address and security for any librdkafka client."""
    conf: dict[str, Any] = {
        "bootstrap.servers": config.bootstrap_servers,
        "security.protocol": config.security_protocol,
    }
    if config.sasl_mechanism:
        conf["sasl.mechanism"] = config.sasl_mechanism
    if config.sasl_username is not None:
        conf["sasl.username"] = config.sasl_username
    if config.sasl_password is not None:
        conf["sasl.password"] = config.sasl_password
    if config.ssl_cafile:
        conf["ssl.ca.location"] = config.ssl_cafile
    if config.ssl_certfile:
        conf["ssl.certificate.location"] = config.ssl_certfile
    if config.ssl_keyfile:
        conf["ssl.key.location"] = config.ssl_keyfile
    return conf


def confluent_producer(config: ClientConfig, **extra: Any) -> dict[str, Any]:
    """Producer settings: keys hashed like Java/Faust (murmur2), per-partition order kept."""
    conf = confluent_common(config)
    conf.update(
        {
            "partitioner": "murmur2_random",
            "acks": "all",
            "linger.ms": 2,
            # Changelog records must stay in order per partition even when a send is retried.
            "max.in.flight.requests.per.connection": 1,
            "message.timeout.ms": 30000,
            # The largest record it sends: the payload limit is derived from it.
            "message.max.bytes": config.message_max_bytes,
        }
    )
    conf.update(extra)
    return conf


def confluent_consumer(config: ClientConfig, group_id: str, **extra: Any) -> dict[str, Any]:
    """Consumer settings with short sessions (fast failover) and reading to EOF."""
    conf = confluent_common(config)
    conf.update(
        {
            "group.id": group_id,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": int(config.session_timeout * 1000),
            "heartbeat.interval.ms": int(config.heartbeat_interval * 1000),
            "enable.partition.eof": True,
        }
    )
    conf.update(extra)
    return conf
