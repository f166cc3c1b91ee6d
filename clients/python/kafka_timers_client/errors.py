"""The one exception hierarchy of kafka-timers, and the reasons a request is refused."""

from __future__ import annotations

from enum import Enum

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


class KafkaTimersError(Exception):
    """Root of every error kafka-timers raises on purpose.

    The CLI prints ``str(error)`` as one line and exits non-zero for any of these.
    """

    #: Whether trying the same thing again later may succeed.
    retriable: bool = False
    #: The CLI's exit status for it.
    exit_status: int = 2


class ConfigurationError(KafkaTimersError):
    """A setting is missing or malformed: fix the environment or the flag and restart."""


class SystemicFailure(KafkaTimersError):
    """The worker cannot go on, whatever record it reads next: the broker refuses every
    write, the disk is full, a flush times out.

    The one kind of failure that stops a worker without acknowledging what it read
    (exit 70): a restart re-reads it. Everything else that goes wrong while one request
    is handled is that record's problem, dead-lettered with a reason
    (:mod:`app.worker.isolation` draws the line).
    """

    exit_status = 70


class InvalidTimeSpec(KafkaTimersError):
    """A due time (``--at``/``--in``) could not be understood."""


class BrokerUnavailable(KafkaTimersError):
    """No Kafka broker answered at the configured address within the timeout."""

    retriable = True


class CancelNotAnswered(KafkaTimersError):
    """A cancel was sent and acknowledged, but no worker answered it in time.

    The cancel is not lost: it waits on the request topic and is applied when a worker
    reads that partition (is one running and holding it?). Sending it again is safe: a
    repeated cancel gets the same answer. Exit status 3, so a script can tell "sent, no
    answer yet" from "not sent" (2).
    """

    retriable = True
    exit_status = 3


class RejectReason(str, Enum):
    """Why a record on the request topic was dead-lettered (the ``reason`` label)."""

    #: The value is neither valid protobuf nor valid JSON.
    MALFORMED = "malformed"
    #: The value is JSON or protobuf, but not a timer request we know.
    UNKNOWN_FORMAT = "unknown_format"
    #: No callback topic, or an empty one.
    MISSING_TOPIC = "missing_topic"
    #: The callback topic is not a legal Kafka topic name.
    INVALID_TOPIC = "invalid_topic"
    #: The callback topic is internal, one of ours, or outside the allow-list.
    TOPIC_NOT_ALLOWED = "topic_not_allowed"
    #: The callback topic does not exist when the timer is due. The worker never creates
    #: a topic: the timer is dead-lettered and forgotten (a series ends with it).
    UNKNOWN_TOPIC = "unknown_topic"
    #: No due time could be found (the key is not a second where one was required).
    MISSING_DUE = "missing_due"
    #: The due time is before 1970 or past the configured horizon.
    DUE_OUT_OF_RANGE = "due_out_of_range"
    #: The callback payload is larger than the configured limit.
    PAYLOAD_TOO_LARGE = "payload_too_large"
    #: A cancel named the right timer with the wrong token.
    WRONG_TOKEN = "wrong_token"
    #: The callback could not be delivered (the broker refused it).
    DELIVERY_FAILED = "delivery_failed"
    #: A cron expression that cannot be parsed (fields, ranges, names).
    INVALID_CRON = "invalid_cron"
    #: A time zone that is not an IANA name known to the worker's tz database.
    UNKNOWN_TIME_ZONE = "unknown_time_zone"
    #: A recurrence that cannot be a series: no interval or cron, both, a bad interval,
    #: end before start, a count below 1, or a due time given as well.
    INVALID_RECURRENCE = "invalid_recurrence"
    #: A valid recurrence with no occurrence from now to its end.
    NO_OCCURRENCE = "no_occurrence"
    #: A late-fire policy that is not ``fire``, ``skip-after <duration>``, ``coalesce``
    #: or ``all``.
    INVALID_LATE_POLICY = "invalid_late_policy"
    #: A spread that is not a duration of whole seconds from 0 to a day
    #: (:data:`kafka_timers_client.spread.MAX_SPREAD_SECONDS`), or one as long as the interval of
    #: the series it spreads.
    INVALID_SPREAD = "invalid_spread"
    #: A debounce that cannot be (:mod:`kafka_timers_client.debounce`): not whole seconds
    #: of at least 1, a max-wait shorter than the debounce or without one, or a debounce
    #: given with a due time or a recurrence.
    INVALID_DEBOUNCE = "invalid_debounce"
    #: Storing the timer would pass a pending-timer quota the operator set for its
    #: callback topic or its tenant (``KAFKA_TIMERS_TOPIC_QUOTAS``,
    #: ``KAFKA_TIMERS_TENANT_QUOTAS``): refused, answered on the fired topic.
    OVER_QUOTA = "over_quota"
    #: A field is out of the bounds the service accepts: a number that is NaN, infinite
    #: or too large, text that is not UTF-8 or too long, JSON nested too deep.
    OUT_OF_BOUNDS = "out_of_bounds"
    #: A record the worker would have to write for this request (the callback, the
    #: stored timer, the answer) is larger than the largest record it can produce.
    RECORD_TOO_LARGE = "record_too_large"
    #: A header the service writes on every callback (``timer-*``, ``scheduler-*``) in
    #: the request: copied onto the callback it would stand beside (or, read last, in
    #: place of) the service's own, so a receiver de-duplicating on ``timer-id`` could be
    #: made to drop another timer's callback.
    RESERVED_HEADER = "reserved_header"
    #: Handling the record raised something no check foresaw: a bug. The record is
    #: dead-lettered with the exception's class (never its message: it may hold payload
    #: bytes) and the worker goes on; the log has the traceback.
    INTERNAL_ERROR = "internal_error"


class RejectedRequest(KafkaTimersError):
    """A request that cannot become a timer; it goes to the dead-letter topic."""

    def __init__(self, reason: RejectReason, detail: str) -> None:
        super().__init__(f"{reason.value}: {detail}")
        self.reason = reason
        self.detail = detail
