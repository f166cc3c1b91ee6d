"""The nemesis's judge: a run's promises and faults against what the topics hold.

Pure: it takes a :class:`~tests.nemesis.history.History` and an
:class:`~tests.nemesis.history.Observed` and returns a :class:`Verdict`; the system's own
counters are never asked. What it holds a run to:

- **lost**: every timer due fired, or was answered cancelled. A one-shot timer's newest
  acknowledged version (or a later one never acknowledged) must have a callback, unless a
  cancel was answered ``cancelled`` / ``cancelled_in_advance``, or a cancel got no answer
  (then either is right). Every occurrence of a series must fire (late policy ``all``).
- **early**: no callback before its second (the version's spread second, if any), by real
  time: the callback's ``timer-fired-at`` is the firing worker's clock, so the offset the
  nemesis gave that worker's incarnation (named by its ``fired`` record) is taken off.
- **after cancel**: no callback of a version sent before a cancel, produced after the
  cancel was answered ``cancelled`` (real time of the answer's reading), unless that
  version first reached the owner partition after the cancel (a forwarded copy the cancel
  overtook: a new version to the owner; reported as ``misordered``).
- **undone**: a rescheduled timer fires its newest version only. An older version that
  fires counts as undone, unless its second came within ``slack_ms`` of the reschedule's
  acknowledgement (the reschedule raced the tick: reported as ``raced``), or the newer
  version reached the owner partition only after the older one fired (its request, or
  forwarded copy, at an offset past the fire's ``request_offset``: held up on its way,
  by a forwarding worker's fault say; reported as ``reached_late``), or its first copy
  reached the owner partition after the newer one (two producers that place records
  differently, which the README leaves to the producer: reported as ``misordered``).
- **lost**: the newest acknowledged version (or one sent after it) fires unless a cancel
  was answered, a version it raced fired, or an older version first reached the owner
  partition after it (two producers' race again: the owner read the older one last, so
  that one is the newest it knows; reported as ``misordered``, ``overtaken``).
- **duplicates**: callbacks beyond the first of one version (or series occurrence),
  counted by cause: the latest fault under way between the first copy and the repeat
  that hit the broker or either copy's worker, ``producer resend`` for copies of one
  produce, else ``unexplained``.
- **unknown**: callbacks for an id, version or occurrence nobody asked for.

A run passes when lost, early, after-cancel, undone and unknown are all empty.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import pairwise

from tests.nemesis.history import (
    Arrival,
    Callback,
    CancelOp,
    Fault,
    Fire,
    History,
    Observed,
    SeriesOp,
    Version,
    series_payload,
)

__all__ = ["CANCELLED", "Verdict", "check"]

#: Answers after which the timer must never fire.
CANCELLED = frozenset({"cancelled", "cancelled_in_advance"})
#: How long before a repeat's first copy a fault may have begun and still explain it:
#: a fire delivered in the round in flight when the fault struck, not yet forgotten.
CAUSE_LEAD_MS = 3000
#: Fault kinds that hit every worker at once.
SHARED_TARGETS = frozenset({"broker"})


@dataclass
class Verdict:
    """What a run showed. ``ok`` when nothing was lost, early, fired after its cancel,
    undone or made up."""

    #: One-shot ids and series judged.
    timers: int = 0
    #: Callbacks read.
    callbacks: int = 0
    lost: list[str] = field(default_factory=list)
    early: list[str] = field(default_factory=list)
    after_cancel: list[str] = field(default_factory=list)
    undone: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    #: Benign, reported: an older version fired because the reschedule raced its tick.
    raced: list[str] = field(default_factory=list)
    #: Benign, reported: a reschedule reached the owner partition only after its older
    #: version had fired there (the fire's ``request_offset`` is below its offset).
    reached_late: list[str] = field(default_factory=list)
    #: Benign, reported: versions reached the owner out of the order they were sent.
    misordered: list[str] = field(default_factory=list)
    #: Reported: a callback came, and then a cancel was answered ``cancelled``.
    fired_then_cancelled: list[str] = field(default_factory=list)
    #: Ids not judged for loss: a request never acknowledged, or a cancel not answered.
    indeterminate: int = 0
    #: Callbacks beyond the first, by cause.
    duplicates: Counter[str] = field(default_factory=Counter)
    #: Latest first callback after its second, ms (limited topics apart: they wait).
    max_late_ms: int = 0
    max_late_limited_ms: int = 0
    #: Dead letters naming a timer, by reason.
    dead_lettered: Counter[str] = field(default_factory=Counter)
    #: Callbacks whose firing worker was not found among the ``fired`` records (judged
    #: on the worker's clock as it stamped them).
    unmatched: int = 0

    @property
    def ok(self) -> bool:
        return not (self.lost or self.early or self.after_cancel or self.undone or self.unknown)

    @property
    def duplicate_total(self) -> int:
        return sum(self.duplicates.values())

    def lines(self, examples: int = 5) -> list[str]:
        """A readable report, one finding a line, with a few examples of each."""
        out = [
            f"timers {self.timers}, callbacks {self.callbacks}, indeterminate "
            f"{self.indeterminate}, unmatched {self.unmatched}",
            f"max late {self.max_late_ms / 1000:.1f} s (limited topic "
            f"{self.max_late_limited_ms / 1000:.1f} s)",
        ]
        for name in (
            "lost",
            "early",
            "after_cancel",
            "undone",
            "unknown",
            "raced",
            "reached_late",
            "misordered",
            "fired_then_cancelled",
        ):
            found: list[str] = getattr(self, name)
            if found:
                out.append(f"{name} {len(found)}: " + "; ".join(found[:examples]))
        if self.dead_lettered:
            out.append(f"dead letters naming timers: {dict(self.dead_lettered)}")
        if self.duplicates:
            by_cause = ", ".join(f"{c} {n}" for c, n in self.duplicates.most_common())
            out.append(f"duplicates {self.duplicate_total} by cause: {by_cause}")
        return out


class _Clocks:
    """Real time of a callback: its ``timer-fired-at`` less its worker's clock offset."""

    def __init__(self, history: History, fires: list[Fire]) -> None:
        self.offset_ms = {i.worker: round(i.offset_s * 1000) for i in history.incarnations}
        self.worker: dict[tuple[str, int, int], str] = {
            (f.id, f.seq or 0, f.fired_at_ms): f.worker for f in fires
        }
        self.applied: dict[tuple[str, int, int], int] = {
            (f.id, f.seq or 0, f.fired_at_ms): f.request_offset
            for f in fires
            if f.request_offset is not None
        }

    def worker_of(self, cb: Callback) -> str | None:
        return self.worker.get((cb.id, cb.seq or 0, cb.fired_at_ms))

    def applied_through(self, cb: Callback) -> int | None:
        """The newest request offset the owner partition had applied when ``cb`` fired."""
        return self.applied.get((cb.id, cb.seq or 0, cb.fired_at_ms))

    def real_ms(self, cb: Callback) -> int:
        worker = self.worker_of(cb)
        return cb.fired_at_ms - (self.offset_ms.get(worker, 0) if worker else 0)


