"""Probe how the dev broker treats a transaction whose producer died (kill -9).

    .venv/bin/python -m bench.tansu_transactions_probe

Apache Kafka aborts such a transaction when ``transaction.timeout.ms`` passes, or when a
new producer with the same ``transactional.id`` calls ``init_transactions`` (fencing).
This prints what the broker at hand does, because exactly-once firing depends on it.
"""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import replace

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from app.dev.broker import DevBroker
from app.kafka.topics import ensure_topics
from app.settings import Settings

__all__ = ["probe"]

_ZOMBIE = """
import os, sys
from confluent_kafka import Producer
p = Producer({"bootstrap.servers": sys.argv[1], "transactional.id": "probe",
              "transaction.timeout.ms": 5000})
p.init_transactions(10); p.begin_transaction(); p.produce("t", b"zombie", partition=0); p.flush(5)
os._exit(0)
"""


def _read(bootstrap: str, isolation: str, seconds: float) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"probe-{isolation}",
            "isolation.level": isolation,
            "enable.partition.eof": True,
        }
    )
    consumer.assign([TopicPartition("t", 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is None:
            continue
        err = msg.error()
        if err is not None:
            if err.code() == KafkaError._PARTITION_EOF and b"after" in values:
                break
            continue
        values.append(msg.value() or b"")
    consumer.close()
    return values


def probe(wait: float = 10.0) -> dict[str, object]:
    """Run the probe on a fresh dev broker; return what each reader saw."""
    with DevBroker() as broker:
        ensure_topics(replace(Settings(), bootstrap_servers=broker.bootstrap, partitions=1), ["t"])
        subprocess.run([sys.executable, "-c", _ZOMBIE, broker.bootstrap], check=True)
        after = Producer({"bootstrap.servers": broker.bootstrap})
        after.produce("t", b"after", partition=0)
        after.flush(5)
        result: dict[str, object] = {
            "read_uncommitted": _read(broker.bootstrap, "read_uncommitted", wait),
            f"read_committed_within_{wait:g}s": _read(broker.bootstrap, "read_committed", wait),
        }
        fencer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "probe"})
        fencer.init_transactions(30)
        result["read_committed_after_fencing"] = _read(broker.bootstrap, "read_committed", wait)
        return result


if __name__ == "__main__":
    for name, seen in probe().items():
        print(f"{name:<32} {seen}")
