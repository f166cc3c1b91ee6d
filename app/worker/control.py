"""The worker's side of the control topic: pauses and rate limits set while it runs.

At start, before the worker fires anything, the control topic is read to its end and
what it says is applied to :class:`~app.worker.topic_gates.TopicGates` (so a topic
paused before a restart is still paused on the first tick after it: its due timers are
held in the wheel again, never fired). Then a thread tails the topic and hands the
records to the event loop, which applies them to the gates (they are not thread-safe).
Every worker reads the whole topic (one partition), so every worker holds the same
pauses and limits; each applies them to the partitions it owns. Only records signed
with the deployment's control secret are applied (:mod:`app.core.control`).

No flood of records on the control topic can hold the worker up:

- the records read wait in an inbox, and the loop applies at most :data:`APPLY_BATCH`
  of them (and :data:`APPLY_SECONDS` of its time) per turn, ticks and requests in
  between; past :data:`INBOX_LIMIT` waiting, the tail stops reading until the loop
  caught up (and a stop ends it within a poll, whatever is waiting);
- each pause or rate record costs the same whatever is paused or limited already
  (:class:`~app.worker.topic_gates.TopicGates` changes one topic at a time), and the
  lines it logs are bounded (:data:`LOG_LINES` per :data:`LOG_WINDOW_SECONDS`, the rest
  summed up);
- bulk cancels wait in a queue (at most :data:`BULK_QUEUE_LIMIT`, the rest ignored and
  counted) and run one at a time, each a unit of bounded work at a time
  (:class:`BulkCanceller`): a tick waits for at most one unit.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from confluent_kafka import Producer

from app.core.control import CANCEL_BULK, ControlRecord, ControlState
from app.core.fired import FiredKind
from app.core.keys import parse_timer_key
from app.core.stored import unpack_timer
from app.core.timer import Cancel
from app.core.timer_filter import TimerFilter
from app.core.wheel import CancelOutcome, PartitionWheel
from app.kafka.config import confluent_producer
from app.kafka.control import ControlReader
from app.settings import Settings
from app.worker.output_port import Output
from app.worker.service import TimerService
from app.worker.topic_gates import TopicGates

__all__ = ["BulkCanceller", "ControlFollower"]

log = logging.getLogger(__name__)

#: Longest a poll of the tail waits (and so how long a stop waits for the thread).
POLL_SECONDS = 0.5
#: Pause after the tail failed, before it tries again.
RETRY_SECONDS = 2.0
#: Most stored timers one unit of a bulk cancel examines, and most loop time it takes:
#: the rest of the partition follows in the next unit, ticks and requests in between.
BULK_CHUNK = 2000
BULK_CHUNK_SECONDS = 0.01
#: Most records applied in one turn of the event loop, and most loop time they take.
APPLY_BATCH = 500
APPLY_SECONDS = 0.005
#: Records read and not yet applied past which the tail waits for the loop.
INBOX_LIMIT = 5000
#: Bulk cancels waiting to run past which a new one is ignored (and counted).
BULK_QUEUE_LIMIT = 1000
#: Lines about applied pauses and limits per window; the rest are counted, then summed.
LOG_LINES = 20
LOG_WINDOW_SECONDS = 10.0


class _BoundedLog:
    """At most :data:`LOG_LINES` warnings per :data:`LOG_WINDOW_SECONDS`; then one line
    saying how many were left out."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._window_start = -LOG_WINDOW_SECONDS
        self._lines = 0
        self._dropped = 0

    def warning(self, msg: str, *args: object) -> None:
        now = self._clock()
        if now - self._window_start >= LOG_WINDOW_SECONDS:
            if self._dropped:
                log.warning(
                    "%d more control-topic lines in the last %.0f s (not logged one by one)",
                    self._dropped,
                    now - self._window_start,
                )
            self._window_start, self._lines, self._dropped = now, 0, 0
        if self._lines < LOG_LINES:
            self._lines += 1
            log.warning(msg, *args)
        else:
            self._dropped += 1


