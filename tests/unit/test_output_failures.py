"""What happens to a callback librdkafka could not deliver, on a real producer (one whose
broker never answers, so every record times out locally).

A timeout says nothing about the record: the broker was away. The flush fails
(:class:`~app.worker.output.DeliveryFailure`), the worker stops without forgetting the
timers, and they fire again after its restart; none is dead-lettered and forgotten. Only
an error that refuses the record itself (:data:`~app.worker.output.REFUSED_RECORD_ERRORS`)
returns the timer from ``take_failures``, to be dead-lettered. The delivery report reaches
the callback's own handler however ``produce`` is called (every argument by position).
"""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError

from app.core.timer import Timer
from app.worker.output import REFUSED_RECORD_ERRORS, DeliveryFailure, OutputProducer


def _unanswered() -> OutputProducer:
    return OutputProducer(
        {
            "bootstrap.servers": "127.0.0.1:1",  # nothing listens there
            "message.timeout.ms": 200,
            "socket.connection.setup.timeout.ms": 1000,
            "log_level": 0,
        },
        worker_id="w-1",
        fired_topic="fired",
        dlq_topic="dlq",
    )


def test_a_callback_that_timed_out_fails_the_flush_and_is_not_dropped() -> None:
    output = _unanswered()
    timers = [
        Timer(id=f"t{i}", due=100, topic="cb", key=b"k", value=b"v", token="tok") for i in range(3)
    ]
    for timer in timers:
        output.callback(timer, partition=0, fired_at_ms=100_000)
    with pytest.raises(DeliveryFailure, match=r"callback of timer 't.'.*timed out"):
        output.flush_blocking(10)
    assert output.take_failures() == []  # nothing to dead-letter: they fire again


def test_only_errors_that_refuse_the_record_itself_dead_letter_it() -> None:
    assert KafkaError.MSG_SIZE_TOO_LARGE in REFUSED_RECORD_ERRORS
    assert KafkaError.TOPIC_AUTHORIZATION_FAILED in REFUSED_RECORD_ERRORS
    for transient in (
        KafkaError._MSG_TIMED_OUT,
        KafkaError._TRANSPORT,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.NOT_ENOUGH_REPLICAS,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError._ALL_BROKERS_DOWN,
    ):
        assert transient not in REFUSED_RECORD_ERRORS
