import dataclasses

from app.core.firing import plan
from app.core.keys import EXPIRY, timer_key
from app.core.timer import Cancel, Timer
from app.core.wheel import CancelOutcome, PartitionWheel, Scheduled
from kafka_timers_client.late import DEFAULT_POLICY, CatchUp, LatePolicy
from kafka_timers_client.recurrence import Recurrence
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


def test_a_cancel_behind_a_request_that_fired_at_once_is_too_late() -> None:
    """A late request and its cancel in one batch: the request fired at once (its
    callback is on its way), so the cancel answers already fired, never cancelled in
    advance (which said "it will not fire" of a timer that did), before and after the
    fire is marked; and a version that replaced a pending one is no different."""
    wheel = PartitionWheel(MemoryKV())
    fire(wheel, 100)
    assert wheel.schedule(timer("late", 90)).outcome is Scheduled.FIRE_NOW
    assert wheel.cancel(Cancel("late", "tok")) is CancelOutcome.ALREADY_FIRED
    assert wheel.cancel(Cancel("late", "other")) is CancelOutcome.ALREADY_FIRED
    wheel.mark_fired(timer("late", 90))
    wheel.settle_fired_at_once()
    assert wheel.cancel(Cancel("late", "tok")) is CancelOutcome.ALREADY_FIRED

    assert wheel.schedule(timer("moved", 150)).outcome is Scheduled.STORED
    assert wheel.schedule(timer("moved", 95)).outcome is Scheduled.FIRE_NOW  # replaced
    assert wheel.cancel(Cancel("moved", "tok")) is CancelOutcome.ALREADY_FIRED
    assert fire(wheel, 150) == []  # the replaced version is gone too

    # Held back instead of fired (its topic paused): a cancel still cancels it.
    assert wheel.schedule(timer("held", 99)).outcome is Scheduled.FIRE_NOW
    wheel.hold_due(timer("held", 99), 0.0)
    assert wheel.cancel(Cancel("held", "tok")) is CancelOutcome.CANCELLED


def test_a_round_does_not_fire_a_version_replaced_after_it_was_taken() -> None:
    """A reschedule read between a round's scan and its produce (the round awaited in
    between): the round leaves the old version out; the new one fires at its second."""
    wheel = PartitionWheel(MemoryKV())
    wheel.schedule(timer("moved", 100, value=b"v1"))
    wheel.schedule(timer("kept", 100))
    due = wheel.begin_tick(100)
    assert due is not None and sorted(t.id for t in due) == ["kept", "moved"]
    assert wheel.schedule(timer("moved", 140, value=b"v2")).outcome is Scheduled.STORED
    left = wheel.still_due(due)
    assert [t.id for t in left] == ["kept"]
    wheel.finish_tick(100, left)
    assert wheel.lookup("moved") == ("pending", 140, "tok")
    assert fire(wheel, 139) == [] and fire(wheel, 140) == ["moved"]
    # A cancel read there is too late instead (answered so): the old version goes out.
    wheel.schedule(timer("gone", 150))
    due = wheel.begin_tick(150)
    assert wheel.cancel(Cancel("gone", "tok")) is CancelOutcome.ALREADY_FIRED
    assert due is not None and [t.id for t in wheel.still_due(due)] == ["gone"]


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
    accepted = wheel.schedule(timer("a", 105, token="t1", value=b"new"))
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
    # a tombstone cancels only timers stored without a token: nothing here for it
    assert wheel.cancel(Cancel("a", "", check_token=False)) is CancelOutcome.NOT_FOUND
    assert len(kv.changes) == writes
    assert wheel.lookup("a") == ("cancelled", 100, "t1")
    # another token is still a cancel in advance of a version not seen yet
    assert wheel.cancel(Cancel("a", "t2")) is CancelOutcome.CANCELLED_IN_ADVANCE
    assert fire(wheel, 100) == []


# -- series ----------------------------------------------------------------------------


def series_timer(
    timer_id: str, first: int, every: int = 2, count: int | None = None, token: str = "tok"
) -> Timer:
    rec = Recurrence.interval(every, start=first, count=count).anchored(first - 1)
    return Timer(timer_id, first, "cb", None, b"v", token, recurrence=rec, seq=1)


def fire_series(wheel: PartitionWheel, second: int) -> list[tuple[str, int, int]]:
    """Fire like the service does: each due occurrence, then its successor stored."""
    due = wheel.begin_tick(second)
    assert due is not None
    successors = {}
    fired = []
    for t in due:
        steps = plan(t, second, second * 1000, DEFAULT_POLICY)
        fired += [(s.timer.id, s.timer.seq, s.timer.due) for s in steps.steps]
        if steps.successor is not None:
            successors[t.id] = steps.successor
    wheel.finish_tick(second, due, successors)
    return fired