def _base(worker: str) -> str:
    """The process a worker incarnation belongs to: ``worker-3~p45`` is ``worker-3``."""
    return worker.split("~", 1)[0]


def _cause(
    faults: list[Fault],
    workers: tuple[str | None, str | None],
    first_ms: int,
    repeat_ms: int,
    same: bool,
) -> str:
    """The fault a repeat is put down to: the latest one under way between the first copy
    (less :data:`CAUSE_LEAD_MS`) and the repeat that hit the broker or the worker of
    either copy. Under way, not only begun: a worker cut off the broker before the first
    copy, whose partitions were fired by another meanwhile, fires them again when it is
    back (at least once: nothing fences it outside exactly-once mode)."""
    if same:
        return "producer resend"
    targets = {_base(w) for w in workers if w is not None}
    hit = [
        f
        for f in faults
        if f.start_ms <= repeat_ms
        and f.end_ms >= first_ms - CAUSE_LEAD_MS
        and (f.target in SHARED_TARGETS or f.target in targets)
    ]
    if not hit:
        return "unexplained"
    return max(hit, key=lambda f: f.start_ms).kind


def _first_offsets(arrivals: list[Arrival]) -> dict[str, int]:
    first: dict[str, int] = {}
    for a in sorted(arrivals, key=lambda a: a.offset):
        first.setdefault(a.payload, a.offset)
    return first


