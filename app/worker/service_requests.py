"""Request intake: one unit of request records applied, durable when it returns.

:meth:`RequestJob._handle_requests` is the request path (a reader's map of it:
docs/architecture.md, "One request's path"): each record is read (a forwarded copy's
hop checked), parsed, forwarded to its id's owner partition or applied to the wheel
(stored, fired at once through :mod:`app.worker.service_firing`, refused, dropped,
cancelled, paused or resumed), and every answer, dead letter and store write of the
unit is made durable together (:mod:`app.worker.unit_of_work`) before it returns. A
record that raises is dead-lettered, unless the system itself is failing
(:mod:`app.worker.isolation`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import replace

from app.core.budget import check_fits
from app.core.keys import APPLYING, REQUEST_OFFSET, origin_key
from app.core.quota_leases import WAIT_MOST_SECONDS
from app.core.quotas import WAIT
from app.core.raw_record import RawRecord
from app.core.request_format import parse_request
from app.core.routing import (
    Origin,
    check_forwardable,
    hop_value,
    id_placement,
    is_replayed,
    split_hop,
)
from app.core.timer import Cancel, Timer, TokenAction
from app.core.wheel import CancelOutcome, Scheduled
from app.worker.isolation import is_systemic, rejection_for
from app.worker.output import DeliveryFailure, TransactionAborted
from app.worker.service_extra import EXTRA_ACTIONS, ExtraRequestJob
from app.worker.service_state import LoadedPartition
from app.worker.unit_of_work import Unit
from kafka_timers_client.errors import RejectReason, SystemicFailure

__all__ = ["UNIT_BUDGET_SECONDS", "RequestJob"]

log = logging.getLogger(__name__)

#: Work one request unit may do before it ends and lets the event loop run (ticks,
#: heartbeats, HTTP): the rest of the batch follows in the next unit.
UNIT_BUDGET_SECONDS = 0.02
#: Longest reason detail a dead letter carries (its ``dlq-detail`` header), bytes.
_DETAIL_BYTES = 1000
#: The outcomes the loop tells apart, read once: an enum member read off its class cost
#: about a thousand instructions a request (callgrind).
_STORED, _FIRE_NOW, _WRONG_TOKEN = Scheduled.STORED, Scheduled.FIRE_NOW, Scheduled.WRONG_TOKEN
_CANCELLED, _NOT_REMEMBERED = CancelOutcome.CANCELLED, CancelOutcome.NOT_REMEMBERED


def _where(record: RawRecord) -> str:
    """``topic[partition]@offset``: how logs and errors name a request record."""
    return f"{record.topic}[{record.partition}]@{record.offset}"


class RequestJob(ExtraRequestJob):
    """Apply units of request records: parse, route, schedule, cancel, answer."""

    async def request_offset(self, p: int) -> int | None:
        """Offset of the last request applied to partition ``p`` (from its table)."""
        raw = (await self._partition(p)).kv.get(REQUEST_OFFSET)
        return int(raw) if raw is not None else None

    async def _handle_requests(self, records: Sequence[RawRecord]) -> Sequence[RawRecord]:
        """Apply records of the batch as one unit; return those left for the next unit.

        Work between two awaits holds the event loop: a batch of large records (2,000
        cancels with 1 KB ids took 0.4 s) would hold back ticks, heartbeats and HTTP. So
        after each :data:`UNIT_BUDGET_SECONDS` of work the loop runs in between. In
        at-least-once mode the unit goes on after that pause: its local writes so far
        are applied first, as at a unit's end (a tick that runs meanwhile scans them),
        and the whole batch is still one flush. Ending the unit there instead cost a
        flush and its broker round trip per 20 ms of work (about six per 2,000-request
        batch: 439 flushes for 150,000 requests against 76, and 1.45 against 0.75 s of
        waiting in the quick ingest bench). In exactly-once mode a unit is a transaction
        holding the unit lock that ticks take, so it ends at the budget and the rest
        follows in the next one.
        """
        fired_now: list[tuple[LoadedPartition, Timer]] = []
        delivered: list[Timer] = []
        now = self._clock()
        # Each partition is loaded (and caught up) before the unit, and looked up once per
        # batch: an await per record cost about a microsecond of a request's ~30.
        parts = {p: await self._partition(p) for p in {r.partition for r in records}}
        # Counted per batch and applied once at the end (the gauge sums every partition).
        scheduled = 0
        # Likewise the requests forwarded (a counter's inc cost ~4,400 instructions), even
        # if the unit fails: each was handed to the output. And the cancels, each counted
        # (and taken off the pending count, per partition) even if the unit fails, as
        # when each was counted as it was applied.
        forwarded = 0
        cancelled: dict[int, int] = {}
        not_remembered = 0
        pending_delta = dict.fromkeys(parts, 0)
        check = self._policy.check
        max_record = self._output.max_record_bytes
        routed = self._request_partitions
        place = id_placement()
        gated = self.gates.gated
        # Pending-timer quotas (app.core.quotas): checked on the id's owner, just before
        # a request is stored; None, none is set and this is all a request pays for them.
        quotas = self.quotas
        tracing = self._tracing
        # Where each (partition, key) last appears in the batch, built at the first
        # request that fires at once (rare: a late request), never for the others.
        last_seen: dict[tuple[int, bytes | None], int] | None = None
        # Those held for the batch: queued for the rounds only once it is read.
        held_for_batch: list[tuple[LoadedPartition, Timer, float]] = []
        # The batch's local writes reach each partition's store as one write (one
        # RocksDB WriteBatch: well under a microsecond a key, where a put costs about 2),
        # and the wheel reads them back meanwhile. They are applied before the flush,
        # as single writes were, so what a failed flush leaves locally is unchanged.
        unit = self._commits.begin(part.kv for part in parts.values())
        unit.ahead_of_changelog()
        # Each partition's last offset in the batch, the partitions in the order they
        # first appear in it.
        ends = {record.partition: record.offset for record in records}
        if not self._output.transactional:
            # Before anything the unit changes, in the changelog as in the store: a store
            # holding any of its effects knows the unit was under way (see reread).
            for p, end in ends.items():
                parts[p].kv.put(APPLYING, b"%d" % end)
        deadline = time.perf_counter() + UNIT_BUDGET_SECONDS
        pause_within = not self._output.transactional
        handled = len(records)
        # The highest origin offsets applied so far, with this unit's copies: made
        # durable with the unit, and the partitions' own only once it is.
        applied: dict[int, dict[int, int]] = {}
        try:
            for i, record in enumerate(records):
                if not i & 15 and i and time.perf_counter() > deadline:
                    if not pause_within:
                        handled = i
                        break
                    await self._let_the_loop_run(unit)
                    deadline = time.perf_counter() + UNIT_BUDGET_SECONDS
                partition, offset = record.partition, record.offset
                part = parts[partition]
                was_applied = part.applied_offset  # put back if it waits (quotas)
                part.applied_offset = offset
                reread = False
                if part.reread_through >= 0:  # after a crash: the unit under way then
                    reread = offset <= part.reread_through
                    if offset >= part.reread_through:
                        # The last request applied before the crash: the store is whole
                        # again after it, and this partition's ticks fire again.
                        part.reread_through = -1
                # Everything one record causes happens inside this try: whatever it
                # raises, the record is dead-lettered and the next one is read, unless
                # the system itself is failing (app.worker.isolation draws the line).
                try:
                    if record.headers:
                        record, origin = split_hop(record, routed, self._hop_secret)
                        if origin is not None:
                            marks = applied.get(record.partition)
                            if marks is None:
                                marks = applied[record.partition] = dict(part.origins)
                            marks_before = marks.get(origin.partition)
                            if is_replayed(origin, marks):
                                self._replayed(record, origin)
                                continue
                    request = parse_request(record, now)
                    if routed:
                        owner = place(request.id.encode(), routed)  # owner_of, inline
                        if owner != partition and self._forwarded(part, record, request, owner):
                            forwarded += 1
                            continue
                    if isinstance(request, Cancel):
                        answered = self._cancel(part, record, request)
                        if answered is _CANCELLED:
                            cancelled[partition] = cancelled.get(partition, 0) + 1
                        elif answered is _NOT_REMEMBERED:
                            not_remembered += 1
                        continue
                    if tracing is not None:
                        request = tracing.scheduled(record, request)
                    check(request, now)
                    check_fits(request, max_record)
                    if quotas is not None:
                        ruling = quotas.admit(record.partition, request, time.monotonic())
                        if ruling is not None:
                            if ruling[0] is WAIT:
                                # No share of the quota to spare here yet: the unit ends
                                # before this record, read again once a share comes, and
                                # the partition is put back as it was before it.
                                part.applied_offset = was_applied
                                if reread and part.reread_through < 0:
                                    part.reread_through = offset  # it was the last re-read
                                if record.origin is not None:  # its copy not applied yet
                                    marks = applied[record.partition]
                                    if marks_before is None:
                                        del marks[record.origin[0]]
                                    else:
                                        marks[record.origin[0]] = marks_before
                                self._share_grew.clear()
                                self._waiting_for_share = True
                                handled = i
                                break
                            self._over_quota(record, request, ruling[1])
                            continue
                    # Read again after a crash, with the store perhaps holding what came
                    # after it: a request whose second passed waits for the next tick
                    # instead of firing at once, so a newer version later in the re-read
                    # replaces it again rather than following a fire of the old one.
                    accepted = part.wheel.schedule(request, reread=reread)
                    outcome = accepted.outcome
                    if outcome is _STORED:
                        scheduled += 1
                        if not accepted.replaced:
                            pending_delta[partition] += 1
                    elif outcome is _FIRE_NOW:
                        scheduled += 1
                        if last_seen is None:
                            last_seen = {(r.partition, r.key): j for j, r in enumerate(records)}
                        for_batch = last_seen[(record.partition, record.key)] > i
                        if for_batch or (gated and request.topic in gated):
                            # Its topic is limited or paused, or a later record of this
                            # batch has its key (a cancel or a new version read with it
                            # must win, though its second has passed): held like a tick's
                            # timers (stored, the watermark below it), released by the
                            # next round of its topic's gate, never fired past it; for
                            # the batch, only once the batch is read (a round may run in
                            # a pause of the unit, before the record that replaces it).
                            since = self._clock()
                            part.wheel.hold_due(request, since, queue=not for_batch)
                            if for_batch:
                                held_for_batch.append((part, request, since))
                            if not accepted.replaced:
                                pending_delta[record.partition] += 1
                            self._release_wanted.set()
                            continue
                        through = part.wheel.ticked_through
                        assert through is not None  # FIRE_NOW: its second has been ticked
                        self._output.fire_offsets[record.partition] = record.offset
                        sent, successor = self._fire(
                            request, through, record.partition, self._now_ms()
                        )
                        delivered.extend(sent)
                        if successor is not None:
                            # A series goes on: its next occurrence is stored in this unit,
                            # with the fire (never after it: a crash in between would end
                            # the series).
                            part.wheel.store_successor(successor)
                            if not accepted.replaced:
                                pending_delta[record.partition] += 1
                            continue
                        if accepted.replaced:
                            pending_delta[record.partition] -= 1
                        fired_now.append((part, request))
                    elif outcome is _WRONG_TOKEN:
                        self._refused(record, request)
                    else:  # dropped: never silently
                        self._dropped(record, request, outcome)
                except Exception as exc:
                    if is_systemic(exc):
                        raise
                    self._reject(record, *rejection_for(exc, _where(record)))
        finally:
            if forwarded:
                self._metrics.forwarded.inc(forwarded)
            if cancelled:
                self._metrics.cancelled.inc(sum(cancelled.values()))
                for p, count in cancelled.items():
                    self._pending[p] = self._pending.get(p, 0) - count
                self._metrics.pending.set(sum(self._pending.values()))
            if not_remembered:
                self._metrics.cancels_not_remembered.inc(not_remembered)
            unit.apply_local()
            for part, timer, since in held_for_batch:
                part.wheel.queue_held(timer, since)
            if held_for_batch:  # a release that ran in a pause found none of them queued
                self._release_wanted.set()
        if scheduled:
            self._metrics.scheduled.inc(scheduled)
        if any(pending_delta.values()):
            for p, delta in pending_delta.items():
                self._pending[p] = self._pending.get(p, 0) + delta
            self._metrics.pending.set(sum(self._pending.values()))
        if self._output.transactional:
            for part, timer in fired_now:  # atomically with the callbacks
                part.wheel.mark_fired(timer)
        # Where the next owner of each partition resumes (Unit.put_resume_offset). In
        # at-least-once mode produced after the flush, it is durable with the next one; a
        # crash before that reads the batch again, which is harmless (second copies are
        # dropped by their owner, a re-read fires nothing at once).
        records, rest = records[:handled], records[handled:]
        # The highest offset handled of each partition with a record handled (at least
        # -1), in the order they first appear: ``ends``' partitions, unless the unit
        # ended before the batch did. Compared in place: a max() and a get() per record
        # cost twice this loop.
        last = dict.fromkeys(ends if not rest else {r.partition: 0 for r in records}, -1)
        for record in records:
            if record.offset > last[record.partition]:
                last[record.partition] = record.offset
        for p, offset in last.items():
            unit.put_resume_offset(parts[p].kv, b"%d" % offset)
        # Likewise the highest origin offsets of the forwarded copies applied: were they
        # written locally before the batch is durable, a worker restarting on its own
        # data would drop the copies the batch re-reads instead of applying them again.
        for p, key, value in self._advanced_origins(parts, applied):
            unit.put_after_commit(parts[p].kv, key, value)
        try:
            await unit.commit(record=False)
        except TransactionAborted as exc:
            raise DeliveryFailure(f"request batch not committed: {exc}") from exc
        for p, marks in applied.items():
            parts[p].origins = marks
        if not self._output.transactional:
            for part, timer in fired_now:  # only once delivered; durable with the next unit
                part.wheel.mark_fired(timer)
        for part in parts.values():
            part.wheel.settle_fired_at_once()
        self._account_fired(delivered)
        self._commits.record_persisted()
        for p, part in parts.items():
            self._export_keys(p, part)
        return rest

    @staticmethod
    def _advanced_origins(
        parts: dict[int, LoadedPartition], applied: dict[int, dict[int, int]]
    ) -> list[tuple[int, bytes, bytes]]:
        """``(partition, key, value)`` of each origin offset this unit advanced."""
        return [
            (p, origin_key(origin), b"%d" % offset)
            for p, marks in applied.items()
            for origin, offset in marks.items()
            if parts[p].origins.get(origin) != offset
        ]

    def _replayed(self, record: RawRecord, origin: Origin) -> None:
        """Drop a forwarded copy its owner has applied already: its forwarder was stopped
        before its batch was durable and forwarded it again (see app.core.routing)."""
        self._metrics.forwards_replayed.inc()
        log.debug(
            "request %s dropped: a copy of %d@%d applied already",
            _where(record),
            origin.partition,
            origin.offset,
        )

    @staticmethod
    async def _let_the_loop_run(unit: Unit) -> None:
        """Pause a unit so the event loop runs (ticks, heartbeats, HTTP): Unit.pause."""
        await unit.pause()

    def _forwarded(
        self, part: LoadedPartition, record: RawRecord, request: Timer | Cancel, owner: int
    ) -> bool:
        """Forward ``request``, read off its id's owner partition, to the ``owner`` (the
        caller counts it in ``kafka_timers_requests_forwarded``); False when it stays: an
        id this partition still holds pending (see :mod:`app.core.routing`; a request
        without an id goes to its derived id's owner)."""
        held = part.wheel.lookup(request.id)
        if held is not None and held[0] == "pending":
            return False
        check_forwardable(record, self._output.max_record_bytes)
        self._output.forward(record, owner, hop_value(record, self._hop_secret))
        return True

    def _dropped(self, record: RawRecord, timer: Timer, outcome: Scheduled) -> None:
        """Count (``kafka_timers_dropped_total{reason}``), log and answer on the fired
        topic (like a cancel) a request not stored."""
        self._metrics.dropped.labels(reason=outcome.value).inc()
        self._output.dropped(timer, outcome.value, record.partition, record.offset)
        log.info(
            "request %s for timer %r dropped: %s",
            _where(record),
            timer.id[:80],
            "that version already fired"
            if outcome is Scheduled.DUPLICATE
            else "a cancel with its token came first",
        )

    def _refused(self, record: RawRecord, timer: Timer) -> None:
        """Answer and dead-letter a request that would have replaced a pending timer
        protected by another token (:meth:`PartitionWheel.schedule`): answered on the fired
        topic at the request's offset, as a cancel with a wrong token is (``"event":
        "dropped"``, outcome ``wrong_token``), and dead-lettered ``wrong_token``."""
        self._output.dropped(timer, Scheduled.WRONG_TOKEN.value, record.partition, record.offset)
        self._reject(
            record,
            RejectReason.WRONG_TOKEN,
            f"timer {timer.id[:80]!r} is pending under another token: not replaced",
        )

    def _over_quota(self, record: RawRecord, timer: Timer, key: str) -> None:
        """Answer and dead-letter a request that would store a timer past a pending-timer
        quota (:mod:`app.core.quotas`): answered on the fired topic at the request's
        offset (``"event": "dropped"``, outcome ``over_quota``), as a request refused for
        another token is, and dead-lettered ``over_quota``, naming the quota. Checked
        before the wheel's own rulings: at a full quota, a request the wheel would have
        dropped (a duplicate, one cancelled in advance) is answered ``over_quota`` instead;
        either way nothing is stored."""
        quotas = self.quotas
        assert quotas is not None
        pending, limit = quotas.pending(key), quotas.policy.limit(key)
        self._output.dropped(timer, RejectReason.OVER_QUOTA.value, record.partition, record.offset)
        if pending >= limit:
            detail = f"{key[:200]} has {pending:,} timers pending, its quota is {limit:,}"
        else:  # waited its longest for a share (app.core.quota_leases)
            detail = (
                f"no share of {key[:200]}'s quota came within {WAIT_MOST_SECONDS:.0f} s "
                f"({pending:,} of {limit:,} pending as known here)"
            )
        self._reject(record, RejectReason.OVER_QUOTA, f"timer {timer.id[:80]!r}: {detail}")

    def _cancel(
        self, part: LoadedPartition, record: RawRecord, cancel: Cancel
    ) -> CancelOutcome | None:
        """Apply a token request (a cancel, or a pause, resume, trigger or backfill) and
        answer it; a cancel's outcome, for the caller to count in
        ``kafka_timers_cancelled`` (taking the timer off the pending count) or
        ``kafka_timers_cancels_not_remembered`` once per unit, None for the others."""
        if cancel.action in EXTRA_ACTIONS:  # a trigger or a backfill: app.worker.service_extra
            self._extra_fire(part, record, cancel)
            return None
        if cancel.action is not TokenAction.CANCEL:
            self._pause_or_resume(part, record, cancel)
            return None
        wheel = part.wheel
        pending = wheel.counts.pending
        outcome = wheel.cancel(cancel)
        self._output.cancel_outcome(
            cancel.id, cancel.token, outcome.value, record.partition, record.offset
        )
        if outcome is CancelOutcome.WRONG_TOKEN:
            self._reject(
                record, RejectReason.WRONG_TOKEN, f"token does not match timer {cancel.id!r}"
            )
        elif outcome is _CANCELLED and wheel.counts.pending == pending:
            # The same cancel again (a retry, a redelivery): answered as the first one
            # was, but it removed nothing, so it is not counted or taken off again.
            return None
        return outcome

    def _pause_or_resume(self, part: LoadedPartition, record: RawRecord, request: Cancel) -> None:
        """Apply a timer owner's pause or resume and answer it on the fired topic (as a
        cancel is answered: at the request's offset, so a client can wait for it)."""
        wheel = part.wheel
        if request.action is TokenAction.PAUSE:
            outcome = wheel.pause(request)
        else:
            outcome = wheel.resume(request)
            if wheel.holding:
                self._release_wanted.set()  # what came due while paused goes out now
        self._answer_owner_request(record, request, outcome.value)
        self._metrics.timer_pauses.labels(action=request.action.value, outcome=outcome.value).inc()
        self._export_paused()

    def _reject(self, record: RawRecord, reason: RejectReason, detail: str) -> None:
        """Dead-letter ``record``, total: if its copy cannot be produced (a bug, a size
        no check foresaw), a bare copy without its key, value and headers goes instead;
        if even that is refused, the system is failing (:class:`SystemicFailure`)."""
        # The detail quotes the record at most through repr: never a lone surrogate, never
        # more than the DLQ header holds.
        detail = detail.encode("utf-8", "backslashreplace")[:_DETAIL_BYTES].decode(
            "utf-8", "ignore"
        )
        log.warning("rejected %s: %s: %s", _where(record), reason.value, detail)
        self._metrics.rejected.labels(reason=reason.value).inc()
        try:
            self._output.dead_letter(record, reason, detail)
        except Exception as exc:
            if is_systemic(exc):
                raise
            bare = replace(record, key=None, value=None, headers=())
            note = f"{detail} (the full copy was refused: {type(exc).__name__})"
            try:
                self._output.dead_letter(bare, reason, note)
            except Exception as again:
                if is_systemic(again):
                    raise
                raise SystemicFailure(
                    f"the dead-letter topic refused a bare record: {type(again).__name__}"
                ) from again
