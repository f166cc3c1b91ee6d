"""Create the service's topics explicitly, all with one partition count and a config.

Never rely on auto-creation: brokers auto-create with their own default count (the dev
broker uses 4) and their own retention, and topics that must be co-partitioned then
disagree. What each topic is created with, and how an existing one is judged:
:mod:`app.kafka.topic_config`.

Two kinds of failure, kept apart: :class:`ConfigurationError` for what an operator must
fix (a changelog that is not compacted, partition counts that differ, a creation the
broker refuses), and :class:`BrokerUnavailable` for a broker that did not answer in time
(a metadata or admin request that timed out, a connection that failed, a topic just
created that metadata does not show yet). A command gives up on either with one line; a
worker at start retries the second with backoff (:mod:`app.worker.startup`).
"""

from __future__ import annotations

import concurrent.futures
import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
)

from app.kafka.config import confluent_common
from app.kafka.demand import DEMAND_CONFIG, demand_topic
from app.kafka.topic_config import (
    CONTROL_CONFIG,
    CONTROL_PARTITIONS,
    DescribedConfig,
    check_existing,
    control_topic,
    fix_command,
    topic_specs,
)
from app.settings import DEFAULT_PARTITIONS, Settings
from kafka_timers_client.errors import BrokerUnavailable, ConfigurationError

__all__ = [
    "describe_topic_configs",
    "ensure_control_topic",
    "ensure_demand_topic",
    "ensure_topics",
    "partition_count",
    "resolve_partitions",
    "service_topics",
    "wait_for_broker",
]

log = logging.getLogger(__name__)


def service_topics(settings: Settings) -> tuple[str, ...]:
    """Every topic the workers need, changelog included."""
    return (*settings.topics.all(), settings.changelog_topic)


#: librdkafka's own log lines of admin clients go here, not to stderr: a CLI error must
#: stay one line (an admin client dropped with a request in flight logs "Purging 1
#: unserved events from background queue" at info level, for instance).
_LIBRDKAFKA_LOG = logging.getLogger("kafka_timers.librdkafka.admin")


def _admin(settings: Settings, *, quiet: bool = False) -> AdminClient:
    conf: dict[str, Any] = {**confluent_common(settings), "logger": _LIBRDKAFKA_LOG}
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


def _broker_failed(exc: BaseException) -> bool:
    """Whether ``exc`` is the broker not answering (in time), not a refusal to fix."""
    if isinstance(exc, concurrent.futures.TimeoutError | TimeoutError):
        return True
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        error: KafkaError = exc.args[0]
        return bool(error.retriable()) or error.code() in (
            KafkaError._TIMED_OUT,
            KafkaError._TRANSPORT,
            KafkaError._ALL_BROKERS_DOWN,
            KafkaError.REQUEST_TIMED_OUT,
        )
    return False


def _existing(admin: AdminClient, timeout: float) -> dict[str, int]:
    """Partition counts of every topic, by name.

    Lists all topics rather than naming one: a metadata request that names a missing
    topic makes brokers that auto-create topics (the dev broker, Apache Kafka by
    default) create it, with their own partition count.
    """
    try:
        topics = admin.list_topics(timeout=timeout).topics
    except KafkaException as exc:
        raise BrokerUnavailable(f"listing the broker's topics: {exc}") from exc
    return {
        name: len(info.partitions)
        for name, info in topics.items()
        if info.error is None and info.partitions
    }


def _create(
    admin: AdminClient,
    settings: Settings,
    topics: Mapping[str, tuple[int, Mapping[str, str]]],
    timeout: float,
) -> None:
    """Create ``topics`` (name: partition count and configuration); one created meanwhile
    by another process is no error. Raise :class:`BrokerUnavailable` when the broker does
    not answer in time, :class:`ConfigurationError` when it refuses (one line each)."""
    futures = admin.create_topics(
        [
            NewTopic(name, partitions, settings.replication_factor, config=dict(config))
            for name, (partitions, config) in topics.items()
        ],
        operation_timeout=timeout,
    )
    for name, future in futures.items():
        try:
            future.result(timeout)
        except (KafkaException, concurrent.futures.TimeoutError) as exc:
            if _broker_failed(exc):
                raise BrokerUnavailable(f"creating topic {name!r}: {exc!r}") from exc
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise ConfigurationError(f"cannot create topic {name!r}: {exc}") from exc


