"""The configuration every topic the service creates gets, and the check of existing ones.

A broker applies its own defaults to a topic created without configuration; on Apache
Kafka that is ``cleanup.policy=delete`` after 7 days, which would drop a timer's
changelog record a week after it was written — and with it the timer, on the next
rebuild. So every topic is created with an explicit configuration, chosen here, and a
topic that already exists is checked against it at start-up. Why each value is what it
is: docs/operations.md, "Topics".

Pure: no Kafka client here, so the choices and the check are unit-tested directly;
:mod:`app.kafka.topics` does the describing and creating.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from app.core.policy import CONTROL_SUFFIX
from app.settings import RECORD_RESERVE_BYTES, Settings
from kafka_timers_client.errors import ConfigurationError

__all__ = [
    "BROKER_DEFAULT_DELETE_RETENTION_MS",
    "CONTROL_CONFIG",
    "DescribedConfig",
    "TopicSpec",
    "broker_defaults",
    "changelog_not_compacted",
    "check_existing",
    "control_topic",
    "record_budget",
    "tombstone_retention_seconds",
    "topic_specs",
]

HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS

#: Apache Kafka's ``log.cleaner.delete.retention.ms``: assumed where a broker does not
#: say (the dev broker returns only the keys a topic was created with).
BROKER_DEFAULT_DELETE_RETENTION_MS = DAY_MS

#: The timer table's changelog: the only durable copy of every pending timer.
CHANGELOG_CONFIG = {
    # Keep the newest record per key for ever: a timer due in 9 years stays.
    "cleanup.policy": "compact",
    # Compact as soon as a segment is closed: nothing needs the old values.
    "min.compaction.lag.ms": "0",
    # Compaction only touches closed segments, and a rebuild reads the open one whole:
    # roll hourly and at 100 MiB so both stay small even when traffic is light.
    "segment.ms": str(HOUR_MS),
    "segment.bytes": str(100 * 1024 * 1024),
    # Clean once 10% of the log is superseded (Kafka: 50%): fired timers are deleted
    # within seconds to days, so most of the log is soon dead; a smaller log is a
    # faster rebuild after a lost disk or a takeover.
    "min.cleanable.dirty.ratio": "0.1",
    # How long a tombstone (a fired, cancelled or forgotten key) outlives compaction:
    # a store more out of date than this is rebuilt from scratch, see
    # app.worker.partition_store.
    "delete.retention.ms": str(DAY_MS),
}

#: Ticks: a worker needs only the newest one, which covers every second before it.
TICKS_CONFIG = {
    "cleanup.policy": "delete",
    # A worker back after all workers were down replays at most this much (and one
    # that needs an older, deleted offset starts from the next tick and catches up).
    "retention.ms": str(HOUR_MS),
    # Retention removes whole closed segments: small ones keep it close to an hour.
    "segment.ms": str(10 * 60_000),
}

#: Requests, when the service creates the topic: kept until a worker applied them.
REQUESTS_CONFIG = {
    "cleanup.policy": "delete",
    # Workers apply a request within seconds; 7 days covers an outage of every worker
    # over a long weekend, and matches how long fired and cancelled ids are remembered
    # (KAFKA_TIMERS_REMEMBER_SECONDS), so a request that can still be read again is
    # still recognised.
    "retention.ms": str(7 * DAY_MS),
}

#: One audit record per fire and cancel: the audit runs daily, reruns need history.
FIRED_CONFIG = {"cleanup.policy": "delete", "retention.ms": str(14 * DAY_MS)}

#: Rejected requests: operators need time to look, fix the producer and replay.
DLQ_CONFIG = {"cleanup.policy": "delete", "retention.ms": str(30 * DAY_MS)}

#: The control topic (pauses, rate limits set at run time: app.core.control): one
#: partition, so every worker reads all of it in one order; compacted, so the newest
#: record of each key (the setting in force) is kept for ever and a worker's start reads
#: a handful of records, not the history. A tombstone (a resume) is kept a day after
#: compaction: a worker reads the whole topic at each start, so none can miss it.
CONTROL_CONFIG = {
    "cleanup.policy": "compact",
    "min.compaction.lag.ms": "0",
    "segment.ms": str(HOUR_MS),
    "delete.retention.ms": str(DAY_MS),
}
#: Partitions of the control topic.
CONTROL_PARTITIONS = 1


def control_topic(settings: Settings) -> str:
    """The control topic: ``<app id>-timer-control``. No timer of any deployment can name
    it as its callback topic (every worker refuses ``*-timer-control``,
    :data:`app.core.policy.CONTROL_SUFFIX`, and its own ``<app id>-*``), and a worker
    applies only records signed with the deployment's control secret
    (:func:`app.core.control.sign_control`): only who Kafka's ACLs let write it and who
    holds the secret can pause or limit a topic."""
    return f"{settings.app_id}{CONTROL_SUFFIX}"


class DescribedConfig(dict[str, str]):
    """A topic's configuration as a broker describes it: every value it reports, and
    which of them are broker defaults rather than set on the topic.

    Apache Kafka describes every config of a topic (36 in 3.9), each with its
    ``source``: ``DYNAMIC_TOPIC_CONFIG`` for what was set on the topic, a broker-level
    source (``DEFAULT_CONFIG``, ``STATIC_BROKER_CONFIG``...) for a default. The dev broker
    describes only what was set. A value is what the topic runs with whatever its
    source; only what was set on the topic is judged against what kafka-timers would
    have created (an operator who left a default did not choose it for this topic).
    """

    def __init__(self, values: Mapping[str, str], defaults: Iterable[str] = ()) -> None:
        super().__init__(values)
        #: Keys whose value is the broker's default, not set on the topic.
        self.defaults = frozenset(defaults)

    def set_on_topic(self) -> dict[str, str]:
        """Only the entries set on the topic itself."""
        return {key: value for key, value in self.items() if key not in self.defaults}


def broker_defaults(described: Mapping[str, str]) -> frozenset[str]:
    """The keys of ``described`` that are broker defaults (none for a plain mapping)."""
    return described.defaults if isinstance(described, DescribedConfig) else frozenset()


@dataclass(frozen=True)
class TopicSpec:
    """One topic the service creates, and the configuration it creates it with."""

    #: Topic name.
    name: str
    #: What it is for: ``changelog``, ``ticks``, ``requests``, ``fired``, ``dlq``.
    role: str
    #: Topic-level configuration given at creation.
    config: Mapping[str, str]


def topic_specs(settings: Settings) -> dict[str, TopicSpec]:
    """Every service topic by name, with its configuration."""
    t = settings.topics
    specs = (
        TopicSpec(t.ticks, "ticks", TICKS_CONFIG),
        TopicSpec(t.requests, "requests", REQUESTS_CONFIG),
        TopicSpec(t.fired, "fired", FIRED_CONFIG),
        TopicSpec(t.dlq, "dlq", DLQ_CONFIG),
        TopicSpec(settings.changelog_topic, "changelog", CHANGELOG_CONFIG),
    )
    return {spec.name: spec for spec in specs}


def fix_command(settings: Settings, topic: str, setting: str) -> str:
    """The ``kafka-configs`` command that sets ``setting`` (``name=value``) on ``topic``."""
    return (
        f"kafka-configs --bootstrap-server {settings.bootstrap_servers} --alter "
        f"--entity-type topics --entity-name {topic} --add-config {setting}"
    )


def changelog_not_compacted(settings: Settings, described: Mapping[str, str]) -> str | None:
    """Why the existing changelog must not be used (one line, with the fix), or None.

    Only ``cleanup.policy=compact`` keeps a timer for years: ``delete`` (Apache Kafka's
    default, assumed when the broker does not say) drops it after the retention, and
    ``compact,delete`` too. Never altered silently: the operator decides.
    """
    topic = settings.changelog_topic
    policy = described.get("cleanup.policy")
    if policy is not None and policy.replace(" ", "") == "compact":
        return None
    if policy is None:
        shown = "no cleanup.policy (broker default)"
    elif "cleanup.policy" in broker_defaults(described):
        shown = f"cleanup.policy={policy} (the broker's default)"
    else:
        shown = f"cleanup.policy={policy}"
    return (
        f"changelog topic {topic!r} has {shown}, not compact: the broker would delete "
        f"pending timers once they are older than its retention. Fix it with: "
        f"{fix_command(settings, topic, 'cleanup.policy=compact')}"
    )


def check_existing(
    settings: Settings, described: Mapping[str, Mapping[str, str]]
) -> tuple[str | None, list[str]]:
    """Judge the configuration of service topics that already existed.

    ``described`` maps a topic name to its configuration as the broker describes it.
    Returns the one fatal problem (a changelog that is not compacted, whatever set its
    policy), if any, and one warning per other setting set on the topic that differs
    from what the service would have created. A broker default (a setting the broker
    does not report, or reports with a broker-level source) is not judged.
    """
    specs = topic_specs(settings)
    fatal = None
    warnings = []
    for name, config in described.items():
        spec = specs.get(name)
        if spec is None:
            continue
        if spec.role == "changelog":
            fatal = changelog_not_compacted(settings, config)
        defaults = broker_defaults(config)
        for key, wanted in spec.config.items():
            actual = config.get(key)
            if actual is None or actual == wanted or key in defaults:
                continue
            if spec.role == "changelog" and key == "cleanup.policy":
                continue  # judged above
            warnings.append(
                f"topic {name!r} ({spec.role}) has {key}={actual}; kafka-timers creates it "
                f"with {key}={wanted} (see docs/operations.md, Topics). To align it: "
                f"{fix_command(settings, name, f'{key}={wanted}')}"
            )
    return fatal, warnings


#: What a record batch adds around its one record, as ``max.message.bytes`` counts it
#: (Kafka's v2 batch header is 61 bytes): allowed for when a topic's limit decides.
BATCH_OVERHEAD_BYTES = 100


def record_budget(settings: Settings, described: Mapping[str, Mapping[str, str]]) -> int:
    """The largest record the worker can write to its own topics, bytes.

    The producer's ``message.max.bytes`` (:attr:`Settings.record_budget_bytes`), less
    where the changelog, the fired or the dead-letter topic takes smaller records
    (``max.message.bytes``, as described; a topic that does not say takes the broker's
    default, 1,048,588 on Apache Kafka, which the producer's default is under). A
    payload limit that would not fit is refused here, with one line: the alternative is
    a changelog record the broker refuses, which stops every worker that reads the
    request.
    """
    budget = settings.record_budget_bytes
    decided_by, remedy = (
        "KAFKA_TIMERS_PRODUCER_MESSAGE_MAX_BYTES",
        "raise KAFKA_TIMERS_PRODUCER_MESSAGE_MAX_BYTES",
    )
    roles = {spec.name: spec.role for spec in topic_specs(settings).values()}
    for name, config in described.items():
        raw = config.get("max.message.bytes")
        if raw is None or roles.get(name) not in ("changelog", "fired", "dlq"):
            continue
        try:
            limit = int(raw) - BATCH_OVERHEAD_BYTES
        except ValueError as exc:
            raise ConfigurationError(f"topic {name!r} max.message.bytes={raw!r}") from exc
        if limit < budget:
            budget, decided_by = limit, f"topic {name!r} takes up to max.message.bytes={raw}"
            remedy = f"raise it: {fix_command(settings, name, 'max.message.bytes=<bytes>')}"
    if settings.max_payload_bytes > budget - RECORD_RESERVE_BYTES:
        raise ConfigurationError(
            f"KAFKA_TIMERS_MAX_PAYLOAD_BYTES={settings.max_payload_bytes} does not fit the "
            f"largest record the worker can write, {budget} bytes ({decided_by}), less "
            f"{RECORD_RESERVE_BYTES} for the rest of the record: lower it to at most "
            f"{budget - RECORD_RESERVE_BYTES}, or {remedy}"
        )
    return budget


def tombstone_retention_seconds(described: Mapping[str, str]) -> float:
    """How long the changelog keeps a tombstone after compaction, seconds."""
    raw = described.get("delete.retention.ms")
    try:
        ms = int(raw) if raw is not None else BROKER_DEFAULT_DELETE_RETENTION_MS
    except ValueError as exc:
        raise ConfigurationError(f"changelog delete.retention.ms={raw!r} is not a number") from exc
    return ms / 1000
