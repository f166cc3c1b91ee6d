"""A worker's start waits for a broker that does not answer, instead of exiting (issue 23).

:func:`app.worker.startup.until_broker_answers` and its probes, which broker failures
count as "not answering" (:mod:`app.kafka.topics`), and the transactional producer's
initialisation, retried the same way. No broker: fakes, and an address nothing listens on.
"""

from __future__ import annotations

import concurrent.futures
import json
import urllib.error
import urllib.request
from dataclasses import replace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from app.core.backoff import Backoff
from app.dev.broker import free_port
from app.kafka import topics
from app.settings import Settings
from app.worker.output import OutputProducer
from app.worker.startup import STARTUP_STEP, StartupProbe, until_broker_answers
from kafka_timers_client.errors import BrokerUnavailable, ConfigurationError


class Flaky:
    """A start-up step that fails ``failures`` times, then answers 42."""

    def __init__(self, failures: list[Exception]) -> None:
        self.failures = failures
        self.calls = 0

    def __call__(self) -> int:
        self.calls += 1
        if self.failures:
            raise self.failures.pop(0)
        return 42


def get(url: str) -> tuple[int, dict[str, Any] | str]:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            body = response.read().decode()
            return response.status, json.loads(body) if body.startswith("{") else body
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_a_step_the_broker_does_not_answer_is_retried_with_backoff() -> None:
    slept: list[float] = []
    step = Flaky([BrokerUnavailable("no broker answered")] * 6)
    result = until_broker_answers(
        "service topics", step, backoff=Backoff(1.0, 8.0), sleep=slept.append
    )
    assert result == 42 and step.calls == 7
    assert slept == [1, 2, 4, 8, 8, 8]


def test_what_the_broker_refuses_stops_the_worker_as_before() -> None:
    step = Flaky([ConfigurationError("changelog not compacted")])
    with pytest.raises(ConfigurationError):
        until_broker_answers("service topics", step, sleep=lambda _: None)
    assert step.calls == 1


def test_while_it_waits_the_worker_is_alive_not_ready_and_says_why() -> None:
    port = free_port()
    probe = StartupProbe(port, "127.0.0.1")
    base = f"http://127.0.0.1:{port}"
    try:
        assert get(base + "/readyz")[0] == 503
        seen: list[tuple[int, Any, Any]] = []

        def sleep(_: float) -> None:  # look at the probes while the step is retried
            seen.append((*get(base + "/readyz"), get(base + "/livez")[0]))

        step = Flaky([BrokerUnavailable("no Kafka broker answered at 127.0.0.1:1")])
        until_broker_answers("service topics", step, probe, sleep=sleep)
        (status, ready, live), *_ = seen
        assert (status, live) == (503, 200)
        assert isinstance(ready, dict) and ready["phase"] == "starting"
        assert "service topics: the broker did not answer" in ready["reason"]
        assert "attempt 1, retrying in" in ready["reason"]
        metrics = get(base + "/metrics")[1]
        assert isinstance(metrics, str)
        assert f'kafka_timers_recovery_stalled{{step="{STARTUP_STEP}"}} 0.0' in metrics
        assert f'kafka_timers_recovery_retries_total{{step="{STARTUP_STEP}"}} 1.0' in metrics
        assert "kafka_timers_not_ready_seconds" in metrics
    finally:
        probe.close()
    # The worker's own server takes the port over.
    again = StartupProbe(port, "127.0.0.1")
    again.close()


def test_no_metrics_port_means_no_server_but_the_same_retries() -> None:
    probe = StartupProbe(None)
    step = Flaky([BrokerUnavailable("away")])
    assert until_broker_answers("x", step, probe, sleep=lambda _: None) == 42
    assert probe.stalled.labels(step=STARTUP_STEP)._value.get() == 0
    probe.close()


@pytest.mark.parametrize(
    ("exc", "broker"),
    [
        (KafkaException(KafkaError(KafkaError._TIMED_OUT)), True),
        (KafkaException(KafkaError(KafkaError._TRANSPORT)), True),
        (KafkaException(KafkaError(KafkaError.REQUEST_TIMED_OUT)), True),
        (concurrent.futures.TimeoutError(), True),
        (KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)), False),
        (KafkaException(KafkaError(KafkaError.INVALID_CONFIG)), False),
        (ValueError("x"), False),
    ],
)
def test_a_broker_that_does_not_answer_is_told_from_one_that_refuses(
    exc: BaseException, broker: bool
) -> None:
    assert topics._broker_failed(exc) is broker


def test_listing_topics_of_a_broker_that_is_not_there_is_broker_unavailable() -> None:
    settings = replace(Settings(), bootstrap_servers="127.0.0.1:1")
    with pytest.raises(BrokerUnavailable):
        topics.partition_count(settings, "anything", timeout=0.5)


class FakeTransactionalProducer:
    def __init__(self, failures: list[KafkaException]) -> None:
        self.failures = failures
        self.calls = 0

    def init_transactions(self, timeout: float) -> None:
        self.calls += 1
        if self.failures:
            raise self.failures.pop(0)


def output_with(producer: FakeTransactionalProducer) -> OutputProducer:
    output = OutputProducer(
        {"bootstrap.servers": "127.0.0.1:1"}, worker_id="w", fired_topic="f", dlq_topic="d"
    )
    output._producer = producer  # type: ignore[assignment]
    return output


def test_the_transactional_init_is_retried_while_the_broker_does_not_answer() -> None:
    timeout = KafkaException(KafkaError(KafkaError._TIMED_OUT, "timed out", retriable=True))
    producer = FakeTransactionalProducer([timeout, timeout])
    slept: list[float] = []
    output_with(producer)._init_transactions(backoff=Backoff(1.0, 30.0), sleep=slept.append)
    assert producer.calls == 3 and slept == [1.0, 2.0]


def test_a_transactional_init_the_broker_refuses_still_raises() -> None:
    fenced = KafkaException(KafkaError(KafkaError._FENCED, "fenced", fatal=True))
    producer = FakeTransactionalProducer([fenced])
    with pytest.raises(KafkaException):
        output_with(producer)._init_transactions(sleep=lambda _: None)
    assert producer.calls == 1
