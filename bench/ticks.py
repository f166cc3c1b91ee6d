"""Ticks sent by the benchmark itself, where a scenario needs one at a chosen moment.

Exactly what an oscillator sends (key = the epoch second as decimal text, a JSON value,
one record to every partition): the worker cannot tell the difference. The fire
scenario uses it to make a bucket due the moment ingest has finished, instead of
guessing the ingest time in advance.
"""

from __future__ import annotations

import json
import time

from confluent_kafka import Producer

__all__ = ["send_tick"]


def send_tick(producer: Producer, topic: str, partitions: int, second: int) -> float:
    """Send tick ``second`` to every partition of ``topic``; return when it was sent (epoch s)."""
    sent = time.time()
    value = json.dumps({"second": second, "oscillator": "bench", "sent_ms": int(sent * 1000)})
    for partition in range(partitions):
        producer.produce(topic, value.encode(), str(second).encode(), partition=partition)
    if producer.flush(10):
        raise RuntimeError("the benchmark's tick was not acknowledged")
    return sent
