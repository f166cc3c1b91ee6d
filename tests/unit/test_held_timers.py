"""Timers a gate holds back, against a model: whatever is scheduled, replaced, cancelled,
held, released in small budgets and reloaded, each delivered timer is the current pending
version of its id, due by then, and every one still pending at the end goes out once.

The wheel reads held timers back from the store with one read each (no index check:
:meth:`PartitionWheel.take_held`); this is what makes that safe.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.core.timer import Cancel, Timer
from app.core.wheel import PartitionWheel, Scheduled
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
_steps = st.lists(st.one_of(_schedule, _cancel, _tick, _release, _reload), max_size=40)


class Model:
    """What should be pending: id -> (token, due), and what went out."""

    def __init__(self) -> None:
        self.pending: dict[str, tuple[str, int]] = {}
        self.delivered: list[tuple[str, str, int]] = []

    def deliver(self, timers: list[Timer], second: int) -> None:
        for t in timers:
            assert self.pending.get(t.id) == (t.token, t.due), (t, self.pending)
            assert t.due <= second  # never early
            del self.pending[t.id]
            self.delivered.append((t.id, t.token, t.due))


def run(steps: list[tuple[object, ...]]) -> None:
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
        return [entry.timer for entry in wheel.take_held(GATED, budget)]

    def tick(second: int, budget: int) -> None:
        clock[0] = float(second)
        timers = wheel.begin_tick(second)
        if timers is None:
            return
        held = [t for t in timers if t.topic == GATED]
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
    # The gate opens: everything still pending goes out, each once.
    second = now() + 10
    tick(second, 1_000)
    while wheel.holding:
        taken = take(1_000)
        model.deliver(taken, second)
        wheel.finish_tick(second, taken)
    assert model.pending == {}, model.pending
    assert len(model.delivered) == len(set(model.delivered))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_steps)
def test_held_timers_go_out_as_the_model_says(steps: list[tuple[object, ...]]) -> None:
    run(steps)
