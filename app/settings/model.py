"""The settings of every kafka-timers process: each field declared once, with its variable.

Every field declared with :func:`~app.settings.table.setting` is a row of the settings
table: ``from_env``, ``to_env``, ``kafka-timers config`` and the table in
docs/configuration.md are all generated from these declarations.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from app.core.policy import RequestPolicy
from app.core.quotas import QuotaPolicy
from app.core.wheel import DEFAULT_MAX_CANCELS_IN_ADVANCE
from app.settings import kinds
from app.settings.groups import SecuritySettings, TopicNames
from app.settings.limits import (
    DEFAULT_MESSAGE_MAX_BYTES,
    ENDPOINT_VARIABLES,
    MAX_HORIZON_SECONDS,
    MAX_MESSAGE_MAX_BYTES,
    MAX_PARTITIONS,
    MAX_REMEMBER_SECONDS,
    MAX_REPLICATION_FACTOR,
    MAX_SESSION_TIMEOUT,
    MAX_TICK_FETCH_WAIT_MS,
    MAX_WORKER_ID_CHARS,
    OTLP_ENDPOINT,
    PREFIX,
    RECORD_RESERVE_BYTES,
    SEVEN_DAYS,
    TABLE_NAME,
    TEN_YEARS,
)
from app.settings.table import build, group, read_values, setting, to_env
from app.settings.text import cut, shown
from kafka_timers_client.config import ClientConfig
from kafka_timers_client.errors import ConfigurationError, KafkaTimersError
from kafka_timers_client.late import DEFAULT_POLICY, LatePolicy

__all__ = ["Settings", "default_demo_file"]

P = PREFIX


def default_demo_file(env: Mapping[str, str]) -> str:
    """Where the demo's addresses go when ``KAFKA_TIMERS_DEMO_FILE`` is unset: the user's
    runtime directory (per user, removed at logout, as systemd and XDG intend for such
    files), else their cache directory."""
    runtime = env.get("XDG_RUNTIME_DIR")
    if runtime:
        return os.path.join(runtime, "kafka-timers-demo.json")
    cache = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "kafka-timers", "demo.json")


def _payload_ceiling(values: kinds.Values) -> int:
    budget: int = values.get("producer_message_max_bytes", DEFAULT_MESSAGE_MAX_BYTES)
    return budget - RECORD_RESERVE_BYTES


def _payload_meaning(values: kinds.Values) -> str:
    budget = values.get("producer_message_max_bytes", DEFAULT_MESSAGE_MAX_BYTES)
    return (
        f"bytes: the producer's message.max.bytes {budget} less {RECORD_RESERVE_BYTES} "
        f"kept for the record's key, id, token, headers and changelog layout; raise "
        f"{P}PRODUCER_MESSAGE_MAX_BYTES for more"
    )


def _seconds(meaning: str = "seconds") -> kinds.Real:
    return kinds.Real(0.001, MAX_SESSION_TIMEOUT, meaning)


@dataclass(frozen=True)
class Settings:
    """Everything a kafka-timers process needs to know."""

    bootstrap_servers: str = setting(
        "KAFKA_BOOTSTRAP_SERVERS",
        kinds.Bootstrap(),
        "broker address",
        default="127.0.0.1:9092",
        flags=("--bootstrap-server",),
    )
    #: ``None`` until an entry point resolves it (:func:`app.kafka.topics.resolve_partitions`).
    partitions: int | None = setting(
        P + "PARTITIONS",
        kinds.Integer(1, MAX_PARTITIONS, "topic partitions"),
        """partitions of every service topic; unset, an existing `timer-request` (or other
        service topic) decides, and the worker logs it; set and different from an existing
        topic, the process stops with one line""",
        shown_default="the existing request topic's, else `8`",
    )
    replication_factor: int = setting(
        P + "REPLICATION_FACTOR",
        kinds.Integer(1, MAX_REPLICATION_FACTOR, "replicas of each topic the service creates"),
        "for the topics the service creates",
        default=1,
    )
    topics: TopicNames = field(default_factory=TopicNames, metadata=group(TopicNames))
    app_id: str = setting(
        P + "APP_ID",
        kinds.AppId(),
        "Faust app id = consumer group of the workers, prefix of their changelog topics",
        default="kafka-timers",
    )
    worker_id: str = setting(
        P + "WORKER_ID",
        kinds.Name(MAX_WORKER_ID_CHARS),
        "name of this worker or oscillator in logs, metrics and fired records",
        factory=lambda: f"{socket.gethostname()}-{os.getpid()}",
        flags=("--worker-id", "--oscillator-id"),
        shown_default="host-pid",
    )
    data_dir: str = setting(
        P + "DATA_DIR",
        kinds.Directory(),
        "where this worker keeps its RocksDB files; one directory per worker process",
        default=".kafka-timers/worker",
        flags=("--data-dir",),
    )
    web_port: int = setting(
        P + "WEB_PORT",
        kinds.Integer(1, 65535, "a TCP port"),
        "port of the worker's web server (status page, health, timers)",
        default=6066,
        flags=("--web-port",),
    )
    web_bind: str = setting(
        P + "WEB_BIND",
        kinds.Address(),
        "address the worker's web server listens on (`127.0.0.1`: this host only)",
        default="0.0.0.0",
    )
    web_max_connections: int = setting(
        P + "WEB_MAX_CONNECTIONS",
        kinds.Integer(1, 100_000, "connections open to the web port at once"),
        """connections open to the web port at once; more are answered `503` and closed at
        once. Counted in the worker's open-file need
        ([operations.md](operations.md))""",
        default=256,
    )
    web_idle_timeout: float = setting(
        P + "WEB_IDLE_TIMEOUT",
        kinds.Real(0.1, 3600.0, "seconds"),
        """seconds a web connection may take to send a request's headers, or stay idle
        between requests, before the worker closes it""",
        default=5.0,
    )
    metrics_port: int | None = setting(
        "METRICS_PORT",
        kinds.Integer(1, 65535, "a TCP port", what="a port"),
        "port of the Prometheus `/metrics` endpoint (also read as `KAFKA_TIMERS_METRICS_PORT`)",
        flags=("--metrics-port",),
        aliases=(P + "METRICS_PORT",),
        shown_default="off",
    )
    metrics_bind: str = setting(
        P + "METRICS_BIND", kinds.Address(), "address `/metrics` listens on", default="0.0.0.0"
    )
    callback_allow: tuple[str, ...] = setting(
        P + "CALLBACK_ALLOW",
        kinds.AllowList(needs_one=True),
        """RE2 patterns a callback topic must match in full, separated by commas or
        whitespace (not inside `[]`, `{}`, `()`; `\\,` is a literal comma): see below""",
        default=(".*",),
    )
    callback_deny: tuple[str, ...] = setting(
        P + "CALLBACK_DENY",
        kinds.AllowList(),
        """patterns of your own internal topics (`connect-.*`, ...), same syntax: refused
        whatever the allow-list says""",
        default=(),
    )
    producer_message_max_bytes: int = setting(
        P + "PRODUCER_MESSAGE_MAX_BYTES",
        kinds.Integer(
            RECORD_RESERVE_BYTES + 1,
            MAX_MESSAGE_MAX_BYTES,
            f"bytes: librdkafka's message.max.bytes, more than the {RECORD_RESERVE_BYTES} "
            "reserved for a record's key, id, token and headers",
        ),
        """librdkafka's `message.max.bytes`: the largest record a worker writes (callback,
        changelog, dead letter); the payload default follows it. Raise the broker's and the
        topics' `max.message.bytes` with it""",
        default=DEFAULT_MESSAGE_MAX_BYTES,
    )
    max_payload_bytes: int = setting(
        P + "MAX_PAYLOAD_BYTES",
        kinds.Integer(
            0,
            _payload_ceiling,
            _payload_meaning,
            shown_range=f"0 to the producer's `message.max.bytes` less {RECORD_RESERVE_BYTES:,}",
        ),
        "largest callback value; more is refused at start",
        default=DEFAULT_MESSAGE_MAX_BYTES - RECORD_RESERVE_BYTES,
        fallback=lambda values, env: _payload_ceiling(values),
        shown_default=(
            f"`{DEFAULT_MESSAGE_MAX_BYTES - RECORD_RESERVE_BYTES}` (the producer's "
            f"`message.max.bytes` less {RECORD_RESERVE_BYTES:,})"
        ),
    )
    horizon_seconds: int = setting(
        P + "HORIZON_SECONDS",
        kinds.Integer(1, MAX_HORIZON_SECONDS, "seconds; store keys hold 12-digit seconds"),
        """furthest due time accepted, seconds ahead; a due time past 999,999,999,999 (the
        store keys' 12 digits) is always refused""",
        default=TEN_YEARS,
        shown_default="10 years",
    )
    session_timeout: float = setting(
        P + "SESSION_TIMEOUT",
        _seconds(),
        """consumer-group session timeout (s): a killed worker's partitions move after this
        ([operations.md](operations.md)). 6 s is the shortest a stock Apache Kafka broker
        accepts (`group.min.session.timeout.ms`)""",
        default=6.0,
    )
    heartbeat_interval: float = setting(
        P + "HEARTBEAT_INTERVAL",
        _seconds("s"),
        "consumer-group heartbeat (s), shorter than the session timeout",
        default=1.0,
    )
    tick_fetch_wait_ms: int = setting(
        P + "TICK_FETCH_WAIT_MS",
        kinds.Integer(
            1, MAX_TICK_FETCH_WAIT_MS, "milliseconds a fetch of ticks may wait at the broker"
        ),
        """longest a worker's fetch of ticks waits at the broker (ms). Fetches are paced by
        the second: each waits at most until the next
        boundary, and 10 ms while a tick is due and not yet read, so on any broker (the dev
        broker answers a waiting fetch late) a tick waits for a fetch about 10 ms at most,
        and an idle worker fetches a few times a second. A partition taken over in a
        rebalance is fetched with short waits until the worker is ready""",
        default=500,
    )
    exactly_once: bool = setting(
        P + "EXACTLY_ONCE",
        kinds.Boolean(),
        """`true`: each request batch and each tick is one Kafka transaction over callbacks,
        audit records and changelog (Apache Kafka 2.5 or later; needs a stable
        `KAFKA_TIMERS_WORKER_ID` per worker, its transactional id). See
        [guarantees.md](guarantees.md#exactly-once-on-apache-kafka)""",
        default=False,
    )
    clock_skew_warn_seconds: float = setting(
        P + "CLOCK_SKEW_WARN_SECONDS",
        kinds.Real(0, None, "seconds"),
        """a clock offset past this is logged as a warning (worker against each oscillator,
        oscillator against the broker)""",
        default=2.0,
    )
    tick_tolerance_seconds: float = setting(
        P + "TICK_TOLERANCE_SECONDS",
        kinds.Real(0, 60, "seconds a tick may run ahead of the worker's clock", below_high=True),
        """how far a tick may run ahead of the worker's clock and still fire at once; a tick
        from further ahead waits until the worker's clock reaches its second minus this
        ([guarantees.md](guarantees.md))""",
        default=0.0,
    )
    tick_max_ahead_seconds: float = setting(
        P + "TICK_MAX_AHEAD_SECONDS",
        kinds.Real(
            60, MAX_HORIZON_SECONDS, "seconds ahead of the worker's clock a tick may be held"
        ),
        """a tick further ahead of the worker's clock is ignored and counted
        (`kafka_timers_ticks_ignored_total{reason="too_far_ahead"}`), never held""",
        default=3600.0,
    )
    tick_max_sources: int = setting(
        P + "TICK_MAX_SOURCES",
        kinds.Integer(1, 10_000, "tick sources told apart in metrics"),
        """tick sources (oscillator names, cut to 64 characters) a worker tells apart in its
        metrics and clock checks; ticks from more count as `other`""",
        default=64,
    )
    tick_source_silence_seconds: float = setting(
        P + "TICK_SOURCE_SILENCE_SECONDS",
        kinds.Real(1, MAX_HORIZON_SECONDS, "seconds without a tick before a source is forgotten"),
        "a source without a tick for this long is forgotten, its metric labels included",
        default=300.0,
    )
    liveness_timeout: float = setting(
        P + "LIVENESS_TIMEOUT",
        kinds.Real(0.001, None, "seconds"),
        """`/livez` fails after this many seconds: a worker with timers due that long ago
        and no tick processed for as long; an oscillator that sent no tick for as long""",
        default=30.0,
    )
    stop_grace_seconds: float = setting(
        P + "STOP_GRACE_SECONDS",
        kinds.Real(1, 3600, "seconds an orderly stop may take"),
        """a worker sent SIGTERM or SIGINT exits this many seconds later if its orderly stop
        has not finished (the broker away: Faust's stop waits on it), with one line and
        status 0; nothing acknowledged is lost (requests and ticks are acknowledged only
        once what they caused is durable)""",
        default=10.0,
    )
    catchup_stall_seconds: float = setting(
        P + "CATCHUP_STALL_SECONDS",
        kinds.Real(
            0.5,
            86400,
            "seconds a changelog catch-up may make no progress before it is retried",
        ),
        """a worker's changelog catch-up (taking partitions over) that reads no record and
        reaches no partition's end for this long is counted as stalled: the worker stays up
        and not ready (`/readyz` says why, `kafka_timers_recovery_stalled`), keeps what it
        read and tries again with backoff (1 s doubling to 30 s) until the broker lets it
        finish""",
        default=60.0,
    )
    late_policy: str = setting(
        P + "LATE_POLICY",
        kinds.Text(shown="`fire` or `skip-after <duration>`, and `coalesce` or `all`"),
        """late-fire policy of every timer that names none (or what it leaves out)
        ([using.md](using.md#late-fire-policy)); a typo stops the worker at start""",
        default=DEFAULT_POLICY.text(),
    )
    security: SecuritySettings = field(
        default_factory=SecuritySettings, metadata=group(SecuritySettings)
    )
    remember_seconds: int = setting(
        P + "REMEMBER_SECONDS",
        kinds.Integer(1, MAX_REMEMBER_SECONDS, "seconds; store keys hold 12-digit seconds"),
        """how long a fired or cancelled id is remembered (a redelivered request is a
        duplicate, a cancel that came first wins); then it is removed from RocksDB and the
        changelog""",
        default=SEVEN_DAYS,
        shown_default=f"`{SEVEN_DAYS}` (7 days)",
    )
    max_cancels_in_advance: int = setting(
        P + "MAX_CANCELS_IN_ADVANCE",
        kinds.Integer(0, 10**9, "cancels remembered per partition for ids with no timer yet"),
        """cancels for ids with no timer yet remembered per partition; past it a cancel in
        advance is answered `not_remembered`""",
        default=DEFAULT_MAX_CANCELS_IN_ADVANCE,
    )
    max_topic_labels: int = setting(
        P + "MAX_TOPIC_LABELS",
        kinds.Integer(0, 100_000, "callback topics with a metric label of their own"),
        """callback topics with a `callback_topic` label of their own in
        `kafka_timers_fired_total` (the first this many a worker delivers to; the rest count
        as `other`), so a producer naming a new topic per request cannot grow the metric
        without bound""",
        default=100,
    )
    otlp_endpoint: str | None = setting(
        OTLP_ENDPOINT,
        kinds.Url(),
        """base URL of an OTLP/HTTP collector (`http://otel-collector:4318`): the worker
        records schedule and fire spans and sends them to `<it>/v1/traces`
        ([operations.md](operations.md#tracing)). Needs `pip install 'kafka-timers[tracing]'`;
        the SDK's own `OTEL_*` variables (`OTEL_EXPORTER_OTLP_HEADERS`,
        `OTEL_BSP_SCHEDULE_DELAY`, `OTEL_TRACES_SAMPLER`, `OTEL_RESOURCE_ATTRIBUTES`...)
        apply; `service.name` is `kafka-timers-worker`, `service.instance.id` the worker id""",
        shown_default="(none: tracing off)",
    )
    operator_token: str | None = setting(
        P + "OPERATOR_TOKEN",
        kinds.Secret(),
        """the operator's credential for `/timers/next` and `/timers/<id>`, sent as
        `Authorization: Bearer <token>`; `kafka-timers status --next/--timer` and
        `kafka-timers get` send it from the environment. Unset, those routes answer 403;
        `/status`, `/livez`, `/readyz` and `/metrics` never need it""",
        secret=True,
        shown_default="(none: off)",
    )
    control_secret: str | None = setting(
        P + "CONTROL_SECRET",
        kinds.Secret(),
        """the deployment's control secret (e.g. `openssl rand -hex 24`), shared by every
        worker and operator: `pause`, `resume`, `rate` and `cancel-bulk` sign their records
        with it, workers apply only records that verify
        ([security.md](security.md#the-control-plane)). Unset, workers ignore the whole
        control topic (and say so at start) and the control commands refuse to run""",
        secret=True,
        shown_default="(none: the control topic is ignored)",
    )
    topic_rate_limits: tuple[tuple[str, float], ...] = setting(
        P + "TOPIC_RATE_LIMITS",
        kinds.RateLimits(),
        """callbacks per second allowed to a callback topic across the whole service, e.g.
        `reminders=500/s,billing=50/s`; timers beyond it wait, pending, and go out at the
        limit in due order ([using.md](using.md#rate-limits)); a
        bad value stops the worker at start with one
        line""",
        default=(),
    )
    topic_quotas: tuple[tuple[str, int], ...] = setting(
        P + "TOPIC_QUOTAS",
        kinds.Quotas(),
        """most timers pending at once for a callback topic across the whole service, e.g.
        `reminders=1000,billing=50`; a request that would store one more is refused
        `over_quota`, answered on the fired topic and dead-lettered
        ([using.md](using.md#pending-timer-quotas)); a bad value stops the worker at start
        with one line""",
        default=(),
    )
    tenant_header: str | None = setting(
        P + "TENANT_HEADER",
        kinds.Name(1024),
        """the request header that names a timer's tenant, e.g. `tenant`, for
        `KAFKA_TIMERS_TENANT_QUOTAS` (a request without it counts under no tenant)""",
        shown_default="(none)",
    )
    tenant_quotas: tuple[tuple[str, int], ...] = setting(
        P + "TENANT_QUOTAS",
        kinds.Quotas(tenants=True),
        """most timers pending at once per tenant (the value of
        `KAFKA_TIMERS_TENANT_HEADER`), e.g. `acme=1000,*=500` (`*`: each tenant not
        named); refused and answered as for `KAFKA_TIMERS_TOPIC_QUOTAS`; needs
        `KAFKA_TIMERS_TENANT_HEADER`""",
        default=(),
    )
    demo_file: str = setting(
        P + "DEMO_FILE",
        kinds.Text(shown="a file path"),
        """where `kafka-timers demo` writes its workers' URLs, broker, app id and operator
        credential while it runs (mode 0600), and where `status`, `get` and `list` look for
        them when given no `--url`, `KAFKA_TIMERS_WEB_PORT`, or other broker or app id
        ([using.md](using.md#the-demo-and-its-discovery-file)): a per-user place, not the
        working directory, so another shell finds it from anywhere""",
        factory=lambda: default_demo_file(os.environ),
        fallback=lambda values, env: default_demo_file(env),
        shown_default=(
            "`$XDG_RUNTIME_DIR/kafka-timers-demo.json`, else `~/.cache/kafka-timers/demo.json`"
        ),
    )
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
            raise ConfigurationError(f"{P}LATE_POLICY: {cut(detail)}") from exc
        except (ValueError, ArithmeticError) as exc:  # e.g. a skip-after too long for a float
            raise ConfigurationError(
                f"{P}LATE_POLICY={shown(self.late_policy)} cannot be read ({type(exc).__name__})"
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

    def quota_policy(self) -> QuotaPolicy | None:
        """The pending-timer quotas (app.core.quotas), or None when none is set."""
        return QuotaPolicy.build(self.topic_quotas, self.tenant_header, self.tenant_quotas)

    def with_overrides(self, **changes: Any) -> Settings:
        """A copy with some fields changed (CLI flags win over the environment)."""
        return replace(self, **{k: v for k, v in changes.items() if v is not None})

    def to_env(self) -> dict[str, str]:
        """The environment from which :meth:`from_env` rebuilds these settings (for children)."""
        return to_env(self)

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
        chosen = frozenset(name for name in ENDPOINT_VARIABLES if env.get(name))
        settings: Settings = build(cls, read_values(cls, env), chosen=chosen)
        settings.check()
        return settings

    def check(self) -> None:
        """Refuse what each variable alone cannot say is wrong: two settings at odds, a
        late policy or allow-list that does not compile."""
        self.topics.check()
        if self.heartbeat_interval >= self.session_timeout:
            raise ConfigurationError(
                f"{P}HEARTBEAT_INTERVAL={self.heartbeat_interval:g} must be shorter than "
                f"{P}SESSION_TIMEOUT={self.session_timeout:g} (seconds)"
            )
        self.default_late_policy()  # a typo is refused at start, not at the first fire
        self.security.check()
        self.request_policy()  # compiles the allow-list: RE2 refusals stop the start
        if self.tenant_quotas and not self.tenant_header:
            raise ConfigurationError(
                f"{P}TENANT_QUOTAS is set but {P}TENANT_HEADER is not: name the request "
                "header that carries the tenant, e.g. tenant"
            )
