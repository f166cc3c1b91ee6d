"""The control topic on Kafka: send a control record, read the topic to its end, tail it.

The records' meaning is :mod:`app.core.control`; the worker applies them
(:mod:`app.worker.control`), ``kafka-timers pause``/``resume``/``rate`` send them.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as _TopicPartition

from app.core.control import (
    SIGNATURE_HEADER,
    ControlRecord,
    cancel_bulk_record,
    read_signed_control,
    sign_control,
)
from app.core.fired import FiredKind
from app.core.printable import printable
from app.core.timer_filter import TimerFilter
from app.kafka.config import confluent_consumer, confluent_producer
from app.kafka.topic_config import control_topic
from app.settings import Settings
from kafka_timers_client.errors import BrokerUnavailable, ConfigurationError
from kafka_timers_client.message_headers import read_headers

__all__ = ["ControlReader", "bulk_answer", "bulk_cancel", "send_control"]

log = logging.getLogger(__name__)

#: librdkafka's own lines of these clients (a CLI error must stay one line).
_LIBRDKAFKA_LOG = logging.getLogger("kafka_timers.librdkafka.control")


def send_control(settings: Settings, key: bytes, value: bytes | None, timeout: float) -> int:
    """Write one control record (``value`` None: a tombstone), signed with the
    deployment's control secret (:func:`app.core.control.sign_control`), and return its
    offset once the broker acknowledged it; :class:`BrokerUnavailable` if it did not in
    time, :class:`ConfigurationError` (before anything is sent) if
    ``KAFKA_TIMERS_CONTROL_SECRET`` is unset: the workers would ignore the record."""
    secret = settings.control_secret
    if secret is None:
        raise ConfigurationError(
            "KAFKA_TIMERS_CONTROL_SECRET is unset: control records are signed with the "
            "deployment's control secret, and every worker ignores a record without it"
        )
    producer = Producer(
        confluent_producer(
            settings, logger=_LIBRDKAFKA_LOG, **{"message.timeout.ms": int(timeout * 1000)}
        )
    )
    result: dict[str, object] = {}

    def delivered(err: KafkaError | None, msg: object) -> None:
        result["err"] = err
        result["offset"] = msg.offset() if err is None else None  # type: ignore[attr-defined]

    topic = control_topic(settings)
    try:
        producer.produce(
            topic,
            value=value,
            key=key,
            headers=[(SIGNATURE_HEADER, sign_control(secret, topic, key, value))],
            on_delivery=delivered,
        )
    except KafkaException as exc:
        raise BrokerUnavailable(f"sending to {topic!r}: {exc}") from exc
    producer.flush(timeout)
    if "err" not in result:
        raise BrokerUnavailable(f"the broker did not acknowledge the record on {topic!r}")
    if result["err"] is not None:
        raise BrokerUnavailable(f"the broker refused the record on {topic!r}: {result['err']}")
    offset = result["offset"]
    assert isinstance(offset, int)
    return offset


class ControlReader:
    """Reads every partition of the control topic from its start: to its end once
    (:meth:`read_to_end`, the end as the fetch reports it, not ListOffsets), then on
    (:meth:`poll`). Only records signed with the settings' control secret are applied;
    the rest are ignored like unreadable ones. One thread at a time."""

    def __init__(self, settings: Settings, on_ignored: Callable[[], object] = lambda: None) -> None:
        self.topic = control_topic(settings)
        self._secret = settings.control_secret
        self._consumer = Consumer(
            confluent_consumer(
                settings,
                group_id=f"kafka-timers-control-{uuid.uuid4().hex}",
                logger=_LIBRDKAFKA_LOG,
                **{"fetch.wait.max.ms": 200},
            )
        )
        self._partitions: set[int] = set()
        self._at_end: set[int] = set()
        #: Records read so far (read to end and polled), all of them.
        self.count = 0
        #: Called once for each record read and ignored (a worker counts them).
        self.on_ignored = on_ignored

    def _assign(self, timeout: float) -> None:
        try:
            meta = self._consumer.list_topics(self.topic, timeout=timeout)
        except KafkaException as exc:
            raise BrokerUnavailable(f"metadata of {self.topic!r}: {exc}") from exc
        info = meta.topics.get(self.topic)
        if info is None or info.error is not None or not info.partitions:
            raise BrokerUnavailable(f"control topic {self.topic!r} not found")
        self._partitions = set(info.partitions)
        self._consumer.assign(
            [_TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in sorted(self._partitions)]
        )

    def read_to_end(self, apply: Callable[[ControlRecord], Any], timeout: float) -> int:
        """Apply every record up to the end of every partition; return how many.
        :class:`BrokerUnavailable` if the end is not reached within ``timeout``."""
        deadline = time.monotonic() + timeout
        self._assign(timeout)
        read = 0
        while self._at_end != self._partitions:
            if time.monotonic() >= deadline:
                raise BrokerUnavailable(
                    f"did not reach the end of control topic {self.topic!r} within {timeout:g}s"
                )
            read += self.poll(apply, 0.2)
        return read

    def poll(self, apply: Callable[[ControlRecord], Any], timeout: float) -> int:
        """Apply whatever arrives within ``timeout``; return how many records."""
        read = 0
        for msg in self._consumer.consume(500, timeout):
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    self._at_end.add(msg.partition() or 0)
                else:
                    log.warning("reading control topic %r: %s", self.topic, err)
                continue
            self._at_end.discard(msg.partition() or 0)
            key, value = msg.key(), msg.value()
            headers, _unreadable = read_headers(msg)  # then unsigned: ignored, with why
            record = read_signed_control(
                key.encode() if isinstance(key, str) else key,
                value.encode() if isinstance(value, str) else value,
                headers,
                secret=self._secret,
                topic=self.topic,
            )
            if record.kind == "ignored":
                log.warning(
                    "control record %s[%s]@%s ignored: %s",
                    self.topic,
                    msg.partition(),
                    msg.offset(),
                    printable(record.reason),
                )
                self.on_ignored()
            else:
                apply(record)
            read += 1
        self.count += read
        return read

    def close(self) -> None:
        self._consumer.close()


def bulk_answer(value: bytes | None, request_id: str) -> dict[str, Any] | None:
    """One partition's answer to bulk cancel ``request_id``, read from a fired-topic
    record's value, or None if the record is not one: anything can be written to the
    fired topic, so an answer counts only with whole numbers where numbers are added up
    (``partition``, ``matched``, ``cancelled``), never a float past any integer or a
    string that would stop the command with a traceback."""
    try:
        doc = json.loads(value or b"")
    except (ValueError, RecursionError):
        return None
    if (
        isinstance(doc, dict)
        and doc.get("event") == FiredKind.BULK_CANCEL.value
        and doc.get("request") == request_id
        and "partition" in doc
        and all(type(doc.get(name, 0)) is int for name in ("partition", "matched", "cancelled"))
    ):
        return doc
    return None


def bulk_cancel(
    settings: Settings,
    flt: TimerFilter,
    *,
    dry_run: bool,
    wait: float,
    by: str,
    timeout: float,
) -> dict[str, Any]:
    """Send a bulk cancel (or count) to every worker through the control topic and add
    up the answers each partition gives on the fired topic, waiting at most ``wait``
    seconds for them all; then tombstone the request, so no later worker applies it.

    The answers are read from where the fired topic ended before the request was sent
    (by ListOffsets, which is never past the true end: reading from an earlier offset
    only reads more). Returns the sums, the partitions that answered and those that did
    not.
    """
    request_id = uuid.uuid4().hex
    fired = settings.topics.fired
    consumer = Consumer(
        confluent_consumer(
            settings, group_id=f"kafka-timers-bulk-{request_id}", logger=_LIBRDKAFKA_LOG
        )
    )
    try:
        try:
            meta = consumer.list_topics(fired, timeout=timeout)
            info = meta.topics.get(fired)
            if info is None or info.error is not None or not info.partitions:
                raise BrokerUnavailable(f"fired topic {fired!r} not found")
            partitions = sorted(info.partitions)
            starts = [
                _TopicPartition(
                    fired, p, consumer.get_watermark_offsets(_TopicPartition(fired, p), timeout)[1]
                )
                for p in partitions
            ]
        except KafkaException as exc:
            raise BrokerUnavailable(f"reading the end of {fired!r}: {exc}") from exc
        consumer.assign(starts)
        key, value = cancel_bulk_record(
            request_id, flt, dry_run=dry_run, by=by, at_ms=int(time.time() * 1000)
        )
        offset = send_control(settings, key, value, timeout)
        answers: dict[int, dict[str, Any]] = {}
        deadline = time.monotonic() + wait
        try:
            while len(answers) < len(partitions) and time.monotonic() < deadline:
                for msg in consumer.consume(1000, 0.5):
                    if msg.error() is not None or msg.key() != key:
                        continue
                    answer = bulk_answer(msg.value(), request_id)
                    if answer is not None:
                        answers.setdefault(answer["partition"], answer)
        finally:
            send_control(settings, key, None, timeout)  # done: no later worker applies it
    finally:
        consumer.close()
    refused = next((a for a in answers.values() if a.get("outcome") == "refused"), None)
    return {
        "request": request_id,
        "dry_run": dry_run,
        # The workers' reason when they refused it (its filter cannot be read), else None.
        "refused": None if refused is None else str(refused.get("reason", ""))[:300],
        "filter": flt.to_query(),
        "matched": sum(a.get("matched", 0) for a in answers.values()),
        "cancelled": sum(a.get("cancelled", 0) for a in answers.values()),
        "partitions_answered": len(answers),
        "partitions_missing": [p for p in partitions if p not in answers],
        "control_offset": offset,
    }
