"""Re-exported from :mod:`kafka_timers_client.fired_reader`, its home: the client reads
a cancel's answer with it, ``kafka-timers get`` a timer's newest record."""

from __future__ import annotations

from kafka_timers_client.fired_reader import FiredPartitionReader

__all__ = ["FiredPartitionReader"]
