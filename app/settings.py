"""Settings: built once at each entry point from the environment, then passed down.

No other module reads ``os.environ``. Every variable has the prefix ``KAFKA_TIMERS_``
except the names operators already know: ``KAFKA_BOOTSTRAP_SERVERS``, ``METRICS_PORT``
and OpenTelemetry's ``OTEL_EXPORTER_OTLP_ENDPOINT`` (the OpenTelemetry SDK, once tracing
is on, reads its own ``OTEL_*`` variables: headers, timeouts, batching).
"""

from __future__ import annotations

import ipaddress
import math
import os
import re
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from app.core.errors import ConfigurationError, KafkaTimersError
from app.core.late import DEFAULT_POLICY, LatePolicy
from app.core.policy import RequestPolicy, compile_topic_pattern, is_legal_topic
from app.core.wheel import DEFAULT_MAX_CANCELS_IN_ADVANCE
from kafka_timers_client.config import ClientConfig

__all__ = [
    "ENDPOINT_VARIABLES",
    "SecuritySettings",
    "Settings",
    "TopicNames",
    "default_demo_file",
    "parse_topic_rate_limits",
    "split_allow_list",
]

_T = TypeVar("_T")

PREFIX = "KAFKA_TIMERS_"
#: OpenTelemetry's own name for the collector's address (read as it is, no prefix).
OTLP_ENDPOINT = "OTEL_EXPORTER_OTLP_ENDPOINT"
#: Name of the worker's Faust table of timers; its changelog is named after it.
TABLE_NAME = "timers"
TEN_YEARS = 10 * 365 * 86400 + 3 * 86400
#: Partitions of the topics the service creates when nothing says otherwise.
DEFAULT_PARTITIONS = 8
#: How long fired and cancelled ids are remembered by default (7 days).
SEVEN_DAYS = 7 * 86400
#: Longest tick fetch wait accepted (ms): well inside the consumer's request timeout.
MAX_TICK_FETCH_WAIT_MS = 10_000
#: Longest horizon and remembering accepted, seconds (about 3,170 years each). Store
#: keys write seconds as 12 digits (:mod:`app.core.keys`): a due time is at most now +
#: horizon, and its id is forgotten at most remember seconds after that, so both stay
#: below 10**12 as long as the clock reads under 8 * 10**11 (the year 27000).
MAX_HORIZON_SECONDS = 10**11
MAX_REMEMBER_SECONDS = 10**11
#: librdkafka's default ``message.max.bytes``: the largest record its producer sends.
DEFAULT_MESSAGE_MAX_BYTES = 1_000_000
#: librdkafka's largest ``message.max.bytes``.
MAX_MESSAGE_MAX_BYTES = 1_000_000_000
#: Bytes of a record kept for everything but the callback value: its key, the timer's
#: id and token, the callback headers, and the changelog's layout of a stored timer
#: (its key and the packed fields around the value). The payload limit is the
#: producer's ``message.max.bytes`` less this.
RECORD_RESERVE_BYTES = 64 * 1024
#: Most partitions librdkafka accepts for a topic it creates.
MAX_PARTITIONS = 100_000
#: Largest replication factor the Kafka protocol carries (int16).
MAX_REPLICATION_FACTOR = 32_767
#: Longest consumer-group session timeout librdkafka accepts, seconds.
MAX_SESSION_TIMEOUT = 3600.0
#: Longest worker or oscillator id accepted (it is also part of a transactional id).
MAX_WORKER_ID_CHARS = 200
#: Longest app id: ``<app id>-timers-changelog`` must still be a legal topic name.
MAX_APP_ID_CHARS = 249 - len(f"-{TABLE_NAME}-changelog")
#: The variables that say where the service is. A command that may use the running
#: demo's addresses (``kafka-timers status``, ``get``, ``list``) does so only for those
#: not set (see :attr:`Settings.chosen`).
ENDPOINT_VARIABLES = ("KAFKA_BOOTSTRAP_SERVERS", PREFIX + "APP_ID", PREFIX + "WEB_PORT")