class ControlFollower:
    """Applies the control topic to ``gates``: :meth:`load` once, then :meth:`start`."""

    def __init__(
        self,
        settings: Settings,
        gates: TopicGates,
        configured: Mapping[str, float],
        bulk: Callable[[ControlRecord], Awaitable[object]] | None = None,
    ) -> None:
        self._settings = settings
        #: Runs a bulk cancel that arrived while this worker runs (never one read at start).
        self.bulk = bulk
        #: Bulk cancels waiting to run, by request id, oldest first; and the one running.
        self._bulk_queue: dict[str, ControlRecord] = {}
        self._bulk_running: str | None = None
        self._bulk_runner: asyncio.Future[None] | None = None
        self._gates = gates
        #: The limits of KAFKA_TIMERS_TOPIC_RATE_LIMITS: a cleared rate record goes back
        #: to these.
        self._configured = dict(configured)
        self.state = ControlState()
        self._reader: ControlReader | None = None
        self._on_ignored: Callable[[], object] = lambda: None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: Records read by the tail, not applied yet (appended by the thread, taken by
        #: the loop: a deque's append and popleft are atomic).
        self._inbox: deque[ControlRecord] = deque()
        self._drain_scheduled = False
        self._log = _BoundedLog()

    def load(self, timeout: float, on_ignored: Callable[[], object] = lambda: None) -> None:
        """Read the control topic to its end and apply it (before the event loop runs).
        ``on_ignored`` is called for each record ignored, then and while following."""
        self._on_ignored = on_ignored
        if self._settings.control_secret is None:
            log.warning(
                "KAFKA_TIMERS_CONTROL_SECRET is unset: every record on the control topic "
                "is ignored (and counted); pauses, limits and bulk cancels set there take "
                "effect only once every worker has the deployment's control secret"
            )
        reader = ControlReader(self._settings, on_ignored)
        try:
            count = reader.read_to_end(self.state.apply, timeout)
        except BaseException:
            reader.close()
            raise
        self._reader = reader
        for topic in self.state.rates:
            self._gates.set_rate(topic, self.state.limit_of(topic, self._configured))
        for topic in self.state.paused:
            self._gates.pause(topic)
        paused, rates = self.state.paused, self.state.rates
        log.info(
            "control topic %s read (%d records): %d topics paused %s, %d limits set at run time %s",
            reader.topic,
            count,
            len(paused),
            sorted(paused)[:20],
            len(rates),
            dict(sorted(rates.items())[:20]),
        )

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Tail the control topic in a thread, applying its records on ``loop``."""
        reader = self._reader
        assert reader is not None, "load() first"
        inbox = self._inbox

        def handed(record: ControlRecord) -> None:
            inbox.append(record)

        def tail() -> None:
            while not self._stop.is_set():
                if len(inbox) >= INBOX_LIMIT:  # the loop has not caught up: wait for it
                    self._stop.wait(0.05)
                    continue
                try:
                    read = reader.poll(handed, POLL_SECONDS)
                except Exception:
                    log.exception("tailing control topic %s; trying again", reader.topic)
                    self._stop.wait(RETRY_SECONDS)
                    continue
                if read and not self._drain_scheduled:
                    self._drain_scheduled = True
                    try:
                        loop.call_soon_threadsafe(self._drain)
                    except RuntimeError:  # the loop is closed: the worker is stopping
                        break
            reader.close()

        self._thread = threading.Thread(target=tail, name="kafka-timers-control", daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        """Apply what the tail read, a bounded batch per turn of the loop (on the loop)."""
        self._drain_scheduled = False
        inbox = self._inbox
        deadline = time.perf_counter() + APPLY_SECONDS
        for n in range(APPLY_BATCH):
            if not inbox or (n & 31 == 31 and time.perf_counter() > deadline):
                break
            self.apply(inbox.popleft())
        if inbox and not self._drain_scheduled and not self._stop.is_set():
            self._drain_scheduled = True
            asyncio.get_running_loop().call_soon(self._drain)

    def apply(self, record: ControlRecord) -> None:
        """Apply one record to the gates (on the event loop): a bounded cost each."""
        if record.kind == "cancel_bulk":
            self._queue_bulk(record)
            return
        if not self.state.apply(record):
            return
        topic = record.topic
        if record.kind == "pause":
            if topic in self.state.paused:
                self._gates.pause(topic)
                self._log.warning("callback topic %r paused (control topic)", topic)
            else:
                self._gates.resume(topic)
                self._log.warning("callback topic %r resumed (control topic)", topic)
        elif record.kind == "rate":
            limit = self.state.limit_of(topic, self._configured)
            self._gates.set_rate(topic, limit)
            self._log.warning(
                "callback topic %r limit now %s (control topic)",
                topic,
                "none" if limit is None else f"{limit:g}/s",
            )

    def _queue_bulk(self, record: ControlRecord) -> None:
        """Queue a bulk cancel; its tombstone takes it off the queue if it has not
        started (whoever sent it stopped waiting for its answer)."""
        request = record.topic
        if record.clear:
            self._bulk_queue.pop(request, None)
            return
        if (
            self.bulk is None
        ):  # a record with no usable filter is queued too: it is answered refused
            return
        if request in self._bulk_queue or request == self._bulk_running:
            return  # the same request again: it runs once
        if len(self._bulk_queue) >= BULK_QUEUE_LIMIT:
            self._log.warning(
                "bulk cancel %s ignored: %d bulk cancels wait already",
                request[:100],
                len(self._bulk_queue),
            )
            self._on_ignored()
            return
        self._bulk_queue[request] = record
        if self._bulk_runner is None or self._bulk_runner.done():
            self._bulk_runner = asyncio.ensure_future(self._run_bulk())

    async def _run_bulk(self) -> None:
        """Run the queued bulk cancels one at a time, oldest first."""
        queue = self._bulk_queue
        while queue and self.bulk is not None and not self._stop.is_set():
            request = next(iter(queue))
            record = queue.pop(request)
            self._bulk_running = request
            try:
                await self.bulk(record)
            finally:
                self._bulk_running = None

    @property
    def bulk_waiting(self) -> int:
        """Bulk cancels queued, not started."""
        return len(self._bulk_queue)

    @property
    def stopping(self) -> bool:
        """Whether :meth:`stop` was called (a bulk cancel then ends after its unit)."""
        return self._stop.is_set()

    def stop(self, timeout: float = 2 * POLL_SECONDS) -> None:
        """Stop the tail and the queue of bulk cancels. The one running ends after its
        current unit (the runner's ``should_stop``), never inside one: a unit cut short
        between its store writes and its commit would leave the output's unit open."""
        self._stop.set()
        self._bulk_queue.clear()
        if self._thread is not None:
            self._thread.join(timeout)
        elif self._reader is not None:
            self._reader.close()


class BulkCanceller:
    """Cancels (or counts) the pending timers a bulk-cancel record's filter matches on
    every partition this worker holds, a bounded unit at a time, and answers each
    partition's count on the fired topic (``event: bulk_cancel``, keyed
    ``cancel-bulk/<request id>``, on the fired partition numbered like it).

    Each cancelled timer is cancelled as by its own token (the wheel's cancel: one in
    flight is ``already_fired`` and not counted) and answered on the fired topic like
    any cancel, so the audit knows it; the units are durable before the answer goes.
    A partition given away meanwhile gets no answer from here (``cancel-bulk`` names it),
    and so does one not finished when the worker stops (``should_stop``, asked between
    units).
    """

    def __init__(
        self,
        settings: Settings,
        service: TimerService,
        should_stop: Callable[[], bool] = lambda: False,
    ) -> None:
        self._service = service
        self._should_stop = should_stop
        self._worker = settings.worker_id
        self._fired_topic = settings.topics.fired
        self._producer = Producer(
            confluent_producer(settings, logger=logging.getLogger("librdkafka"))
        )

    async def run(self, record: ControlRecord) -> None:
        flt = record.filter
        request_id = record.topic
        if flt is None:  # refused (an empty prefix, no filter): answered, nothing touched
            log.warning("bulk cancel %s refused: %s", request_id, record.reason)
            for p in sorted(self._service.wheels()):
                self._answer(request_id, p, 0, 0, record.dry_run, refused=record.reason)
            await asyncio.get_running_loop().run_in_executor(None, self._producer.flush, 30.0)
            return
        log.warning(
            "bulk %s %s: filter %s",
            "count" if record.dry_run else "cancel",
            request_id,
            flt.to_query(),
        )
        for p in sorted(self._service.wheels()):
            if self._should_stop():
                break
            counted = await self._partition(p, flt, record.dry_run)
            if counted is None:
                continue
            matched, cancelled = counted
            self._answer(request_id, p, matched, cancelled, record.dry_run)
            log.warning(
                "bulk cancel %s, partition %d: %d matched, %d cancelled",
                request_id,
                p,
                matched,
                cancelled,
            )
        await asyncio.get_running_loop().run_in_executor(None, self._producer.flush, 30.0)

    async def _partition(self, p: int, flt: TimerFilter, dry_run: bool) -> tuple[int, int] | None:
        """``(matched, cancelled)`` on partition ``p``; None if it went away meanwhile."""
        matched = cancelled = 0
        after = b""
        while True:
            if self._should_stop():
                return None
            chunk: dict[str, Any] = {"next": None, "matched": 0}

            def work(
                wheel: PartitionWheel,
                output: Output | None,
                after: bytes = after,
                chunk: dict[str, Any] = chunk,
            ) -> int:
                deadline = time.perf_counter() + BULK_CHUNK_SECONDS
                found = []
                for examined, (key, value) in enumerate(wheel.scan_pending(after), 1):
                    if flt.id_may_match(parse_timer_key(key)[1]):
                        timer = unpack_timer(value)
                        if flt.matches(timer):
                            found.append((timer.id, timer.token))
                    if examined >= BULK_CHUNK or (
                        not examined & 63 and time.perf_counter() > deadline
                    ):
                        chunk["next"] = key
                        break
                chunk["matched"] = len(found)
                if output is None:
                    return 0
                removed = 0
                for timer_id, token in found:  # after the scan: never while iterating
                    if wheel.cancel(Cancel(timer_id, token)) is CancelOutcome.CANCELLED:
                        output.cancel_outcome(timer_id, token, "cancelled", p)
                        removed += 1
                return removed

            if dry_run:
                wheel = self._service.wheels().get(p)
                if wheel is None:
                    return None
                removed: int | None = work(wheel, None)
            else:
                removed = await self._service.change_partition(p, work)
                if removed is None:
                    return None
                cancelled += removed
            matched += chunk["matched"]
            if chunk["next"] is None:
                return matched, cancelled
            after = chunk["next"] + b"\x00"
            await asyncio.sleep(0)  # ticks and requests between units

    def _answer(
        self,
        request_id: str,
        partition: int,
        matched: int,
        cancelled: int,
        dry_run: bool,
        refused: str | None = None,
    ) -> None:
        key = f"{CANCEL_BULK}{request_id}"
        value: dict[str, Any] = {
            "event": FiredKind.BULK_CANCEL.value,
            "id": key,
            "token": "",
            "partition": partition,
            "worker": self._worker,
            "outcome": "refused" if refused else "dry_run" if dry_run else "cancelled",
            "at_ms": int(time.time() * 1000),
            "request": request_id,
            "matched": matched,
            "cancelled": cancelled,
        }
        if refused:
            value["reason"] = refused
        self._producer.produce(
            self._fired_topic, json.dumps(value).encode(), key.encode(), partition=partition
        )
        self._producer.poll(0)
