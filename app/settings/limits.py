"""The figures settings are checked against: defaults, bounds and names of the service."""

from __future__ import annotations

__all__ = [
    "DEFAULT_MESSAGE_MAX_BYTES",
    "DEFAULT_PARTITIONS",
    "ENDPOINT_VARIABLES",
    "MAX_APP_ID_CHARS",
    "MAX_HORIZON_SECONDS",
    "MAX_MESSAGE_MAX_BYTES",
    "MAX_PARTITIONS",
    "MAX_REMEMBER_SECONDS",
    "MAX_REPLICATION_FACTOR",
    "MAX_SESSION_TIMEOUT",
    "MAX_TICK_FETCH_WAIT_MS",
    "MAX_TOPIC_RATE",
    "MAX_WORKER_ID_CHARS",
    "OTLP_ENDPOINT",
    "PREFIX",
    "RECORD_RESERVE_BYTES",
    "SEVEN_DAYS",
    "TABLE_NAME",
    "TEN_YEARS",
]

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
#: not set (see :attr:`app.settings.Settings.chosen`).
ENDPOINT_VARIABLES = ("KAFKA_BOOTSTRAP_SERVERS", PREFIX + "APP_ID", PREFIX + "WEB_PORT")
#: Highest rate limit accepted, callbacks per second (far above what a worker delivers).
MAX_TOPIC_RATE = 10_000_000.0
