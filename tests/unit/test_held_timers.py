"""Timers a gate holds back or their owner pauses, against a model: whatever is
scheduled, replaced, cancelled, paused, resumed, held, released in small budgets and
reloaded, each delivered timer is the current pending version of its id, due by then and
not paused, and every one still pending at the end goes out once, once resumed.
With forgetting left behind delivery (at-least-once mode: ``forget_taken_later`` and
:meth:`PartitionWheel.forget_behind`), the same holds, and a reload delivers nothing
twice: what was delivered but not yet forgotten is recorded in the store (``L``
batches) and found there again, still to be forgotten. (The store here keeps every
write; a real crash loses what its last unit had not flushed, which may include a
round's record: that round's timers are then delivered again, at least once.)

The wheel reads held timers back from the store with one read each (no index check:
:meth:`PartitionWheel.take_held`); this is what makes that safe, whether a tick's scan
held them by their topic alone or they were held after it.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from itertools import count

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.core import wheel_behind as wheel_module
from app.core.keys import DELIVERED, DELIVERED_END, WATERMARK, index_key
from app.core.keys import pending_index_entry as _pending_entry
from app.core.timer import Cancel, Timer
from app.core.wheel import PartitionWheel, PauseOutcome, Scheduled
from tests.support.memkv import MemoryKV

START = 1_767_225_600
IDS = ["a", "b", "c", "d"]
GATED = "held"

_schedule = st.tuples(
    st.just("schedule"),
    st.sampled_from(IDS),
    st.integers(-3, 6),
    st.sampled_from([GATED, "free"]),
    st.sampled_from(["t1", "t2"]),
)
_cancel = st.tuples(st.just("cancel"), st.sampled_from(IDS), st.sampled_from(["t1", "t2"]))
_tick = st.tuples(st.just("tick"), st.integers(0, 3), st.integers(0, 3))
_release = st.tuples(st.just("release"), st.integers(0, 3))
_reload = st.tuples(st.just("reload"))
_forget = st.tuples(st.just("forget"), st.integers(0, 3))
_pause = st.tuples(
    st.sampled_from(["pause", "resume"]), st.sampled_from(IDS), st.sampled_from(["t1", "t2"])
)
_steps = st.lists(
    st.one_of(_schedule, _cancel, _tick, _release, _reload, _pause, _pause, _forget), max_size=40
)


class Model:
    """What should be pending: id -> (token, due), and what went out: the number of each
    accepted request, so that a version sent again after newer ones (a new timer by then,
    which may fire again) is told from a duplicate delivery."""

    def __init__(self) -> None:
        self.pending: dict[str, tuple[str, int]] = {}
        #: The payload of each pending version (every request carries its own), so a
        #: stale copy of an older version cannot pass for it.
        self.values: dict[str, bytes] = {}
        self.accepted: dict[str, int] = {}
        self.serial = count()
        self.paused: set[str] = set()
        self.delivered: list[int] = []
        #: Delivered, their forgetting left behind: id -> (token, due, serial).
        self.behind: dict[str, tuple[str, int, int]] = {}

    def touched(self, timer_id: str) -> None:
        """A request named ``timer_id``: the wheel forgets it first if it was behind."""
        self.behind.pop(timer_id, None)

    def reloaded(self) -> None:
        """What was left behind stays behind: a reload reads it back from its records."""

    def deliver(self, timers: list[Timer], second: int) -> None:
        for t in timers:
            assert self.pending.get(t.id) == (t.token, t.due), (t, self.pending)
            assert t.value == self.values[t.id], (t, self.values[t.id])
            assert t.due <= second  # never early
            assert t.id not in self.paused
            del self.pending[t.id]
            self.delivered.append(self.accepted.pop(t.id))


def assert_behind_still_pending(wheel: PartitionWheel, kv: MemoryKV) -> None:
    """Every timer left behind still has the pending index entry it was stored with:
    what lets :meth:`PartitionWheel.forget_behind` forget them without reading those
    entries (``_forget``'s ``settled``)."""
    for entry in wheel._behind.values():
        assert kv.get(index_key(entry.id)) == _pending_entry(entry.slot, entry.token), entry


def run(steps: list[tuple[object, ...]], scan_holds: bool = False, behind: bool = False) -> None:
    """``scan_holds``: the tick's scan holds the gated topic's timers itself (as the
    service's ticks do, unpacking them only when released); else they are returned and
    held through :meth:`PartitionWheel.hold` (as a topic gated after the scan is).
    ``behind``: rounds leave the held timers they deliver to be forgotten later."""
    kv = MemoryKV()
    clock = [float(START)]
    model = Model()
    values = count()

    def load() -> PartitionWheel:
        wheel = PartitionWheel(kv, clock=lambda: clock[0])
        wheel.recount()
        return wheel

    wheel = load()

    def now() -> int:
        return wheel.ticked_through if wheel.ticked_through is not None else int(clock[0])

    def take(budget: int) -> list[Timer]:
        """As the service's gates do: a gated topic by its budget, any other (a resumed
        timer's) at once."""
        return [
            timer
            for topic in wheel.held_topics()
            for timer, _ in wheel.take_held(topic, budget if topic == GATED else None)
        ]

    def finish(second: int, delivered: list[Timer], taken: list[Timer]) -> None:
        serials = {t.id: model.delivered[-len(delivered) + i] for i, t in enumerate(delivered)}
        wheel.finish_tick(second, delivered, forget_taken_later=behind)
        if behind:
            # One-shot timers taken from the held ones are left behind, up to BEHIND_MAX:
            # past it the rest is forgotten with its round.
            taken_ids = {t.id for t in taken}
            leaving = [t for t in delivered if t.id in taken_ids]
            room = wheel_module.BEHIND_MAX - len(model.behind)
            for t in leaving[: max(room, 0)]:
                model.behind[t.id] = (t.token, t.due, serials[t.id])
        assert wheel.behind == len(model.behind)
        assert set(wheel._behind) == set(model.behind)

    def tick(second: int, budget: int) -> None:
        clock[0] = float(second)
        if scan_holds:
            timers = wheel.begin_tick(second, hold=frozenset({GATED}), since=clock[0])
        else:
            timers = wheel.begin_tick(second)
        if timers is None:
            return
        held = [t for t in timers if t.topic == GATED]
        assert not (scan_holds and held), "the scan returned a timer it was told to hold"
        free = [t for t in timers if t.topic != GATED]
        if held:
            wheel.hold(held, clock[0])
        taken = take(budget)
        free += taken
        model.deliver(free, second)
        finish(second, free, taken)

    for step in steps:
        kind = step[0]
        if kind in ("schedule", "cancel", "pause", "resume"):
            model.touched(str(step[1]))
        if kind == "schedule":
            _, tid, offset, topic, token = step
            timer = Timer(
                id=str(tid),
                due=now() + int(str(offset)),
                topic=str(topic),
                key=b"k",
                value=b"v%d" % next(values),
                token=str(token),
            )
            accepted = wheel.schedule(timer)
            if accepted.outcome in (Scheduled.STORED, Scheduled.FIRE_NOW):
                model.pending[timer.id] = (timer.token, timer.due)
                model.values[timer.id] = timer.value or b""
                model.accepted[timer.id] = next(model.serial)
                model.paused.discard(timer.id)  # a new version is not paused
            if accepted.outcome is Scheduled.FIRE_NOW:
                if timer.topic == GATED:  # as the service does for a gated topic
                    wheel.hold_due(timer, clock[0])
                else:
                    model.deliver([timer], now())
                    wheel.mark_fired(timer)
        elif kind == "cancel":
            _, tid, token = step
            entry = model.pending.get(str(tid))
            outcome = wheel.cancel(Cancel(id=str(tid), token=str(token)))
            if entry is not None and entry[0] == token:
                assert outcome.value == "cancelled", outcome
                del model.pending[str(tid)]
                del model.accepted[str(tid)]
                model.paused.discard(str(tid))
        elif kind in ("pause", "resume"):
            _, tid, token = step
            entry = model.pending.get(str(tid))
            request = Cancel(id=str(tid), token=str(token))
            answer = wheel.pause(request) if kind == "pause" else wheel.resume(request)
            if entry is None:
                assert answer in (PauseOutcome.NOT_FOUND, PauseOutcome.ALREADY_FIRED), answer
            elif entry[0] != token:
                assert answer is PauseOutcome.WRONG_TOKEN
            elif kind == "pause":
                assert answer is PauseOutcome.PAUSED
                model.paused.add(str(tid))
            else:
                assert answer is PauseOutcome.RESUMED
                model.paused.discard(str(tid))
        elif kind == "tick":
            _, gap, budget = step
            tick(now() + int(str(gap)), int(str(budget)))
        elif kind == "release":
            through = wheel.fired_through
            if through is not None and wheel.holding:
                taken = take(int(str(step[1])))
                model.deliver(taken, through)
                finish(through, taken, taken)
        elif kind == "forget":
            wanted = int(str(step[1]))
            forgotten = wheel.forget_behind(wanted)
            assert forgotten == min(wanted, len(model.behind))
            for timer_id in list(model.behind)[:forgotten]:  # oldest first
                del model.behind[timer_id]
        else:  # a restart: held timers are below the persisted watermark, scanned again
            wheel = load()
            model.reloaded()
            assert list(wheel._behind) == list(model.behind)  # oldest first, as before
        assert_behind_still_pending(wheel, kv)
    # Every pause is lifted and the gate opens: everything still pending goes out, once.
    for tid in sorted(model.paused):
        assert wheel.is_paused(tid)
        assert wheel.resume(Cancel(id=tid, token=model.pending[tid][0])) is PauseOutcome.RESUMED
    model.paused.clear()
    assert wheel.paused_count == 0
    second = max([now()] + [due for _, due in model.pending.values()]) + 1
    tick(second, 1_000)
    while wheel.holding:
        taken = take(1_000)
        model.deliver(taken, second)
        finish(second, taken, taken)
    assert wheel.forget_behind(1_000) == len(model.behind)
    assert wheel.behind == 0
    assert model.pending == {}, model.pending
    twice = [serial for serial, n in Counter(model.delivered).items() if n > 1]
    assert not twice, twice  # a reload found what was left behind, and kept it behind
    # Everything delivered is forgotten: no timer key left, no record of one left
    # behind, the key counts exact.
    assert wheel.count_pending() == 0
    assert wheel.delivered_batches == 0
    assert not list(kv.scan(DELIVERED, DELIVERED_END))
    counted = dataclasses.replace(wheel.counts)
    assert wheel.recount() == counted


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_steps, st.booleans(), st.booleans())
def test_held_timers_go_out_as_the_model_says(
    steps: list[tuple[object, ...]], scan_holds: bool, behind: bool
) -> None:
    run(steps, scan_holds, behind)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_steps, st.booleans(), st.integers(1, 4))