def _listed(admin: AdminClient, name: str, timeout: float) -> None:
    """Return once ``name`` shows in the broker's metadata (it can lag a creation for a
    moment); raise :class:`BrokerUnavailable` if it does not within ``timeout``."""
    deadline = time.monotonic() + timeout
    while name not in _existing(admin, timeout):
        if time.monotonic() >= deadline:
            raise BrokerUnavailable(f"topic {name!r} does not show in the broker's metadata")
        time.sleep(0.05)


def partition_count(settings: Settings, topic: str, timeout: float = 10.0) -> int | None:
    """Partitions of ``topic``, or ``None`` if it does not exist (never creates it)."""
    return _existing(_admin(settings), timeout).get(topic)


def resolve_partitions(settings: Settings, timeout: float = 15.0) -> Settings:
    """``settings`` with its partition count decided, once, at an entry point.

    ``KAFKA_TIMERS_PARTITIONS`` wins when set (:func:`ensure_topics` then refuses
    topics that differ). Unset, an existing request topic decides — producers often
    create it, or have it auto-created, before the first worker runs — else any other
    service topic that exists, else :data:`app.settings.DEFAULT_PARTITIONS`.
    """
    if settings.partitions is not None:
        return settings
    wait_for_broker(settings, timeout)
    existing = _existing(_admin(settings), timeout)
    requests = settings.topics.requests
    names = (requests, *(n for n in service_topics(settings) if n != requests))
    for name in names:
        count = existing.get(name)
        if count is not None:
            log.info(
                "KAFKA_TIMERS_PARTITIONS unset: using the %d partitions of existing topic %r",
                count,
                name,
            )
            return replace(settings, partitions=count)
    return replace(settings, partitions=DEFAULT_PARTITIONS)


def _broker_defaults(entries: dict[str, ConfigEntry]) -> list[str]:
    """The keys of a topic's description whose value is a broker default.

    Its ``source`` says so: anything but ``DYNAMIC_TOPIC_CONFIG`` (set on the topic) is
    the broker's. The dev broker labels what was set ``DEFAULT_CONFIG`` and describes
    nothing else; it lists no synonyms, which Apache Kafka does for most configs: a
    description without any is taken as one of only what was set.
    """
    if not any(entry.synonyms for entry in entries.values()):
        return []
    set_on_topic = ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    return [key for key, entry in entries.items() if _source(entry) != set_on_topic]


def _source(entry: ConfigEntry) -> int:
    """An entry's source as a number (confluent-kafka gives an int, its stubs an enum)."""
    source: Any = entry.source
    return int(getattr(source, "value", source))


def describe_topic_configs(
    settings: Settings, names: Iterable[str], timeout: float = 15.0
) -> dict[str, DescribedConfig]:
    """Configuration of each existing topic in ``names``, as described: every value the
    broker reports, broker defaults included and marked as such (``.defaults``)."""
    admin = _admin(settings)
    resources = [ConfigResource(ConfigResource.Type.TOPIC, name) for name in names]
    if not resources:
        return {}
    described: dict[str, DescribedConfig] = {}
    for resource, future in admin.describe_configs(resources, request_timeout=timeout).items():
        try:
            entries = future.result(timeout)
        except (KafkaException, concurrent.futures.TimeoutError) as exc:
            if isinstance(exc, KafkaException) and exc.args[0].code() == (
                KafkaError.UNKNOWN_TOPIC_OR_PART
            ):
                continue
            if _broker_failed(exc):
                raise BrokerUnavailable(
                    f"describing the configuration of topic {resource.name!r}: {exc!r}"
                ) from exc
            raise ConfigurationError(
                f"cannot describe the configuration of topic {resource.name!r}: {exc}"
            ) from exc
        values = {key: entry.value for key, entry in entries.items() if entry.value is not None}
        described[resource.name] = DescribedConfig(values, _broker_defaults(entries))
    return described


