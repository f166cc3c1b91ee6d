"""Processes with known web and metrics ports, and what their endpoints say.

The health and lag tests read ``/readyz``, ``/livez``, ``/status/data`` and ``/metrics``
of real processes, so they need to know each one's ports.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient  # type: ignore[attr-defined]
from prometheus_client.parser import text_string_to_metric_families

from app.dev.broker import free_port
from app.dev.stack import ServiceProcess
from app.kafka.config import confluent_common
from app.settings import Settings
from tests.support.stack import Stack
from tests.support.waiting import wait_until

__all__ = [
    "Probed",
    "committed_offsets",
    "get_admitted",
    "get_json",
    "metric_by_partition",
    "metric_total",
    "start_probed",
]


class Probed:
    """A started process and the settings it runs with (its ports among them)."""

    def __init__(self, process: ServiceProcess) -> None:
        assert process.settings is not None
        self.process = process
        self.settings: Settings = process.settings

    @property
    def web(self) -> str:
        return f"http://127.0.0.1:{self.settings.web_port}"

    @property
    def metrics(self) -> str:
        return f"http://127.0.0.1:{self.settings.metrics_port}"


def start_probed(
    stack: Stack, command: str, name: str, loglevel: str = "warning", **changes: Any
) -> Probed:
    """A worker or an oscillator started as ``name`` by the stack, with free web and
    metrics ports; ``changes`` are settings applied on top of the stack's."""
    if command == "worker":
        process = stack.worker(name, loglevel=loglevel, metrics_port=free_port(), **changes)
    else:
        process = stack.oscillator(name, metrics_port=free_port(), **changes)
    return Probed(process)


def get_json(url: str, timeout: float = 2.0) -> tuple[int | None, Any]:
    """``(status, body)``; ``(None, why)`` when nothing answers in time."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")
    except (OSError, ValueError) as exc:
        return None, repr(exc)


def get_admitted(
    url: str, token: str | None = None, deadline: float = 30.0, timeout: float = 10.0
) -> tuple[int, Any]:
    """``(status, body)`` of ``url`` as a well-behaved client gets it: a heavy view that
    answers 503 with ``Retry-After`` (its share of the worker's loop is spent, by design:
    :mod:`app.status.admission`; it always says 1 s) is not an answer yet and is asked
    again a second later, until ``deadline`` (then ``AssertionError``)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}

    def answer() -> tuple[int, Any] | None:
        request = urllib.request.Request(url, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as exc:
            if exc.code == 503 and exc.headers.get("Retry-After") is not None:
                return None
            return exc.code, json.loads(exc.read() or b"null")

    answered = wait_until(answer, deadline, f"{url} to answer other than busy", 1.0)
    assert answered is not None  # wait_until returns only a truthy answer
    return answered


def metric_by_partition(base_url: str, name: str) -> dict[int, float]:
    """The samples of gauge ``name`` on ``base_url``/metrics, by their ``partition`` label."""
    try:
        with urllib.request.urlopen(base_url + "/metrics", timeout=2) as response:
            text = response.read().decode()
    except OSError:
        return {}
    return {
        int(sample.labels["partition"]): sample.value
        for family in text_string_to_metric_families(text)
        if family.name == name
        for sample in family.samples
    }


def metric_total(base_url: str, name: str) -> float:
    """The sum of the samples of ``name`` on ``base_url``/metrics; 0 when nothing answers."""
    try:
        with urllib.request.urlopen(base_url + "/metrics", timeout=2) as response:
            text = response.read().decode()
    except OSError:
        return 0.0
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        if family.name == name
        for sample in family.samples
        if not sample.name.endswith("_created")  # a counter's creation time, not a count
    )


def committed_offsets(
    settings: Settings, group: str, topic: str, timeout: float = 15.0
) -> dict[int, int]:
    """The offsets ``group`` committed on each partition of ``topic``, as
    ``kafka-consumer-groups --describe`` reads them (negative: none committed)."""
    admin = AdminClient(confluent_common(settings))
    request = ConsumerGroupTopicPartitions(
        group, [TopicPartition(topic, p) for p in range(settings.partition_count)]
    )
    result = admin.list_consumer_group_offsets([request])[group].result(timeout)
    return {tp.partition: tp.offset for tp in result.topic_partitions}
