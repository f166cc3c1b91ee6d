"""What the worker's output says went wrong with what it produced: the records a broker
refuses for what they are, and the two failures a unit of work ends with
(:mod:`app.worker.output` produces; these are re-exported from it)."""

from __future__ import annotations

from confluent_kafka import KafkaError

from kafka_timers_client.errors import SystemicFailure

__all__ = ["REFUSED_RECORD_ERRORS", "DeliveryFailure", "TransactionAborted"]


#: Produce errors that refuse the record itself: sent again, it would be refused again.
#: A callback refused so is dead-lettered with the error (``delivery_failed``) and its
#: timer is done. Any other error (a delivery that timed out while the broker was down
#: or had no leader, a lost connection) says nothing about the record: the flush fails
#: (:class:`DeliveryFailure`), the timer stays pending, and it fires again after the
#: worker's restart, at least once, never dropped because the broker was away.
REFUSED_RECORD_ERRORS = frozenset(
    {
        KafkaError.MSG_SIZE_TOO_LARGE,
        KafkaError.RECORD_LIST_TOO_LARGE,
        KafkaError.INVALID_RECORD,
        KafkaError.INVALID_TIMESTAMP,
        KafkaError.UNSUPPORTED_FOR_MESSAGE_FORMAT,
        KafkaError.POLICY_VIOLATION,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.TOPIC_EXCEPTION,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError._UNKNOWN_TOPIC,
        KafkaError._UNKNOWN_PARTITION,
        KafkaError._INVALID_ARG,
    }
)


class DeliveryFailure(SystemicFailure):
    """Records the worker needs durable were not acknowledged: stop before acking anything.

    Raised when a flush times out, or a changelog record, a forwarded request or a
    callback was not delivered (a callback refused for what it is is dead-lettered
    instead: :data:`REFUSED_RECORD_ERRORS`). The worker
    then exits without committing offsets, so a restart re-reads what was not durable.
    """


class TransactionAborted(Exception):
    """The unit's transaction was aborted: none of its records are visible; retry later."""
