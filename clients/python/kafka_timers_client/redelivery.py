"""Per-message acknowledgement, and redelivery after a visibility timeout, on a plain
Kafka consumer: what SQS and RabbitMQ give, done with one durable timer per message.

:class:`RedeliveringConsumer` wraps a confluent-kafka ``Consumer``. For every message it
hands out, it has first scheduled a timer (id from the message's topic, partition and
offset; due ``visibility_timeout`` seconds from now) whose callback is a copy of the
message (key, value, headers) for the queue topic (or a retry topic), and only once every
such timer of a batch was acknowledged by the broker does it commit the batch's offsets
and hand the batch out. :meth:`RedeliveringConsumer.ack` cancels the message's timer
with its token; a message not acknowledged in time comes back as a copy whose
``delivery-count`` header says how many times it has been handed out. The timer of a
message handed out ``max_deliveries`` times sends its copy to the dead-letter topic
instead.

Requests are produced without waiting (librdkafka batches them); a batch of schedules
is waited for once, before its offsets are committed, and acknowledgements are never
waited for. docs/redelivery.md has the guarantees and how they compare with kmq and with
Kafka's share groups.
"""

from __future__ import annotations

import base64
import json
import math
import secrets
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from kafka_timers_client.bounds import MAX_HEADERS, MAX_ID_CHARS, RESERVED_HEADER_PREFIXES
from kafka_timers_client.config import ClientConfig, ClientConfigSource, confluent_producer
from kafka_timers_client.errors import BrokerUnavailable, KafkaTimersError
from kafka_timers_client.message_headers import read_headers
from kafka_timers_client.protowire import ACTION_CANCEL, encode_varint

__all__ = [
    "DEAD_LETTER_REASON_HEADER",
    "DELIVERY_COUNT_HEADER",
    "DELIVERY_ORIGIN_HEADER",
    "RedeliveringConsumer",
    "RedeliveryStats",
    "cancel_request",
    "copy_headers",
    "deliveries",
    "origin",
    "schedule_request",
    "timer_id_of",
]

#: How many times this message (its first copy included) has been handed out: absent on
#: the original (1), ``2`` on the first redelivered copy, and so on.
DELIVERY_COUNT_HEADER = "delivery-count"
#: Where the first copy was read, ``topic/partition/offset``: the same on every copy, so a
#: receiver that must act once per message de-duplicates on it.
DELIVERY_ORIGIN_HEADER = "delivery-origin"
#: On a message sent to the dead-letter topic at once, without being handed out: why
#: (``max-deliveries`` is never written: such a copy carries its ``delivery-count``).
DEAD_LETTER_REASON_HEADER = "delivery-dead-letter-reason"

