"""The one exception hierarchy of kafka-timers: defined in :mod:`kafka_timers_client.errors`
(a client catches the same classes the service raises), re-exported here for the service."""

from __future__ import annotations

from kafka_timers_client.errors import (
    BrokerUnavailable,
    CancelNotAnswered,
    ConfigurationError,
    InvalidTimeSpec,
    KafkaTimersError,
    RejectedRequest,
    RejectReason,
    SystemicFailure,
)

__all__ = [
    "BrokerUnavailable",
    "CancelNotAnswered",
    "ConfigurationError",
    "InvalidTimeSpec",
    "KafkaTimersError",
    "RejectReason",
    "RejectedRequest",
    "SystemicFailure",
]