def default_demo_file(env: Mapping[str, str]) -> str:
    """Where the demo's addresses go when ``KAFKA_TIMERS_DEMO_FILE`` is unset: the user's
    runtime directory (per user, removed at logout, as systemd and XDG intend for such
    files), else their cache directory."""
    runtime = env.get("XDG_RUNTIME_DIR")
    if runtime:
        return os.path.join(runtime, "kafka-timers-demo.json")
    cache = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "kafka-timers", "demo.json")


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
    #: Most connections open to the web port at once; more are answered 503 and closed
    #: on the spot (see :mod:`app.worker.web_limits`).
    web_max_connections: int = 256
    #: Seconds a web connection may take to send a request's headers, or stay idle
    #: between requests, before it is closed.
    web_idle_timeout: float = 5.0
    #: Port of the Prometheus ``/metrics`` endpoint; ``None`` disables it.
    metrics_port: int | None = None
    #: Address the ``/metrics`` endpoint listens on.
    metrics_bind: str = "0.0.0.0"
    #: Patterns a callback topic must match in full (default: anything not always
    #: refused), RE2 syntax (no backreferences or lookaround: matching takes linear time).
    #: ``KAFKA_TIMERS_CALLBACK_ALLOW`` lists them separated by commas or whitespace
    #: (newlines too); a comma or whitespace inside ``[...]``, ``{...}`` or ``(...)``
    #: belongs to its pattern, and ``\,`` is a literal comma anywhere
    #: (:func:`split_allow_list`). So ``payments.*, orders-\d{1,3}`` is two patterns.
    callback_allow: tuple[str, ...] = (".*",)
    #: Patterns of topics callbacks may never go to, whatever the allow-list says, in the
    #: same syntax (``KAFKA_TIMERS_CALLBACK_DENY``): the operator's internal topics, on
    #: top of the ones refused by construction (:class:`~app.core.policy.RequestPolicy`).
    callback_deny: tuple[str, ...] = ()
    #: Largest callback value accepted, bytes. From the environment it defaults to
    #: :attr:`producer_message_max_bytes` less :data:`RECORD_RESERVE_BYTES` (934,464), and
    #: more than that is refused at start.
    max_payload_bytes: int = DEFAULT_MESSAGE_MAX_BYTES - RECORD_RESERVE_BYTES
    #: Furthest a due time may be in the future, seconds (1 to :data:`MAX_HORIZON_SECONDS`).
    horizon_seconds: int = TEN_YEARS
    #: ``message.max.bytes`` of the librdkafka producers: the largest record a worker
    #: writes (callback, changelog, DLQ), see :attr:`record_budget_bytes`. Raise it
    #: together with the broker's and the topics' ``max.message.bytes``.
    producer_message_max_bytes: int = DEFAULT_MESSAGE_MAX_BYTES
    #: Consumer-group session timeout, seconds: how long a killed worker's partitions
    #: wait before a survivor takes them over. 6 s is the shortest a stock Apache Kafka
    #: broker accepts (``group.min.session.timeout.ms``); see docs/operations.md, Failover.
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
    #: How far ahead of the worker's clock a tick may be held, seconds: a tick from
    #: further ahead is ignored and counted (``kafka_timers_ticks_ignored_total``).
    tick_max_ahead_seconds: float = 3600.0
    #: Most tick sources (oscillators) a worker tells apart in its metrics and clock
    #: checks; ticks from any further one count as ``other`` (see
    #: :mod:`app.core.tick_sources`).
    tick_max_sources: int = 64
    #: Seconds without a tick after which a worker forgets a source, labels included.
    tick_source_silence_seconds: float = 300.0
    #: ``/livez`` fails when work is this many seconds overdue: a worker holding timers
    #: due longer ago than this with no tick processed for as long, or an oscillator
    #: that sent no tick for as long (see docs/operations.md, Health endpoints).
    liveness_timeout: float = 30.0
    #: Seconds a worker's orderly stop (SIGTERM, SIGINT) may take before it exits
    #: regardless: with the broker away, Faust's stop waits on it (app.worker.stopping).
    stop_grace_seconds: float = 10.0
    #: Seconds a worker's changelog catch-up may go without reading a record or reaching
    #: a partition's end before it counts as stalled: the worker stays up and not ready,
    #: and retries with backoff (app.worker.partition_store.catch_up_until_done).
    catchup_stall_seconds: float = 60.0
    #: The late-fire policy of every timer that does not name its own (or names only
    #: half): ``fire`` or ``skip-after <duration>``, and ``coalesce`` or ``all``.
    late_policy: str = DEFAULT_POLICY.text()
    security: SecuritySettings = field(default_factory=SecuritySettings)
    #: How long a fired or cancelled timer id is remembered, seconds: a redelivered
    #: request or an early cancel within it is recognised; after it, the id is removed
    #: from the table and its changelog.
    remember_seconds: int = SEVEN_DAYS
    #: Most cancels for ids with no timer yet one partition remembers; past it a cancel in
    #: advance is answered ``not_remembered`` (see :mod:`app.core.wheel`).
    max_cancels_in_advance: int = DEFAULT_MAX_CANCELS_IN_ADVANCE
    #: Callback topics with a ``callback_topic`` label of their own in
    #: ``kafka_timers_fired_total`` (the first this many a worker delivers to; the rest
    #: count as ``other``): a label value per topic name would grow without bound.
    max_topic_labels: int = 100
    #: OpenTelemetry's ``OTEL_EXPORTER_OTLP_ENDPOINT``: the base URL of an OTLP/HTTP
    #: collector (spans go to ``<it>/v1/traces``). Set: the worker records a span per
    #: schedule and per fire (app/worker/tracing.py); unset: no tracing at all.
    otlp_endpoint: str | None = None
    #: The operator's credential for the routes that say which timers exist
    #: (``/timers/next``, ``/timers/<id>``): sent as ``Authorization: Bearer <token>``.
    #: Unset, those routes are off (403); ``/status``, ``/livez``, ``/readyz`` and
    #: ``/metrics`` never need it.
    operator_token: str | None = field(default=None, repr=False)
    #: The deployment's control secret (``KAFKA_TIMERS_CONTROL_SECRET``, at least 16
    #: printable ASCII characters): the CLI signs every control record with it (pause,
    #: resume, rate, cancel-bulk) and every worker applies only records it signed
    #: (:mod:`app.core.control`). Unset, a worker ignores the whole control topic (and
    #: says so as it starts) and the CLI's control commands refuse to run: an unsigned
    #: record is never applied. Every worker and operator of one deployment share it.
    control_secret: str | None = field(default=None, repr=False)
    #: Rate limits per callback topic, callbacks per second across the whole service
    #: (``KAFKA_TIMERS_TOPIC_RATE_LIMITS="reminders=500/s,billing=50/s"``, also ``/m`` and
    #: ``/h``): see :mod:`app.worker.topic_gates`.
    topic_rate_limits: tuple[tuple[str, float], ...] = ()
    #: Where ``kafka-timers demo`` writes the addresses of its stack (workers, broker)
    #: and where ``status``, ``get`` and ``list`` look for them when told nothing else
    #: (``KAFKA_TIMERS_DEMO_FILE``; by default ``$XDG_RUNTIME_DIR/kafka-timers-demo.json``,
    #: else ``~/.cache/kafka-timers/demo.json``: a per-user place, not the working
    #: directory, so another shell finds it from anywhere).
    demo_file: str = field(default_factory=lambda: default_demo_file(os.environ))
    #: The variables among :data:`ENDPOINT_VARIABLES` that the environment or a flag
    #: set: a command that may fall back on the demo's addresses keeps those it was given.
    chosen: frozenset[str] = field(default=frozenset(), compare=False, repr=False)

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
        except KafkaTimersError as exc:
            detail = getattr(exc, "detail", str(exc))
            raise ConfigurationError(f"{PREFIX}LATE_POLICY: {_cut(detail)}") from exc
        except (ValueError, ArithmeticError) as exc:  # e.g. a skip-after too long for a float
            raise ConfigurationError(
                f"{PREFIX}LATE_POLICY={_shown(self.late_policy)} cannot be read "
                f"({type(exc).__name__})"
            ) from exc

    @property
    def record_budget_bytes(self) -> int:
        """The largest record (key, value and headers) the worker's producer can send.

        A record above it is refused by librdkafka before it leaves the process: the
        request path should refuse a request whose records would not fit.
        """
        return self.producer_message_max_bytes

    def client_config(self) -> ClientConfig:
        """What a :class:`kafka_timers_client.TimerClient` (and every librdkafka client of
        the service) needs of these settings: the broker, the topics, the credentials."""
        sec = self.security
        return ClientConfig(
            bootstrap_servers=self.bootstrap_servers,
            request_topic=self.topics.requests,
            fired_topic=self.topics.fired,
            security_protocol=sec.protocol,
            sasl_mechanism=sec.sasl_mechanism,
            sasl_username=sec.sasl_username,
            sasl_password=sec.sasl_password,
            ssl_cafile=sec.ssl_cafile,
            ssl_certfile=sec.ssl_certfile,
            ssl_keyfile=sec.ssl_keyfile,
            message_max_bytes=self.record_budget_bytes,
            session_timeout=self.session_timeout,
            heartbeat_interval=self.heartbeat_interval,
        )

    @property
    def payload_limit_ceiling(self) -> int:
        """The largest :attr:`max_payload_bytes` accepted with this record budget."""
        return self.record_budget_bytes - RECORD_RESERVE_BYTES

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
            deny_patterns=self.callback_deny,
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
            PREFIX + "WEB_MAX_CONNECTIONS": str(self.web_max_connections),
            PREFIX + "WEB_IDLE_TIMEOUT": str(self.web_idle_timeout),
            PREFIX + "METRICS_BIND": self.metrics_bind,
            PREFIX + "CALLBACK_ALLOW": ",".join(self.callback_allow),
            PREFIX + "CALLBACK_DENY": ",".join(self.callback_deny),
            PREFIX + "MAX_PAYLOAD_BYTES": str(self.max_payload_bytes),
            PREFIX + "HORIZON_SECONDS": str(self.horizon_seconds),
            PREFIX + "PRODUCER_MESSAGE_MAX_BYTES": str(self.producer_message_max_bytes),
            PREFIX + "SESSION_TIMEOUT": str(self.session_timeout),
            PREFIX + "HEARTBEAT_INTERVAL": str(self.heartbeat_interval),
            PREFIX + "TICK_FETCH_WAIT_MS": str(self.tick_fetch_wait_ms),
            PREFIX + "EXACTLY_ONCE": "true" if self.exactly_once else "false",
            PREFIX + "CLOCK_SKEW_WARN_SECONDS": str(self.clock_skew_warn_seconds),
            PREFIX + "TICK_TOLERANCE_SECONDS": str(self.tick_tolerance_seconds),
            PREFIX + "TICK_MAX_AHEAD_SECONDS": str(self.tick_max_ahead_seconds),
            PREFIX + "TICK_MAX_SOURCES": str(self.tick_max_sources),
            PREFIX + "TICK_SOURCE_SILENCE_SECONDS": str(self.tick_source_silence_seconds),
            PREFIX + "LIVENESS_TIMEOUT": str(self.liveness_timeout),
            PREFIX + "STOP_GRACE_SECONDS": str(self.stop_grace_seconds),
            PREFIX + "CATCHUP_STALL_SECONDS": str(self.catchup_stall_seconds),
            PREFIX + "LATE_POLICY": self.late_policy,
            PREFIX + "DEMO_FILE": self.demo_file,
            **({PREFIX + "OPERATOR_TOKEN": self.operator_token} if self.operator_token else {}),
            **({PREFIX + "CONTROL_SECRET": self.control_secret} if self.control_secret else {}),
            PREFIX + "SECURITY_PROTOCOL": self.security.protocol,
            PREFIX + "REMEMBER_SECONDS": str(self.remember_seconds),
            PREFIX + "MAX_CANCELS_IN_ADVANCE": str(self.max_cancels_in_advance),
            PREFIX + "MAX_TOPIC_LABELS": str(self.max_topic_labels),
            PREFIX + "TOPIC_RATE_LIMITS": ",".join(
                f"{topic}={f'{rate:.12f}'.rstrip('0').rstrip('.')}/s"
                for topic, rate in self.topic_rate_limits
            ),
        }
        if self.partitions is not None:
            env[PREFIX + "PARTITIONS"] = str(self.partitions)
        if self.metrics_port is not None:
            env["METRICS_PORT"] = str(self.metrics_port)
        if self.otlp_endpoint is not None:
            env[OTLP_ENDPOINT] = self.otlp_endpoint
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
    def from_env_and_flags(cls, flags: Mapping[str, tuple[str, object | None]]) -> Settings:
        """:meth:`from_env` with command-line flags over the environment, each checked as
        its variable is: ``flags`` maps a variable to ``(flag name, value or None)``. A bad
        flag is one line naming the flag, as a bad variable names the variable."""
        given = {var: (flag, value) for var, (flag, value) in flags.items() if value is not None}
        env = {**os.environ, **{var: str(value) for var, (_, value) in given.items()}}
        try:
            return cls.from_env(env)
        except ConfigurationError as exc:
            message = str(exc)
            for var, (flag, _) in given.items():
                if message.startswith(f"{var}="):
                    raise ConfigurationError(flag + message[len(var) :]) from exc
            raise

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Read settings from ``env`` (default ``os.environ``).

        Every malformed or out-of-range value raises :class:`ConfigurationError` with a
        one-line message naming its variable; nothing else escapes.
        """
        env = os.environ if env is None else env
        read = _Reader(env)
        defaults = cls()

        partitions = read.integer("PARTITIONS", None, 1, MAX_PARTITIONS, "topic partitions")
        topics = TopicNames(
            ticks=read.topic("TICK_TOPIC", TopicNames.ticks),
            requests=read.topic("REQUEST_TOPIC", TopicNames.requests),
            fired=read.topic("FIRED_TOPIC", TopicNames.fired),
            dlq=read.topic("DLQ_TOPIC", TopicNames.dlq),
        )
        _check_distinct(topics)
        session_timeout = read.real(
            "SESSION_TIMEOUT", defaults.session_timeout, 0.001, MAX_SESSION_TIMEOUT, "seconds"
        )
        heartbeat = read.real(
            "HEARTBEAT_INTERVAL", defaults.heartbeat_interval, 0.001, MAX_SESSION_TIMEOUT, "s"
        )
        if heartbeat >= session_timeout:
            raise ConfigurationError(
                f"{PREFIX}HEARTBEAT_INTERVAL={heartbeat:g} must be shorter than "
                f"{PREFIX}SESSION_TIMEOUT={session_timeout:g} (seconds)"
            )
        budget = read.integer(
            "PRODUCER_MESSAGE_MAX_BYTES",
            defaults.producer_message_max_bytes,
            RECORD_RESERVE_BYTES + 1,
            MAX_MESSAGE_MAX_BYTES,
            f"bytes: librdkafka's message.max.bytes, more than the {RECORD_RESERVE_BYTES} "
            "reserved for a record's key, id, token and headers",
        )
        ceiling = budget - RECORD_RESERVE_BYTES
        max_payload = read.integer(
            "MAX_PAYLOAD_BYTES",
            ceiling,
            0,
            ceiling,
            f"bytes: the producer's message.max.bytes {budget} less {RECORD_RESERVE_BYTES} "
            f"kept for the record's key, id, token, headers and changelog layout; raise "
            f"{PREFIX}PRODUCER_MESSAGE_MAX_BYTES for more",
        )
        security = SecuritySettings(
            protocol=(read.text("SECURITY_PROTOCOL") or "PLAINTEXT").upper(),
            sasl_mechanism=(read.text("SASL_MECHANISM") or "").upper() or None,
            sasl_username=read.text("SASL_USERNAME"),
            sasl_password=read.text("SASL_PASSWORD"),
            ssl_cafile=read.file("SSL_CAFILE"),
            ssl_certfile=read.file("SSL_CERTFILE"),
            ssl_keyfile=read.file("SSL_KEYFILE"),
        )
        settings = cls(
            bootstrap_servers=read.bootstrap(defaults.bootstrap_servers),
            partitions=partitions,
            replication_factor=read.integer(
                "REPLICATION_FACTOR",
                defaults.replication_factor,
                1,
                MAX_REPLICATION_FACTOR,
                "replicas of each topic the service creates",
            ),
            topics=topics,
            app_id=read.app_id(defaults.app_id),
            worker_id=read.name("WORKER_ID", defaults.worker_id, MAX_WORKER_ID_CHARS),
            data_dir=read.directory("DATA_DIR", defaults.data_dir),
            web_port=read.integer("WEB_PORT", defaults.web_port, 1, 65535, "a TCP port"),
            web_bind=read.address("WEB_BIND", defaults.web_bind),
            web_max_connections=read.integer(
                "WEB_MAX_CONNECTIONS",
                defaults.web_max_connections,
                1,
                100_000,
                "connections open to the web port at once",
            ),
            web_idle_timeout=read.real(
                "WEB_IDLE_TIMEOUT", defaults.web_idle_timeout, 0.1, 3600.0, "seconds"
            ),
            metrics_port=read.metrics_port(),
            metrics_bind=read.address("METRICS_BIND", defaults.metrics_bind),
            callback_allow=read.allow_list(defaults.callback_allow),
            callback_deny=read.allow_list(defaults.callback_deny, "CALLBACK_DENY"),
            max_payload_bytes=max_payload,
            horizon_seconds=read.integer(
                "HORIZON_SECONDS",
                defaults.horizon_seconds,
                1,
                MAX_HORIZON_SECONDS,
                "seconds; store keys hold 12-digit seconds",
            ),
            producer_message_max_bytes=budget,
            session_timeout=session_timeout,
            heartbeat_interval=heartbeat,
            tick_fetch_wait_ms=read.integer(
                "TICK_FETCH_WAIT_MS",
                defaults.tick_fetch_wait_ms,
                1,
                MAX_TICK_FETCH_WAIT_MS,
                "milliseconds a fetch of ticks may wait at the broker",
            ),
            exactly_once=read.boolean("EXACTLY_ONCE", defaults.exactly_once),
            clock_skew_warn_seconds=read.real(
                "CLOCK_SKEW_WARN_SECONDS", defaults.clock_skew_warn_seconds, 0, None, "seconds"
            ),
            tick_tolerance_seconds=read.real(
                "TICK_TOLERANCE_SECONDS",
                defaults.tick_tolerance_seconds,
                0,
                60,
                "seconds a tick may run ahead of the worker's clock",
                below_high=True,
            ),
            tick_max_ahead_seconds=read.real(
                "TICK_MAX_AHEAD_SECONDS",
                defaults.tick_max_ahead_seconds,
                60,
                MAX_HORIZON_SECONDS,
                "seconds ahead of the worker's clock a tick may be held",
            ),
            tick_max_sources=read.integer(
                "TICK_MAX_SOURCES",
                defaults.tick_max_sources,
                1,
                10_000,
                "tick sources told apart in metrics",
            ),
            tick_source_silence_seconds=read.real(
                "TICK_SOURCE_SILENCE_SECONDS",
                defaults.tick_source_silence_seconds,
                1,
                MAX_HORIZON_SECONDS,
                "seconds without a tick before a source is forgotten",
            ),
            liveness_timeout=read.real(
                "LIVENESS_TIMEOUT", defaults.liveness_timeout, 0.001, None, "seconds"
            ),
            stop_grace_seconds=read.real(
                "STOP_GRACE_SECONDS",
                defaults.stop_grace_seconds,
                1,
                3600,
                "seconds an orderly stop may take",
            ),
            catchup_stall_seconds=read.real(
                "CATCHUP_STALL_SECONDS",
                defaults.catchup_stall_seconds,
                0.5,
                86400,
                "seconds a changelog catch-up may make no progress before it is retried",
            ),
            late_policy=read.text("LATE_POLICY") or defaults.late_policy,
            otlp_endpoint=read.url(OTLP_ENDPOINT),
            demo_file=read.text("DEMO_FILE") or default_demo_file(env),
            chosen=frozenset(name for name in ENDPOINT_VARIABLES if env.get(name)),
            operator_token=read.secret("OPERATOR_TOKEN"),
            control_secret=read.secret("CONTROL_SECRET"),
            security=security,
            remember_seconds=read.integer(
                "REMEMBER_SECONDS",
                defaults.remember_seconds,
                1,
                MAX_REMEMBER_SECONDS,
                "seconds; store keys hold 12-digit seconds",
            ),
            max_cancels_in_advance=read.integer(
                "MAX_CANCELS_IN_ADVANCE",
                defaults.max_cancels_in_advance,
                0,
                10**9,
                "cancels remembered per partition for ids with no timer yet",
            ),
            max_topic_labels=read.integer(
                "MAX_TOPIC_LABELS",
                defaults.max_topic_labels,
                0,
                100_000,
                "callback topics with a metric label of their own",
            ),
            topic_rate_limits=read.rate_limits("TOPIC_RATE_LIMITS"),
        )
        settings.default_late_policy()  # a typo is refused at start, not at the first fire
        _check_security(settings.security)
        settings.request_policy()  # compiles the allow-list: RE2 refusals stop the start
        return settings


#: Highest rate limit accepted, callbacks per second (far above what a worker delivers).
MAX_TOPIC_RATE = 10_000_000.0
_RATE_ITEM = re.compile(
    r"^(?P<topic>[^=\s]+)\s*=\s*(?P<rate>[0-9]+(?:\.[0-9]+)?)\s*/\s*(?P<unit>[smh])$"
)
_RATE_UNIT_SECONDS = {"s": 1.0, "m": 60.0, "h": 3600.0}


def parse_topic_rate_limits(text: str) -> dict[str, float]:
    """Read ``topic=500/s,other=50/s`` (also ``/m``, ``/h``) into callbacks per second.

    Raises ``ValueError`` with a one-line reason for anything else: no ``=`` or unit, a
    name that is no legal topic, a rate of 0 (pause the topic instead) or above
    :data:`MAX_TOPIC_RATE`, a topic named twice.
    """
    limits: dict[str, float] = {}
    for raw in text.split(","):
        item = raw.strip()
        if not item:
            continue
        match = _RATE_ITEM.match(item)
        if match is None:
            raise ValueError(
                f"{item[:100]!r} is not <topic>=<rate>/s (or /m, /h), e.g. reminders=500/s"
            )
        topic = match["topic"]
        if not is_legal_topic(topic):
            raise ValueError(f"{topic[:100]!r} is not a legal topic name")
        per_second = float(match["rate"]) / _RATE_UNIT_SECONDS[match["unit"]]
        if not 0 < per_second <= MAX_TOPIC_RATE:
            raise ValueError(
                f"{item[:100]!r}: the rate must be above 0 and at most {MAX_TOPIC_RATE:,.0f}/s"
                " (a topic that must get nothing is paused, not limited to 0)"
            )
        if topic in limits:
            raise ValueError(f"topic {topic!r} is named twice")
        limits[topic] = per_second
    return limits


def split_allow_list(text: str) -> tuple[str, ...]:
    """The patterns of ``KAFKA_TIMERS_CALLBACK_ALLOW``, in order.

    Commas and whitespace (newlines included) separate patterns, except inside a
    character class ``[...]`` or a group ``(...)`` or a repetition ``{...}``, and except
    escaped with a backslash (``\\,``, which RE2 reads as a literal comma). A pattern
    keeps its text exactly, escapes included, so ``a,b`` is ``a`` and ``b``, while
    ``orders-\\d{1,3}`` and ``[a-z,]+`` are one pattern each. Topic names never contain
    a comma or whitespace, so no pattern needs one at its top level.
    """
    patterns: list[str] = []
    current: list[str] = []
    depth = 0  # open ( and { outside a class
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "\\" and i + 1 < n:
            current.append(text[i : i + 2])
            i += 2
            continue
        if c == "[":
            end = _class_end(text, i)
            current.append(text[i:end])
            i = end
            continue
        if c in "({":
            depth += 1
        elif c in ")}":
            depth = max(depth - 1, 0)
        elif depth == 0 and (c == "," or c.isspace()):
            if current:
                patterns.append("".join(current))
                current = []
            i += 1
            continue
        current.append(c)
        i += 1
    if current:
        patterns.append("".join(current))
    return tuple(patterns)


SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


def _check_security(sec: SecuritySettings) -> None:
    """Refuse combinations that one of the two Kafka clients would misread or reject."""
    if sec.protocol not in PROTOCOLS:
        raise ConfigurationError(
            f"{PREFIX}SECURITY_PROTOCOL={sec.protocol!r}: use one of {', '.join(PROTOCOLS)}"
        )
    # Checked whatever the protocol: an unsupported mechanism is a mistake even unused.
    if sec.sasl_mechanism is not None and sec.sasl_mechanism not in SASL_MECHANISMS:
        raise ConfigurationError(
            f"{PREFIX}SASL_MECHANISM={sec.sasl_mechanism!r}: use one of "
            f"{', '.join(SASL_MECHANISMS)}"
        )
    if sec.protocol.startswith("SASL") and (not sec.sasl_username or not sec.sasl_password):
        raise ConfigurationError(
            f"{PREFIX}SECURITY_PROTOCOL={sec.protocol} needs {PREFIX}SASL_USERNAME and "
            f"{PREFIX}SASL_PASSWORD"
        )
    if sec.ssl_keyfile and not sec.ssl_certfile:
        raise ConfigurationError(
            f"{PREFIX}SSL_KEYFILE needs {PREFIX}SSL_CERTFILE (the certificate of that key)"
        )


def _class_end(text: str, start: int) -> int:
    """Index just past the character class opening at ``text[start]`` (``[``).

    A ``]`` right after ``[`` or ``[^`` is a literal, ``[:alpha:]`` is a POSIX class
    inside it, and a backslash escapes the next character. An unclosed class runs to
    the end (RE2 then refuses the pattern, naming it).
    """
    i, n = start + 1, len(text)
    if text.startswith("^", i):
        i += 1
    if text.startswith("]", i):
        i += 1
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2
        elif c == "]":
            return i + 1
        elif text.startswith("[:", i) and (close := text.find(":]", i + 2)) != -1:
            i = close + 2
        else:
            i += 1
    return n


_LEGAL_NAME = re.compile(r"[A-Za-z0-9._-]+")
_HOST_LABEL = r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
_HOSTNAME = re.compile(rf"(?=.{{1,253}}\.?$){_HOST_LABEL}(?:\.{_HOST_LABEL})*\.?")
_BOOTSTRAP_ENTRY = re.compile(r"(?P<host>\[[^\]]*\]|[^:\[\]]*)(?::(?P<port>[0-9]{1,5}))?")
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


#: Most characters of a variable's value a complaint quotes back.
_SHOWN_CHARS = 100


def _shown(raw: str) -> str:
    """``raw`` quoted for a complaint, cut to :data:`_SHOWN_CHARS` characters: a value of
    a megabyte made a complaint of a megabyte (and one line is the promise)."""
    if len(raw) <= _SHOWN_CHARS:
        return repr(raw)
    return f"{raw[:_SHOWN_CHARS]!r}... ({len(raw):,} characters)"


def _cut(text: str) -> str:
    """``text`` (a complaint's detail, which may quote the value) cut like :func:`_shown`."""
    if len(text) <= 2 * _SHOWN_CHARS:
        return text
    return f"{text[: 2 * _SHOWN_CHARS]}..."


class _Reader:
    """Reads and checks one variable at a time; every complaint names its variable."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = env

    def text(self, name: str) -> str | None:
        """``KAFKA_TIMERS_<name>``, or ``None`` when unset or empty.

        Refused unless it is valid UTF-8: bytes that are not come in as lone surrogates,
        which librdkafka cannot take (an unreadable ``SASL_USERNAME`` failed every Kafka
        client with a traceback instead of this line)."""
        value = self.env.get(PREFIX + name)
        if value in (None, ""):
            return None
        try:
            value.encode()
        except UnicodeEncodeError:
            raise ConfigurationError(f"{PREFIX}{name} is not valid UTF-8") from None
        return value

    def url(self, name: str) -> str | None:
        """An ``http://`` or ``https://`` URL in variable ``name`` (no prefix), or None."""
        raw = self.env.get(name)
        if not raw:
            return None
        if not re.fullmatch(r"https?://[^\s/?#]+(/[^\s?#]*)?", raw):
            raise ConfigurationError(
                f"{name}={raw[:100]!r} is not an http:// or https:// URL (an OTLP/HTTP "
                "collector's base address, e.g. http://otel-collector:4318)"
            )
        return raw.rstrip("/")

    def secret(self, name: str) -> str | None:
        """A credential: at least 16 printable ASCII characters, no spaces; never quoted
        back in the complaint."""
        raw = self.text(name)
        if raw is not None and not (
            len(raw) >= 16 and raw.isascii() and raw.isprintable() and " " not in raw
        ):
            raise ConfigurationError(
                f"{PREFIX}{name}: must be at least 16 printable ASCII characters without "
                "spaces (e.g. the output of `openssl rand -hex 24`)"
            )
        return raw

    def _parse(self, name: str, raw: str, kind: Callable[[str], _T], what: str = "a number") -> _T:
        try:
            return kind(raw)
        except (ValueError, ArithmeticError) as exc:
            raise ConfigurationError(f"{name}={_shown(raw)} is not {what}") from exc

    def integer(self, name: str, default: _T, low: int, high: int, meaning: str) -> int | _T:
        raw = self.text(name)
        if raw is None:
            return default
        value = self._parse(PREFIX + name, raw, int)
        if not low <= value <= high:
            raise ConfigurationError(
                f"{PREFIX}{name}={_shown(raw)}: must be from {low} to {high} ({meaning})"
            )
        return value

    def real(
        self,
        name: str,
        default: float,
        low: float,
        high: float | None,
        meaning: str,
        *,
        below_high: bool = False,
    ) -> float:
        raw = self.text(name)
        if raw is None:
            return default
        value = self._parse(PREFIX + name, raw, float)
        too_high = high is not None and (value >= high if below_high else value > high)
        if not math.isfinite(value) or value < low or too_high:
            upper = "" if high is None else f" {'to under' if below_high else 'to'} {high:g}"
            span = f"from {low:g}{upper}" if upper else f"at least {low:g}"
            raise ConfigurationError(f"{PREFIX}{name}={_shown(raw)}: must be {span} ({meaning})")
        return value

    def rate_limits(self, name: str) -> tuple[tuple[str, float], ...]:
        raw = self.text(name)
        if raw is None:
            return ()
        try:
            return tuple(parse_topic_rate_limits(raw).items())
        except ValueError as exc:
            raise ConfigurationError(f"{PREFIX}{name}: {exc}") from exc

    def boolean(self, name: str, default: bool) -> bool:
        raw = self.text(name)
        if raw is None:
            return default
        word = raw.strip().lower()
        if word in _TRUE:
            return True
        if word in _FALSE:
            return False
        raise ConfigurationError(f"{PREFIX}{name}={_shown(raw)}: use true or false")

    def topic(self, name: str, default: str) -> str:
        raw = self.text(name)
        if raw is None:
            return default
        if not is_legal_topic(raw):
            raise ConfigurationError(
                f"{PREFIX}{name}={_shown(raw)} is not a Kafka topic name "
                "(1 to 249 of A-Z a-z 0-9 . _ -)"
            )
        return raw

    def app_id(self, default: str) -> str:
        raw = self.text("APP_ID")
        if raw is None:
            return default
        if len(raw) > MAX_APP_ID_CHARS or raw in (".", "..") or not _LEGAL_NAME.fullmatch(raw):
            raise ConfigurationError(
                f"{PREFIX}APP_ID={_shown(raw)}: use 1 to {MAX_APP_ID_CHARS} of A-Z a-z 0-9 . _ - "
                f"(it names the consumer group and the topic <app id>-{TABLE_NAME}-changelog)"
            )
        return raw

    def name(self, name: str, default: str, longest: int) -> str:
        raw = self.text(name)
        if raw is None:
            return default
        if len(raw) > longest or not raw.isprintable() or raw != raw.strip():
            raise ConfigurationError(
                f"{PREFIX}{name}={_shown(raw)}: use up to {longest} printable characters, "
                "without leading or trailing spaces"
            )
        return raw

    def directory(self, name: str, default: str) -> str:
        raw = self.text(name)
        if raw is None:
            return default
        if not raw.isprintable():
            raise ConfigurationError(f"{PREFIX}{name}={_shown(raw)} is not a usable path")
        if os.path.exists(raw) and not os.path.isdir(raw):
            raise ConfigurationError(f"{PREFIX}{name}={_shown(raw)} exists and is not a directory")
        return raw

    def file(self, name: str) -> str | None:
        raw = self.text(name)
        if raw is None:
            return None
        if not os.path.isfile(raw) or not os.access(raw, os.R_OK):
            raise ConfigurationError(f"{PREFIX}{name}={_shown(raw)} is not a readable file")
        return raw

    def address(self, name: str, default: str) -> str:
        raw = self.text(name)
        if raw is None:
            return default
        if not _is_host(raw):
            raise ConfigurationError(
                f"{PREFIX}{name}={_shown(raw)} is not an IP address or host name to listen on"
            )
        return raw

    def metrics_port(self) -> int | None:
        name = "METRICS_PORT" if self.env.get("METRICS_PORT") else PREFIX + "METRICS_PORT"
        raw = self.env.get(name)
        if not raw:
            return None
        value = self._parse(name, raw, int, "a port")
        if not 1 <= value <= 65535:
            raise ConfigurationError(f"{name}={_shown(raw)}: must be from 1 to 65535 (a TCP port)")
        return value

    def bootstrap(self, default: str) -> str:
        """``host[:port][,host[:port]...]``: spaces around the commas are dropped."""
        raw = self.env.get("KAFKA_BOOTSTRAP_SERVERS")
        if not raw:
            return default
        entries = [entry.strip() for entry in raw.split(",")]
        for entry in entries:
            match = _BOOTSTRAP_ENTRY.fullmatch(entry)
            host = match["host"] if match else ""
            if host.startswith("[") and host.endswith("]"):
                host = host[1:-1]
                good = _is_ip(host, version=6)
            else:
                good = _is_host(host)
            port = match["port"] if match else None
            if not good or (port is not None and not 1 <= int(port) <= 65535):
                raise ConfigurationError(
                    f"KAFKA_BOOTSTRAP_SERVERS={_shown(raw)}: {_shown(entry)} is not host:port "
                    "(use host:port[,host:port], no scheme)"
                )
        return ",".join(entries)

    def allow_list(self, default: tuple[str, ...], name: str = "CALLBACK_ALLOW") -> tuple[str, ...]:
        raw = self.text(name)
        if raw is None:
            return default
        patterns = split_allow_list(raw)
        if not patterns and name == "CALLBACK_ALLOW":
            raise ConfigurationError(f"{PREFIX}{name}={_shown(raw)} names no pattern")
        for pattern in patterns:
            try:
                compile_topic_pattern(pattern)
            except ConfigurationError as exc:
                raise ConfigurationError(f"{PREFIX}{name}: {exc}") from None
        return patterns


def _is_ip(text: str, version: int | None = None) -> bool:
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return False
    return version is None or address.version == version


def _is_host(text: str) -> bool:
    """An IP address (v4 or v6, without brackets) or a DNS host name."""
    return _is_ip(text) or bool(text.isascii() and _HOSTNAME.fullmatch(text))


def _check_distinct(topics: TopicNames) -> None:
    names = ("TICK_TOPIC", "REQUEST_TOPIC", "FIRED_TOPIC", "DLQ_TOPIC")
    seen: dict[str, str] = {}
    for name, topic in zip(names, topics.all(), strict=True):
        if topic in seen:
            raise ConfigurationError(
                f"{PREFIX}{name}={topic!r} is also {PREFIX}{seen[topic]}: "
                "each service topic needs its own name"
            )
        seen[topic] = name
