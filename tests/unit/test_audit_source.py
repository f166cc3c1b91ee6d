"""Planning Kafka reads and translating client settings, without a broker or Spark."""

from __future__ import annotations

from dataclasses import replace

import pytest

from app.settings import SecuritySettings, Settings
from spark_audit.kafka_source import KafkaTopicReader, plan_ranges
from spark_audit.reading import jvm_kafka_options, python_source_options


def spans(ranges: list) -> list[tuple[int, int, int | None]]:
    return [(r.partition, r.start, r.end) for r in ranges]


def test_without_a_split_each_partition_is_one_range_read_to_its_end() -> None:
    ranges = plan_ranges("t", {1: (0, 50), 0: (5, 9)}, None)
    assert spans(ranges) == [(0, 5, None), (1, 0, None)]


def test_a_split_partition_ends_with_an_open_range_whatever_its_high_watermark() -> None:
    ranges = plan_ranges("t", {0: (0, 250), 1: (0, 0)}, 100)
    assert spans(ranges) == [(0, 0, 100), (0, 100, 200), (0, 200, None), (1, 0, None)]


def test_an_unknown_low_watermark_starts_at_the_beginning() -> None:
    assert spans(plan_ranges("t", {0: (-1001, -1001)}, 10)) == [(0, -2, None)]


def test_the_python_source_reads_with_the_service_client_settings_and_no_group() -> None:
    settings = replace(
        Settings(bootstrap_servers="b:9093"),
        security=SecuritySettings(protocol="SASL_SSL", sasl_mechanism="PLAIN", sasl_username="u"),
    )
    options = {**python_source_options(settings), "subscribe": "requests"}
    reader = KafkaTopicReader(options)
    assert reader.topic == "requests"
    assert reader.conf["bootstrap.servers"] == "b:9093"
    assert reader.conf["security.protocol"] == "SASL_SSL"
    assert reader.conf["sasl.username"] == "u"
    assert reader.conf["enable.partition.eof"] is True
    assert reader.conf["enable.auto.commit"] is False


def test_the_python_source_needs_a_topic() -> None:
    with pytest.raises(ValueError, match="subscribe"):
        KafkaTopicReader({"kafka.bootstrap.servers": "b:9092"})


def test_jvm_options_translate_sasl_and_the_ca_file() -> None:
    settings = replace(
        Settings(bootstrap_servers="b:9093"),
        security=SecuritySettings(
            protocol="SASL_SSL",
            sasl_mechanism="SCRAM-SHA-512",
            sasl_username="user",
            sasl_password='p"w',
            ssl_cafile="/etc/ca.pem",
        ),
    )
    options = jvm_kafka_options(settings)
    assert options["kafka.bootstrap.servers"] == "b:9093"
    assert options["kafka.sasl.mechanism"] == "SCRAM-SHA-512"
    assert options["kafka.sasl.jaas.config"] == (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="user" password="p\\"w";'
    )
    assert options["kafka.ssl.truststore.location"] == "/etc/ca.pem"
    assert jvm_kafka_options(Settings()) == {
        "kafka.bootstrap.servers": "127.0.0.1:9092",
        "kafka.security.protocol": "PLAINTEXT",
    }