def check(history: History, observed: Observed, *, slack_ms: int = 10_000) -> Verdict:
    """Judge ``observed`` against ``history`` (see the module docstring).

    ``slack_ms``: how long after a reschedule was acknowledged its older version may
    still fire, having raced the reschedule to the worker (a frozen or busy worker reads
    its ticks and its requests in no promised order).
    """
    verdict = Verdict(callbacks=len(observed.callbacks))
    clocks = _Clocks(history, observed.fires)
    versions: dict[str, list[Version]] = defaultdict(list)
    for v in history.versions:
        versions[v.id].append(v)
    series = {s.id: s for s in history.series}
    cancels: dict[str, list[CancelOp]] = defaultdict(list)
    for c in history.cancels:
        cancels[c.id].append(c)
    arrivals: dict[str, list[Arrival]] = defaultdict(list)
    for a in observed.arrivals:
        arrivals[a.id].append(a)
    by_id: dict[str, list[Callback]] = defaultdict(list)
    for cb in observed.callbacks:
        by_id[cb.id].append(cb)
    for cb in observed.callbacks:
        if clocks.worker_of(cb) is None:
            verdict.unmatched += 1
    for timer_id in sorted(set(by_id) - versions.keys() - series.keys()):
        verdict.unknown.append(f"{timer_id}: {len(by_id[timer_id])} callback(s), never asked")
    verdict.timers = len(versions) + len(series)
    dead: dict[str, str] = {}
    for d in observed.dead:
        verdict.dead_lettered[d.reason] += 1
        dead[d.id] = f"{d.reason}: {d.detail[:80]}"

    def copies_of(got: list[Callback]) -> None:
        """Count the repeats among ``got`` (the callbacks of one version or occurrence)."""
        ordered = sorted(got, key=clocks.real_ms)
        first = ordered[0]
        for repeat in ordered[1:]:
            same = repeat.fired_at_ms == first.fired_at_ms
            verdict.duplicates[
                _cause(
                    history.faults,
                    (clocks.worker_of(first), clocks.worker_of(repeat)),
                    clocks.real_ms(first),
                    clocks.real_ms(repeat),
                    same,
                )
            ] += 1

    for timer_id, vs in sorted(versions.items()):
        _judge_one_shot(
            verdict,
            clocks,
            sorted(vs, key=lambda v: v.version),
            sorted(cancels.get(timer_id, []), key=lambda c: c.sent_ms),
            by_id.get(timer_id, []),
            _first_offsets(arrivals.get(timer_id, [])),
            slack_ms,
            copies_of,
        )
    for timer_id, s in sorted(series.items()):
        _judge_series(verdict, clocks, s, by_id.get(timer_id, []), copies_of)
    verdict.lost = [
        f"{line}, dead-lettered {dead[line.split(' ')[0]]}" if line.split(" ")[0] in dead else line
        for line in verdict.lost
    ]
    return verdict


