"""Create the service's topics explicitly, all with one partition count.

Never rely on auto-creation: brokers auto-create with their own default count (the dev
broker uses 4), and topics that must be co-partitioned then disagree.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from app.core.errors import BrokerUnavailable, ConfigurationError
from app.kafka.config import confluent_common
from app.settings import Settings

__all__ = [
    "ensure_topics",
    "partition_count",
    "service_topics",
    "wait_for_broker",
]


def service_topics(settings: Settings) -> tuple[str, ...]:
    """Every topic the workers need, changelog included."""
    return (*settings.topics.all(), settings.changelog_topic)


def _admin(settings: Settings, *, quiet: bool = False) -> AdminClient:
    conf = confluent_common(settings)
    if quiet:
        conf["log_level"] = 0  # the probe's connection failures become one error, not a log flood
    return AdminClient(conf)


def wait_for_broker(settings: Settings, timeout: float = 15.0) -> None:
    """Return once a broker answers a metadata request; raise :class:`BrokerUnavailable`."""
    admin = _admin(settings, quiet=True)
    deadline = time.monotonic() + timeout
    while True:
        try:
            admin.list_topics(timeout=min(2.0, max(0.1, deadline - time.monotonic())))
            return
        except KafkaException as exc:
            if time.monotonic() >= deadline:
                raise BrokerUnavailable(
                    f"no Kafka broker answered at {settings.bootstrap_servers} within "
                    f"{timeout:g}s: is it running, and is KAFKA_BOOTSTRAP_SERVERS right?"
                ) from exc


def partition_count(settings: Settings, topic: str, timeout: float = 10.0) -> int | None:
    """Partitions of ``topic``, or ``None`` if it does not exist."""
    metadata = _admin(settings).list_topics(topic=topic, timeout=timeout)
    info = metadata.topics.get(topic)
    if info is None or info.error is not None or not info.partitions:
        return None
    return len(info.partitions)


def ensure_topics(
    settings: Settings, names: Iterable[str] | None = None, timeout: float = 15.0
) -> None:
    """Create missing topics with ``settings.partitions``; refuse existing ones that differ."""
    wait_for_broker(settings, timeout)
    admin = _admin(settings)
    wanted = list(names if names is not None else service_topics(settings))
    existing = admin.list_topics(timeout=timeout).topics
    missing = [n for n in wanted if n not in existing]
    if missing:
        futures = admin.create_topics(
            [NewTopic(n, settings.partitions, settings.replication_factor) for n in missing],
            operation_timeout=timeout,
        )
        for name, future in futures.items():
            try:
                future.result(timeout)
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise ConfigurationError(f"cannot create topic {name!r}: {exc}") from exc
    deadline = time.monotonic() + timeout
    for name in wanted:
        while (count := partition_count(settings, name)) is None and time.monotonic() < deadline:
            time.sleep(0.05)  # metadata for a just-created topic can lag for a moment
        if count != settings.partitions:
            raise ConfigurationError(
                f"topic {name!r} has {count} partitions but KAFKA_TIMERS_PARTITIONS is "
                f"{settings.partitions}: every service topic needs the same count"
            )
