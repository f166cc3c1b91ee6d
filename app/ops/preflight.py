"""``kafka-timers preflight``: check a cluster before deploying, and say what is missing.

What a deployment needs from its Kafka cluster, for one principal's role (``--role``):
the topics it uses exist, with one partition count and the configuration the service
creates them with (:mod:`app.kafka.topic_config`), the callback topics it will write
exist (the worker never creates one), and the principal holds the Kafka permissions
the role needs (:data:`ROLE_GRANTS`, the same table docs/deploy.md's ``kafka-acls``
scripts are written from, which a unit test compares).

Permissions are read from what the broker says the principal may do (KIP-430's
authorized operations, on DescribeTopics, DescribeGroups and DescribeCluster): a broker
that does not say (the dev broker; a cluster without an authorizer) leaves them
``unknown``, never ``ok``. Nothing is written, created or changed.

Each check is one line: ``ok``, ``MISSING`` (with the command that fixes it) or
``UNKNOWN`` (with why it could not be tested). Exit status 0 when nothing is missing,
1 when something is, 2 when the broker cannot be reached.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum

from app.kafka.demand import DEMAND_CONFIG, demand_topic
from app.kafka.topic_config import (
    CONTROL_CONFIG,
    CONTROL_PARTITIONS,
    changelog_not_compacted,
    control_topic,
    fix_command,
    topic_specs,
)
from app.settings import Settings
from kafka_timers_client.errors import BrokerUnavailable

__all__ = [
    "ROLES",
    "Check",
    "Grant",
    "Status",
    "grants",
    "judge_permissions",
    "judge_topics",
    "run_preflight",
]

#: The roles a principal can have, as ``--role`` names them.
ROLES = ("worker", "oscillator", "producer", "operator", "audit")


class Status(str, Enum):
    """What a check found."""

    #: Present and as the service needs it.
    OK = "ok"
    #: Absent or wrong: the line says how to fix it.
    MISSING = "MISSING"
    #: Could not be tested here (the broker does not say): the line says why.
    UNKNOWN = "UNKNOWN"


@dataclass(frozen=True)
class Check:
    """One thing preflight looked at."""

    status: Status
    #: What was checked, e.g. ``topic timer-request`` or ``READ on topic timer-request``.
    what: str
    #: What was found, or what to do about it.
    detail: str

    def line(self) -> str:
        return f"{self.status.value:<8} {self.what}: {self.detail}"

    def as_dict(self) -> dict[str, str]:
        return {"status": self.status.value, "what": self.what, "detail": self.detail}


@dataclass(frozen=True)
class Grant:
    """Kafka operations a role needs on one resource."""

    #: ``topic``, ``group``, ``cluster`` or ``transactional-id``.
    resource: str
    #: The resource's name (``kafka-cluster`` for the cluster).
    name: str
    #: Kafka's operation names: ``READ``, ``WRITE``, ``CREATE``, ``DESCRIBE``,
    #: ``DESCRIBE_CONFIGS``, ``IDEMPOTENT_WRITE``.
    operations: tuple[str, ...]
    #: Why the role needs it.
    why: str
    #: ``literal`` or ``prefixed`` (a name prefix, for callback topics).
    pattern: str = "literal"


def leader_topic(settings: Settings) -> str:
    """The topic Faust declares for its partition assignor."""
    return f"{settings.app_id}-__assignor-__leader"


def grants(settings: Settings, role: str, callback_topics: Sequence[str] = ()) -> list[Grant]:
    """Every permission ``role`` needs, least privilege (docs/deploy.md's scripts)."""
    t = settings.topics
    control = control_topic(settings)
    info = ("DESCRIBE", "DESCRIBE_CONFIGS")
    if role == "worker":
        out = [
            Grant(
                "topic",
                t.requests,
                ("READ", "WRITE", *info),
                "reads its partitions; forwards a request to the partition that owns its id",
            ),
            Grant(
                "topic",
                t.ticks,
                ("READ", "CREATE", *info),
                "reads ticks (Faust declares the topic at start)",
            ),
            Grant(
                "topic",
                settings.changelog_topic,
                ("READ", "WRITE", "CREATE", *info),
                "the table's changelog (Faust declares it at start)",
            ),
            Grant(
                "topic",
                leader_topic(settings),
                ("READ", "WRITE", "CREATE", *info),
                "Faust's assignor topic",
            ),
            Grant("topic", t.fired, ("WRITE", *info), "one record per fire and cancel"),
            Grant("topic", t.dlq, ("WRITE", *info), "refused requests"),
            Grant("topic", control, ("READ", *info), "pauses, rate limits, bulk cancels"),
            Grant(
                "topic",
                demand_topic(settings),
                ("READ", "WRITE", "DESCRIBE"),
                "each worker's backlog of rate-limited timers, which shares every limit among them",
            ),
            Grant("group", settings.app_id, ("READ", "DESCRIBE"), "Faust's consumer group"),
            Grant(
                "group",
                settings.request_group,
                ("READ", "DESCRIBE"),
                "request offsets that Kafka's lag tools read",
            ),
        ]
        out += [
            Grant("topic", name, ("WRITE", "DESCRIBE"), "callbacks", pattern)
            for name, pattern in _callback_patterns(callback_topics)
        ]
        if settings.exactly_once:
            out += [
                Grant(
                    "transactional-id",
                    settings.worker_id,
                    ("WRITE", "DESCRIBE"),
                    "exactly-once: the worker id is its transactional id",
                ),
                Grant(
                    "cluster",
                    "kafka-cluster",
                    ("IDEMPOTENT_WRITE",),
                    "exactly-once on Kafka before 2.8",
                ),
            ]
        return out
    if role == "oscillator":
        return [
            Grant("topic", t.ticks, ("WRITE", *info), "one tick a second to every partition"),
            Grant("topic", t.requests, ("DESCRIBE",), "adopts the request topic's partition count"),
        ]
    if role == "producer":
        return [
            Grant("topic", t.requests, ("WRITE", "DESCRIBE"), "schedule, cancel, pause"),
            Grant("topic", t.fired, ("READ", "DESCRIBE"), "only to wait for cancel answers"),
        ]
    if role == "operator":
        return [
            Grant(
                "topic", control, ("READ", "WRITE", "DESCRIBE"), "pause, resume, rate, cancel-bulk"
            ),
            Grant("topic", t.fired, ("READ", "DESCRIBE"), "cancel-bulk answers, get"),
            Grant("topic", t.requests, ("DESCRIBE",), "get: the owner partition of an id"),
        ]
    if role == "audit":
        return [
            Grant("topic", t.requests, ("READ", "DESCRIBE"), "what was requested"),
            Grant("topic", t.fired, ("READ", "DESCRIBE"), "what fired"),
        ]
    raise ValueError(f"unknown role {role!r}: one of {', '.join(ROLES)}")


def _callback_patterns(names: Sequence[str]) -> list[tuple[str, str]]:
    """``name`` literal, or ``prefix*`` as a prefixed pattern."""
    return [(n[:-1], "prefixed") if n.endswith("*") else (n, "literal") for n in names]


def _literal(names: Iterable[str]) -> list[str]:
    """The callback topics named in full (a prefix is not checked for existence)."""
    return [n for n in names if not n.endswith("*")]


def _create_command(
    settings: Settings, name: str, partitions: int, config: Mapping[str, str]
) -> str:
    configs = "".join(f" --config {k}={v}" for k, v in config.items())
    return (
        f"kafka-topics --bootstrap-server {settings.bootstrap_servers} --command-config "
        f"admin.properties --create --topic {name} --partitions {partitions} "
        f"--replication-factor {settings.replication_factor}{configs}"
    )


def role_topics(settings: Settings, role: str) -> list[str]:
    """The service topics ``role`` uses (those it must find), in a stable order."""
    return list(
        dict.fromkeys(
            g.name
            for g in grants(settings, role)
            if g.resource == "topic" and g.name != leader_topic(settings)
        )
    )


def judge_topics(
    settings: Settings,
    role: str,
    existing: Mapping[str, int],
    configs: Mapping[str, Mapping[str, str]],
    callback_topics: Sequence[str] = (),
) -> list[Check]:
    """The topic checks, from the partition counts of the topics that exist and their
    described configurations. Pure."""
    specs = topic_specs(settings)
    # Topics of one partition, read whole by every worker, and what they are created with.
    single = {
        control_topic(settings): CONTROL_CONFIG,
        demand_topic(settings): DEMAND_CONFIG,
    }
    wanted = role_topics(settings, role)
    counts = {existing[n] for n in wanted if n in existing and n not in single}
    partitions = settings.partitions or (
        existing.get(settings.topics.requests) or (min(counts) if counts else 8)
    )
    checks: list[Check] = []
    for name in wanted:
        what = f"topic {name}"
        spec_config = single.get(name) or (specs[name].config if name in specs else {})
        count = CONTROL_PARTITIONS if name in single else partitions
        if name not in existing:
            checks.append(
                Check(
                    Status.MISSING,
                    what,
                    "does not exist; create it: "
                    + _create_command(settings, name, count, spec_config),
                )
            )
            continue
        have = existing[name]
        if name not in single and have != partitions:
            checks.append(
                Check(
                    Status.MISSING,
                    what,
                    f"{have} partitions, the other service "
                    f"topics {partitions}: every service topic needs the same count "
                    "(a new deployment with kafka-timers migrate, docs/operations.md)",
                )
            )
            continue
        described = configs.get(name, {})
        if name == settings.changelog_topic:
            fatal = changelog_not_compacted(settings, described)
            if fatal is not None:
                checks.append(Check(Status.MISSING, what, fatal))
                continue
        differs = [
            f"{key}={described[key]} (the service creates it with {value}: "
            f"{fix_command(settings, name, f'{key}={value}')})"
            for key, value in spec_config.items()
            if key in described and described[key] != value
        ]
        if differs:
            checks.append(Check(Status.MISSING, what, "; ".join(differs)))
        else:
            checks.append(
                Check(
                    Status.OK, what, f"{have} partition(s), configuration as the service creates it"
                )
            )
    for name in _literal(callback_topics):
        what = f"callback topic {name}"
        if name in existing:
            checks.append(Check(Status.OK, what, f"{existing[name]} partition(s)"))
        else:
            checks.append(
                Check(
                    Status.MISSING,
                    what,
                    "does not exist, and the worker never "
                    "creates one (a timer to it is dead-lettered unknown_topic): "
                    f"kafka-topics --bootstrap-server {settings.bootstrap_servers} "
                    f"--command-config admin.properties --create --topic {name}",
                )
            )
    return checks


#: The operations a broker reports, by resource: ``None`` where it did not say.
Authorized = Mapping[tuple[str, str], frozenset[str] | None]


def judge_permissions(grants_needed: Sequence[Grant], authorized: Authorized) -> list[Check]:
    """One check per grant, from the operations the broker says the principal may do.

    ``ALL`` covers every operation; ``READ``, ``WRITE`` and ``DELETE`` imply
    ``DESCRIBE``, as Kafka's authorizer has it; ``ALTER_CONFIGS`` implies
    ``DESCRIBE_CONFIGS``. Pure."""
    checks = []
    for grant in grants_needed:
        what = f"{'+'.join(grant.operations)} on {grant.resource} {grant.name}"
        if grant.pattern == "prefixed":
            checks.append(
                Check(
                    Status.UNKNOWN,
                    what + "*",
                    "a prefix: check one of its topics with --callback-topic",
                )
            )
            continue
        allowed = authorized.get((grant.resource, grant.name))
        if allowed is None:
            checks.append(
                Check(
                    Status.UNKNOWN,
                    what,
                    "not reported by this broker (no authorizer?): check the ACLs of "
                    "docs/deploy.md by hand",
                )
            )
            continue
        lacking = [op for op in grant.operations if not _implied(op, allowed)]
        if lacking:
            checks.append(
                Check(
                    Status.MISSING,
                    what,
                    f"not allowed: {', '.join(lacking)} "
                    f"({grant.why}); see docs/deploy.md, Permissions",
                )
            )
        else:
            checks.append(Check(Status.OK, what, grant.why))
    return checks


def _implied(operation: str, allowed: frozenset[str]) -> bool:
    if operation in allowed or "ALL" in allowed:
        return True
    if operation == "DESCRIBE":
        return bool(allowed & {"READ", "WRITE", "DELETE", "ALTER"})
    if operation == "DESCRIBE_CONFIGS":
        return "ALTER_CONFIGS" in allowed
    return False


def _names(operations: Iterable[object] | None) -> frozenset[str] | None:
    if operations is None:
        return None
    return frozenset(getattr(op, "name", str(op)) for op in operations)


def run_preflight(
    settings: Settings,
    role: str,
    callback_topics: Sequence[str] = (),
    timeout: float = 15.0,
) -> list[Check]:
    """Every check for ``role`` against the cluster ``settings`` name.

    Raises:
        BrokerUnavailable: no broker answered within ``timeout``.
    """
    from confluent_kafka import KafkaException, TopicCollection
    from confluent_kafka.admin import AdminClient

    from app.kafka.topics import _admin, describe_topic_configs, wait_for_broker

    wait_for_broker(settings, timeout)
    admin: AdminClient = _admin(settings)
    try:
        listed = admin.list_topics(timeout=timeout).topics
    except KafkaException as exc:
        raise BrokerUnavailable(f"listing the broker's topics: {exc}") from exc
    existing = {
        name: len(info.partitions)
        for name, info in listed.items()
        if info.error is None and info.partitions
    }
    needed = grants(settings, role, callback_topics)
    wanted = [n for n in role_topics(settings, role) if n in existing]
    try:
        configs = describe_topic_configs(settings, wanted, timeout)
    except Exception as exc:  # a principal without DescribeConfigs: judged below
        configs = {}
        config_error: str | None = str(exc).splitlines()[0][:200]
    else:
        config_error = None
    checks = judge_topics(settings, role, existing, configs, callback_topics)
    if config_error is not None:
        checks.append(
            Check(
                Status.MISSING,
                "topic configurations",
                f"cannot describe them ({config_error}): grant DESCRIBE_CONFIGS",
            )
        )
    authorized: dict[tuple[str, str], frozenset[str] | None] = {}
    topics = [g.name for g in needed if g.resource == "topic" and g.name in existing]
    if topics:
        futures = admin.describe_topics(
            TopicCollection(topics),
            include_authorized_operations=True,
            request_timeout=timeout,
        )
        for name, future in futures.items():
            try:
                described = future.result(timeout)
            except (KafkaException, concurrent.futures.TimeoutError):
                authorized[("topic", name)] = None
                continue
            authorized[("topic", name)] = _names(described.authorized_operations)
    groups = [g.name for g in needed if g.resource == "group"]
    if groups:
        for name, future in admin.describe_consumer_groups(
            groups, include_authorized_operations=True, request_timeout=timeout
        ).items():
            try:
                authorized[("group", name)] = _names(future.result(timeout).authorized_operations)
            except (KafkaException, concurrent.futures.TimeoutError):
                authorized[("group", name)] = None
    if any(g.resource == "cluster" for g in needed):
        try:
            cluster = admin.describe_cluster(
                include_authorized_operations=True, request_timeout=timeout
            ).result(timeout)
            authorized[("cluster", "kafka-cluster")] = _names(cluster.authorized_operations)
        except (KafkaException, concurrent.futures.TimeoutError):
            authorized[("cluster", "kafka-cluster")] = None
    present = [
        g for g in needed if g.resource != "topic" or g.name in existing or g.pattern == "prefixed"
    ]
    checks += judge_permissions(present, authorized)
    return checks


@dataclass
class Summary:
    """How many checks of each status."""

    counts: dict[Status, int] = field(default_factory=dict)

    @classmethod
    def of(cls, checks: Iterable[Check]) -> Summary:
        summary = cls({status: 0 for status in Status})
        for check in checks:
            summary.counts[check.status] += 1
        return summary

    @property
    def exit_status(self) -> int:
        """0 when nothing is missing, 1 when something is."""
        return 1 if self.counts[Status.MISSING] else 0

    def line(self) -> str:
        ok, missing, unknown = (self.counts[s] for s in Status)
        verdict = "ready" if not missing else f"{missing} to fix before deploying"
        return f"preflight: {ok} ok, {missing} missing, {unknown} not testable here: {verdict}"