def _judge_one_shot(
    verdict: Verdict,
    clocks: _Clocks,
    vs: list[Version],
    cs: list[CancelOp],
    got: list[Callback],
    first_arrival: dict[str, int],
    slack_ms: int,
    copies_of: Callable[[list[Callback]], None],
) -> None:
    timer_id = vs[0].id
    by_payload = {v.payload: v for v in vs}
    fired: dict[int, list[Callback]] = defaultdict(list)
    for cb in got:
        v = by_payload.get(cb.payload)
        if v is None or cb.seq:
            verdict.unknown.append(f"{timer_id}: callback {cb.payload!r}, never asked")
            continue
        fired[v.version].append(cb)
    by_number = {v.version: v for v in vs}
    for number, cbs in fired.items():
        v = by_number[number]
        for cb in cbs:
            real = clocks.real_ms(cb)
            if real < v.fire_at * 1000:
                verdict.early.append(
                    f"{timer_id} v{number}: {v.fire_at * 1000 - real} ms before its second "
                    f"{v.fire_at} (worker {clocks.worker_of(cb)})"
                )
        copies_of(cbs)

    # Cancels: nothing sent before a cancel answered cancelled may fire after the answer.
    answered = [c for c in cs if c.outcome in CANCELLED and c.answered_ms is not None]
    for cancel in answered:
        assert cancel.answered_ms is not None
        for v in vs:
            if v.sent_ms > cancel.sent_ms:
                continue
            v_at, cancel_at = first_arrival.get(v.payload), first_arrival.get("")
            if v_at is not None and cancel_at is not None and cancel_at < v_at:
                # sent before the cancel, but it reached the owner after it (a forwarded
                # copy the cancel overtook): a new version to the owner, as documented
                if fired.get(v.version):
                    verdict.misordered.append(f"{timer_id} v{v.version} after its cancel")
                continue
            for cb in fired.get(v.version, []):
                real = clocks.real_ms(cb)
                if real > cancel.answered_ms:
                    verdict.after_cancel.append(
                        f"{timer_id} v{v.version}: fired {real - cancel.answered_ms} ms after "
                        f"its cancel was answered {cancel.outcome}"
                    )
                elif real >= cancel.sent_ms - 60_000:
                    verdict.fired_then_cancelled.append(f"{timer_id} v{v.version}")

    # Reschedules: an older version fires only if it raced its reschedule.
    misordered = False
    for older, newer in pairwise(vs):
        if not fired.get(older.version) or newer.acked_ms is None:
            continue
        first_real = min(clocks.real_ms(cb) for cb in fired[older.version])
        if older.fire_at * 1000 <= newer.acked_ms + slack_ms:
            verdict.raced.append(f"{timer_id} v{older.version}")
            continue
        old_at, new_at = first_arrival.get(older.payload), first_arrival.get(newer.payload)
        first = min(fired[older.version], key=clocks.real_ms)
        through = clocks.applied_through(first)
        if new_at is not None and through is not None and new_at > through:
            verdict.reached_late.append(f"{timer_id} v{older.version}")
            continue
        if old_at is not None and new_at is not None and new_at < old_at:
            verdict.misordered.append(f"{timer_id} v{older.version}")
            misordered = True
            continue
        newest_fired = bool(fired.get(vs[-1].version))
        verdict.undone.append(
            f"{timer_id} v{older.version} (second {older.fire_at}, payload {older.payload}) "
            f"fired at {first_real} though v{newer.version} was acknowledged at "
            f"{newer.acked_ms}, {(older.fire_at * 1000 - newer.acked_ms) / 1000:.1f} s before; "
            f"newest v{vs[-1].version} {'fired too' if newest_fired else 'never fired'}"
        )

    # Loss: the newest acknowledged version (or one after it) fires unless cancelled.
    if any(c.outcome is None for c in cs) or any(v.acked_ms is None for v in vs):
        acked = [i for i, v in enumerate(vs) if v.acked_ms is not None]
        if not acked or any(c.outcome is None for c in cs):
            verdict.indeterminate += 1
            return
        candidates = vs[acked[-1] :]
    else:
        candidates = vs[-1:]
    if answered:
        return
    firsts = [min(fired[v.version], key=clocks.real_ms) for v in candidates if fired.get(v.version)]
    if not firsts:
        # An older version the owner read after the newest one (two producers' race: one
        # retried its record past a broker restart) is the newest the owner knows.
        newest_at = first_arrival.get(candidates[-1].payload)
        overtaken = newest_at is not None and any(
            first_arrival.get(v.payload, -1) > newest_at for v in vs[: vs.index(candidates[0])]
        )
        if overtaken and not misordered:
            verdict.misordered.append(f"{timer_id} v{candidates[-1].version} overtaken")
        elif not misordered:
            last = candidates[0]
            verdict.lost.append(
                f"{timer_id} v{last.version} (second {last.fire_at}, {last.kind}, "
                f"{len(vs)} version(s), route {last.route})"
            )
        return
    first = min(firsts, key=clocks.real_ms)
    v = by_payload[first.payload]
    late = clocks.real_ms(first) - v.fire_at * 1000
    if v.kind == "limited":
        verdict.max_late_limited_ms = max(verdict.max_late_limited_ms, late)
    else:
        verdict.max_late_ms = max(verdict.max_late_ms, late)


def _judge_series(
    verdict: Verdict,
    clocks: _Clocks,
    s: SeriesOp,
    got: list[Callback],
    copies_of: Callable[[list[Callback]], None],
) -> None:
    by_seq: dict[int, list[Callback]] = defaultdict(list)
    for cb in got:
        if cb.payload != series_payload(s.id) or not cb.seq or not 1 <= cb.seq <= s.count:
            verdict.unknown.append(f"{s.id}: callback {cb.payload!r} seq {cb.seq}, never asked")
            continue
        by_seq[cb.seq].append(cb)
    if s.acked_ms is None:
        verdict.indeterminate += 1
    for seq in range(1, s.count + 1):
        due_ms = s.due_of(seq) * 1000
        cbs = by_seq.get(seq, [])
        if not cbs:
            if s.acked_ms is not None:
                verdict.lost.append(f"{s.id} seq {seq} (second {s.due_of(seq)}, series)")
            continue
        for cb in cbs:
            real = clocks.real_ms(cb)
            if real < due_ms:
                verdict.early.append(f"{s.id} seq {seq}: {due_ms - real} ms before its second")
        verdict.max_late_ms = max(verdict.max_late_ms, min(map(clocks.real_ms, cbs)) - due_ms)
        copies_of(cbs)