_OWN_HEADERS = (DELIVERY_COUNT_HEADER, DELIVERY_ORIGIN_HEADER, DEAD_LETTER_REASON_HEADER)
_LEN = 2
_VARINT = 0
#: What the service keeps of a record's budget for its key, id, token and headers.
_RECORD_RESERVE_BYTES = 65_536
_CANCEL_ACTION = encode_varint(8 << 3 | _VARINT) + encode_varint(ACTION_CANCEL)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (``number`` at most 15: a one-byte tag)."""
    size = len(payload)
    if size < 0x80:  # the common case, without the varint loop
        return bytes((number << 3 | _LEN, size)) + payload
    return bytes((number << 3 | _LEN,)) + encode_varint(size) + payload


def _headers(message: Message) -> list[tuple[str, bytes]]:
    """``message``'s headers as ``(name, bytes)`` pairs (text values encoded, null empty;
    none when a header name is not UTF-8: see :mod:`.message_headers`)."""
    return list(read_headers(message)[0])


def _place(message: Message) -> tuple[str, int, int]:
    """Topic, partition and offset of a message read from Kafka (never None then)."""
    return message.topic() or "", message.partition() or 0, message.offset() or 0


def deliveries(message: Message) -> int:
    """How many times ``message`` has been handed out, this time included (1 for a
    message that was never redelivered)."""
    for name, value in _headers(message):
        if name == DELIVERY_COUNT_HEADER and value:
            try:
                return max(1, int(value))
            except ValueError:
                return 1
    return 1


def origin(message: Message) -> str:
    """Where ``message``'s first copy was read (``topic/partition/offset``): the same on
    every redelivered copy, so it names the message across its copies."""
    for name, value in _headers(message):
        if name == DELIVERY_ORIGIN_HEADER and value:
            return value.decode(errors="replace")
    return "/".join(map(str, _place(message)))


def timer_id_of(namespace: str, topic: str, partition: int, offset: int) -> str:
    """The id of the redelivery timer of the message at ``topic[partition]@offset``."""
    return f"{namespace}/{topic}/{partition}/{offset}"


def copy_headers(message: Message, count: int) -> list[tuple[str, bytes]]:
    """The headers of ``message``'s next copy: its own, less the service's ``timer-*``
    (the worker writes them afresh) and its old count; its origin; ``count``."""
    headers: list[tuple[str, bytes]] = []
    has_origin = False
    for name, value in _headers(message):
        if name[:10].lower().startswith(RESERVED_HEADER_PREFIXES) or name == DELIVERY_COUNT_HEADER:
            continue
        has_origin = has_origin or name == DELIVERY_ORIGIN_HEADER
        headers.append((name, value))
    if not has_origin:
        headers.append((DELIVERY_ORIGIN_HEADER, origin(message).encode()))
    headers.append((DELIVERY_COUNT_HEADER, str(count).encode()))
    return headers


def schedule_request(
    topic: str,
    key: bytes | None,
    value: bytes | None,
    headers: list[tuple[str, bytes]],
    timer_id: str,
    token: str,
    due: int,
    due_field: bytes | None = None,
) -> bytes | str:
    """The request for a timer that sends ``key``, ``value`` and ``headers`` to ``topic``
    at ``due``: protobuf (fields numbered as in ``future.proto``), or JSON when the key
    is not UTF-8 (protobuf carries the key as text). A reason (``str``) when no request
    can carry it: too many headers, an id too long, a key and header values that are
    both bytes. ``due_field``: ``due`` already encoded (one per batch)."""
    if len(headers) > MAX_HEADERS:
        return "too-many-headers"
    if len(timer_id) > MAX_ID_CHARS:
        return "id-too-long"
    if key is not None:
        try:
            key.decode()
        except UnicodeDecodeError:
            return _json_request(topic, key, value, headers, timer_id, token, due)
    parts = [_field(1, topic.encode())]
    if key is not None:
        parts.append(_field(2, key))
    if value is not None:
        parts.append(_field(3, value))
    parts.append(_field(4, timer_id.encode()))
    parts.append(_field(5, token.encode()))
    parts.append(due_field or encode_varint(6 << 3 | _VARINT) + encode_varint(due))
    for name, hvalue in headers:
        parts.append(_field(7, _field(1, name.encode()) + _field(2, hvalue)))
    return b"".join(parts)


def _json_request(
    topic: str,
    key: bytes,
    value: bytes | None,
    headers: list[tuple[str, bytes]],
    timer_id: str,
    token: str,
    due: int,
) -> bytes | str:
    """The schedule as a JSON request (``key_b64``); its headers must be distinct text."""
    text_headers: dict[str, str] = {}
    for name, hvalue in headers:
        try:
            text = hvalue.decode()
        except UnicodeDecodeError:
            return "binary-key-and-headers"
        if name in text_headers:
            return "binary-key-and-headers"
        text_headers[name] = text
    doc: dict[str, Any] = {
        "topic": topic,
        "key_b64": base64.b64encode(key).decode(),
        "id": timer_id,
        "token": token,
        "at": due,
        "headers": text_headers,
    }
    if value is not None:
        doc["value_b64"] = base64.b64encode(value).decode()
    return json.dumps(doc).encode()


def cancel_request(timer_id: str, token: str) -> bytes:
    """The protobuf request that cancels ``timer_id`` (an acknowledgement)."""
    return _field(4, timer_id.encode()) + _field(5, token.encode()) + _CANCEL_ACTION


@dataclass
class RedeliveryStats:
    """What a :class:`RedeliveringConsumer` did (counts since it was made)."""

    #: Messages handed to the application, each with its timer durably scheduled.
    handed_out: int = 0
    #: Acknowledgements sent (cancels of timers).
    acked: int = 0
    #: Of ``handed_out``, messages whose timer sends them to the dead-letter topic.
    last_chance: int = 0
    #: Messages sent to the dead-letter topic at once, never handed out (a copy could not
    #: be carried by a timer request: too many headers, too large).
    dead_lettered_now: int = 0
    #: Requests the broker refused (schedules are retried with their batch; a refused
    #: acknowledgement means its message comes back after the timeout).
    refused: int = 0


class RedeliveringConsumer:
    """A confluent-kafka consumer whose messages are acknowledged one by one.

    The consumer is the application's: made with ``enable.auto.commit=False``,
    subscribed (or assigned) by it, and closed by it after :meth:`close`. Read with
    :meth:`consume` or :meth:`poll`, never with the consumer itself; call :meth:`ack`
    for each message once it is processed.

    Args:
        consumer: the confluent-kafka consumer to read with.
        config: where the kafka-timers service is (as for :class:`TimerClient`).
        dead_letter_topic: where a message goes once it has been handed out
            ``max_deliveries`` times without an acknowledgement.
        visibility_timeout: whole seconds a handed-out message has to be acknowledged
            before a copy of it comes back (timers fire on whole seconds: it comes back
            within about a second after that).
        max_deliveries: how many times a message is handed out at most.
        retry_topic: where copies go; by default the topic the message was read from.
            Subscribe the consumer to it too.
        namespace: the prefix of the timer ids; each group that reads the same topics
            with redelivery needs its own (its group id, say).
        batch_size: messages read, scheduled and committed together.
        max_value_bytes: the largest value a copy may carry: the service's payload limit
            (``KAFKA_TIMERS_MAX_PAYLOAD_BYTES``; by default, as the service's default,
            the client's ``message_max_bytes`` less 65,536). A larger message goes to
            the dead-letter topic at once.
        clock: wall clock, epoch seconds.
        producer_conf: librdkafka settings on top of the client's.
    """

    def __init__(
        self,
        consumer: Consumer,
        config: ClientConfig | ClientConfigSource | str,
        *,
        dead_letter_topic: str,
        visibility_timeout: int = 30,
        max_deliveries: int = 5,
        retry_topic: str | None = None,
        namespace: str = "redelivery",
        batch_size: int = 500,
        max_value_bytes: int | None = None,
        clock: Callable[[], float] = time.time,
        producer_conf: Mapping[str, Any] | None = None,
    ) -> None:
        if isinstance(config, str):
            config = ClientConfig(bootstrap_servers=config)
        elif not isinstance(config, ClientConfig):
            config = config.client_config()
        if not (isinstance(visibility_timeout, int) and 1 <= visibility_timeout <= 86400 * 365):
            raise KafkaTimersError(
                f"visibility_timeout must be whole seconds, 1 or more, not {visibility_timeout!r}"
            )
        if max_deliveries < 1:
            raise KafkaTimersError(f"max_deliveries must be 1 or more, not {max_deliveries}")
        if not dead_letter_topic:
            raise KafkaTimersError("a dead-letter topic is needed")
        self.config = config
        self.consumer = consumer
        self.dead_letter_topic = dead_letter_topic
        self.retry_topic = retry_topic
        self.visibility_timeout = visibility_timeout
        self.max_deliveries = max_deliveries
        self.namespace = namespace
        self.batch_size = batch_size
        self.max_value_bytes = (
            config.message_max_bytes - _RECORD_RESERVE_BYTES
            if max_value_bytes is None
            else max_value_bytes
        )
        self.stats = RedeliveryStats()
        self._clock = clock
        self._request_topic = config.request_topic
        # One token for every timer this consumer schedules: only this consumer acks
        # the messages it handed out. A restarted consumer schedules again the messages
        # past the committed offsets under the same ids, which replaces those timers.
        self._token = secrets.token_hex(12)
        self._cancel_tail = _field(5, self._token.encode()) + _CANCEL_ACTION
        self._errors: list[str] = []
        self._acks_since_poll = 0
        self._ready: deque[Message] = deque()
        settings = {
            # Acks are not waited for, schedules once per batch: let librdkafka batch.
            "linger.ms": 5,
            # Acks and schedules name distinct timers, and a schedule is acknowledged
            # before its message is handed out (so before its ack is sent): no order
            # between requests in flight matters.
            "max.in.flight.requests.per.connection": 5,
            "delivery.report.only.error": True,
            "on_delivery": self._on_delivery,
            "queue.buffering.max.messages": 1_000_000,
        }
        settings.update(producer_conf or {})
        self._producer = Producer(confluent_producer(config, **settings))

    # -- reading ---------------------------------------------------------------------

    def consume(self, num_messages: int | None = None, timeout: float = 1.0) -> list[Message]:
        """Up to ``num_messages`` (default ``batch_size``) messages, each with its
        redelivery timer durably scheduled and its offset committed; ``[]`` if none came
        within ``timeout`` seconds.

        Raises :class:`BrokerUnavailable` if the broker did not take the batch's timers:
        nothing of that batch was handed out or committed, and the consumer is moved back
        to it, so the next call reads it again.
        """
        if self._ready:
            batch = list(self._ready)
            self._ready.clear()
            return batch
        wanted = num_messages or self.batch_size
        read = self.consumer.consume(wanted, timeout)
        out: list[Message] = []
        ends: dict[tuple[str, int], int] = {}
        starts: dict[tuple[str, int], int] = {}
        due = math.ceil(self._clock() + self.visibility_timeout)
        due_field = encode_varint(6 << 3 | _VARINT) + encode_varint(due)
        self.stats.refused += len(self._errors)  # acks refused since the last batch
        self._errors.clear()
        for message in read:
            err = message.error()
            if err is not None:
                # An end of partition, or an error librdkafka recovers from by itself.
                if err.fatal():
                    raise KafkaException(err)
                continue
            topic, partition, offset = _place(message)
            place = (topic, partition)
            starts.setdefault(place, offset)
            ends[place] = offset + 1
            if self._schedule(message, due, due_field):
                out.append(message)
        if not starts:
            return out
        remaining = self._producer.flush(max(15.0, self.config.session_timeout))
        if remaining or self._errors:
            detail = self._errors[0] if self._errors else f"{remaining} requests unacknowledged"
            self.stats.refused += len(self._errors)
            self._errors.clear()
            for (topic, partition), offset in starts.items():
                self.consumer.seek(TopicPartition(topic, partition, offset))
            raise BrokerUnavailable(
                f"the redelivery timers of {len(read)} messages were not all accepted by the "
                f"broker ({detail}): none was handed out; the next read retries them"
            )
        self.consumer.commit(
            offsets=[TopicPartition(t, p, o) for (t, p), o in ends.items()], asynchronous=False
        )
        self.stats.handed_out += len(out)
        return out

    def poll(self, timeout: float = 1.0) -> Message | None:
        """One message, as :meth:`consume` hands them out (batches are read ahead)."""
        if not self._ready:
            self._ready.extend(self.consume(self.batch_size, timeout))
        return self._ready.popleft() if self._ready else None

    def _schedule(self, message: Message, due: int, due_field: bytes) -> bool:
        """Queue the timer of ``message`` (its copy due at ``due``); False if the message
        went to the dead-letter topic at once instead."""
        count = deliveries(message)
        last = count >= self.max_deliveries
        source, partition, offset = _place(message)
        topic = self.dead_letter_topic if last else (self.retry_topic or source)
        timer_id = timer_id_of(self.namespace, source, partition, offset)
        headers = copy_headers(message, count if last else count + 1)
        value = message.value()
        if value is not None and len(value) > self.max_value_bytes:
            self._dead_letter_now(message, "too-large")
            return False
        request = schedule_request(
            topic, message.key(), value, headers, timer_id, self._token, due, due_field
        )
        if isinstance(request, str):
            self._dead_letter_now(message, request)
            return False
        try:
            self._produce(request, timer_id.encode())
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.MSG_SIZE_TOO_LARGE:
                raise
            self._dead_letter_now(message, "too-large")
            return False
        if last:
            self.stats.last_chance += 1
        return True

    def _dead_letter_now(self, message: Message, reason: str) -> None:
        """Send ``message`` to the dead-letter topic as it is, with the reason: it cannot
        be protected by a timer, so it is not handed out."""
        headers: list[tuple[str, str | bytes | None]] = list(_headers(message))
        headers.append((DEAD_LETTER_REASON_HEADER, reason.encode()))
        headers.append((DELIVERY_ORIGIN_HEADER, origin(message).encode()))
        self._producer.produce(
            self.dead_letter_topic, message.value(), message.key(), headers=headers
        )
        self.stats.dead_lettered_now += 1

    # -- acknowledging -----------------------------------------------------------------

    def ack(self, message: Message) -> None:
        """``message`` is processed: cancel its timer, so it never comes back (unless
        the timer fired already: then its copy comes back with its delivery count).

        Returns at once: the cancel is batched with others and never waited for. A
        message whose cancel the broker refuses comes back after the timeout (counted in
        ``stats.refused``). :meth:`flush` waits until every ack is with the broker.
        """
        # timer_id_of, inlined: this is the hot path.
        timer_id = f"{self.namespace}/{message.topic()}/{message.partition()}/{message.offset()}"
        encoded = timer_id.encode()
        self._produce(_field(4, encoded) + self._cancel_tail, encoded)
        self.stats.acked += 1
        self._acks_since_poll += 1
        if self._acks_since_poll >= 256:
            self._acks_since_poll = 0
            self._producer.poll(0)

    def _produce(self, value: bytes, key: bytes) -> None:
        # Positional: keywords cost confluent-kafka a dict look-up each (see client.py).
        while True:
            try:
                self._producer.produce(self._request_topic, value, key)
                return
            except BufferError:
                self._producer.poll(0.05)

    def _on_delivery(self, err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            self._errors.append(str(err))

    def flush(self, timeout: float = 15.0) -> None:
        """Wait until every ack sent so far is with the broker (after this, no crash of
        this process can make an acked message come back, but a race with its timeout).
        Raises :class:`BrokerUnavailable` if some were not taken."""
        remaining = self._producer.flush(timeout)
        if remaining or self._errors:
            detail = self._errors[0] if self._errors else f"{remaining} acks unacknowledged"
            self.stats.refused += len(self._errors)
            self._errors.clear()
            raise BrokerUnavailable(f"acknowledgements not taken by the broker: {detail}")

    def close(self) -> None:
        """Flush the acks, then release the producer. Messages read ahead by
        :meth:`poll` and not handed out come back after the timeout. The consumer stays
        open: close it after this."""
        try:
            self.flush()
        finally:
            self._producer.close()  # type: ignore[attr-defined]
