"""What a due timer does when its tick comes: deliver, skip, coalesce, and what comes next.

Pure logic, for the worker's two firing paths (a tick, and a request for a second
already ticked). A one-shot timer is one step: delivered, or skipped when later than its
``skip-after``. A series is walked from its stored occurrence through every occurrence
due at the tick's second, and the plan says what each becomes and which occurrence is
stored next — in the same unit of work as the fires, so an occurrence is never lost and
a series never has two pending.

Catch-up after an outage is bounded, whatever the policy:

- in total: a series catches up only the occurrences due in the last
  :data:`MAX_CATCH_UP_SECONDS` before the tick (an hour, the anchor slack of
  :mod:`kafka_timers_client.recurrence`: a series requested late starts no earlier than that).
  Older ones are folded into one ``skipped: coalesced`` record — for an interval series
  in one step however far behind, for a cron series :data:`CRON_WALK_PER_TICK` at a
  time — so ``all`` delivers at most an hour of occurrences, not the whole outage;
- per tick: one plan delivers or walks at most :data:`CATCH_UP_PER_TICK` occurrences
  of an interval series and :data:`CRON_WALK_PER_TICK` of a cron series (each cron
  step costs 15-60 µs: a tick's work per series stays a few milliseconds).

What is left is stored as the next occurrence although it is already due; the wheel
stores it under the next tick's second (it scans only forward), with its true due second
kept in the value and the callback headers, so it fires on the next tick — late as it
truly is, never early.

A spread timer (:mod:`kafka_timers_client.spread`) is judged from the second it fires at
(:attr:`Timer.fire_at`), not its due second: a ``skip-after`` counts from there, and
``coalesce`` sees an outage only when that second is more than :data:`MISFIRE_MS` past.
A series walks on to its next occurrence in the same tick only once that occurrence's
own fire second has come; otherwise it is stored under it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from app.core.timer import Timer
from kafka_timers_client.late import CatchUp, LatePolicy
from kafka_timers_client.recurrence import ANCHOR_SLACK_SECONDS

__all__ = [
    "CATCH_UP_PER_TICK",
    "CRON_WALK_PER_TICK",
    "MAX_CATCH_UP_SECONDS",
    "MISFIRE_MS",
    "Plan",
    "Step",
    "StepKind",
    "next_occurrence",
    "plan",
]

#: Most occurrences of one series one plan walks (a tick, per series). The rest follow
#: on the next tick. Each costs a microsecond or two (interval).
CATCH_UP_PER_TICK = 1000
#: The same for a cron series, whose every step is a cronsim search (15-60 µs), and for
#: any series with a calendar (each step also reads the dates it lands on).
CRON_WALK_PER_TICK = 100
#: A series catching up delivers only occurrences due this close before the tick; older
#: ones are folded (reported ``coalesced``), whatever the policy.
MAX_CATCH_UP_SECONDS = ANCHOR_SLACK_SECONDS
#: ``coalesce`` folds the occurrences due at one tick into one fire only when the oldest
#: of them is later than this (an outage); below it each fires, as with ``all``, so a
#: tick that is a second or two late (a busy worker, a slow fetch) folds nothing.
MISFIRE_MS = 5000


class StepKind(str, Enum):
    """What one step of a plan does."""

    #: Deliver the callback (and its ``fired`` audit record).
    DELIVER = "deliver"
    #: Later than its ``skip-after``: not delivered, reported as skipped (``late``).
    SKIP_LATE = "late"
    #: Folded by ``coalesce`` into a fire on a later tick (the walk's budget ran out):
    #: not delivered, reported as skipped (``coalesced``).
    FOLD = "coalesced"


@dataclass(frozen=True)
class Step:
    """One occurrence's fate (and, with ``coalesced``, that of the ones folded into it)."""

    kind: StepKind
    #: The occurrence: its own ``due`` and ``seq``.
    timer: Timer
    #: Earlier occurrences of the series this step also stands for, folded by
    #: ``coalesce``: ``seq - coalesced`` to ``seq - 1``.
    coalesced: int = 0


@dataclass(frozen=True)
class Plan:
    """Everything one due timer does at one tick."""

    #: In order.
    steps: list[Step]
    #: The series' next occurrence to store (possibly already due: see the module doc);
    #: ``None`` for a one-shot timer and a series that has ended.
    successor: Timer | None = None


def plan(
    timer: Timer,
    through: int,
    now_ms: float,
    policy: LatePolicy,
    *,
    budget: int = CATCH_UP_PER_TICK,
) -> Plan:
    """The plan for ``timer``, due at or before ``through`` (the tick's second), at
    ``now_ms`` (the worker's clock), under ``policy`` (defaults already filled in)."""
    if timer.recurrence is None:
        return Plan([_judge(timer, now_ms, policy)])
    rec = timer.recurrence
    if not rec.arithmetic:  # a cron series, or any series with a calendar: walked
        budget = min(budget, CRON_WALK_PER_TICK)
    if (
        policy.catch_up is CatchUp.COALESCE
        and now_ms - timer.fire_at * 1000 > MISFIRE_MS
        and (following := rec.after(timer.due, timer.seq)) is not None
        and following <= through
    ):
        return _coalesce(timer, through, now_ms, policy, budget)
    steps: list[Step] = []
    cutoff = through - MAX_CATCH_UP_SECONDS
    if timer.due < cutoff:  # far behind: fold what is older than the catch-up bound
        folded = _fold_before(timer, cutoff, through, budget)
        if folded is not None:
            steps.append(folded.step)
            if not folded.done:  # a cron series: the next tick folds on
                return Plan(steps, folded.rest)
            timer = folded.rest
    fired_before = timer.fired_before
    seq, due = timer.seq, timer.due
    while True:
        occurrence = _at(timer, seq, due, fired_before)
        step = _judge(occurrence, now_ms, policy)
        steps.append(step)
        fired_before += step.kind is StepKind.DELIVER
        nxt = rec.after(due, seq)
        if nxt is None:
            return Plan(steps)
        seq, due = seq + 1, nxt
        if due > through or len(steps) >= budget:
            return Plan(steps, _at(timer, seq, due, fired_before))
        if timer.spread:
            upcoming = _at(timer, seq, due, fired_before)
            if upcoming.fire_at > through:  # due, but its spread second is still to come
                return Plan(steps, upcoming)