def test_a_series_keeps_one_occurrence_pending_and_fires_each_on_its_second() -> None:
    wheel = PartitionWheel(MemoryKV())
    wheel.schedule(series_timer("s", 100, count=3))
    assert fire_series(wheel, 99) == []
    assert fire_series(wheel, 100) == [("s", 1, 100)]
    assert wheel.count_pending() == 1 and wheel.lookup("s") == ("pending", 102, "tok")
    assert fire_series(wheel, 101) == []
    assert fire_series(wheel, 102) == [("s", 2, 102)]
    assert fire_series(wheel, 104) == [("s", 3, 104)]
    assert wheel.count_pending() == 0
    # ended: remembered as fired, under occurrence 1's second (the version's identity)
    assert wheel.lookup("s") == ("fired", 100, "tok")
    assert wheel.schedule(series_timer("s", 100, count=3)).outcome is Scheduled.DUPLICATE


def test_cancel_stops_a_series_and_a_new_schedule_replaces_it() -> None:
    wheel = PartitionWheel(MemoryKV())
    wheel.schedule(series_timer("s", 100))
    fire_series(wheel, 100)
    assert wheel.cancel(Cancel("s", "tok")) is CancelOutcome.CANCELLED
    assert fire_series(wheel, 102) == [] and wheel.count_pending() == 0
    wheel.schedule(series_timer("r", 200, token="v1"))
    refused = wheel.schedule(series_timer("r", 250, every=5, token="v2"))
    assert refused.outcome is Scheduled.WRONG_TOKEN
    accepted = wheel.schedule(series_timer("r", 300, every=5, token="v1"))
    assert accepted.replaced and wheel.count_pending() == 1
    assert fire_series(wheel, 200) == []
    assert fire_series(wheel, 300) == [("r", 1, 300)]


def test_a_cancel_while_an_occurrence_is_delivered_stops_the_rest() -> None:
    wheel = PartitionWheel(MemoryKV())
    wheel.schedule(series_timer("s", 100))
    due = wheel.begin_tick(100)
    assert due is not None
    # the occurrence is on its way; the cancel must still stop the series
    assert wheel.cancel(Cancel("s", "tok")) is CancelOutcome.CANCELLED
    successor = plan(due[0], 100, 100_000, DEFAULT_POLICY).successor
    assert successor is not None
    wheel.finish_tick(100, due, {"s": successor})
    assert wheel.count_pending() == 0 and wheel.lookup("s") == ("cancelled", 100, "tok")
    assert fire_series(wheel, 102) == []


def test_catch_up_left_for_the_next_tick_is_keyed_forward_and_keeps_its_true_due() -> None:
    kv = MemoryKV()
    wheel = PartitionWheel(kv)
    wheel.schedule(series_timer("s", 100, every=1))
    due = wheel.begin_tick(150)
    assert due is not None
    policy = LatePolicy(0, CatchUp.ALL)
    steps = plan(due[0], 150, 150_000, policy, budget=10)
    assert steps.successor is not None and steps.successor.due == 110
    wheel.finish_tick(150, due, {"s": steps.successor})
    # stored under second 151 (the scan starts there), with its own due second 110
    assert [key for key in kv.data if key.startswith(b"T")] == [timer_key(151, "s")]
    assert wheel.get_pending("s") == steps.successor
    assert wheel.begin_tick(150) is None  # an old tick fires nothing
    nxt = wheel.begin_tick(151)
    assert nxt is not None and [(t.seq, t.due) for t in nxt] == [(11, 110)]
    rest = plan(nxt[0], 151, 151_000, policy, budget=1000)
    wheel.finish_tick(151, nxt, {"s": rest.successor} if rest.successor else {})
    assert [s.timer.seq for s in rest.steps] == list(range(11, 53))
    assert [key for key in kv.data if key.startswith(b"T")] == [timer_key(152, "s")]
    assert wheel.cancel(Cancel("s", "tok")) is CancelOutcome.CANCELLED
    assert not [key for key in kv.data if key.startswith(b"T")]


def test_a_series_due_at_once_fires_and_its_successor_is_stored() -> None:
    wheel = PartitionWheel(MemoryKV())
    fire(wheel, 100)
    first = series_timer("s", 99)
    assert wheel.schedule(first).outcome is Scheduled.FIRE_NOW
    successor = plan(first, 100, 100_000, DEFAULT_POLICY).successor
    assert successor is not None and successor.due == 101
    wheel.store_successor(successor)
    assert wheel.lookup("s") == ("pending", 101, "tok")
    assert fire_series(wheel, 101) == [("s", 2, 101)]