def test_held_timers_past_behind_max_go_out_as_the_model_says(
    steps: list[tuple[object, ...]], scan_holds: bool, behind_max: int
) -> None:
    """With room for a few left behind: rounds make room by forgetting the oldest."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(wheel_module, "BEHIND_MAX", behind_max)
        run(steps, scan_holds, behind=True)


def _delivered_behind(n: int = 3) -> tuple[PartitionWheel, MemoryKV, list[Timer]]:
    """A wheel whose ``n`` held timers were delivered and left to forget."""
    kv = MemoryKV()
    wheel = PartitionWheel(kv, clock=lambda: float(START))
    timers = [
        Timer(id=f"h{i}", due=START + 1, topic=GATED, key=b"k", value=b"v", token="t1")
        for i in range(n)
    ]
    for timer in timers:
        wheel.schedule(timer)
    assert wheel.begin_tick(START + 1, hold=frozenset({GATED})) == []
    taken = [t for t, _ in wheel.take_held(GATED, None)]
    wheel.finish_tick(START + 1, taken, forget_taken_later=True)
    assert wheel.behind == n
    return wheel, kv, timers


def test_a_request_sent_again_for_a_timer_delivered_but_not_forgotten_is_a_duplicate() -> None:
    """Its index entry still says pending until it is forgotten: the request would
    otherwise replace it (and be delivered again, or be forgotten in its place)."""
    wheel, _, timers = _delivered_behind()
    assert wheel.schedule(timers[0]).outcome is Scheduled.DUPLICATE
    assert wheel.behind == 2
    assert wheel.forget_behind(10) == 2
    assert wheel.count_pending() == 0


def test_a_cancel_or_pause_of_a_timer_delivered_but_not_forgotten_says_already_fired() -> None:
    wheel, _, timers = _delivered_behind()
    assert wheel.cancel(Cancel(id=timers[0].id, token="t1")).value == "already_fired"
    assert wheel.pause(Cancel(id=timers[1].id, token="t1")) is PauseOutcome.ALREADY_FIRED
    assert wheel.lookup(timers[2].id) == ("fired", START + 1, "t1")
    assert wheel.behind == 0 and wheel.count_pending() == 0


def test_an_id_left_behind_twice_is_forgotten_in_its_place_in_the_order() -> None:
    """``d`` is left behind, touched (forgotten at once), then left behind again after
    ``a``: its first place in the order was stale and forgot the newer ``d`` before
    ``a`` (found by the model test below)."""
    run(
        [
            ("schedule", "a", 0, GATED, "t1"),
            ("schedule", "d", -1, GATED, "t1"),
            ("tick", 0, 1),
            ("schedule", "d", 0, GATED, "t1"),
            ("release", 2),
            ("forget", 1),
            ("schedule", "a", 0, GATED, "t1"),
            ("reload",),
        ],
        behind=True,
    )


def test_a_new_version_read_while_the_old_one_is_delivered_keeps_its_entry() -> None:
    """A round takes a held timer; a reschedule is read before the round ends. The old
    version goes out (it was on its way), but its forgetting, left for later without
    reading index entries, overwrote the new version's pending entry with "fired": the
    new one could no longer be cancelled (already fired) and was counted wrong."""
    kv = MemoryKV()
    wheel = PartitionWheel(kv, clock=lambda: float(START))
    old = Timer(id="x", due=START + 1, topic=GATED, key=b"k", value=b"v1", token="t1")
    wheel.schedule(old)
    assert wheel.begin_tick(START + 1, hold=frozenset({GATED})) == []
    taken = [t for t, _ in wheel.take_held(GATED, None)]
    assert [t.value for t in taken] == [b"v1"]
    new = dataclasses.replace(old, due=START + 50, value=b"v2")
    assert wheel.schedule(new).outcome is Scheduled.STORED
    wheel.finish_tick(START + 1, taken, forget_taken_later=True)
    wheel.forget_behind(10)
    assert kv.get(index_key("x")) == _pending_entry(START + 50, "t1")
    assert wheel.count_pending() == 1
    assert wheel.cancel(Cancel(id="x", token="t1")).value == "cancelled"


def test_the_watermark_stays_below_what_is_left_behind_until_it_is_forgotten() -> None:
    """A reload before the forgetting finds them again (delivered twice: at least once);
    after it, nothing."""
    wheel, kv, _ = _delivered_behind()
    wheel.finish_tick(START + 100, [])  # later ticks persist no watermark past them
    assert int(kv.get(WATERMARK) or b"0") < START + 1
    assert wheel.forget_behind(1) == 1
    assert int(kv.get(WATERMARK) or b"0") < START + 1
    assert wheel.forget_behind(10) == 2
    assert int(kv.get(WATERMARK) or b"0") == START + 100
    reloaded = PartitionWheel(kv, clock=lambda: float(START + 100))
    assert reloaded.begin_tick(START + 101) == []


def test_a_round_over_behind_max_forgets_the_rest_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wheel_module, "BEHIND_MAX", 2)
    kv = MemoryKV()
    wheel = PartitionWheel(kv, clock=lambda: float(START))
    for i in range(5):
        wheel.schedule(
            Timer(id=f"h{i}", due=START + 1, topic=GATED, key=b"k", value=b"v", token="t1")
        )
    wheel.begin_tick(START + 1, hold=frozenset({GATED}))
    taken = [t for t, _ in wheel.take_held(GATED, None)]
    wheel.finish_tick(START + 1, taken, forget_taken_later=True)
    assert wheel.behind == 2
    assert wheel.count_pending() == 2  # the other three forgotten with their round
    # The next round finds no room: its own are forgotten with it, the two left behind
    # before stay (to be forgotten in the rounds' spare time).
    for i in range(5, 7):
        wheel.schedule(
            Timer(id=f"h{i}", due=START + 2, topic=GATED, key=b"k", value=b"v", token="t1")
        )
    wheel.begin_tick(START + 2, hold=frozenset({GATED}))
    taken = [t for t, _ in wheel.take_held(GATED, None)]
    wheel.finish_tick(START + 2, taken, forget_taken_later=True)
    assert sorted(wheel._behind) == ["h0", "h1"]
    assert wheel.count_pending() == 2
    assert [wheel.lookup(f"h{i}") for i in (5, 6)] == [("fired", START + 2, "t1")] * 2
    assert int(kv.get(WATERMARK) or b"0") < START + 1  # below the two left behind
    assert wheel.forget_behind(10) == 2
    assert wheel.count_pending() == 0
    assert int(kv.get(WATERMARK) or b"0") == START + 2


def test_timers_delivered_but_not_forgotten_are_not_listed_as_pending() -> None:
    """``kafka-timers list``, bulk cancels and the status page read pending timers: one
    delivered and left to forget has fired."""
    wheel, _, _ = _delivered_behind(3)
    wheel.schedule(Timer(id="later", due=START + 50, topic="free", key=b"k", value=b"v", token="t"))
    assert [t.id for t in wheel.iter_pending()] == ["later"]
    assert [timer_id for _, timer_id in wheel.iter_due()] == ["later"]
    assert len(list(wheel.scan_pending())) == 1
    wheel.forget_behind(10)
    assert [t.id for t in wheel.iter_pending()] == ["later"]


def test_a_timer_held_twice_goes_out_once_when_the_first_is_left_behind() -> None:
    """Found by the model: a request sent twice more for a held timer due already holds
    it again each time; once one round delivered it and left it behind, the next
    round found its key still there and delivered it a second time (no crash)."""
    steps: list[tuple[object, ...]] = [
        ("schedule", "a", 0, GATED, "t1"),
        ("tick", 0, 0),
        ("schedule", "a", 0, GATED, "t1"),
        ("schedule", "a", 0, GATED, "t1"),
        ("release", 1),
    ]
    run(steps, scan_holds=False, behind=True)


def test_a_reload_reads_back_what_was_left_behind_and_delivers_none_of_it() -> None:
    """A restart (or the next owner) before the forgetting: the ``L`` records say which
    timers were delivered, so the rescan skips them and they are forgotten, not sent."""
    _, kv, timers = _delivered_behind(3)
    assert len(list(kv.scan(DELIVERED, DELIVERED_END))) == 1  # one batch for the round
    reloaded = PartitionWheel(kv, clock=lambda: float(START + 5))
    reloaded.recount()
    assert list(reloaded._behind) == [t.id for t in timers]
    assert reloaded.begin_tick(START + 5, hold=frozenset({GATED})) == []
    assert not reloaded.holding  # skipped, not held again for delivery
    reloaded.finish_tick(START + 5, [])
    assert reloaded.forget_behind(2) == 2
    assert reloaded.delivered_batches == 1  # its last one is still to forget
    assert reloaded.forget_behind(10) == 1
    assert reloaded.delivered_batches == 0
    assert not list(kv.scan(DELIVERED, DELIVERED_END))
    assert reloaded.count_pending() == 0
    assert reloaded.lookup(timers[0].id) == ("fired", START + 1, "t1")


def test_a_version_stored_since_a_record_is_delivered_after_a_reload() -> None:
    """A record names the version it delivered (its pending index entry): one forgotten
    and then scheduled anew is a new timer, delivered when due, not taken as behind."""
    wheel, kv, timers = _delivered_behind(2)
    later = Timer(id=timers[0].id, due=START + 9, topic=GATED, key=b"k", value=b"v", token="t2")
    assert wheel.schedule(later).outcome is Scheduled.STORED  # the old one forgotten first
    assert wheel.behind == 1 and wheel.delivered_batches == 1
    reloaded = PartitionWheel(kv, clock=lambda: float(START + 9))
    reloaded.recount()
    assert list(reloaded._behind) == [timers[1].id]
    assert reloaded.begin_tick(START + 9, hold=frozenset({GATED})) == []
    assert [t.token for t, _ in reloaded.take_held(GATED, None)] == ["t2"]


def test_an_aborted_round_keeps_what_earlier_rounds_delivered() -> None:
    """A failed flush rescans from the persisted watermark: what earlier rounds
    delivered (and recorded) is not held for delivery again."""
    wheel, _, _ = _delivered_behind(3)
    wheel.abort_tick()
    assert wheel.behind == 3
    assert wheel.begin_tick(START + 2, hold=frozenset({GATED})) == []
    assert not wheel.holding


def test_records_of_long_ids_are_cut_by_size() -> None:
    """A round's record is at most about 64 KB (ids may be up to 1 KB): more batches."""
    kv = MemoryKV()
    wheel = PartitionWheel(kv, clock=lambda: float(START))
    for i in range(200):
        wheel.schedule(
            Timer(id=f"{i:04}" + "x" * 996, due=START + 1, topic=GATED, key=b"k", value=b"v")
        )
    wheel.begin_tick(START + 1, hold=frozenset({GATED}))
    taken = [t for t, _ in wheel.take_held(GATED, None)]
    wheel.finish_tick(START + 1, taken, forget_taken_later=True)
    records = list(kv.scan(DELIVERED, DELIVERED_END))
    assert len(records) > 1 and all(len(value) < 70_000 for _, value in records)
    reloaded = PartitionWheel(kv, clock=lambda: float(START + 1))
    reloaded.recount()
    assert reloaded.behind == 200


def test_a_record_that_is_not_one_is_left_alone() -> None:
    """Bytes under an ``L`` key that no round wrote neither stop a reload nor count."""
    _, kv, _ = _delivered_behind(2)
    kv.put(b"L999999999999", b"not a batch")
    reloaded = PartitionWheel(kv, clock=lambda: float(START + 1))
    reloaded.recount()
    assert reloaded.behind == 2
