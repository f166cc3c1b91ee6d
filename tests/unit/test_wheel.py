from app.core.timer import Cancel, Timer
from app.core.wheel import CancelOutcome, PartitionWheel, Scheduled
from tests.support.memkv import MemoryKV


def timer(timer_id: str, due: int, token: str = "tok", value: bytes = b"v") -> Timer:
    return Timer(id=timer_id, due=due, topic="cb", key=b"k", value=value, token=token)


def fire(wheel: PartitionWheel, second: int) -> list[str] | None:
    due = wheel.begin_tick(second)
    if due is None:
        return None
    wheel.finish_tick(second, due)
    return sorted(t.id for t in due)


def test_tick_fires_only_what_is_due_never_early() -> None:
    wheel = PartitionWheel(MemoryKV())
    for i, due in enumerate((100, 101, 101, 102)):
        assert wheel.schedule(timer(f"t{i}", due)).outcome is Scheduled.STORED
    assert fire(wheel, 99) == []
    assert fire(wheel, 100) == ["t0"]
    assert fire(wheel, 101) == ["t1", "t2"]
    assert wheel.count_pending() == 1


def test_gap_in_ticks_is_caught_up_not_skipped() -> None:
    wheel = PartitionWheel(MemoryKV())
    fire(wheel, 100)
    for i in range(5):
        wheel.schedule(timer(f"t{i}", 101 + i))
    assert fire(wheel, 104) == ["t0", "t1", "t2", "t3"]


def test_duplicate_and_old_ticks_fire_nothing() -> None:
    wheel = PartitionWheel(MemoryKV())
    wheel.schedule(timer("a", 100))
    assert fire(wheel, 100) == ["a"]
    assert fire(wheel, 100) is None
    assert fire(wheel, 99) is None


def test_late_request_fires_at_once() -> None:
    wheel = PartitionWheel(MemoryKV())
    fire(wheel, 100)
    assert wheel.schedule(timer("late", 90)).outcome is Scheduled.FIRE_NOW
    assert wheel.schedule(timer("now", 100)).outcome is Scheduled.FIRE_NOW
    assert wheel.schedule(timer("next", 101)).outcome is Scheduled.STORED


def test_request_arriving_while_a_tick_is_being_delivered_is_not_lost() -> None:
    wheel = PartitionWheel(MemoryKV())
    fire(wheel, 99)
    due = wheel.begin_tick(100)
    # delivery of tick 100 is in progress; a request due at 100 arrives now
    assert wheel.schedule(timer("racer", 100)).outcome is Scheduled.FIRE_NOW
    assert due == []
    wheel.finish_tick(100, due)


def test_failed_delivery_keeps_timers_for_the_next_tick() -> None:
    wheel = PartitionWheel(MemoryKV())
    wheel.schedule(timer("a", 100))
    assert [t.id for t in wheel.begin_tick(100) or []] == ["a"]
    wheel.abort_tick()
    assert fire(wheel, 101) == ["a"]


def test_state_survives_a_restart_from_the_same_store() -> None:
    kv = MemoryKV()
    wheel = PartitionWheel(kv)
    wheel.schedule(timer("a", 100))
    wheel.schedule(timer("b", 105))
    fire(wheel, 100)
    reborn = PartitionWheel(kv)
    assert reborn.fired_through == 100
    assert reborn.schedule(timer("late", 100)).outcome is Scheduled.FIRE_NOW
    assert fire(reborn, 105) == ["b"]


def test_crash_between_delivery_and_forgetting_refires_at_least_once() -> None:
    kv = MemoryKV()
    wheel = PartitionWheel(kv)
    wheel.schedule(timer("a", 100))
    assert wheel.begin_tick(100)  # delivered, then the process dies before finish_tick
    reborn = PartitionWheel(kv)
    assert fire(reborn, 101) == ["a"]


def test_reschedule_replaces_the_pending_version() -> None:
    wheel = PartitionWheel(MemoryKV())
    wheel.schedule(timer("a", 100, token="t1", value=b"old"))
    accepted = wheel.schedule(timer("a", 105, token="t2", value=b"new"))
    assert accepted.outcome is Scheduled.STORED and accepted.replaced
    assert fire(wheel, 104) == []
    due = wheel.begin_tick(105)
    assert [(t.id, t.value) for t in due or []] == [("a", b"new")]


def test_cancel_with_the_right_token_removes_the_timer() -> None:
    wheel = PartitionWheel(MemoryKV())
    wheel.schedule(timer("a", 100, token="t1"))
    assert wheel.cancel(Cancel("a", "wrong")) is CancelOutcome.WRONG_TOKEN
    assert wheel.cancel(Cancel("a", "t1")) is CancelOutcome.CANCELLED
    assert fire(wheel, 100) == []