def _fold_before(timer: Timer, cutoff: int, through: int, budget: int) -> _Folded | None:
    """``timer``'s occurrences due before ``cutoff`` but the newest due by ``through``
    (which is always judged, as ``coalesce`` does), as one ``coalesced`` step: all of
    them for an interval series, at O(1); at most ``budget`` for a cron series.
    ``None`` if there is nothing to fold."""
    rec = timer.recurrence
    assert rec is not None
    if rec.arithmetic:
        assert rec.every is not None
        seq, due = rec.skip_to(timer.due, timer.seq, cutoff - 1)
        newest, _ = rec.skip_to(timer.due, timer.seq, through)
        if seq >= newest:
            seq, due = newest - 1, timer.due + (newest - 1 - timer.seq) * rec.every
        if seq < timer.seq:
            return None
        nxt, done = due + rec.every, True
    else:
        second = rec.after(timer.due, timer.seq)
        if second is None or second > through:
            return None
        seq, due, nxt, walked = timer.seq, timer.due, second, 0
        while True:  # fold (seq, due): a later one (nxt) is due too
            walked += 1
            after = rec.after(nxt, seq + 1)
            if nxt >= cutoff or after is None or after > through:
                done = True
                break
            if walked >= budget:
                done = False
                break
            seq, due, nxt = seq + 1, nxt, after
    fold = Step(StepKind.FOLD, _at(timer, seq, due, timer.fired_before), seq - timer.seq)
    return _Folded(fold, _at(timer, seq + 1, nxt, timer.fired_before), done)


@dataclass(frozen=True)
class _Folded:
    step: Step
    #: The first occurrence not folded (due by the tick).
    rest: Timer
    #: Whether every occurrence to fold was (else the next tick goes on).
    done: bool


def _coalesce(timer: Timer, through: int, now_ms: float, policy: LatePolicy, budget: int) -> Plan:
    """One step for every occurrence due through ``through`` (or as many as ``budget``)."""
    rec = timer.recurrence
    assert rec is not None
    if rec.arithmetic:
        seq, due = rec.skip_to(timer.due, timer.seq, through)  # O(1): no budget needed
        walked_all = True
    else:
        seq, due, walked = timer.seq, timer.due, 0
        nxt = rec.after(due, seq)
        while nxt is not None and nxt <= through and walked < budget:
            seq, due, walked = seq + 1, nxt, walked + 1
            nxt = rec.after(due, seq)
        walked_all = nxt is None or nxt > through
    folded = seq - timer.seq
    last = _at(timer, seq, due, timer.fired_before)
    if not walked_all:  # report what was walked; the rest continues on the next tick
        nxt = rec.after(due, seq)
        successor = None if nxt is None else _at(timer, seq + 1, nxt, timer.fired_before)
        return Plan([Step(StepKind.FOLD, last, folded)], successor)
    step = _judge(last, now_ms, policy, folded)
    fired_before = timer.fired_before + (step.kind is StepKind.DELIVER)
    nxt = rec.after(due, seq)
    successor = None if nxt is None else _at(timer, seq + 1, nxt, fired_before)
    return Plan([step], successor)


def _judge(occurrence: Timer, now_ms: float, policy: LatePolicy, coalesced: int = 0) -> Step:
    late = policy.skips(now_ms - occurrence.fire_at * 1000)
    return Step(StepKind.SKIP_LATE if late else StepKind.DELIVER, occurrence, coalesced)


#: A Timer without its __init__ (frozen: its fields go into the instance's dict).
_new_timer = object.__new__


def _at(timer: Timer, seq: int, due: int, fired_before: int) -> Timer:
    """Occurrence ``seq`` of ``timer``'s series: ``timer``'s fields with another due
    second, sequence number and count fired before, and no debounce (as ``Timer(...)``
    with the thirteen other fields builds it). Copied into a new instance's dict, as
    :func:`app.core.stored.unpack_timer` builds one: this runs once per fired
    occurrence, and the constructor's call with thirteen arguments costs twice as much
    (10,200 against 5,400 instructions, callgrind)."""
    if seq == timer.seq and due == timer.due and fired_before == timer.fired_before:
        return timer
    occurrence: Timer = _new_timer(Timer)
    fields = occurrence.__dict__
    fields.update(timer.__dict__)
    fields["due"] = due
    fields["seq"] = seq
    fields["fired_before"] = fired_before
    if "debounce" in fields:  # a window is the debounced request's, never a series'
        del fields["debounce"]
    return occurrence


def next_occurrence(delivered: Timer, due: int) -> Timer:
    """The occurrence after ``delivered`` (just delivered), due at ``due``: what
    :func:`plan` makes the successor of a series whose one due occurrence fired."""
    return _at(delivered, delivered.seq + 1, due, delivered.fired_before + 1)