def test_a_series_stays_pending_while_it_lives_then_is_remembered_and_expires() -> None:
    """With the bounded id memory: a living series is never expired; when it ends (or is
    cancelled) its id becomes terminal and is forgotten after the window. The running
    key counts agree with a recount all along."""
    kv = MemoryKV()
    wheel = PartitionWheel(kv, memory_seconds=100, clock=lambda: 90)

    def counts_agree() -> bool:
        running = dataclasses.replace(wheel.counts)
        return running == wheel.recount()

    wheel.schedule(series_timer("s", 100, count=3))
    wheel.schedule(series_timer("c", 100))
    fire(wheel, 99)
    assert fire_series(wheel, 100) == [("c", 1, 100), ("s", 1, 100)]
    assert counts_agree()
    assert not [k for k in kv.data if k.startswith(EXPIRY)], "nothing expires while alive"
    # a catch-up occurrence keyed forward, a cancel while one is in flight, and the end
    due = wheel.begin_tick(150)
    assert due is not None
    policy = LatePolicy(0, CatchUp.ALL)
    successors = {}
    for t in due:
        nxt = plan(t, 150, 150_000, policy, budget=1).successor
        if nxt is not None:
            successors[t.id] = nxt
    assert wheel.cancel(Cancel("c", "tok")) is CancelOutcome.CANCELLED
    wheel.finish_tick(150, due, successors)
    assert counts_agree()
    assert fire_series(wheel, 151) == [("s", 3, 104)]  # its last occurrence, late
    assert counts_agree()
    assert wheel.lookup("s") == ("fired", 100, "tok") and wheel.count_pending() == 0
    fire(wheel, 151 + 100)  # the memory window has passed
    assert wheel.lookup("s") is None and wheel.lookup("c") is None
    assert counts_agree()
    # fired at once, its successor stored
    first = series_timer("n", 250)
    assert wheel.schedule(first).outcome is Scheduled.FIRE_NOW
    nxt = plan(first, 251, 251_000, DEFAULT_POLICY).successor
    assert nxt is not None
    wheel.store_successor(nxt)
    assert counts_agree()


def test_pending_index_entry_is_written_byte_for_byte_as_the_entry_encodes() -> None:
    from app.core.keys import IndexEntry, pending_index_entry

    for due, token in [(0, ""), (1_767_225_600, "tok"), (999_999_999_999, "ü-ß")]:
        assert pending_index_entry(due, token) == IndexEntry(b"P", due, token).encode()


def test_a_token_protected_timer_is_replaced_only_with_its_token() -> None:
    wheel = PartitionWheel(MemoryKV())
    wheel.schedule(timer("a", 100, token="t1", value=b"mine"))
    for stranger in ("", "t2"):  # no token, another token
        refused = wheel.schedule(timer("a", 900, token=stranger, value=b"theirs"))
        assert refused.outcome is Scheduled.WRONG_TOKEN and not refused.replaced
    assert wheel.lookup("a") == ("pending", 100, "t1")
    assert wheel.cancel(Cancel("a", "t1")) is CancelOutcome.CANCELLED  # the owner still can
    # The same refusals when the timer is due now: nothing fires in its place.
    wheel.schedule(timer("b", 200, token="t1"))
    assert fire(wheel, 150) == []
    assert wheel.schedule(timer("b", 120, token="t2")).outcome is Scheduled.WRONG_TOKEN
    got = wheel.begin_tick(200)
    assert [(t.id, t.token, t.value) for t in got or []] == [("b", "t1", b"v")]


def test_a_token_less_timer_is_cancel_and_replace_by_id() -> None:
    wheel = PartitionWheel(MemoryKV())
    wheel.schedule(timer("a", 100, token=""))
    assert wheel.schedule(timer("a", 110, token="")).replaced  # etf1 re-keyed: replaced
    taken = wheel.schedule(timer("a", 120, token="t1"))  # anyone may, with a token too...
    assert taken.outcome is Scheduled.STORED and taken.replaced
    # ... which then protects the new version.
    assert wheel.schedule(timer("a", 130, token="")).outcome is Scheduled.WRONG_TOKEN
    assert wheel.lookup("a") == ("pending", 120, "t1")


def test_a_wrong_token_keeps_a_pause_and_the_right_one_ends_it() -> None:
    wheel = PartitionWheel(MemoryKV())
    wheel.schedule(timer("a", 100, token="t1"))
    assert wheel.pause(Cancel("a", "t1")).value == "paused"
    assert wheel.schedule(timer("a", 105, token="t2")).outcome is Scheduled.WRONG_TOKEN
    assert wheel.is_paused("a")
    assert fire(wheel, 100) == []  # still paused: waits
    assert wheel.schedule(timer("a", 105, token="t1")).replaced  # its owner's new decision
    assert not wheel.is_paused("a")
    assert fire(wheel, 105) == ["a"]


def test_an_id_that_fired_or_was_cancelled_takes_a_new_token() -> None:
    wheel = PartitionWheel(MemoryKV())
    wheel.schedule(timer("a", 100, token="t1"))
    assert fire(wheel, 100) == ["a"]
    assert wheel.schedule(timer("a", 200, token="t2")).outcome is Scheduled.STORED
    assert wheel.cancel(Cancel("a", "t2")) is CancelOutcome.CANCELLED
    assert wheel.schedule(timer("a", 300, token="t3")).outcome is Scheduled.STORED
