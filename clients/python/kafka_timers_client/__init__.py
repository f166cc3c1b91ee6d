"""kafka-timers' Python client: schedule, cancel and look up durable timers, and read a
queue whose messages are acknowledged one by one (:class:`RedeliveringConsumer`).

The client and the service share these modules: what the client computes (a due
second, a series' first occurrence, a request's partition, the request's bytes) is what
the worker computes. The Kafka-free modules (``due``, ``recurrence``, ``protowire``, ...)
are imported by the worker's pure core, so this package's top level imports the
Kafka-using ones (:class:`TimerClient`) only when they are first named: importing
``kafka_timers_client.due`` never loads librdkafka.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kafka_timers_client.calendars import Calendar, SkipPolicy
    from kafka_timers_client.client import ScheduledTimer, TimerClient
    from kafka_timers_client.config import ClientConfig
    from kafka_timers_client.errors import (
        BrokerUnavailable,
        CancelNotAnswered,
        KafkaTimersError,
    )
    from kafka_timers_client.fired import FiredRecord
    from kafka_timers_client.late import LatePolicy
    from kafka_timers_client.outcome import (
        BackfillOutcome,
        CancelOutcome,
        PauseOutcome,
        TriggerOutcome,
    )
    from kafka_timers_client.recurrence import Recurrence
    from kafka_timers_client.redelivery import RedeliveringConsumer
    from kafka_timers_client.series_preview import Occurrence, preview

__all__ = [
    "BackfillOutcome",
    "BrokerUnavailable",
    "Calendar",
    "CancelNotAnswered",
    "CancelOutcome",
    "ClientConfig",
    "FiredRecord",
    "KafkaTimersError",
    "LatePolicy",
    "Occurrence",
    "PauseOutcome",
    "Recurrence",
    "RedeliveringConsumer",
    "ScheduledTimer",
    "SkipPolicy",
    "TimerClient",
    "TriggerOutcome",
    "preview",
]

#: Where each public name lives.
_HOMES = {
    "BackfillOutcome": "outcome",
    "BrokerUnavailable": "errors",
    "Calendar": "calendars",
    "CancelNotAnswered": "errors",
    "CancelOutcome": "outcome",
    "ClientConfig": "config",
    "FiredRecord": "fired",
    "KafkaTimersError": "errors",
    "LatePolicy": "late",
    "Occurrence": "series_preview",
    "PauseOutcome": "outcome",
    "Recurrence": "recurrence",
    "RedeliveringConsumer": "redelivery",
    "ScheduledTimer": "client",
    "SkipPolicy": "calendars",
    "preview": "series_preview",
    "TimerClient": "client",
    "TriggerOutcome": "outcome",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)
