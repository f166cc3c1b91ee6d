"""Topic configuration and partition count, against real processes on the broker.

- ``kafka-timers topics`` and a worker start create the changelog compacted (read back
  with DescribeConfigs), and every other topic with its explicit policy;
- a changelog that already exists with a delete policy stops the worker with one line
  saying how to fix it;
- a request topic a producer created first (explicitly, or by auto-creation) is
  adopted: workers started without ``KAFKA_TIMERS_PARTITIONS`` fire its timers.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from app.dev.broker import free_port
from app.kafka.config import confluent_common, confluent_producer
from app.kafka.topic_config import topic_specs
from app.kafka.topics import describe_topic_configs, ensure_topics, partition_count
from app.settings import Settings
from kafka_timers_client.client import TimerClient
from tests.conftest import fresh_settings
from tests.support.broker import BrokerInfo
from tests.support.cli import run_cli
from tests.support.stack import fired_ids, running_stack
from tests.support.waiting import wait_until

FIRE_TIMEOUT = 90.0


def assert_created_as_specified(settings: Settings) -> None:
    described = describe_topic_configs(settings, topic_specs(settings))
    for name, spec in topic_specs(settings).items():
        assert name in described, f"{name} was not created"
        for key, value in spec.config.items():
            assert described[name].get(key) == value, f"{name}: {key}"
    assert described[settings.changelog_topic]["cleanup.policy"] == "compact"


def test_the_topics_command_creates_the_changelog_compacted(broker: BrokerInfo) -> None:
    settings = fresh_settings(broker.bootstrap)
    done = run_cli(settings, "topics")
    assert done.returncode == 0, done.stderr
    assert_created_as_specified(settings)
    # run again on the existing topics: they pass the check, without a word on stderr
    again = run_cli(settings, "topics")
    assert again.returncode == 0, again.stderr
    assert "WARNING" not in again.stderr


def test_a_worker_start_creates_the_changelog_compacted(broker: BrokerInfo, tmp_path: Path) -> None:
    settings = fresh_settings(broker.bootstrap)
    with running_stack(settings, tmp_path) as stack:
        worker = stack.worker()
        wait_until(
            lambda: partition_count(settings, settings.changelog_topic) is not None,
            60,
            "the worker did not create its changelog",
        )
        assert worker.alive
    assert_created_as_specified(settings)


def test_a_changelog_with_a_delete_policy_stops_the_worker_with_one_line(
    broker: BrokerInfo, tmp_path: Path
) -> None:
    settings = fresh_settings(broker.bootstrap)
    ensure_topics(settings, list(settings.topics.all()))
    admin = AdminClient(confluent_common(settings))
    changelog = settings.changelog_topic
    futures = admin.create_topics([NewTopic(changelog, 8, 1, config={"cleanup.policy": "delete"})])
    futures[changelog].result(15)
    worker_env = replace(settings, data_dir=str(tmp_path / "w1"), web_port=free_port())
    done = run_cli(worker_env, "worker", "--loglevel", "warning")
    assert done.returncode != 0
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    (line,) = lines
    assert "Traceback" not in done.stderr
    assert "cleanup.policy=delete" in line
    assert (
        f"kafka-configs --bootstrap-server {settings.bootstrap_servers} --alter "
        f"--entity-type topics --entity-name {changelog} --add-config cleanup.policy=compact"
    ) in line
    # never silently altered
    assert describe_topic_configs(settings, [changelog])[changelog]["cleanup.policy"] == "delete"
    topics_cmd = run_cli(settings, "topics")
    assert topics_cmd.returncode != 0
    assert len([x for x in topics_cmd.stderr.splitlines() if x.strip()]) == 1


def _adopting_settings(broker: BrokerInfo) -> Settings:
    """Fresh topic names, and no KAFKA_TIMERS_PARTITIONS: the workers decide."""
    return replace(fresh_settings(broker.bootstrap), partitions=None)


def _fire_on_adopted_topic(settings: Settings, base: Path, count: int) -> None:
    """Start an oscillator and two workers without a partition count; timers fire."""
    with running_stack(settings, base) as stack:
        topic = f"{settings.topics.requests}-callbacks"
        ensure_topics(replace(settings, partitions=count), [topic])
        stack.oscillator()
        w1 = stack.worker("worker-1")
        stack.worker("worker-2")
        client = TimerClient(settings)
        now = time.time()
        scheduled = {client.schedule(topic, b"x", at=now + 3 + i % 5).id for i in range(40)}
        client.flush()
        with stack.reader(topic) as reader:
            reader.wait_for(lambda rs: set(fired_ids(rs)) >= scheduled, FIRE_TIMEOUT)
            reader.poll(1.0)
            counts = Counter(fired_ids(reader.records))
        assert counts == Counter(dict.fromkeys(scheduled, 1))
        for name in (settings.topics.ticks, settings.changelog_topic, settings.topics.fired):
            assert partition_count(settings, name) == count, name
        assert f"using the {count} partitions of existing topic" in w1.log_text()


def test_a_request_topic_created_first_by_a_producer_is_adopted(
    broker: BrokerInfo, tmp_path: Path
) -> None:
    settings = _adopting_settings(broker)
    requests = settings.topics.requests
    admin = AdminClient(confluent_common(settings))
    admin.create_topics([NewTopic(requests, 4, 1)])[requests].result(15)
    _fire_on_adopted_topic(settings, tmp_path, 4)


def test_an_auto_created_request_topic_is_adopted(broker: BrokerInfo, tmp_path: Path) -> None:
    settings = _adopting_settings(broker)
    requests = settings.topics.requests
    # A producer that reaches the broker first: its first record auto-creates the topic
    # with the broker's default partition count (4 on the dev broker).
    producer = Producer(confluent_producer(settings))
    producer.produce(requests, b"not a timer", b"k")
    assert producer.flush(30) == 0
    count = wait_until(
        lambda: partition_count(settings, requests), 15, "the broker did not auto-create it"
    )
    # 4 on the dev broker, num.partitions (1 by default) on Apache Kafka: never our 8
    _fire_on_adopted_topic(settings, tmp_path, count)


def test_a_dead_letter_topic_that_takes_smaller_records_than_the_payload_limit_stops_the_worker(
    broker: BrokerInfo, tmp_path: Path
) -> None:
    """One size budget (issue 21): the largest record the worker writes is known at start,
    from its producer and from the topics it writes; a payload limit that would not fit
    is refused with one line, never found out when the broker refuses a record."""
    settings = fresh_settings(broker.bootstrap)
    admin = AdminClient(confluent_common(settings))
    dlq = settings.topics.dlq
    small = {"max.message.bytes": "200000", "cleanup.policy": "delete"}
    admin.create_topics([NewTopic(dlq, 8, 1, config=small)])[dlq].result(15)
    worker_env = replace(settings, data_dir=str(tmp_path / "w1"), web_port=free_port())
    done = run_cli(worker_env, "worker", "--loglevel", "warning")
    assert done.returncode == 2
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert "KAFKA_TIMERS_MAX_PAYLOAD_BYTES=934464" in lines[0]
    assert f"topic {dlq!r} takes up to max.message.bytes=200000" in lines[0]
    assert "at most 134364" in lines[0]


def test_the_topics_command_creates_the_control_and_demand_topics(broker: BrokerInfo) -> None:
    """Both are created by the topics module's one creation path, as specified, and
    found again on a second run."""
    from app.kafka.demand import DEMAND_CONFIG, demand_topic
    from app.kafka.topic_config import CONTROL_CONFIG, control_topic

    settings = fresh_settings(broker.bootstrap)
    for _ in range(2):
        done = run_cli(settings, "topics")
        assert done.returncode == 0, done.stderr
    control, demand = control_topic(settings), demand_topic(settings)
    assert partition_count(settings, control) == 1
    assert partition_count(settings, demand) == 1
    described = describe_topic_configs(settings, [control, demand])
    for name, config in ((control, CONTROL_CONFIG), (demand, DEMAND_CONFIG)):
        for key, value in config.items():
            assert described[name].get(key) == value, f"{name}: {key}"
