"""Same-run baselines for latency figures: a bare sleeper, and a raw confluent-kafka echo.

Both run *while* the scenario they are compared with runs, on the same loaded cores:

- :class:`BoundaryProbe` wakes at each second boundary with the oscillator's own wait
  (:func:`oscillator.clock.wait_for_second`) and notes how late it woke. That is the
  floor of the oscillator's tick delay on this machine right now: scheduler jitter.
- It also sends one probe record per partition at each boundary, and
  :class:`EchoResponder` consumes them and produces an echo with librdkafka, with the
  worker's fetch wait and producer settings. Echo timestamp minus boundary is what a
  timer service with no Faust, no RocksDB and no work at all would show as lateness.
"""

from __future__ import annotations

import json
import threading
import time
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition

from app.kafka.config import confluent_consumer, confluent_producer
from app.settings import Settings
from bench.scan import QUIET, read_topic, timestamp_ms
from oscillator.clock import wait_for_second

__all__ = ["BoundaryProbe", "EchoResponder", "echo_lateness"]

#: The worker's fetch wait (app.worker.faust_app.FETCH_MAX_WAIT_MS), so the echo waits alike.
FETCH_WAIT_MS = 50


class BoundaryProbe(threading.Thread):
    """Wakes at every second boundary; records how late, and sends one probe per partition."""

    def __init__(self, settings: Settings, topic: str, partitions: int) -> None:
        super().__init__(name="boundary-probe", daemon=True)
        self._producer = Producer(confluent_producer(settings, **{"linger.ms": 0, **QUIET}))
        self._topic = topic
        self._partitions = partitions
        self._halt = threading.Event()
        #: (second, seconds after its boundary the probe woke).
        self.wakeups: list[tuple[int, float]] = []

    def run(self) -> None:
        second = int(time.time()) + 1
        while not self._halt.is_set():
            woke = wait_for_second(second, time.time, self._halt.wait)
            if woke is None:
                break
            self.wakeups.append((second, woke - second))
            value = json.dumps({"second": second}).encode()
            for p in range(self._partitions):
                self._producer.produce(self._topic, value, str(second).encode(), partition=p)
            self._producer.poll(0)
            second = max(second + 1, int(time.time()))
        self._producer.flush(5)

    def stop(self) -> None:
        self._halt.set()
        self.join(10)


class EchoResponder(threading.Thread):
    """Echoes each probe record to another topic as soon as it is consumed."""

    def __init__(self, settings: Settings, source: str, echo: str, partitions: int) -> None:
        super().__init__(name="echo-responder", daemon=True)
        self._consumer = Consumer(
            confluent_consumer(
                settings,
                group_id=f"bench-echo-{uuid.uuid4().hex}",
                **{"enable.partition.eof": False, "fetch.wait.max.ms": FETCH_WAIT_MS, **QUIET},
            )
        )
        self._consumer.assign([TopicPartition(source, p) for p in range(partitions)])
        self._producer = Producer(confluent_producer(settings, **QUIET))
        self._echo = echo
        self._halt = threading.Event()

    def run(self) -> None:
        try:
            while not self._halt.is_set():
                # poll, not consume(n, timeout): consume waits for n records or the
                # whole timeout, which would add up to the timeout to every echo.
                msg = self._consumer.poll(0.1)
                if msg is not None and msg.error() is None:
                    self._producer.produce(
                        self._echo, msg.value(), msg.key(), partition=msg.partition() or 0
                    )
                self._producer.poll(0)
        finally:
            self._producer.flush(5)
            self._consumer.close()

    def stop(self) -> None:
        self._halt.set()
        self.join(10)


def echo_lateness(settings: Settings, echo_topic: str) -> list[float]:
    """Seconds from each probe's boundary to its echo's timestamp."""
    return read_topic(
        settings,
        echo_topic,
        lambda m: timestamp_ms(m) / 1000 - int(m.key() or b"0"),
    )
