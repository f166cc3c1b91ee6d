"""Settings: built once at each entry point from the environment, then passed down.

No other module reads ``os.environ``. Every variable has the prefix ``KAFKA_TIMERS_``
except the names operators already know: ``KAFKA_BOOTSTRAP_SERVERS``, ``METRICS_PORT``
and OpenTelemetry's ``OTEL_EXPORTER_OTLP_ENDPOINT`` (the OpenTelemetry SDK, once tracing
is on, reads its own ``OTEL_*`` variables: headers, timeouts, batching).

Each setting is declared once, on its field in :mod:`app.settings.model` (its variable,
kind, bounds, default and help); :mod:`app.settings.table` reads and writes the
environment from those declarations, :mod:`app.settings.reference` lists them
(``kafka-timers config``) and writes the table in docs/configuration.md
(``python -m app.settings.reference``).
"""

from __future__ import annotations

from app.settings.groups import SecuritySettings, TopicNames
from app.settings.limits import (
    DEFAULT_MESSAGE_MAX_BYTES,
    DEFAULT_PARTITIONS,
    ENDPOINT_VARIABLES,
    MAX_HORIZON_SECONDS,
    MAX_REMEMBER_SECONDS,
    MAX_TOPIC_RATE,
    PREFIX,
    RECORD_RESERVE_BYTES,
    TABLE_NAME,
)
from app.settings.model import Settings, default_demo_file
from app.settings.text import parse_topic_rate_limits, split_allow_list

__all__ = [
    "DEFAULT_MESSAGE_MAX_BYTES",
    "DEFAULT_PARTITIONS",
    "ENDPOINT_VARIABLES",
    "MAX_HORIZON_SECONDS",
    "MAX_REMEMBER_SECONDS",
    "MAX_TOPIC_RATE",
    "PREFIX",
    "RECORD_RESERVE_BYTES",
    "TABLE_NAME",
    "SecuritySettings",
    "Settings",
    "TopicNames",
    "default_demo_file",
    "parse_topic_rate_limits",
    "split_allow_list",
]
