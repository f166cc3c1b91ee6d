"""Timers a gate holds back or their owner pauses, against a model: whatever is
scheduled, replaced, cancelled, paused, resumed, held, released in small budgets and
reloaded, each delivered timer is the current pending version of its id, due by then and
not paused, and every one still pending at the end goes out once, once resumed.

The wheel reads held timers back from the store with one read each (no index check:
:meth:`PartitionWheel.take_held`); this is what makes that safe, whether a tick's scan
held them by their topic alone or they were held after it.
"""

from __future__ import annotations

from itertools import count

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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
_pause = st.tuples(
    st.sampled_from(["pause", "resume"]), st.sampled_from(IDS), st.sampled_from(["t1", "t2"])
)
_steps = st.lists(
    st.one_of(_schedule, _cancel, _tick, _release, _reload, _pause, _pause), max_size=40
)


class Model:
    """What should be pending: id -> (token, due), and what went out: the number of each
    accepted request, so that a version sent again after newer ones (a new timer by then,
    which may fire again) is told from a duplicate delivery."""

    def __init__(self) -> None:
        self.pending: dict[str, tuple[str, int]] = {}
        self.accepted: dict[str, int] = {}
        self.serial = count()
        self.paused: set[str] = set()
        self.delivered: list[int] = []

    def deliver(self, timers: list[Timer], second: int) -> None:
        for t in timers:
            assert self.pending.get(t.id) == (t.token, t.due), (t, self.pending)
            assert t.due <= second  # never early
            assert t.id not in self.paused
            del self.pending[t.id]
            self.delivered.append(self.accepted.pop(t.id))


def run(steps: list[tuple[object, ...]], scan_holds: bool = False) -> None:
    """``scan_holds``: the tick's scan holds the gated topic's timers itself (as the
    service's ticks do, unpacking them only when released); else they are returned and
    held through :meth:`PartitionWheel.hold` (as a topic gated after the scan is)."""
    kv = MemoryKV()
    clock = [float(START)]
    model = Model()

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
            entry.timer
            for topic in wheel.held_topics()
            for entry in wheel.take_held(topic, budget if topic == GATED else None)
        ]

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
        free += take(budget)
        model.deliver(free, second)
        wheel.finish_tick(second, free)

    for step in steps:
        kind = step[0]
        if kind == "schedule":
            _, tid, offset, topic, token = step
            timer = Timer(
                id=str(tid),
                due=now() + int(str(offset)),
                topic=str(topic),
                key=b"k",
                value=b"v",
                token=str(token),
            )
            accepted = wheel.schedule(timer)
            if accepted.outcome in (Scheduled.STORED, Scheduled.FIRE_NOW):
                model.pending[timer.id] = (timer.token, timer.due)
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
                wheel.finish_tick(through, taken)
        else:  # a restart: held timers are below the persisted watermark, scanned again
            wheel = load()
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
        wheel.finish_tick(second, taken)
    assert model.pending == {}, model.pending
    assert len(model.delivered) == len(set(model.delivered))


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_steps, st.booleans())
def test_held_timers_go_out_as_the_model_says(
    steps: list[tuple[object, ...]], scan_holds: bool
) -> None:
    run(steps, scan_holds)
