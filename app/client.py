"""The service's Python client is the slim client, :mod:`kafka_timers_client`: one
implementation, re-exported here for the service's CLI, demo, benchmarks and tests
(``TimerClient(settings)`` works: ``Settings`` has ``client_config()``)."""

from __future__ import annotations

from kafka_timers_client.client import ScheduledTimer, TimerClient
from kafka_timers_client.outcome import CancelOutcome, PauseOutcome

__all__ = ["CancelOutcome", "PauseOutcome", "ScheduledTimer", "TimerClient"]
