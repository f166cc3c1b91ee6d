"""The oscillator loop: at each second boundary, one tick to every tick-topic partition.

Ticks go to every partition explicitly (not by key), so every worker that may hold
timers for a second hears it, whatever partitioner produced the requests. Several
oscillators can run at once: workers ignore a tick for a second they have already seen.
A (re)started oscillator starts at the current second and never replays history: a
worker fires everything due up to the tick it receives, so a gap is caught up there.
"""

from __future__ import annotations

import functools
import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from oscillator.broker_clock import LOG_APPEND_TIME, BrokerClockCheck
from oscillator.clock import current_second, wait_for_second
from oscillator.metrics import OscillatorMetrics

__all__ = ["Oscillator"]

log = logging.getLogger(__name__)

#: How often the partition count of the tick topic is looked up again.
METADATA_REFRESH_SECONDS = 30.0
#: Longest the first few ticks wait for their delivery reports (the broker-clock probe).
PROBE_FLUSH_SECONDS = 1.0


class Oscillator:
    """Sends tick ``S`` to every partition of ``topic`` as soon as second ``S`` begins."""

    def __init__(
        self,
        producer_conf: dict[str, Any],
        topic: str,
        *,
        oscillator_id: str,
        metrics: OscillatorMetrics | None = None,
        clock: Callable[[], float] = time.time,
        clock_check: BrokerClockCheck | None = None,
        append_time: Callable[[int, int], int | None] | None = None,
    ) -> None:
        conf = dict(producer_conf)
        conf.update({"linger.ms": 0, "acks": "all"})
        self._producer = Producer(conf)
        self._topic = topic
        self._id = oscillator_id
        self._metrics = metrics or OscillatorMetrics()
        self._clock = clock
        self._partitions = 0
        self._partitions_checked = 0.0
        self._clock_check = clock_check
        #: ``(partition, offset) -> the broker's append time of that record``, if it says.
        self._append_time = append_time
        #: ``time.monotonic()`` when this oscillator started and last sent a tick (``/livez``).
        self.started = time.monotonic()
        self.last_sent: float | None = None

    def _partition_count(self) -> int:
        """The tick topic's partition count, looked up again every
        :data:`METADATA_REFRESH_SECONDS`.

        A lookup that fails (the broker away longer than its timeout) keeps the last count
        and is tried again at the next refresh: ticks keep being produced (librdkafka
        queues them until the broker is back). Letting it raise ended the oscillator,
        both of them in a 12 s broker outage (test_broker_restart).
        """
        if (
            not self._partitions
            or time.monotonic() - self._partitions_checked > METADATA_REFRESH_SECONDS
        ):
            try:
                meta = self._producer.list_topics(self._topic, timeout=10)
            except KafkaException as exc:
                log.warning(
                    "could not look up %s's partitions (keeping %d): %s",
                    self._topic,
                    self._partitions,
                    exc,
                )
                self._partitions_checked = time.monotonic()
                return self._partitions
            info = meta.topics.get(self._topic)
            count = len(info.partitions) if info is not None and info.error is None else 0
            if count:
                self._partitions = count
            self._partitions_checked = time.monotonic()
        return self._partitions

    def _on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            log.error("tick to %s[%s] failed: %s", msg.topic(), msg.partition(), err)

    def _on_probe_delivery(self, sent_ms: int, err: KafkaError | None, msg: Message) -> None:
        self._on_delivery(err, msg)
        if err is not None or self._clock_check is None:
            return
        timestamp_type, timestamp_ms = msg.timestamp()
        if timestamp_type == LOG_APPEND_TIME:
            self._clock_check.delivered(timestamp_ms, sent_ms, "LogAppendTime")
            return
        offset, partition = msg.offset(), msg.partition()
        appended = None
        if self._append_time is not None and offset is not None and partition is not None:
            appended = self._append_time(partition, offset)
        self._clock_check.delivered(appended, sent_ms, "ListOffsets append time")

    def send_tick(self, second: int) -> int:
        """Produce tick ``second`` to every partition; return how many partitions."""
        partitions = self._partition_count()
        sent_ms = int(self._clock() * 1000)
        value = json.dumps({"second": second, "oscillator": self._id, "sent_ms": sent_ms}).encode()
        key = str(second).encode()
        probe = self._clock_check is not None and not self._clock_check.done
        for p in range(partitions):
            on_delivery: Callable[[KafkaError | None, Message], None] = self._on_delivery
            if probe and p == 0:  # the broker's clock, where it stamps records (at start)
                on_delivery = functools.partial(self._on_probe_delivery, sent_ms)
            # The record timestamp is librdkafka's: the clock that decided the second had
            # come is ``sent_ms`` in the value, which the worker's clock check reads.
            self._producer.produce(self._topic, value, key, partition=p, on_delivery=on_delivery)
        if probe:
            # At start only: have the probe's delivery report (and the broker's stamp) now,
            # before another oscillator's tick lands behind it.
            self._producer.flush(PROBE_FLUSH_SECONDS)
        self._producer.poll(0)
        self.last_sent = time.monotonic()
        self._metrics.ticks.inc()
        self._metrics.tick_delay.observe(max(0.0, sent_ms / 1000 - second))
        return partitions

    def run(self, stop: threading.Event) -> None:
        """Tick until ``stop`` is set; then deliver what is queued and return."""
        second = current_second(self._clock)
        log.info("oscillator %s ticking %s from second %d", self._id, self._topic, second)
        try:
            while not stop.is_set():
                reached = wait_for_second(second, self._clock, stop.wait)
                if reached is None:
                    break
                # Behind by more than a second (suspended, overloaded)? Tick the current
                # second only: workers fire everything due up to it, gaps included.
                second = max(second, current_second(self._clock))
                self.send_tick(second)
                second += 1
        finally:
            self._producer.flush(5)
