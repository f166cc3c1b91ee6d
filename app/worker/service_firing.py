"""A round's callbacks: what a due timer produces, and a round delivered, then forgotten.

:class:`FiringJob` is shared by the three paths that fire: a tick
(:mod:`app.worker.service_ticks`), a release of held timers between ticks
(:mod:`app.worker.service_gates`) and a request whose second has passed
(:mod:`app.worker.service_requests`). In at-least-once mode a round's callbacks go out
with one flush and only then is the round forgotten (:meth:`FiringJob._deliver_then_forget`);
in exactly-once mode the callbacks and the forgetting are one transaction
(:meth:`FiringJob._fire_in_transaction`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from app.core.fired import SkipReason
from app.core.firing import StepKind, next_occurrence, plan
from app.core.timer import Timer
from app.core.wheel import PartitionWheel
from app.worker.metrics import observe_many
from app.worker.output import DeliveryFailure, TransactionAborted
from app.worker.service_state import CAUGHT_UP_INTERVAL, LoadedPartition, ServiceState
from kafka_timers_client.errors import RejectedRequest, RejectReason

__all__ = ["FAIR_TURN", "Fired", "FiringJob"]

log = logging.getLogger(__name__)

#: Callbacks one partition of a round produces before the next partition takes its turn
#: (:meth:`FiringJob._fire_partitions`): small enough that a turn of 8 partitions is a few
#: tens of milliseconds, large enough that the turns cost nothing measurable.
FAIR_TURN = 512


@dataclass
class Fired:
    """What one partition's tick delivered, and the successor of each series that goes on."""

    delivered: list[Timer] = field(default_factory=list)
    successors: dict[str, Timer] = field(default_factory=dict)


