"""Settings: built once at each entry point from the environment, then passed down.

No other module reads ``os.environ``. Every variable has the prefix ``KAFKA_TIMERS_``
except the two names operators already know: ``KAFKA_BOOTSTRAP_SERVERS`` and
``METRICS_PORT``.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from app.core.errors import ConfigurationError, RejectedRequest
from app.core.late import DEFAULT_POLICY, LatePolicy
from app.core.policy import RequestPolicy

__all__ = ["SecuritySettings", "Settings", "TopicNames"]

PREFIX = "KAFKA_TIMERS_"
#: Name of the worker's Faust table of timers; its changelog is named after it.
TABLE_NAME = "timers"
TEN_YEARS = 10 * 365 * 86400 + 3 * 86400
#: Partitions of the topics the service creates when nothing says otherwise.
DEFAULT_PARTITIONS = 8
#: How long fired and cancelled ids are remembered by default (7 days).
SEVEN_DAYS = 7 * 86400
#: Longest tick fetch wait accepted (ms): well inside the consumer's request timeout.
MAX_TICK_FETCH_WAIT_MS = 10_000


@dataclass(frozen=True)
class TopicNames:
    """The service's own topics; all created with the same partition count."""

    #: Ticks from the oscillators, one per second per partition.
    ticks: str = "oscillator"
    #: Timer requests (schedule, reschedule, cancel) from users.
    requests: str = "timer-request"
    #: One JSON audit record per fire and per cancel outcome.
    fired: str = "timer-fired"
    #: Rejected requests, with the original bytes and a reason header.
    dlq: str = "timer-request-dlq"

    def all(self) -> tuple[str, ...]:
        return (self.ticks, self.requests, self.fired, self.dlq)


@dataclass(frozen=True)
class SecuritySettings:
    """TLS/SASL for real clusters, for both Kafka clients (see :mod:`app.kafka.config`)."""

    #: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL.
    protocol: str = "PLAINTEXT"
    #: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (with a SASL protocol).
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = None
    #: CA bundle to verify the brokers (default: the system store).
    ssl_cafile: str | None = None
    #: Client certificate and key for mutual TLS.
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None


