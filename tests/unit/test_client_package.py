"""The slim client (clients/python) and the service share one implementation: the
service's modules are the client's, its settings configure the client, and the client's
shared modules load no Kafka client (the worker's pure core imports them)."""

from __future__ import annotations

import importlib.util
from dataclasses import replace

import pytest

from app.kafka.config import confluent_consumer, confluent_producer
from app.settings import SecuritySettings, Settings, TopicNames
from kafka_timers_client import ClientConfig, TimerClient
from kafka_timers_client.config import confluent_producer as client_producer
from tests.support.cli import run_python


@pytest.mark.parametrize(
    "module",
    [
        "app.client",
        "app.kafka.fired_reader",
        *(
            f"app.core.{name}"
            for name in [
                "bounds",
                "calendars",
                "due",
                "errors",
                "late",
                "partitioner",
                "protowire",
                "recurrence",
                "spread",
            ]
        ),
    ],
)
def test_a_name_the_client_defines_has_one_import_path(module: str) -> None:
    """The service imports the client's modules where it uses them: no module of its own
    re-exports them under a second path."""
    assert importlib.util.find_spec(module) is None


def test_the_services_settings_become_the_clients_config() -> None:
    settings = replace(
        Settings(),
        bootstrap_servers="k1:9093,k2:9093",
        topics=TopicNames(requests="req", fired="fir"),
        security=SecuritySettings(
            protocol="SASL_SSL", sasl_mechanism="PLAIN", sasl_username="u", sasl_password="p"
        ),
        producer_message_max_bytes=2_000_000,
        session_timeout=9.0,
    )
    config = settings.client_config()
    assert (config.bootstrap_servers, config.request_topic, config.fired_topic) == (
        "k1:9093,k2:9093",
        "req",
        "fir",
    )
    producer = confluent_producer(settings)
    assert producer == client_producer(config)
    assert producer["partitioner"] == "murmur2_random"  # where the worker expects each id
    assert producer["message.max.bytes"] == 2_000_000
    assert producer["sasl.username"] == "u" and producer["security.protocol"] == "SASL_SSL"
    assert confluent_consumer(settings, "g")["session.timeout.ms"] == 9000


def test_a_bare_address_is_a_config_with_the_services_default_topics() -> None:
    client = TimerClient("127.0.0.1:1")
    try:
        assert client.config == ClientConfig(bootstrap_servers="127.0.0.1:1")
        assert (client.config.request_topic, client.config.fired_topic) == (
            Settings().topics.requests,
            Settings().topics.fired,
        )
    finally:
        client._producer.close()  # nothing was sent: no flush against a missing broker


def test_the_shared_modules_load_no_kafka_client() -> None:
    """The worker's core imports them: ``import kafka_timers_client.due`` must not load
    librdkafka (the package's top level names the client lazily)."""
    code = (
        "import sys, kafka_timers_client.due, kafka_timers_client.recurrence, "
        "kafka_timers_client.protowire, kafka_timers_client.fired, app.core.wheel\n"
        "print('confluent_kafka' in sys.modules)"
    )
    assert run_python(code, timeout=60).strip() == "False"