class FiringJob(ServiceState):
    """Produce a round's callbacks, skips and dead letters; deliver and forget rounds."""

    def _fire(
        self, timer: Timer, through: int, partition: int, now_ms: int
    ) -> tuple[list[Timer], Timer | None]:
        """Produce what ``timer``, due by tick ``through``, does now: its callbacks and
        skipped records. Return the occurrences delivered and the series' successor.

        The service's rules are checked again first (:meth:`_refused_at_fire`): a timer
        stored under rules since narrowed is dead-lettered, not delivered.
        """
        if self._refused_at_fire(timer, partition):
            return [], None
        if timer.late is None and not self._late.skip_after_ms:  # the hot paths: nothing to skip
            rec = timer.recurrence
            if rec is None:
                self._output.callback(timer, partition=partition, fired_at_ms=now_ms)
                return [timer], None
            nxt = rec.after(timer.due, timer.seq)
            if nxt is None or nxt > through:  # one occurrence due: nothing to catch up
                self._output.callback(timer, partition=partition, fired_at_ms=now_ms)
                return [timer], None if nxt is None else next_occurrence(timer, nxt)
        policy = self._late if timer.late is None else timer.late.over(self._late)
        steps = plan(timer, through, now_ms, policy)
        delivered: list[Timer] = []
        for step in steps.steps:
            folded = step.coalesced + (step.kind is StepKind.FOLD)
            if folded:
                self._metrics.skipped.labels(reason=SkipReason.COALESCED.value).inc(folded)
            if step.kind is StepKind.DELIVER:
                self._output.callback(
                    step.timer, partition=partition, fired_at_ms=now_ms, coalesced=step.coalesced
                )
                delivered.append(step.timer)
                continue
            reason = SkipReason.LATE if step.kind is StepKind.SKIP_LATE else SkipReason.COALESCED
            if reason is SkipReason.LATE:
                self._metrics.skipped.labels(reason=reason.value).inc()
            self._output.skipped(step.timer, reason, partition=partition, coalesced=step.coalesced)
        return delivered, steps.successor

    async def _look_up_topics(self, timers: Iterable[Timer], more: Iterable[str] = ()) -> None:
        """Find which of the callback topics of ``timers`` (and the topics ``more``) do
        not exist (:attr:`_absent`).

        The worker's producer creates no topic, and a callback to a missing one would hold
        the flush of the whole tick. A set of the tick's topics costs ~40 ns a timer; the
        broker is asked only when one of them is new to the directory.
        """
        if self._topics is None:
            return
        topics = {timer.topic for timer in timers}
        topics.update(more)
        self._absent = await self._topics.missing(topics) if self._topics.unseen(topics) else set()

    def _refused_at_fire(self, timer: Timer, partition: int) -> bool:
        """Whether ``timer`` may no longer be delivered: its topic is not allowed or does
        not exist, or its value is over the payload limit, under the rules this worker
        runs with now.

        An operator who narrows the allow-list (abuse, a topic retired) and restarts the
        workers stops every stored timer and series on its next due second, not only new
        requests. Such a timer is dead-lettered with the reason, reported ``skipped``
        (``not_allowed``) on the fired topic for the audit, and forgotten; a series ends.
        Costs a set lookup and a length per fire: topics that passed are remembered.
        """
        try:
            self._policy.check_topic(timer.topic)
            self._policy.check_payload(timer)
            if self._absent and timer.topic in self._absent:
                raise RejectedRequest(
                    RejectReason.UNKNOWN_TOPIC,
                    f"{timer.topic[:200]!r} does not exist (requests never create topics)",
                )
        except RejectedRequest as refused:
            log.warning(
                "timer %r refused when due, dead-lettered: %s: %s",
                timer.id[:80],
                refused.reason.value,
                refused.detail,
            )
            self._metrics.rejected.labels(reason=refused.reason.value).inc()
            self._metrics.skipped.labels(reason=SkipReason.NOT_ALLOWED.value).inc()
            self._output.dead_letter_timer(timer, refused.reason, refused.detail)
            self._output.skipped(timer, SkipReason.NOT_ALLOWED, partition=partition)
            return True
        return False

    def _fire_partitions(
        self, rounds: Sequence[tuple[int, int, list[Timer], PartitionWheel]]
    ) -> list[Fired]:
        """:meth:`_fire_all` for each ``(partition, second, timers, wheel)`` of one round,
        the partitions taking turns of :data:`FAIR_TURN` callbacks.

        Fair firing across partitions, as :mod:`app.core.fair_order` is within one: a
        burst of 200,000 timers spread over the partitions would otherwise be produced
        partition after partition, and another topic's few timers on the last partition
        would wait for every other partition's share of the burst (seconds). A round of
        one partition, or of few timers, takes the straight path.

        A wheel that scanned a burst without decoding it all (``wheel.undecoded``,
        :meth:`PartitionWheel.take_scanned`) gives the rest of its round a turn at a
        time: each ``timers`` is extended in place with what its wheel decodes, and is
        the round's whole list once this returns (what ``finish_tick`` forgets).
        """
        if (len(rounds) < 2 or sum(len(timers) for _, _, timers, _ in rounds) <= FAIR_TURN) and (
            not any(wheel.undecoded for _, _, _, wheel in rounds)
        ):
            return [
                self._fire_all(partition, second, timers) for partition, second, timers, _ in rounds
            ]
        fired = [Fired() for _ in rounds]
        start, turn = 0, True
        while turn:
            turn = False
            for (partition, second, timers, wheel), into in zip(rounds, fired, strict=True):
                end = start + FAIR_TURN
                while len(timers) < end and wheel.undecoded:
                    timers.extend(wheel.take_scanned(end - len(timers)))
                if start < len(timers):
                    self._fire_into(into, partition, second, timers[start:end])
                    turn = True
            start += FAIR_TURN
        for partition, _, _, _ in rounds:
            self.gates.produced(partition)  # a limit's window counts them from now
        return fired

    def _fire_all(self, partition: int, second: int, timers: list[Timer]) -> Fired:
        """:meth:`_fire` each of ``timers`` (:meth:`_fire_into`) into a new :class:`Fired`."""
        fired = Fired()
        self._fire_into(fired, partition, second, timers)
        self.gates.produced(partition)  # a limit's window counts them from now
        return fired

    def _fire_into(self, fired: Fired, partition: int, second: int, timers: list[Timer]) -> None:
        """:meth:`_fire` each of ``timers`` into ``fired``; a timer with no late policy
        of its own, to a topic that passed the rules already, with a value within the
        limit (a burst's timers, nearly always), is produced here without the four calls
        through :meth:`_fire` and :meth:`_refused_at_fire` that decide as much: a
        one-shot timer is one callback, and so is a series with one occurrence due
        (its successor noted), as :meth:`_fire`'s own hot path has them."""
        now_ms = self._now_ms()
        part = self._partitions.get(partition)
        if part is not None and part.applied_offset >= 0:  # the audits name it
            self._output.fire_offsets[partition] = part.applied_offset
        delivered, successors = fired.delivered, fired.successors
        callback = self._output.callback
        passed = self._policy.passed_topics
        max_bytes = self._policy.max_payload_bytes
        absent = self._absent
        plain = not self._late.skip_after_ms
        for timer in timers:
            if (
                plain
                and timer.late is None
                and timer.topic in passed
                and not (absent and timer.topic in absent)
                and (timer.value is None or len(timer.value) <= max_bytes)
            ):
                rec = timer.recurrence
                if rec is None:
                    callback(timer, partition=partition, fired_at_ms=now_ms)
                    delivered.append(timer)
                    continue
                nxt = rec.after(timer.due, timer.seq)
                if nxt is None or nxt > second:  # one occurrence due: nothing to catch up
                    callback(timer, partition=partition, fired_at_ms=now_ms)
                    delivered.append(timer)
                    if nxt is not None:
                        successors[timer.id] = next_occurrence(timer, nxt)
                    continue
            sent, successor = self._fire(timer, second, partition, now_ms)
            delivered.extend(sent)
            if successor is not None:
                successors[timer.id] = successor

    def _account_fired(self, timers: Sequence[Timer]) -> None:
        failures = self._output.take_failures()
        if failures:
            refused = {t.id for t, _ in failures}
            timers = [timer for timer in timers if timer.id not in refused]
        now = self._clock()
        # Counted per callback topic and per due second (timers of one second share their
        # lateness), then added once each: a label lookup and an observe per timer cost
        # ~2.5 µs of a fire's ~40. A round's timers come in runs of one topic and one
        # second: a run is counted, then added to its dict once (two dict look-ups and
        # stores a timer were half of this loop's instructions).
        by_topic: dict[str, int] = {}
        by_due: dict[int, int] = {}
        last_topic, last_due, topic_run, due_run = "", -1, 0, 0
        for timer in timers:
            topic = timer.topic
            if topic != last_topic:
                if topic_run:
                    by_topic[last_topic] = by_topic.get(last_topic, 0) + topic_run
                last_topic, topic_run = topic, 0
            topic_run += 1
            # A spread timer is late from the second it fires at (Timer.fire_at, a
            # property call, only for those).
            fire_at = timer.fire_at if timer.spread else timer.due
            if fire_at != last_due:
                if due_run:
                    by_due[last_due] = by_due.get(last_due, 0) + due_run
                last_due, due_run = fire_at, 0
            due_run += 1
        if topic_run:
            by_topic[last_topic] = by_topic.get(last_topic, 0) + topic_run
        if due_run:
            by_due[last_due] = by_due.get(last_due, 0) + due_run
        for topic, n in by_topic.items():
            self._metrics.fired.labels(callback_topic=self._topic_label(topic)).inc(n)
        for due, n in by_due.items():
            observe_many(self._metrics.lateness, max(0.0, now - due), n)
        for timer, error in failures:
            log.error(
                "callback of timer %s to %s refused by the broker: %s", timer.id, timer.topic, error
            )
            self._metrics.rejected.labels(reason=RejectReason.DELIVERY_FAILED.value).inc()
            self._output.dead_letter_timer(timer, RejectReason.DELIVERY_FAILED, error)

    async def _deliver_then_forget(
        self, began: list[tuple[int, LoadedPartition, int, list[Timer], Fired]]
    ) -> int:
        """Flush the callbacks of ``(partition, part, second, timers, fired)`` rounds, then
        forget what each delivered; return how many were delivered.

        The forgetting rides with the next flush; lost in a crash, it means a duplicate. A
        series' next occurrence is written before its fired one is deleted, so a crash
        loses neither (finish_tick). Locally it is one write per partition (a RocksDB
        WriteBatch), so a crash keeps all of it or none. A failed flush forgets nothing;
        rounds with no timers still advance their wheels, without a flush.
        """
        produced = any(timers for _, _, _, timers, _ in began)
        if produced:
            try:
                await self._commits.flush(record=False)
            except DeliveryFailure:
                for _, part, _, _, _ in began:
                    part.wheel.abort_tick()
                raise
        behind = False
        for partition, part, second, timers, fired in began:
            with self._commits.local_batch(part.kv):
                # Held timers taken this round may be forgotten in the release loop's
                # spare time (forget_behind): a limited topic then gets its limit, not
                # what delivering and forgetting together leave of a worker's CPU.
                part.wheel.finish_tick(second, timers, fired.successors, forget_taken_later=True)
            self._ticked(partition, part, second, timers, fired)
            behind = behind or part.wheel.behind > 0
        if produced:
            self._commits.record_persisted()
        if behind:
            self._export_behind()
            self._release_wanted.set()
        return sum(len(fired.delivered) for _, _, _, _, fired in began)

    def _ticked(
        self, partition: int, part: LoadedPartition, second: int, timers: list[Timer], fired: Fired
    ) -> None:
        """The metrics and pending count after ``partition`` fired ``timers`` for ``second``."""
        if fired.delivered:
            self._account_fired(fired.delivered)
        ended = len(timers) - len(fired.successors)  # a series that goes on stays pending
        if ended:
            self._adjust_pending(partition, -ended)
        self._metrics.last_tick.labels(partition=str(partition)).set(second)
        self._export_keys(partition, part)
        if second - self._marked.get(partition, second - CAUGHT_UP_INTERVAL) >= CAUGHT_UP_INTERVAL:
            part.kv.mark_caught_up()
            self._marked[partition] = second

    async def _fire_in_transaction(
        self, partition: int, part: LoadedPartition, second: int, timers: list[Timer]
    ) -> Fired | None:
        """Callbacks, audit records, the forgetting and each series' next occurrence in
        one transaction; ``None`` if aborted."""
        unit = self._commits.begin([part.kv])
        if part.wheel.behind:
            # Recorded as delivered by at-least-once rounds before this worker ran in
            # exactly-once mode (which leaves nothing behind): forgotten in here.
            part.wheel.forget_behind(part.wheel.behind)
        fired = self._fire_all(partition, second, timers)
        part.wheel.finish_tick(second, timers, fired.successors)
        try:
            # Its local writes (the forgetting) only once committed: a crash before that
            # leaves the timers in place. Aborted, they are dropped.
            await unit.commit(record=False)
        except TransactionAborted as exc:
            log.error(
                "tick %d on partition %d aborted, retried on the next tick: %s",
                second,
                partition,
                exc,
            )
            self.forget_partitions([partition])  # reload the wheel from RocksDB as it was
            return None
        return fired