def ensure_topics(
    settings: Settings, names: Iterable[str] | None = None, timeout: float = 15.0
) -> dict[str, DescribedConfig]:
    """Create missing topics, check existing ones; return every service topic's config.

    Missing topics are created with ``settings.partitions`` and, for service topics,
    the configuration of :func:`app.kafka.topic_config.topic_specs`. Existing service
    topics are described and checked: a changelog that is not compacted raises
    :class:`ConfigurationError` (one line, with the fix); other differences are logged
    as warnings. Any topic whose partition count differs is refused. Returns the
    configuration of each service topic among ``names``: as described if it existed,
    as created otherwise. Without ``names`` (every service topic), the control topic
    and the demand topic too (:func:`ensure_control_topic`,
    :func:`ensure_demand_topic`).
    """
    if names is None:
        ensure_control_topic(settings, timeout)
        ensure_demand_topic(settings, timeout)
    partitions = settings.partition_count
    wait_for_broker(settings, timeout)
    admin = _admin(settings)
    wanted = list(names if names is not None else service_topics(settings))
    specs = topic_specs(settings)
    existing = _existing(admin, timeout)
    found = [n for n in wanted if n in existing]
    configs = describe_topic_configs(settings, [n for n in found if n in specs], timeout)
    fatal, warnings = check_existing(settings, configs)
    if fatal is not None:
        raise ConfigurationError(fatal)
    for warning in warnings:
        log.warning("%s", warning)
    missing = [n for n in wanted if n not in existing]
    if missing:
        created = {n: (partitions, specs[n].config if n in specs else {}) for n in missing}
        _create(admin, settings, created, timeout)
        configs.update({n: DescribedConfig(specs[n].config) for n in missing if n in specs})
    deadline = time.monotonic() + timeout
    counts = _existing(admin, timeout)
    while any(n not in counts for n in wanted) and time.monotonic() < deadline:
        time.sleep(0.05)  # metadata for a just-created topic can lag for a moment
        counts = _existing(admin, timeout)
    for name in wanted:
        count = counts.get(name)
        if count is None:
            raise BrokerUnavailable(
                f"topic {name!r} does not show in the broker's metadata {timeout:g}s after "
                "it was created or found"
            )
        if count != partitions:
            raise ConfigurationError(
                f"topic {name!r} has {count} partitions but the service topics need "
                f"{partitions} (KAFKA_TIMERS_PARTITIONS, or the existing request topic's "
                f"count when it is unset): every service topic needs the same count"
            )
    return configs


def ensure_control_topic(settings: Settings, timeout: float = 15.0) -> str:
    """Create the control topic if missing (one partition, compacted); return its name.

    An existing one is used as it is, whatever its partition count (readers read every
    partition); one that is not compacted is a warning: a restarted worker would then
    forget a pause once retention removed its record.
    """
    name = control_topic(settings)
    wait_for_broker(settings, timeout)
    admin = _admin(settings)
    if name in _existing(admin, timeout):
        described = describe_topic_configs(settings, [name], timeout)
        policy = described[name].get("cleanup.policy") if name in described else None
        if policy is not None and policy.replace(" ", "") != "compact":
            log.warning(
                "control topic %r has cleanup.policy=%s, not compact: a pause or a limit set "
                "at run time is lost once retention removes its record. Fix it with: %s",
                name,
                policy,
                fix_command(settings, name, "cleanup.policy=compact"),
            )
        return name
    _create(admin, settings, {name: (CONTROL_PARTITIONS, CONTROL_CONFIG)}, timeout)
    _listed(admin, name, timeout)
    return name


def ensure_demand_topic(settings: Settings, timeout: float = 15.0) -> str:
    """Create the workers' demand topic if missing (one partition, compacted and
    deleted: see :mod:`app.kafka.demand`); return its name."""
    name = demand_topic(settings)
    admin = _admin(settings)
    if name not in _existing(admin, timeout):
        _create(admin, settings, {name: (1, DEMAND_CONFIG)}, timeout)
        _listed(admin, name, timeout)
    return name
