"""Per-topic rate limits and pauses in the service's fire path, on memory stores.

Timers of a limited topic are held in their wheel and delivered at the partition's
share of the limit, in due order, never early, none lost across a failed flush, a
restart on the same stores or a partition moved away and back; topics without a limit
are not held back; a held timer keeps its late-fire policy and can be cancelled.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from app.core.keys import WATERMARK, timer_key
from app.worker.output import DeliveryFailure
from app.worker.service import TimerService
from app.worker.topic_gates import RELEASE_INTERVAL, TopicGates
from tests.support.waiting import wait_until_async
from tests.unit.test_service import NOW, Harness, run
from tests.unit.test_topic_gates import busiest_window


def limited(rate: float = 10.0, *, partitions: int = 1, **options: object) -> Harness:
    h = Harness(request_partitions=None, **options)  # type: ignore[arg-type]
    h.service.gates = TopicGates({"lim": rate}, partitions=partitions, clock=h.clock)
    h.service.gates.on_change(h.service._release_wanted.set)
    return h


def restarted_service(h: Harness, rate: float) -> TimerService:
    """A new process's service on ``h``'s stores and output (RocksDB outlives the old
    one), ``lim`` limited to ``rate``."""
    return TimerService(
        policy=h.service._policy,
        output=h.output,
        metrics=h.metrics,
        stores=h.stores,
        clock=h.clock,
        gates=TopicGates({"lim": rate}, partitions=1, clock=h.clock),
    )


def release_for(
    h: Harness, seconds: float, step: float = RELEASE_INTERVAL, *, forget: bool = True
) -> None:
    """The release loop's rounds for ``seconds`` of the fake clock, ticking each second;
    ``forget``: between rounds the loop forgets what they delivered, as it does with time
    to spare (TimerService.run_gated_release)."""
    end = h.clock.now + seconds
    while h.clock.now < end - 1e-9:
        before = int(h.clock.now)
        h.clock.now += step
        if int(h.clock.now) > before:
            h.tick(int(h.clock.now))
        run(h.service.release_gated())
        if forget:
            run(h.service.forget_behind(1.0))


def run_release_loop(
    h: Harness,
    done: Callable[[], bool],
    what: str,
    *,
    overrun: float = 0.0,
    fake_cadence: bool = False,
) -> None:
    """TimerService.run_gated_release on the fake clock until ``done``: its sleeps advance
    the clock by what they were asked, ``overrun`` of it more (and at least 1 ms), in
    one turn of the loop; ``fake_cadence``: its cadence read from the fake clock too."""

    async def sleep(seconds: float) -> None:
        h.clock.now += max(seconds * (1 + overrun), 0.001)
        await asyncio.sleep(0)  # the fake clock's sleep: one turn of the loop, no time

    async def drive() -> None:
        if fake_cadence:
            release = h.service.run_gated_release(sleep, lambda: h.clock.now)
        else:
            release = h.service.run_gated_release(sleep)
        loop = asyncio.ensure_future(release)
        try:
            await wait_until_async(done, 30, what)
        finally:
            loop.cancel()

    run(drive())


def callbacks(h: Harness, topic: str) -> list[tuple[str, int, int]]:
    """``(id, due, fired_at_ms)`` of the durable callbacks to ``topic``, in order."""
    return [(t.id, t.due, at) for t, at in h.output.durable.callbacks if t.topic == topic]


def test_a_limited_topic_goes_out_at_its_limit_in_due_order_and_others_at_once() -> None:
    h = limited(10.0)
    h.requests(
        *(h.schedule(f"l{i:02}", NOW + 1 + i % 2, topic="lim") for i in range(30)),
        *(h.schedule(f"u{i}", NOW + 1, topic="cb") for i in range(5)),
    )
    h.tick(NOW + 1)
    assert len(callbacks(h, "cb")) == 5  # not held back by the limited topic
    assert callbacks(h, "lim") == []  # its bucket starts empty
    release_for(h, 4.5)
    sent = callbacks(h, "lim")
    assert len(sent) == 30 and len({i for i, _, _ in sent}) == 30  # none lost, each once
    assert [due for _, due, _ in sent] == sorted(due for _, due, _ in sent)  # due order
    assert all(at >= due * 1000 for _, due, at in sent)  # never early
    per_second = Counter(at // 1000 for _, _, at in sent)
    assert max(per_second.values()) <= 11  # 10/s plus the bucket's tenth of a second
    assert h.pending() == 0
    backlog = h.metrics.rate_limit_backlog.labels(callback_topic="lim")._value.get()
    assert backlog == 0
    delays = h.metrics.rate_limit_delay.labels(callback_topic="lim")
    assert delays._sum.get() > 30 * 1.0  # 30 timers waited 0.1 to 3 s each


def test_a_round_slow_to_produce_keeps_every_second_of_record_timestamps_under_the_limit() -> None:
    """Each callback takes 0.5 ms to produce here, and every 300th waits 0.6 s (a full
    local queue waiting on the broker): a round's callbacks spill past the moment it took
    its tokens, and each record's timestamp is the moment it was produced. Counted from
    when each round took its tokens, a second got 600 at a limit of 400/s; the window
    counts a round from when its last callback was produced."""
    h = limited(400.0)
    produced_at: list[float] = []
    produce = h.output.callback

    def slow_callback(timer: Any, **kwargs: Any) -> None:
        h.clock.now += 0.0005 + (0.6 if len(produced_at) % 300 == 299 else 0.0)
        produced_at.append(h.clock.now)
        produce(timer, **kwargs)

    h.output.callback = slow_callback  # type: ignore[method-assign]
    h.requests(*(h.schedule(f"l{i:04}", NOW + 1, topic="lim") for i in range(2_400)))
    h.tick(NOW + 1)
    for _ in range(200):
        h.clock.now += RELEASE_INTERVAL
        run(h.service.release_gated())
    assert len(produced_at) == 2_400
    assert busiest_window(produced_at) <= 400 + 40  # the limit plus a tenth of a second


def test_held_timers_stay_pending_and_the_watermark_stays_below_them() -> None:
    h = limited(0.01)
    h.requests(h.schedule("a", NOW + 1, topic="lim"), h.schedule("b", NOW + 2, topic="lim"))
    h.tick(NOW + 1)
    h.tick(NOW + 2)
    h.clock.now = NOW + 30
    h.tick(NOW + 30)
    store = h.stores.stores[0]
    assert store.get(timer_key(NOW + 1, "a")) is not None
    assert int(store.get(WATERMARK) or b"0") <= NOW
    assert h.pending() == 2


def test_a_restart_on_the_same_stores_finds_every_held_timer_again() -> None:
    h = limited(10.0)
    h.requests(*(h.schedule(f"t{i:02}", NOW + 1, topic="lim") for i in range(20)))
    h.tick(NOW + 1)
    release_for(h, 1.0)
    before = {t.id for t, _ in h.output.durable.callbacks}
    assert 0 < len(before) < 20
    # The process dies; a new one opens the same stores (RocksDB outlives it).
    h.service = restarted_service(h, 10.0)
    release_for(h, 3.0)
    ids = [t.id for t, _ in h.output.durable.callbacks]
    assert sorted(set(ids)) == [f"t{i:02}" for i in range(20)]  # none lost
    assert len(ids) == 20  # and none twice: the delivered ones were forgotten


def test_a_restart_before_the_forgetting_delivers_nothing_again() -> None:
    """Rounds deliver at the limit and forget in their spare time; a process that dies
    in between leaves those timers pending (the watermark below them) and recorded as
    delivered (``L`` batches), and the next one reads the records back and forgets them
    instead of delivering them again. Nothing is lost, and nothing goes out twice. (The
    fake stores keep every write: a real crash may also lose the last round's record,
    and that round is then delivered again: at least once.)"""
    h = limited(10.0)
    h.requests(*(h.schedule(f"t{i:02}", NOW + 1, topic="lim") for i in range(20)))
    h.tick(NOW + 1)
    release_for(h, 0.5)  # delivered and forgotten
    forgotten = {t.id for t, _ in h.output.durable.callbacks}
    release_for(h, 0.5, forget=False)  # delivered, left behind
    behind = {t.id for t, _ in h.output.durable.callbacks} - forgotten
    assert forgotten and behind
    assert h.metrics.forget_behind._value.get() == len(behind)
    h.service = restarted_service(h, 10.0)
    release_for(h, 3.0)
    sent = Counter(t.id for t, _ in h.output.durable.callbacks)
    assert sorted(sent) == [f"t{i:02}" for i in range(20)]  # none lost
    assert max(sent.values()) == 1  # none twice: the ones left behind were read back
    assert h.service._partitions[0].wheel.behind == 0
    assert h.service._partitions[0].wheel.delivered_batches == 0


def test_a_failed_flush_loses_no_held_timer() -> None:
    h = limited(10.0)
    h.requests(*(h.schedule(f"t{i:02}", NOW + 1, topic="lim") for i in range(10)))
    h.tick(NOW + 1)
    release_for(h, 0.3)
    h.output.fail_flush = True
    h.clock.now += 0.1
    with pytest.raises(DeliveryFailure):
        run(h.service.release_gated())
    release_for(h, 2.0)
    ids = [t.id for t, _ in h.output.durable.callbacks]
    assert sorted(ids) == [f"t{i:02}" for i in range(10)]
    assert h.pending() == 0


def test_a_partition_moved_away_and_back_holds_its_timers_and_starts_its_bucket_empty() -> None:
    h = limited(40.0, partitions=2)
    h.requests(
        *(h.schedule(f"a{i:02}", NOW + 1, 0, topic="lim") for i in range(20)),
        *(h.schedule(f"b{i:02}", NOW + 1, 1, topic="lim") for i in range(20)),
    )
    h.tick(NOW + 1, 0, 1)
    release_for(h, 0.5)
    run(h.service.revoke_partitions([0, 1]))
    # Given back (or to another worker on the same changelog): the first round after
    # finds the held timers again and delivers nothing, its buckets being new.
    h.clock.now = NOW + 2.01
    delivered = len(h.output.durable.callbacks)
    h.tick(NOW + 2, 0, 1)
    assert len(h.output.durable.callbacks) == delivered
    release_for(h, 2.0)
    ids = [t.id for t, _ in h.output.durable.callbacks]
    assert len(ids) == 40 and len(set(ids)) == 40


def test_a_held_timer_keeps_its_late_policy_measured_from_its_due() -> None:
    h = limited(1.0)
    h.service.gates.set_rate("cb", 1.0)  # one_shot's topic: one a second
    # Three ahead of it in due (key) order: it waits about 4 s, past its skip-after.
    h.requests(
        *(h.schedule(f"c{i}", NOW + 1) for i in range(3)),
        h.one_shot("strict", NOW + 1, "skip-after 2s"),
        h.one_shot("zlenient", NOW + 1, "fire"),
    )
    h.tick(NOW + 1)
    release_for(h, 8.0)
    assert [t.id for t, _, _ in h.output.durable.skipped] == ["strict"]
    assert h.fired() == ["c0", "c1", "c2", "zlenient"]
    assert h.skipped("late") == 1
    assert h.pending() == 0


def test_a_held_timer_can_be_cancelled_and_never_goes_out() -> None:
    h = limited(1.0)
    h.requests(h.schedule("a", NOW + 1, topic="lim"), h.schedule("b", NOW + 1, topic="lim"))
    h.tick(NOW + 1)
    h.requests(h.cancel("b"))
    assert [o for _, _, o, _ in h.output.durable.cancels] == ["cancelled"]
    release_for(h, 3.0)
    assert h.fired() == ["a"]
    assert h.pending() == 0


def test_a_paused_topic_holds_everything_until_resumed_then_fires_by_late_policy() -> None:
    h = Harness()
    h.service.gates.pause("cb")
    h.requests(h.schedule("a", NOW + 1), h.one_shot("strict", NOW + 1, "skip-after 5s"))
    h.requests(h.schedule("other", NOW + 1, topic="elsewhere"))
    h.tick(NOW + 1)
    release_for(h, 10.0)
    assert h.fired() == ["other"]
    assert h.pending() == 2
    h.service.gates.resume("cb")
    run(h.service.release_gated())
    assert h.fired() == ["other", "a"]
    assert [t.id for t, _, _ in h.output.durable.skipped] == ["strict"]


def test_a_request_already_due_for_a_limited_topic_is_held_not_fired_at_once() -> None:
    h = limited(1.0)
    h.tick(NOW + 10)
    h.clock.now = NOW + 10.5
    h.requests(h.schedule("late", NOW + 3, topic="lim"), h.schedule("free", NOW + 3))
    assert h.fired() == ["free"]
    assert h.pending() == 1
    # Durable: a restart finds it (the watermark moved below it with the request).
    assert int(h.stores.stores[0].get(WATERMARK) or b"0") < NOW + 3
    h.service = restarted_service(h, 1.0)
    release_for(h, 3.0)
    assert h.fired() == ["free", "late"]
    assert h.pending() == 0


def test_exactly_once_limited_timers_go_out_in_transactions_and_an_abort_loses_none() -> None:
    h = limited(10.0, transactional=True)
    h.requests(*(h.schedule(f"t{i:02}", NOW + 1, topic="lim") for i in range(15)))
    h.tick(NOW + 1)
    release_for(h, 0.5)
    h.output.abort_next_commit = True
    h.clock.now += 0.1
    run(h.service.release_gated())
    release_for(h, 3.0)
    ids = [t.id for t, _ in h.output.durable.callbacks]
    assert sorted(ids) == [f"t{i:02}" for i in range(15)]


def test_lifting_a_limit_delivers_what_it_held_at_once() -> None:
    h = limited(1.0)
    h.requests(*(h.schedule(f"t{i}", NOW + 1, topic="lim") for i in range(10)))
    h.tick(NOW + 1)
    h.service.gates.set_rate("lim", None)
    h.clock.now += 0.1
    run(h.service.release_gated())
    assert len(h.fired()) == 10


@pytest.mark.parametrize("how", ["revoked", "stopping"])
def test_a_revocation_or_a_stop_hands_over_what_rounds_left_behind(how: str) -> None:
    """A rebalance or an orderly stop only makes the records of what rounds delivered
    and left to forget durable: the next owner reads them back, forgets those timers,
    and delivers nothing twice."""
    h = limited(10.0)
    h.requests(*(h.schedule(f"t{i:02}", NOW + 1, topic="lim") for i in range(20)))
    h.tick(NOW + 1)
    release_for(h, 1.0, forget=False)
    assert h.service._partitions[0].wheel.behind > 0
    left = h.service._partitions[0].wheel.behind
    if how == "revoked":
        run(h.service.revoke_partitions([0]))
        assert h.metrics.forget_behind._value.get() == 0  # no longer this worker's
    else:  # the stop signal, Faust's on_before_shutdown (app.worker.faust_app), the end
        h.service.begin_stopping()
        delivered = len(h.output.durable.callbacks)
        h.requests(h.schedule("free", NOW + 3, topic="other"))
        release_for(h, 1.0)  # ticks and rounds while Faust stops: no held one goes out
        assert [t.id for t, _ in h.output.durable.callbacks[delivered:]] == ["free"]
        assert run(h.service.forget_behind(1.0)) == 0  # nor forgets: the next owner will
        run(h.service.forget_all_behind())
        h.service = restarted_service(h, 10.0)
    part = run(h.service._partition(0))  # the next owner: the same stores
    assert part.wheel.behind == left  # read back, still to be forgotten
    release_for(h, 3.0)
    sent = Counter(t.id for t, _ in h.output.durable.callbacks if t.id != "free")
    assert sorted(sent) == [f"t{i:02}" for i in range(20)]
    assert max(sent.values()) == 1
    assert part.wheel.behind == 0 and part.wheel.delivered_batches == 0


def test_the_release_loop_delivers_at_the_limit_and_forgets_in_between() -> None:
    """TimerService.run_gated_release itself, on the fake clock: the callbacks go out at
    the limit, each round leaves its forgetting behind, and the loop forgets it between
    rounds and once nothing is held, down to no timer left in the store and the gauge
    at 0."""
    h = limited(100.0)
    h.requests(*(h.schedule(f"t{i:03}", NOW + 1, topic="lim") for i in range(200)))
    h.tick(NOW + 1)
    wheel = h.service._partitions[0].wheel
    left_by_rounds: list[int] = []
    release = h.service.release_gated

    async def release_and_look() -> int:
        count = await release()
        left_by_rounds.append(wheel.behind)
        return count

    h.service.release_gated = release_and_look  # type: ignore[method-assign]

    def done() -> bool:
        return (
            len(h.output.durable.callbacks) == 200
            and wheel.count_pending() == 0
            and h.metrics.forget_behind._value.get() == 0
        )

    run_release_loop(h, done, "every timer delivered and forgotten")
    sent = callbacks(h, "lim")
    assert len({i for i, _, _ in sent}) == 200 == len(sent)
    per_second = Counter(at // 1000 for _, _, at in sent)
    assert max(per_second.values()) <= 110  # the limit plus the bucket's tenth of a second
    assert max(left_by_rounds) > 0  # rounds left their forgetting to the time between
    assert wheel.count_pending() == 0 and wheel.behind == 0
    assert h.metrics.forget_behind._value.get() == 0


@pytest.mark.parametrize("overrun", [0.0, 0.3])
def test_release_rounds_keep_their_cadence_when_sleeps_overrun(overrun: float) -> None:
    """Rounds are due an interval after the one before was due, not after it ended: a
    loop whose sleeps overrun by ``overrun`` of what they were asked (a busy event loop)
    still delivers the limit. Spaced from each round's end, rounds of one interval's
    tokens each gave 1 / (1 + overrun) of it (77 a second here at 30%)."""
    h = limited(100.0)
    h.requests(*(h.schedule(f"t{i:03}", NOW + 1, topic="lim") for i in range(400)))
    h.tick(NOW + 1)
    started = h.clock.now

    def done() -> bool:
        return len(h.output.durable.callbacks) == 400

    run_release_loop(h, done, "every timer delivered", overrun=overrun, fake_cadence=True)
    sent = callbacks(h, "lim")
    assert len({i for i, _, _ in sent}) == 400 == len(sent)
    took = max(at for _, _, at in sent) / 1000 - started
    assert took <= 400 / 100.0 / 0.95  # at 95% of the limit or better
    per_second = Counter(at // 1000 for _, _, at in sent)
    assert max(per_second.values()) <= 110  # and never above it by more than its slack


def test_a_switch_to_exactly_once_forgets_what_at_least_once_rounds_left_behind() -> None:
    """Records of timers left behind, found by a worker now in exactly-once mode (which
    leaves nothing behind): those timers are forgotten inside its first transaction,
    never delivered again, never written outside a transaction."""
    h = limited(10.0)
    h.requests(*(h.schedule(f"t{i:02}", NOW + 1, topic="lim") for i in range(20)))
    h.tick(NOW + 1)
    release_for(h, 1.0, forget=False)
    left = h.service._partitions[0].wheel.behind
    assert left > 0
    h.output.transactional = True
    changelog = h.output.changelog

    def only_in_transactions(topic: str, partition: int, key: bytes, value: bytes | None) -> None:
        assert h.output.in_transaction, key
        changelog(topic, partition, key, value)

    h.output.changelog = only_in_transactions  # type: ignore[method-assign]
    h.service = restarted_service(h, 10.0)
    part = run(h.service._partition(0))
    assert part.wheel.behind == left
    release_for(h, 3.0)
    sent = Counter(t.id for t, _ in h.output.durable.callbacks)
    assert sorted(sent) == [f"t{i:02}" for i in range(20)]
    assert max(sent.values()) == 1
    assert part.wheel.behind == 0 and part.wheel.delivered_batches == 0
    assert part.wheel.count_pending() == 0
