"""Everything the worker writes to Kafka, through one confluent-kafka producer.

Callbacks, audit records, dead letters and the timer table's changelog all go through
here. librdkafka produces an order of magnitude faster than Faust's own producer, and
one producer means one :meth:`flush` tells us that *everything* written so far is
durable before the worker acknowledges the records that caused it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from bisect import bisect_right
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from app.core.backoff import Backoff
from app.core.budget import DEFAULT_MAX_RECORD_BYTES, fits, record_bytes
from app.core.fired import (
    Audit,
    FiredKind,
    FiredRecord,
    SkipReason,
    extra_json,
    fired_jsons,
    json_string,
)
from app.core.raw_record import RawRecord
from app.core.routing import HOP_HEADER
from app.core.timer import Timer
from app.worker.output_errors import REFUSED_RECORD_ERRORS, DeliveryFailure, TransactionAborted
from app.worker.tracing import Tracing
from kafka_timers_client.debounce import DEBOUNCED_HEADER
from kafka_timers_client.errors import RejectReason

__all__ = [
    "REFUSED_RECORD_ERRORS",
    "DeliveryFailure",
    "OutputProducer",
    "TransactionAborted",
]

log = logging.getLogger(__name__)

#: The partition argument that lets the producer's partitioner choose
#: (librdkafka's ``RD_KAFKA_PARTITION_UA``; confluent-kafka's own default for it).
_ANY_PARTITION = -1
#: Between two attempts of a transactional producer's initialisation at start.
INIT_TRANSACTIONS_BACKOFF = Backoff(initial=1.0, maximum=30.0, factor=2.0)

#: Record headers, typed as confluent-kafka's produce() takes them (all ours are bytes).
HeaderList = list[tuple[str, str | bytes | None]]


class OutputProducer:
    """Produces the worker's records and reports which callbacks could not be delivered."""

    def __init__(
        self,
        conf: dict[str, Any],
        *,
        worker_id: str,
        fired_topic: str,
        dlq_topic: str,
        transactional_id: str | None = None,
        clock: Callable[[], float] = time.time,
        max_record_bytes: int | None = None,
        tracing: Tracing | None = None,
    ) -> None:
        conf = dict(conf)
        # A request must never create a topic (Apache Kafka's broker default and the dev
        # broker would): callbacks to a missing topic are dead-lettered instead
        # (app.worker.topic_directory). A topic that vanishes between the worker's lookup
        # and its produce then fails after this wait, not after librdkafka's 30 s.
        conf.update({"allow.auto.create.topics": False, "topic.metadata.propagation.max.ms": 2000})
        if transactional_id is not None:
            # A dead worker's open transaction blocks read_committed readers of its
            # partitions (the next owner's recovery among them) until this timeout.
            conf.update(
                {
                    "transactional.id": transactional_id,
                    "enable.idempotence": True,
                    "transaction.timeout.ms": 15000,
                    "message.timeout.ms": 15000,  # librdkafka: must not exceed the above
                }
            )
            conf.pop("max.in.flight.requests.per.connection", None)
        self._producer = Producer(conf)
        #: The largest record this output can write: its ``message.max.bytes``, or less
        #: where a topic it writes takes smaller records (``max_record_bytes``).
        self.max_record_bytes = min(
            int(conf.get("message.max.bytes", DEFAULT_MAX_RECORD_BYTES)),
            max_record_bytes or DEFAULT_MAX_RECORD_BYTES * 1000,
        )
        #: Whether every unit of work is one Kafka transaction (exactly-once mode).
        self.transactional = transactional_id is not None
        if self.transactional:
            # Fences an earlier incarnation with the same id and aborts its open transaction.
            self._init_transactions()
        self._worker_id = worker_id
        self._fired_topic = fired_topic
        self._dlq_topic = dlq_topic
        self._clock = clock
        #: Callbacks the broker refused since the last :meth:`take_failures`.
        self._failed: list[tuple[Timer, str]] = []
        #: Highest changelog offset acknowledged, per changelog partition.
        self.changelog_acked: dict[int, int] = {}
        #: Per changelog partition whose store checks that it is the only writer: the
        #: offset the store was caught up to, and how many of this output's records
        #: were acknowledged past it since (:meth:`count_changelog_after`).
        self.changelog_counted: dict[int, list[int]] = {}
        #: The offsets of the counted records, until taken (:meth:`take_own_changelog`).
        self._changelog_own: dict[int, list[int]] = {}
        #: Changelog records the broker refused: the table would diverge from its changelog.
        self._changelog_errors: list[str] = []
        #: :meth:`_changelog_delivered` bound once: a bound method made for every changelog
        #: record (and freed with its delivery report) was a seventh of its produce.
        self._on_changelog = self._changelog_delivered
        self._worker_json = json_string(worker_id)
        #: Records a fire span per callback and puts its traceparent on it; None: off.
        self._tracing = tracing
        #: The ``timer-fired-at`` header of the last fire time seen: a tick's timers share one.
        self._fired_at: tuple[int, bytes] = (-1, b"")
        #: The ``timer-due`` header of the last due second seen: a round's timers share few.
        self._due: tuple[int, bytes] = (-1, b"")
        #: Audit records of callbacks produced since the unit's last flush or commit:
        #: ``(timer, partition, fired_at_ms, coalesced)`` (see :meth:`callback`).
        self._audits: list[Audit] = []
        #: Per partition, the newest request the service had applied there when it last
        #: fired on it: each audit record's ``request_offset``, set by the service before
        #: a round. Read when the unit's audits are produced, so a round of the same
        #: partition in between (rare: one flush a tick) gives the earlier one a later
        #: offset, never an earlier one.
        self.fire_offsets: dict[int, int] = {}

    def _init_transactions(
        self,
        timeout: float = 60.0,
        backoff: Backoff = INIT_TRANSACTIONS_BACKOFF,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """librdkafka's ``init_transactions``, retried with backoff while the broker does
        not answer in time (a retriable error: librdkafka allows the call again).

        It used to be tried once: a broker slower than ``timeout`` at start stopped the
        worker with a traceback. Runs at start, before the worker serves anything but its
        start-up probes (:mod:`app.worker.startup`). What is not retriable (fenced by a
        newer incarnation, not authorised, transactions unsupported) still raises: that
        needs an operator, not a retry.
        """
        attempt = 1
        while True:
            try:
                self._producer.init_transactions(timeout)
                return
            except KafkaException as exc:
                error = exc.args[0] if exc.args else None
                if not isinstance(error, KafkaError) or not error.retriable():
                    raise
                delay = backoff.delay(attempt)
                log.warning(
                    "initialising the transactional producer did not complete (%s): the "
                    "worker tries again in %.1f s (attempt %d)",
                    error,
                    delay,
                    attempt,
                )
                sleep(delay)
                attempt += 1

    # -- producing --------------------------------------------------------------

    def _produce(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        partition: int | None = None,
        headers: HeaderList | None = None,
        on_delivery: Callable[[KafkaError | None, Message], None] | None = None,
        timestamp_ms: int | None = None,
    ) -> None:
        # Every argument by position, librdkafka's defaults where not given (the reason:
        # :meth:`callback`).
        args = (
            topic,
            value,
            key,
            _ANY_PARTITION if partition is None else partition,
            on_delivery,
            None,
            timestamp_ms or 0,
            headers or None,
        )
        while True:
            try:
                self._producer.produce(*args)
                return
            except BufferError:
                self._producer.poll(0.05)  # local queue full: let deliveries drain, then retry

    def topic_names(self, timeout: float) -> list[str]:
        """The names of the topics the broker has (one metadata request; blocks)."""
        metadata = self._producer.list_topics(timeout=timeout)
        return [name for name, topic in metadata.topics.items() if topic.error is None]

    def callback(
        self, timer: Timer, *, partition: int, fired_at_ms: int, coalesced: int = 0
    ) -> None:
        """Produce ``timer``'s callback; its audit record on the fired topic follows at
        the unit's :meth:`flush` or :meth:`commit`, in the same unit.

        A tick produces thousands of callbacks in a row, and their record timestamps are
        their lateness: producing each audit record (and building its JSON) beside its
        callback put half as much work again before a second's last callback (measured
        on one core: 3.5 µs a callback with its audit record beside it, 2.3 without).
        Nobody waits for an audit record before the unit is durable, so it loses nothing.
        ``timer-fired-at`` is the worker's fire time. The record timestamp is left to
        librdkafka (the same system clock in production, a moment later): a timestamp
        set from the process's own clock would be refused by brokers that bound how far
        ahead a timestamp may be (Kafka 4's ``message.timestamp.after.max.ms``, 1 hour)
        when a test moves that clock, and would add nothing in production.
        A series occurrence also carries ``timer-seq``, and ``timer-coalesced`` when the
        ``coalesce`` policy folded earlier occurrences into it; a debounced timer
        ``timer-debounced``, the requests merged into it. With tracing on, its
        ``traceparent`` is its fire span's (:mod:`app.worker.tracing`).
        """
        if fired_at_ms != self._fired_at[0]:
            self._fired_at = (fired_at_ms, b"%d" % fired_at_ms)
        due = timer.due
        if due != self._due[0]:
            self._due = (due, b"%d" % due)
        headers: HeaderList = [
            ("timer-id", timer.id.encode()),
            ("timer-token", timer.token.encode()),
            ("timer-due", self._due[1]),
            ("timer-fired-at", self._fired_at[1]),
        ]
        if timer.seq:
            headers.append(("timer-seq", b"%d" % timer.seq))
            if coalesced:
                headers.append(("timer-coalesced", b"%d" % coalesced))
        elif timer.debounce is not None:
            headers.append((DEBOUNCED_HEADER, b"%d" % timer.debounce.merged))
        own = timer.headers
        audit: Audit = (timer, partition, fired_at_ms, coalesced)
        if own:  # most timers have none: neither the copy nor the look for a marker
            headers.extend(own)
            extra = extra_json(own)
            if extra:  # a trigger's or a backfill's fire: its audit says so
                audit = (timer, partition, fired_at_ms, extra)
        if self._tracing is not None:
            self._tracing.fired(timer, headers, partition)

        # Its timer and this output bound as defaults, not closed over: two cells fewer
        # to make and free a callback (5,000 to 3,400 instructions made, called, freed).
        def delivered(
            err: KafkaError | None, _msg: Message, timer: Timer = timer, output: Any = self
        ) -> None:
            if err is not None:
                if err.code() in REFUSED_RECORD_ERRORS:
                    output._failed.append((timer, str(err)))
                else:  # the broker did not answer in time: fire it again, never drop it
                    output._changelog_errors.append(f"callback of timer {timer.id[:80]!r}: {err}")

        # Produced directly, with no kwargs dict or retry loop, unless the queue is full,
        # and every argument positional (partition, callback, on_delivery, timestamp,
        # headers: librdkafka's defaults where not ours): with any keyword, confluent-kafka
        # looks each keyword it has up in the call's dict by a str made from a C string,
        # a third of this produce's instructions (13,891 against 9,328, callgrind).
        try:
            self._producer.produce(
                timer.topic, timer.value, timer.key, _ANY_PARTITION, delivered, None, 0, headers
            )
        except BufferError:
            self._produce(
                timer.topic, timer.value, timer.key, headers=headers, on_delivery=delivered
            )
        self._audits.append(audit)

    def _produce_audits(self) -> None:
        """Produce the audit records of the callbacks produced since the last call.

        On the event loop only (callbacks append from there), before the unit's flush or
        commit waits: so they are durable, or in the transaction, with their callbacks.
        """
        audits, self._audits = self._audits, []
        if not audits:
            return
        fired_topic = self._fired_topic
        produce = self._producer.produce
        # The audit JSON of the whole unit at once: the same bytes as
        # FiredRecord.fired().to_json(), with what a run of them shares formatted once.
        for (timer, partition, _, _), audit in zip(
            audits, fired_jsons(audits, self._worker_json, self.fire_offsets), strict=True
        ):
            timer_id = timer.id.encode()
            # The fired topic's partition numbered like the timer's request partition,
            # not wherever a partitioner puts the id: a request produced to an explicit
            # partition (or by a producer with another partitioner) still has its
            # records where a reader that knows the request's partition looks.
            try:
                produce(fired_topic, audit, timer_id, partition)
            except BufferError:
                self._produce(fired_topic, audit, timer_id, partition=partition)

    def skipped(
        self, timer: Timer, reason: SkipReason, *, partition: int, coalesced: int = 0
    ) -> None:
        """Report on the fired topic a fire of ``timer`` that the policy did not deliver."""
        record = FiredRecord.skipped(
            timer,
            reason,
            partition=partition,
            worker=self._worker_id,
            at_ms=int(self._clock() * 1000),
            coalesced=coalesced,
        )
        self._produce(self._fired_topic, record.to_json(), timer.id.encode(), partition=partition)

    def dropped(
        self, timer: Timer, outcome: str, partition: int, request_offset: int | None = None
    ) -> None:
        """Answer a request that was not stored (``duplicate``, ``cancelled_earlier``,
        ``wrong_token``), on the fired topic's partition numbered like the request's, as a
        cancel is answered."""
        record = FiredRecord.dropped(
            timer,
            outcome,
            partition=partition,
            worker=self._worker_id,
            at_ms=int(self._clock() * 1000),
            request_offset=request_offset,
        )
        self._produce(self._fired_topic, record.to_json(), timer.id.encode(), partition=partition)

    def cancel_outcome(
        self,
        timer_id: str,
        token: str,
        outcome: str,
        partition: int,
        request_offset: int | None = None,
    ) -> None:
        """Report what a cancel did: for the audit, and as the answer a client waits for.

        ``partition`` and ``request_offset`` locate the cancel request; the record goes
        to that partition number of the fired topic, where the client reads it back.
        """
        self._answer(FiredKind.CANCEL, timer_id, token, outcome, partition, request_offset)

    def pause_outcome(
        self,
        timer_id: str,
        token: str,
        action: str,
        outcome: str,
        partition: int,
        request_offset: int | None = None,
    ) -> None:
        """Report what a pause or resume (``action``) did, as the answer a client waits
        for: like :meth:`cancel_outcome`, with the event ``pause`` or ``resume``."""
        self._answer(FiredKind(action), timer_id, token, outcome, partition, request_offset)

    def _answer(
        self,
        kind: FiredKind,
        timer_id: str,
        token: str,
        outcome: str,
        partition: int,
        request_offset: int | None,
    ) -> None:
        """The fired-topic record answering a request that named ``timer_id`` with its
        token, on the request's partition number, where its client reads it back."""
        record = FiredRecord.cancel(
            timer_id,
            token,
            outcome,
            partition=partition,
            worker=self._worker_id,
            at_ms=int(self._clock() * 1000),
            request_offset=request_offset,
            kind=kind,
        )
        self._produce(self._fired_topic, record.to_json(), timer_id.encode(), partition=partition)

    def dead_letter(self, record: RawRecord, reason: RejectReason, detail: str) -> None:
        """Copy a rejected request to the DLQ with why and where from: bytes unchanged
        when the copy fits the largest record this producer can write, else cut down
        (``dlq-truncated`` says what was cut: the record's own headers if they alone
        take half the room, then the value's and the key's tails), so a request at the
        broker's limit is dead-lettered, not refused at ``produce()``."""
        ours: HeaderList = [
            ("dlq-reason", reason.value.encode()),
            ("dlq-detail", detail.encode("utf-8", "backslashreplace")[:1000]),
            ("dlq-source-topic", record.topic.encode()),
            ("dlq-source-partition", b"%d" % record.partition),
            ("dlq-source-offset", b"%d" % record.offset),
        ]
        key, value, theirs = record.key, record.value, list(record.headers)
        limit = self.max_record_bytes
        if not fits(limit, key, value, [*theirs, *ours]):
            cut = f"was: value {len(value or b'')} bytes, key {len(key or b'')} bytes"
            if theirs and not fits(limit // 2, None, None, [*theirs, *ours]):
                cut += f", {len(theirs)} headers (dropped)"
                theirs = []
            room = limit - record_bytes(None, None, [*theirs, *ours, ("dlq-truncated", b"")])
            room -= 200  # the dlq-truncated header's own text
            key = key[: max(0, min(len(key), room // 2))] if key else key
            value = value[: max(0, room - len(key or b""))] if value else value
            ours.append(("dlq-truncated", cut.encode()))
        self._produce(self._dlq_topic, value, key, headers=[*theirs, *ours])

    def dead_letter_timer(self, timer: Timer, reason: RejectReason, detail: str) -> None:
        """Dead-letter a timer that was accepted but whose callback the broker refused."""
        headers: HeaderList = [
            *timer.headers,
            ("timer-id", timer.id.encode()),
            ("timer-due", b"%d" % timer.due),
            ("dlq-callback-topic", timer.topic.encode()),
            ("dlq-reason", reason.value.encode()),
            ("dlq-detail", detail.encode()[:1000]),
        ]
        self._produce(self._dlq_topic, timer.value, timer.key, headers=headers)

    def forward(self, record: RawRecord, partition: int, hop: bytes) -> None:
        """Copy a request to ``partition`` of its topic, the one that owns its timer id:
        the same key, value, headers and timestamp, and ``timer-hop: <hop>`` naming where
        it was read, signed where the deployment has a secret (:mod:`app.core.routing`).
        Needed durable like a changelog record: the request's offset is made durable once
        the unit is, so a copy the broker refused fails the unit instead of losing the
        request."""
        headers: HeaderList = [*record.headers, (HOP_HEADER, hop)]
        self._produce(
            record.topic,
            record.value,
            record.key,
            partition=partition,
            headers=headers,
            on_delivery=self._needed_delivered,
            timestamp_ms=record.timestamp_ms,
        )

    def _needed_delivered(self, err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            self._changelog_errors.append(str(err))

    def changelog(self, topic: str, partition: int, key: bytes, value: bytes | None) -> None:
        """Write one table change to the changelog partition that mirrors ``partition``.

        Two of these per stored timer make this the hottest produce: positional
        arguments and one delivery callback bound once (no closure, no kwargs dict, no
        bound method made per record) cost about a third of :meth:`_produce`'s way. A
        full local queue takes :meth:`_produce`'s wait-and-retry.
        """
        try:
            self._producer.produce(topic, value, key, partition, self._on_changelog)
        except BufferError:
            self._produce(topic, value, key, partition=partition, on_delivery=self._on_changelog)

    def _changelog_delivered(self, err: KafkaError | None, msg: Message) -> None:
        """Note a changelog record's fate; its partition is the table partition it mirrors."""
        if err is not None:
            self._changelog_errors.append(str(err))
            return
        offset = msg.offset()
        partition = msg.partition()
        if offset is not None and partition is not None:
            # Own first: a store on the loop's thread trusts acked offsets to be listed.
            counted = self.changelog_counted.get(partition)
            if counted is not None and offset > counted[0]:
                counted[1] += 1
                self._changelog_own[partition].append(offset)
            if offset > self.changelog_acked.get(partition, -1):
                self.changelog_acked[partition] = offset

    def count_changelog_after(self, partition: int, offset: int) -> None:
        """From now on, count this output's acknowledged records of changelog
        ``partition`` past ``offset``: a store caught up to ``offset`` opens, and tells
        by the count whether another worker wrote after it
        (:meth:`app.worker.partition_store.ChangeloggedKV.record_persisted`). Records
        acknowledged late at or before ``offset`` were in the changelog it read."""
        self.changelog_counted[partition] = [offset, 0]
        self._changelog_own[partition] = []

    def in_flight(self) -> int:
        return len(self._producer)  # produced, not yet acknowledged (or refused)

    def take_own_changelog(self, partition: int, through: int) -> list[int]:
        """The offsets of this output's records of changelog ``partition`` acknowledged
        since the last call (counted ones only: :meth:`count_changelog_after`), up to
        ``through``; later ones stay for the next call. In order: a partition's records
        are acknowledged in the order they were written."""
        own = self._changelog_own.get(partition)
        if not own:
            return []
        # One list throughout: a slice then its del loses none of the flush thread's appends.
        cut = bisect_right(own, through)
        taken = own[:cut]
        del own[:cut]
        return taken

    # -- waiting ----------------------------------------------------------------

    def flush_blocking(self, timeout: float = 60.0) -> None:
        """Wait until the broker acknowledged everything produced so far (on the loop's
        thread: :meth:`flush` waits in another)."""
        self._produce_audits()
        self._wait_blocking(timeout)

    def _wait_blocking(self, timeout: float) -> None:
        remaining = self._producer.flush(timeout)
        if remaining:
            raise DeliveryFailure(f"{remaining} records not acknowledged within {timeout}s")
        if self._changelog_errors:
            raise DeliveryFailure(
                f"a changelog record, a forwarded request or a callback was not delivered: "
                f"{self._changelog_errors[0]}"
            )

    async def flush(self, timeout: float = 60.0) -> None:
        """:meth:`flush_blocking` off the event loop."""
        self._produce_audits()
        await asyncio.get_running_loop().run_in_executor(None, self._wait_blocking, timeout)

    def begin(self) -> None:
        """Start a unit of work: a transaction in exactly-once mode, nothing otherwise."""
        if self.transactional:
            self._producer.begin_transaction()

    def _commit_blocking(self, timeout: float) -> None:
        try:
            self._producer.commit_transaction(timeout)
        except KafkaException as exc:
            error = exc.args[0]
            if error.txn_requires_abort():
                self._producer.abort_transaction(timeout)
                self._failed.clear()
                raise TransactionAborted(str(error)) from exc
            raise DeliveryFailure(f"transaction commit failed: {error}") from exc

    async def commit(self, timeout: float = 60.0) -> None:
        """End a unit of work: commit its transaction, or flush (at-least-once mode).

        Raises :class:`TransactionAborted` when the transaction had to be aborted (its
        records are invisible to read_committed consumers), :class:`DeliveryFailure`
        when durability cannot be established at all.
        """
        self._produce_audits()
        loop = asyncio.get_running_loop()
        if self.transactional:
            await loop.run_in_executor(None, self._commit_blocking, timeout)
        else:
            await loop.run_in_executor(None, self._wait_blocking, timeout)

    def poll(self) -> None:
        """Serve delivery callbacks without waiting."""
        self._producer.poll(0)

    def take_failures(self) -> list[tuple[Timer, str]]:
        """Callbacks refused by the broker since the last call, with the error."""
        failed, self._failed = self._failed, []
        return failed