@dataclass(frozen=True)
class Settings:
    """Everything a kafka-timers process needs to know."""

    #: Kafka bootstrap address, ``host:port[,host:port]``.
    bootstrap_servers: str = "127.0.0.1:9092"
    #: Partition count of every service topic (and the table changelog); ``None`` when
    #: ``KAFKA_TIMERS_PARTITIONS`` is unset: each entry point then adopts the request
    #: topic's count if it exists, else :data:`DEFAULT_PARTITIONS`
    #: (:func:`app.kafka.topics.resolve_partitions`).
    partitions: int | None = None
    #: Replication factor for the topics the service creates.
    replication_factor: int = 1
    topics: TopicNames = field(default_factory=TopicNames)
    #: Faust app id: consumer group of the workers and prefix of their changelog topics.
    app_id: str = "kafka-timers"
    #: Name of this worker or oscillator in logs, metrics and fired records.
    worker_id: str = field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}")
    #: Where this worker keeps its RocksDB files (one directory per worker process).
    data_dir: str = ".kafka-timers/worker"
    #: Port of the worker's Faust web server (status page).
    web_port: int = 6066
    #: Address the worker's web server listens on (``127.0.0.1``: this host only).
    web_bind: str = "0.0.0.0"
    #: Port of the Prometheus ``/metrics`` endpoint; ``None`` disables it.
    metrics_port: int | None = None
    #: Address the ``/metrics`` endpoint listens on.
    metrics_bind: str = "0.0.0.0"
    #: Regexes a callback topic must match (default: anything not always refused).
    callback_allow: tuple[str, ...] = (".*",)
    #: Largest callback value accepted, bytes.
    max_payload_bytes: int = 1024 * 1024
    #: Furthest a due time may be in the future, seconds.
    horizon_seconds: int = TEN_YEARS
    #: Consumer-group session timeout, seconds: how long a killed worker's partitions
    #: wait before a survivor takes them over. 6 s is the shortest a stock Apache Kafka
    #: broker accepts (``group.min.session.timeout.ms``); see README, Operations.
    session_timeout: float = 6.0
    #: Consumer-group heartbeat interval, seconds.
    heartbeat_interval: float = 1.0
    #: Longest a worker's fetch of ticks waits at the broker when none has come, in
    #: milliseconds. Each fetch waits at most until the next second boundary, and only
    #: 10 ms while a tick is due (:mod:`app.core.fetch_pacing`), so on any broker a tick
    #: waits for a fetch about 10 ms at most; the longer this, the fewer fetches an idle
    #: worker makes (3-4 a second at 500).
    tick_fetch_wait_ms: int = 500
    #: Exactly-once firing through Kafka transactions (needs broker support).
    exactly_once: bool = False
    #: Clock skew against broker timestamps that is logged as a warning, seconds.
    clock_skew_warn_seconds: float = 2.0
    #: How far ahead of the worker's clock a tick may be and still fire at once, seconds.
    #: A tick from further ahead waits until the worker's clock reaches its second
    #: minus this (see :mod:`app.core.tick_gate`): 0 means never before the worker's
    #: own clock says the second has come.
    tick_tolerance_seconds: float = 0.0
    #: ``/livez`` fails when work is this many seconds overdue: a worker holding timers
    #: due longer ago than this with no tick processed for as long, or an oscillator
    #: that sent no tick for as long (see docs/operations.md, Health endpoints).
    liveness_timeout: float = 30.0
    #: The late-fire policy of every timer that does not name its own (or names only
    #: half): ``fire`` or ``skip-after <duration>``, and ``coalesce`` or ``all``.
    late_policy: str = DEFAULT_POLICY.text()
    security: SecuritySettings = field(default_factory=SecuritySettings)
    #: How long a fired or cancelled timer id is remembered, seconds: a redelivered
    #: request or an early cancel within it is recognised; after it, the id is removed
    #: from the table and its changelog.
    remember_seconds: int = SEVEN_DAYS

    @property
    def partition_count(self) -> int:
        """:attr:`partitions` once resolved; raise if an entry point forgot to resolve it."""
        if self.partitions is None:
            raise ConfigurationError(
                "partition count not resolved: call app.kafka.topics.resolve_partitions first"
            )
        return self.partitions

    def default_late_policy(self) -> LatePolicy:
        """:attr:`late_policy` read, with what it leaves out from the built-in default."""
        try:
            return LatePolicy.parse(self.late_policy).over(DEFAULT_POLICY)
        except RejectedRequest as exc:
            raise ConfigurationError(f"{PREFIX}LATE_POLICY: {exc.detail}") from exc

    @property
    def request_group(self) -> str:
        """The consumer group the workers commit applied request offsets to.

        Informational, for ``kafka-consumer-groups --describe``, Burrow and lag
        exporters: where to resume is kept in the table. No worker ever joins it (Kafka
        refuses an offset commit from a non-member to a group that has members, and the
        workers' own group, :attr:`app_id`, has them), so it stays Empty.
        """
        return f"{self.app_id}-requests"

    @property
    def changelog_topic(self) -> str:
        """The timer table's changelog topic (the name Faust gives it)."""
        return f"{self.app_id}-{TABLE_NAME}-changelog"

    def request_policy(self) -> RequestPolicy:
        """The rules the workers apply to requests (the audit and tests apply the same)."""
        return RequestPolicy.build(
            allow_patterns=self.callback_allow,
            own_topics=(*self.topics.all(), self.changelog_topic),
            app_id=self.app_id,
            max_payload_bytes=self.max_payload_bytes,
            horizon_seconds=self.horizon_seconds,
        )

    def with_overrides(self, **changes: Any) -> Settings:
        """A copy with some fields changed (CLI flags win over the environment)."""
        return replace(self, **{k: v for k, v in changes.items() if v is not None})

    def to_env(self) -> dict[str, str]:
        """The environment from which :meth:`from_env` rebuilds these settings (for children)."""
        env = {
            "KAFKA_BOOTSTRAP_SERVERS": self.bootstrap_servers,
            PREFIX + "REPLICATION_FACTOR": str(self.replication_factor),
            PREFIX + "TICK_TOPIC": self.topics.ticks,
            PREFIX + "REQUEST_TOPIC": self.topics.requests,
            PREFIX + "FIRED_TOPIC": self.topics.fired,
            PREFIX + "DLQ_TOPIC": self.topics.dlq,
            PREFIX + "APP_ID": self.app_id,
            PREFIX + "WORKER_ID": self.worker_id,
            PREFIX + "DATA_DIR": self.data_dir,
            PREFIX + "WEB_PORT": str(self.web_port),
            PREFIX + "WEB_BIND": self.web_bind,
            PREFIX + "METRICS_BIND": self.metrics_bind,
            PREFIX + "CALLBACK_ALLOW": ",".join(self.callback_allow),
            PREFIX + "MAX_PAYLOAD_BYTES": str(self.max_payload_bytes),
            PREFIX + "HORIZON_SECONDS": str(self.horizon_seconds),
            PREFIX + "SESSION_TIMEOUT": str(self.session_timeout),
            PREFIX + "HEARTBEAT_INTERVAL": str(self.heartbeat_interval),
            PREFIX + "TICK_FETCH_WAIT_MS": str(self.tick_fetch_wait_ms),
            PREFIX + "EXACTLY_ONCE": "true" if self.exactly_once else "false",
            PREFIX + "CLOCK_SKEW_WARN_SECONDS": str(self.clock_skew_warn_seconds),
            PREFIX + "TICK_TOLERANCE_SECONDS": str(self.tick_tolerance_seconds),
            PREFIX + "LIVENESS_TIMEOUT": str(self.liveness_timeout),
            PREFIX + "LATE_POLICY": self.late_policy,
            PREFIX + "SECURITY_PROTOCOL": self.security.protocol,
            PREFIX + "REMEMBER_SECONDS": str(self.remember_seconds),
        }
        if self.partitions is not None:
            env[PREFIX + "PARTITIONS"] = str(self.partitions)
        if self.metrics_port is not None:
            env["METRICS_PORT"] = str(self.metrics_port)
        optional = {
            "SASL_MECHANISM": self.security.sasl_mechanism,
            "SASL_USERNAME": self.security.sasl_username,
            "SASL_PASSWORD": self.security.sasl_password,
            "SSL_CAFILE": self.security.ssl_cafile,
            "SSL_CERTFILE": self.security.ssl_certfile,
            "SSL_KEYFILE": self.security.ssl_keyfile,
        }
        env.update({PREFIX + k: v for k, v in optional.items() if v is not None})
        return env

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Read settings from ``env`` (default ``os.environ``); raise on malformed values."""
        env = os.environ if env is None else env

        def get(name: str) -> str | None:
            value = env.get(PREFIX + name)
            return value if value not in (None, "") else None

        def number(name: str, kind: type[int] | type[float], default: Any) -> Any:
            raw = get(name)
            if raw is None:
                return default
            try:
                return kind(raw)
            except ValueError as exc:
                raise ConfigurationError(f"{PREFIX}{name}={raw!r} is not a number") from exc

        defaults = cls()
        topics = TopicNames(
            ticks=get("TICK_TOPIC") or TopicNames.ticks,
            requests=get("REQUEST_TOPIC") or TopicNames.requests,
            fired=get("FIRED_TOPIC") or TopicNames.fired,
            dlq=get("DLQ_TOPIC") or TopicNames.dlq,
        )
        metrics_raw = env.get("METRICS_PORT") or get("METRICS_PORT")
        try:
            metrics_port = int(metrics_raw) if metrics_raw else None
        except ValueError as exc:
            raise ConfigurationError(f"METRICS_PORT={metrics_raw!r} is not a port") from exc
        allow = get("CALLBACK_ALLOW")
        security = SecuritySettings(
            protocol=(get("SECURITY_PROTOCOL") or "PLAINTEXT").upper(),
            sasl_mechanism=(get("SASL_MECHANISM") or "").upper() or None,
            sasl_username=get("SASL_USERNAME"),
            sasl_password=get("SASL_PASSWORD"),
            ssl_cafile=get("SSL_CAFILE"),
            ssl_certfile=get("SSL_CERTFILE"),
            ssl_keyfile=get("SSL_KEYFILE"),
        )
        settings = cls(
            bootstrap_servers=env.get("KAFKA_BOOTSTRAP_SERVERS") or defaults.bootstrap_servers,
            partitions=number("PARTITIONS", int, defaults.partitions),
            replication_factor=number("REPLICATION_FACTOR", int, defaults.replication_factor),
            topics=topics,
            app_id=get("APP_ID") or defaults.app_id,
            worker_id=get("WORKER_ID") or defaults.worker_id,
            data_dir=get("DATA_DIR") or defaults.data_dir,
            web_port=number("WEB_PORT", int, defaults.web_port),
            web_bind=get("WEB_BIND") or defaults.web_bind,
            metrics_port=metrics_port,
            metrics_bind=get("METRICS_BIND") or defaults.metrics_bind,
            callback_allow=tuple(p for p in allow.split(",") if p) if allow else (".*",),
            max_payload_bytes=number("MAX_PAYLOAD_BYTES", int, defaults.max_payload_bytes),
            horizon_seconds=number("HORIZON_SECONDS", int, defaults.horizon_seconds),
            session_timeout=number("SESSION_TIMEOUT", float, defaults.session_timeout),
            heartbeat_interval=number("HEARTBEAT_INTERVAL", float, defaults.heartbeat_interval),
            tick_fetch_wait_ms=number("TICK_FETCH_WAIT_MS", int, defaults.tick_fetch_wait_ms),
            exactly_once=(get("EXACTLY_ONCE") or "false").lower() in ("1", "true", "yes"),
            clock_skew_warn_seconds=number(
                "CLOCK_SKEW_WARN_SECONDS", float, defaults.clock_skew_warn_seconds
            ),
            tick_tolerance_seconds=number(
                "TICK_TOLERANCE_SECONDS", float, defaults.tick_tolerance_seconds
            ),
            liveness_timeout=number("LIVENESS_TIMEOUT", float, defaults.liveness_timeout),
            late_policy=get("LATE_POLICY") or defaults.late_policy,
            security=security,
            remember_seconds=number("REMEMBER_SECONDS", int, defaults.remember_seconds),
        )
        if settings.partitions is not None and settings.partitions < 1:
            raise ConfigurationError(f"{PREFIX}PARTITIONS must be at least 1")
        if not 1 <= settings.tick_fetch_wait_ms <= MAX_TICK_FETCH_WAIT_MS:
            raise ConfigurationError(
                f"{PREFIX}TICK_FETCH_WAIT_MS must be from 1 to {MAX_TICK_FETCH_WAIT_MS} "
                "(milliseconds a fetch of ticks may wait at the broker)"
            )
        if settings.remember_seconds < 1:
            raise ConfigurationError(f"{PREFIX}REMEMBER_SECONDS must be at least 1")
        if not 0 <= settings.tick_tolerance_seconds < 60:
            raise ConfigurationError(
                f"{PREFIX}TICK_TOLERANCE_SECONDS must be from 0 to under 60 (seconds a tick "
                "may run ahead of the worker's clock)"
            )
        settings.default_late_policy()  # a typo is refused at start, not at the first fire
        _check_security(settings.security)
        return settings


SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


def _check_security(sec: SecuritySettings) -> None:
    """Refuse combinations that one of the two Kafka clients would misread or reject."""
    if sec.protocol not in PROTOCOLS:
        raise ConfigurationError(
            f"{PREFIX}SECURITY_PROTOCOL={sec.protocol!r}: use one of {', '.join(PROTOCOLS)}"
        )
    if sec.protocol.startswith("SASL"):
        mechanism = sec.sasl_mechanism or "PLAIN"
        if mechanism not in SASL_MECHANISMS:
            raise ConfigurationError(
                f"{PREFIX}SASL_MECHANISM={mechanism!r}: use one of {', '.join(SASL_MECHANISMS)}"
            )
        if not sec.sasl_username or not sec.sasl_password:
            raise ConfigurationError(
                f"{sec.protocol} needs {PREFIX}SASL_USERNAME and {PREFIX}SASL_PASSWORD"
            )