def test_cancel_before_request_wins_and_survives_retries() -> None:
    wheel = PartitionWheel(MemoryKV())
    assert wheel.cancel(Cancel("a", "t1")) is CancelOutcome.CANCELLED_IN_ADVANCE
    assert wheel.schedule(timer("a", 100, token="t1")).outcome is Scheduled.CANCELLED_EARLIER
    assert wheel.schedule(timer("a", 100, token="t1")).outcome is Scheduled.CANCELLED_EARLIER
    assert fire(wheel, 100) == []
    # a new version (new token) of the same id is a new timer
    assert wheel.schedule(timer("a", 101, token="t2")).outcome is Scheduled.STORED


def test_cancel_after_fire_is_reported_as_such() -> None:
    wheel = PartitionWheel(MemoryKV())
    wheel.schedule(timer("a", 100, token="t1"))
    fire(wheel, 100)
    assert wheel.cancel(Cancel("a", "t1")) is CancelOutcome.ALREADY_FIRED


def test_cancel_while_firing_is_already_fired() -> None:
    wheel = PartitionWheel(MemoryKV())
    wheel.schedule(timer("a", 100, token="t1"))
    due = wheel.begin_tick(100)
    assert wheel.cancel(Cancel("a", "t1")) is CancelOutcome.ALREADY_FIRED
    wheel.finish_tick(100, due or [])


def test_redelivered_request_after_fire_is_a_duplicate() -> None:
    wheel = PartitionWheel(MemoryKV())
    wheel.schedule(timer("a", 100, token="t1"))
    fire(wheel, 100)
    assert wheel.schedule(timer("a", 100, token="t1")).outcome is Scheduled.DUPLICATE


def test_tombstone_cancel_of_unknown_id_leaves_no_marker() -> None:
    wheel = PartitionWheel(MemoryKV())
    assert wheel.cancel(Cancel("a", "", check_token=False)) is CancelOutcome.NOT_FOUND
    assert wheel.schedule(timer("a", 100, token="")).outcome is Scheduled.STORED


def test_many_timers_in_one_second_cost_one_write_each() -> None:
    kv = MemoryKV()
    wheel = PartitionWheel(kv)
    for i in range(2000):
        wheel.schedule(timer(f"t{i}", 100))
    # two writes per timer (bucket entry + id index), independent of the bucket's size
    assert len(kv.changes) == 4000
    assert len(fire(wheel, 100) or []) == 2000


def test_idle_tick_scans_nothing_pending_later() -> None:
    class CountingKV(MemoryKV):
        scanned = 0

        def scan(self, low: bytes, high: bytes):  # type: ignore[no-untyped-def]
            for item in super().scan(low, high):
                self.scanned += 1
                yield item

    kv = CountingKV()
    wheel = PartitionWheel(kv)
    for i in range(500):
        wheel.schedule(timer(f"t{i}", 1000 + i))
    for second in range(100, 200):
        fire(wheel, second)
    assert kv.scanned == 0


def test_status_reads_keys_and_point_lookups() -> None:
    wheel = PartitionWheel(MemoryKV())
    wheel.schedule(timer("b", 101))
    wheel.schedule(timer("a", 100, token="t"))
    assert list(wheel.iter_due(0)) == [(100, "a"), (101, "b")]
    assert list(wheel.iter_due(101)) == [(101, "b")]
    assert wheel.get_pending("a") == timer("a", 100, token="t")
    assert wheel.lookup("a") == ("pending", 100, "t")
    fire(wheel, 100)
    assert wheel.get_pending("a") is None
    assert wheel.lookup("a") == ("fired", 100, "t")
    assert wheel.get_pending("nope") is None


def test_a_repeated_cancel_gets_the_same_answer_and_writes_nothing() -> None:
    # A client that got no answer in time cancels again: it must not be told
    # "cancelled in advance", nor lose the cancelled version's due second.
    kv = MemoryKV()
    wheel = PartitionWheel(kv)
    wheel.schedule(timer("a", 100, token="t1"))
    assert wheel.cancel(Cancel("a", "t1")) is CancelOutcome.CANCELLED
    writes = len(kv.changes)
    assert wheel.cancel(Cancel("a", "t1")) is CancelOutcome.CANCELLED
    assert wheel.cancel(Cancel("a", "", check_token=False)) is CancelOutcome.CANCELLED
    assert len(kv.changes) == writes
    assert wheel.lookup("a") == ("cancelled", 100, "t1")
    # another token is still a cancel in advance of a version not seen yet
    assert wheel.cancel(Cancel("a", "t2")) is CancelOutcome.CANCELLED_IN_ADVANCE
    assert fire(wheel, 100) == []
