"""TimerService, the worker's orchestration, on in-memory stores and a fake output.

No broker, no RocksDB, no Faust: the service is handed request batches and ticks the way
the worker's request reader and tick agent hand them over, and what it produced (and
made durable) is read back from the fake output.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

import pytest

from app.core.keys import REQUEST_OFFSET, index_key, timer_key
from app.core.policy import RequestPolicy
from app.core.raw_record import RawRecord
from app.worker.metrics import WorkerMetrics
from app.worker.output import DeliveryFailure
from app.worker.service import TimerService
from app.worker.service_firing import FAIR_TURN
from kafka_timers_client import protowire
from kafka_timers_client.errors import RejectReason
from kafka_timers_client.late import LatePolicy
from tests.support.memkv import MemoryKV
from tests.support.memstores import FakeOutput, MemoryStores

NOW = 1_767_225_600
T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


class Clock:
    def __init__(self, now: float = NOW) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _policy(**rules: Any) -> RequestPolicy:
    """The harness's rules (any topic, 1,000-byte values, a day ahead), ``rules`` overriding."""
    options: dict[str, Any] = {
        "allow_patterns": (".*",),
        "own_topics": ("ticks", "requests", "fired", "dlq"),
        "app_id": "kt",
        "max_payload_bytes": 1000,
        "horizon_seconds": 86400,
        **rules,
    }
    return RequestPolicy.build(**options)


class Harness:
    """A service on memory stores, plus helpers to feed it requests and ticks."""

    def __init__(self, *, transactional: bool = False, **service_options: Any) -> None:
        self.clock = Clock()
        self.output = FakeOutput(transactional=transactional)
        self.stores = MemoryStores(self.output)
        self.metrics = WorkerMetrics()
        self.service = self._service(_policy(), **service_options)
        self._offsets: dict[int, int] = {}

    def _service(self, policy: RequestPolicy, **service_options: Any) -> TimerService:
        return TimerService(
            policy=policy,
            output=self.output,
            metrics=self.metrics,
            stores=self.stores,
            clock=self.clock,
            **service_options,
        )

    def restart(self, **rules: Any) -> TimerService:
        """The worker restarted on the same stores under other rules (``rules`` override
        :func:`_policy`'s): the new service replaces the old one, and is returned."""
        self.service = self._service(_policy(**rules))
        return self.service

    def record(self, value: bytes | None, partition: int = 0, key: bytes = b"k") -> RawRecord:
        """A request record; the helpers below key it by its timer's id, as clients do."""
        offset = self._offsets.get(partition, -1) + 1
        self._offsets[partition] = offset
        return RawRecord("requests", partition, offset, int(self.clock.now * 1000), key, value)

    def schedule(
        self, timer_id: str, due: int, partition: int = 0, topic: str = "cb", token: str = "tok"
    ) -> RawRecord:
        future = protowire.Future(
            callback_topic=topic, callback=timer_id.encode(), id=timer_id, token=token, due=due
        )
        return self.record(protowire.encode(future), partition, timer_id.encode())

    def series(
        self,
        timer_id: str,
        *,
        every: int | None = None,
        cron: str | None = None,
        count: int | None = None,
        late: str | None = None,
        start: int | None = None,
        token: str = "tok",
    ) -> RawRecord:
        future = protowire.Future(
            callback_topic="cb",
            callback=timer_id.encode(),
            id=timer_id,
            token=token,
            every=every,
            cron=cron,
            count=count,
            late=late,
            start=start,
        )
        return self.record(protowire.encode(future), key=timer_id.encode())

    def one_shot(self, timer_id: str, due: int, late: str) -> RawRecord:
        future = protowire.Future(
            callback_topic="cb", callback=b"v", id=timer_id, token="tok", due=due, late=late
        )
        return self.record(protowire.encode(future), key=timer_id.encode())

    def cancel(self, timer_id: str, token: str = "tok", partition: int = 0) -> RawRecord:
        future = protowire.Future(id=timer_id, token=token, action=protowire.ACTION_CANCEL)
        return self.record(protowire.encode(future), partition, timer_id.encode())

    def requests(self, *records: RawRecord) -> None:
        run(self.service.handle_requests(list(records)))

    def tick(self, second: int, *partitions: int) -> int:
        """A tick from an honest oscillator: it arrives just after its second began."""
        self.clock.now = max(self.clock.now, second + 0.01)
        ticks = [(p, second, None, "osc") for p in partitions or (0,)]
        return run(self.service.handle_ticks(ticks))

    def fired(self) -> list[str]:
        """Ids of the callbacks made durable, in order."""
        return [timer.id for timer, _ in self.output.durable.callbacks]

    def occurrences(self) -> list[tuple[int, int]]:
        """``(seq, due - NOW)`` of the durable callbacks, in order."""
        return [(t.seq, t.due - NOW) for t, _ in self.output.durable.callbacks]

    def skipped(self, reason: str) -> float:
        return float(self.metrics.skipped.labels(reason=reason)._value.get())

    def pending(self) -> int:
        return int(self.metrics.pending._value.get())


def test_a_request_batch_stores_timers_and_where_to_resume_once_durable() -> None:
    h = Harness()
    h.requests(h.schedule("a", NOW + 10), h.schedule("b", NOW + 20), h.schedule("c", NOW + 5, 1))
    store = h.stores.stores[0]
    assert store.get(timer_key(NOW + 10, "a")) is not None
    assert store.get(REQUEST_OFFSET) == b"1"
    assert h.stores.stores[1].get(REQUEST_OFFSET) == b"0"
    # Produced only once the unit is durable (never ahead of its forwarded copies and
    # callbacks): it is durable with the next flush.
    assert (0, REQUEST_OFFSET, b"1") not in h.output.durable.changelog
    assert (0, REQUEST_OFFSET, b"1") in h.output.pending.changelog
    assert h.pending() == 3
    assert run(h.service.request_offset(0)) == 1


def test_the_resume_offset_stays_behind_when_the_batch_is_not_durable() -> None:
    h = Harness()
    h.requests(h.schedule("a", NOW + 10))
    h.output.fail_flush = True
    with pytest.raises(DeliveryFailure):
        h.requests(h.schedule("b", NOW + 10))
    assert h.stores.stores[0].get(REQUEST_OFFSET) == b"0"  # b is read again after a restart


def test_a_request_batch_writes_its_store_in_one_go_before_the_flush() -> None:
    h = Harness()
    h.requests(h.schedule("a", NOW + 10))
    h.output.fail_flush = True
    with pytest.raises(DeliveryFailure):
        h.requests(h.schedule("b", NOW + 10), h.schedule("b", NOW + 20), h.cancel("a"))
    store = h.stores.stores[0]
    # In the store itself (not held back), as when every write went straight in: the
    # batch's writes are applied before its flush, whatever the flush then does.
    assert store._deferred is None
    assert MemoryKV.get(store, timer_key(NOW + 20, "b")) is not None
    assert MemoryKV.get(store, timer_key(NOW + 10, "b")) is None  # the reschedule's delete
    assert MemoryKV.get(store, timer_key(NOW + 10, "a")) is None  # the cancel's delete


def test_a_tick_fires_what_is_due_and_forgets_it_only_after_delivery() -> None:
    h = Harness()
    h.requests(h.schedule("a", NOW + 1), h.schedule("b", NOW + 2), h.schedule("c", NOW + 3))
    assert h.tick(NOW + 2) == 2
    assert h.fired() == ["a", "b"]
    assert h.stores.stores[0].get(timer_key(NOW + 1, "a")) is None
    # Forgotten in the store itself (the tick's writes are applied at once, not held).
    assert h.stores.stores[0]._deferred is None
    assert MemoryKV.get(h.stores.stores[0], timer_key(NOW + 2, "b")) is None
    assert MemoryKV.get(h.stores.stores[0], index_key("b")) is not None  # remembered
    assert h.pending() == 1
    assert h.tick(NOW + 2) == 0  # the same second again, from a second oscillator
    assert h.fired() == ["a", "b"]


def test_a_fire_names_the_newest_request_its_partition_had_applied() -> None:
    # The audit record's request_offset: a reschedule at a higher offset had not reached
    # the partition when its older version fired (lost the race), one at a lower offset
    # had (an older version firing then would be a reschedule undone).
    h = Harness()
    h.requests(h.schedule("a", NOW + 1), h.schedule("x", NOW + 9), h.schedule("b", NOW + 1, 2))
    assert h.tick(NOW + 1, 0, 2) == 2
    assert h.output.fire_offsets == {0: 1, 2: 0}
    h.requests(h.schedule("c", NOW + 3), h.schedule("y", NOW + 9), h.schedule("z", NOW + 9))
    assert h.tick(NOW + 3) == 1
    assert h.output.fire_offsets[0] == 4
    # after a restart, from the store: the offset where reading resumes, less one
    h.restart()
    h.output.fire_offsets.clear()
    h.requests(h.schedule("d", NOW + 4, 2))
    assert h.tick(NOW + 4, 0, 2) == 1
    assert h.output.fire_offsets == {0: 4, 2: 1}
    h.restart()
    h.output.fire_offsets.clear()
    assert h.tick(NOW + 9) == 3  # x, y, z
    assert h.output.fire_offsets[0] == 4


def test_ticks_of_several_partitions_share_one_flush() -> None:
    h = Harness()
    h.requests(*(h.schedule(f"t{p}", NOW + 1, p) for p in range(4)))
    assert h.tick(NOW + 1, 0, 1, 2, 3) == 4
    assert sorted(h.fired()) == ["t0", "t1", "t2", "t3"]


def test_a_failed_flush_keeps_the_timers_and_the_next_tick_fires_them_again() -> None:
    h = Harness()
    h.requests(h.schedule("a", NOW + 1))
    h.output.fail_flush = True
    with pytest.raises(DeliveryFailure):
        h.tick(NOW + 1)
    assert h.fired() == []
    assert h.stores.stores[0].get(timer_key(NOW + 1, "a")) is not None
    assert h.tick(NOW + 2) == 1
    assert h.fired() == ["a"]


def test_a_request_for_a_second_already_ticked_fires_at_once() -> None:
    h = Harness()
    h.tick(NOW + 10)
    h.requests(h.schedule("late", NOW + 3))
    assert h.fired() == ["late"]
    assert h.pending() == 0
    assert h.stores.stores[0].get(timer_key(NOW + 3, "late")) is None
    h.requests(h.schedule("late", NOW + 3))  # redelivered: recognised, not fired again
    assert h.fired() == ["late"]


def test_a_callback_the_broker_refuses_is_dead_lettered_and_the_rest_fire() -> None:
    h = Harness()
    h.output.refuse_topics = {"gone"}
    h.requests(h.schedule("ok", NOW + 1), h.schedule("bad", NOW + 1, topic="gone"))
    h.tick(NOW + 1)
    assert h.output.durable.dead_timers == [] and ("bad", RejectReason.DELIVERY_FAILED) in (
        h.output.pending.dead_timers
    )
    delivered = h.metrics.fired.labels(callback_topic="cb")._value.get()
    assert delivered == 1
    refused = h.metrics.rejected.labels(reason=RejectReason.DELIVERY_FAILED.value)._value.get()
    assert refused == 1


def test_a_replace_without_the_token_is_answered_dead_lettered_and_the_original_fires() -> None:
    h = Harness()
    h.requests(h.schedule("a", NOW + 5))
    h.requests(h.schedule("a", NOW + 9, token="other"), h.schedule("a", NOW + 2, token=""))
    assert h.output.durable.dropped == [("a", "wrong_token", 0, 1), ("a", "wrong_token", 0, 2)]
    reasons = [reason for _, reason, _ in h.output.durable.dead_letters]
    assert reasons == [RejectReason.WRONG_TOKEN] * 2
    assert h.pending() == 1
    for second in range(NOW + 1, NOW + 10):
        h.tick(second)
    assert [(t.id, t.due, t.token) for t, _ in h.output.durable.callbacks] == [
        ("a", NOW + 5, "tok")
    ]


def test_cancel_removes_a_pending_timer_and_a_wrong_token_is_dead_lettered() -> None:
    h = Harness()
    h.requests(h.schedule("a", NOW + 5), h.schedule("b", NOW + 5))
    h.requests(h.cancel("a"), h.cancel("b", token="wrong"))
    outcomes = {(i, o) for i, _, o, _ in h.output.durable.cancels}
    assert outcomes == {("a", "cancelled"), ("b", "wrong_token")}
    assert [reason for _, reason, _ in h.output.durable.dead_letters] == [RejectReason.WRONG_TOKEN]
    h.tick(NOW + 5)
    assert h.fired() == ["b"]
    assert h.pending() == 0


def test_a_units_cancels_are_counted_and_taken_off_the_pending_count_per_partition() -> None:
    h = Harness()
    h.requests(*(h.schedule(f"t{i}", NOW + 5, partition=i % 2) for i in range(5)))
    assert h.pending() == 5
    # Three cancelled (two on partition 0) and one wrong token in one unit: counted for
    # the unit, taken off each partition's pending count.
    h.requests(
        h.cancel("t0", partition=0),
        h.cancel("t1", partition=1),
        h.cancel("t2", partition=0),
        h.cancel("t3", token="wrong", partition=1),
    )
    assert float(h.metrics.cancelled._value.get()) == 3
    assert h.pending() == 2
    assert h.service._pending == {0: 1, 1: 1}
    outcomes = [o for _, _, o, _ in h.output.durable.cancels]
    assert outcomes == ["cancelled", "cancelled", "cancelled", "wrong_token"]
    assert float(h.metrics.cancels_not_remembered._value.get()) == 0


def test_the_same_cancel_again_is_answered_alike_and_counted_once() -> None:
    h = Harness()
    h.requests(h.schedule("a", NOW + 5), h.schedule("b", NOW + 5))
    h.requests(h.cancel("a"), h.cancel("a"))  # a retry in the same unit
    h.requests(h.cancel("a"))  # and in a later one
    outcomes = [o for _, _, o, _ in h.output.durable.cancels]
    assert outcomes == ["cancelled"] * 3
    assert float(h.metrics.cancelled._value.get()) == 1
    assert h.pending() == 1  # b is still pending
    assert h.service._pending == {0: 1}


def test_a_units_cancels_in_advance_past_the_cap_are_counted_not_remembered() -> None:
    h = Harness(max_cancels_in_advance=1)
    h.requests(*(h.cancel(f"never{i}") for i in range(3)))
    outcomes = [o for _, _, o, _ in h.output.durable.cancels]
    assert outcomes == ["cancelled_in_advance", "not_remembered", "not_remembered"]
    assert float(h.metrics.cancels_not_remembered._value.get()) == 2
    assert float(h.metrics.cancelled._value.get()) == 0 and h.pending() == 0


def test_each_cancel_answer_names_the_request_it_answers() -> None:
    # A client matches its answer on (partition, offset): two cancels of one id get
    # two answers, each with its own request's position.
    h = Harness()
    h.requests(h.schedule("a", NOW + 5, partition=3))
    first, second = h.cancel("a", partition=3), h.cancel("a", token="wrong", partition=3)
    h.requests(first, second)
    assert h.output.durable.cancel_requests == [
        ("a", 3, first.offset),
        ("a", 3, second.offset),
    ]
    assert [o for _, _, o, _ in h.output.durable.cancels] == ["cancelled", "cancelled_in_advance"]


def test_a_late_request_read_with_its_cancel_never_fires() -> None:
    """A late request (its second passed: it fires at once) and its cancel read in one
    batch, as after an outage or a migration: the cancel wins, and is answered so."""
    h = Harness()
    h.tick(NOW + 10)
    h.requests(h.schedule("doomed", NOW + 5), h.cancel("doomed"), h.schedule("lone", NOW + 6))
    assert h.fired() == ["lone"]  # alone in its batch: fired at once, as before
    assert [(i, o) for i, _, o, _ in h.output.durable.cancels] == [("doomed", "cancelled")]
    run(h.service.release_gated())  # the round that delivers what was held
    h.tick(NOW + 11)
    assert h.fired() == ["lone"]
    assert h.pending() == 0


def test_a_late_request_read_with_its_next_version_gives_way_to_it() -> None:
    h = Harness()
    h.tick(NOW + 10)
    h.requests(h.schedule("moved", NOW + 5), h.schedule("moved", NOW + 20))
    run(h.service.release_gated())
    h.tick(NOW + 19)
    assert h.fired() == []
    h.tick(NOW + 20)
    assert h.fired() == ["moved"]


def test_a_late_request_with_a_later_record_of_its_key_fires_in_the_next_round() -> None:
    """Held back for the batch, not lost: with nothing after it for its id (another
    request that shares its key), it goes out in the next round, once."""
    h = Harness()
    h.tick(NOW + 10)
    shared = h.record(h.schedule("other", NOW + 30).value, key=b"late")
    late = h.schedule("late", NOW + 5)
    h.requests(late, shared)
    assert h.fired() == []
    assert run(h.service.release_gated()) == 1
    h.tick(NOW + 11)
    assert h.fired() == ["late"]


def test_a_cancel_that_arrives_first_wins_when_the_request_comes() -> None:
    h = Harness()
    h.requests(h.cancel("early"))
    h.requests(h.schedule("early", NOW + 1))
    h.tick(NOW + 1)
    assert h.fired() == []
    assert [o for _, _, o, _ in h.output.durable.cancels] == ["cancelled_in_advance"]


def test_invalid_requests_are_dead_lettered_with_a_reason_and_the_batch_goes_on() -> None:
    h = Harness()
    h.requests(
        h.record(b"\xff\xff\xff"),
        h.schedule("internal", NOW + 1, topic="__consumer_offsets"),
        h.schedule("fine", NOW + 1),
    )
    reasons = [reason for _, reason, _ in h.output.durable.dead_letters]
    assert reasons == [RejectReason.MALFORMED, RejectReason.TOPIC_NOT_ALLOWED]
    h.tick(NOW + 1)
    assert h.fired() == ["fine"]


def test_exactly_once_an_aborted_tick_fires_nothing_and_the_next_tick_retries() -> None:
    h = Harness(transactional=True)
    h.requests(h.schedule("a", NOW + 1), h.schedule("b", NOW + 2))
    h.output.abort_next_commit = True
    assert h.tick(NOW + 2) == 0
    assert h.fired() == []
    assert h.stores.stores[0].get(timer_key(NOW + 1, "a")) is not None  # deletes held back
    assert h.tick(NOW + 3) == 2
    assert h.fired() == ["a", "b"]
    assert h.stores.stores[0].get(timer_key(NOW + 1, "a")) is None


def test_exactly_once_an_aborted_request_batch_stops_the_worker() -> None:
    h = Harness(transactional=True)
    h.output.abort_next_commit = True
    with pytest.raises(DeliveryFailure):
        h.requests(h.schedule("a", NOW + 1))
    assert h.stores.stores[0].get(REQUEST_OFFSET) is None


def test_a_forgotten_partition_is_reopened_from_its_store() -> None:
    h = Harness()
    h.requests(h.schedule("a", NOW + 5))
    h.service.forget_partitions([0])
    assert h.pending() == 0
    h.tick(NOW + 5)  # reopened: its timers are found again
    assert h.fired() == ["a"]
    assert h.stores.opened == [0, 0]


# -- series and the late-fire policy ---------------------------------------------------


def test_a_series_fires_each_occurrence_and_stays_pending_until_its_count() -> None:
    h = Harness()
    h.requests(h.series("s", every=2, count=3))  # sent at NOW: first due NOW + 2
    assert h.pending() == 1
    for second in range(NOW + 1, NOW + 9):
        h.tick(second)
    assert h.occurrences() == [(1, 2), (2, 4), (3, 6)]
    assert h.pending() == 0
    assert [t.fired_before for t, _ in h.output.durable.callbacks] == [0, 1, 2]


def test_the_next_occurrence_is_written_before_the_fired_one_is_forgotten() -> None:
    h = Harness()
    h.requests(h.series("s", every=2))
    h.tick(NOW + 2)
    h.tick(NOW + 4)  # the forgetting of tick NOW + 2 rides with this tick's flush
    changes = [(key, value is None) for _, key, value in h.output.durable.changelog]
    put_next = changes.index((timer_key(NOW + 4, "s"), False))
    delete_fired = changes.index((timer_key(NOW + 2, "s"), True))
    assert put_next < delete_fired, "a crash between them must leave an occurrence, not none"


def test_a_series_due_at_once_fires_and_its_next_occurrence_is_in_the_same_flush() -> None:
    h = Harness()
    h.tick(NOW + 10)
    h.clock.now = NOW + 10
    h.requests(h.series("s", every=5, start=NOW + 10))
    assert h.occurrences() == [(1, 10)]
    assert (0, timer_key(NOW + 15, "s"), False) in [
        (p, k, v is None) for p, k, v in h.output.durable.changelog
    ]
    assert h.pending() == 1
    h.tick(NOW + 15)
    assert h.occurrences() == [(1, 10), (2, 15)]


def test_cancel_stops_a_series() -> None:
    h = Harness()
    h.requests(h.series("s", every=2))
    h.tick(NOW + 2)
    h.requests(h.cancel("s"))
    for second in range(NOW + 3, NOW + 10):
        h.tick(second)
    assert h.occurrences() == [(1, 2)]
    assert h.pending() == 0
    assert [o for _, _, o, _ in h.output.durable.cancels] == ["cancelled"]


def test_skip_after_reports_a_late_fire_as_skipped_and_counts_it() -> None:
    h = Harness()
    h.requests(h.one_shot("strict", NOW + 5, "skip-after 5s"), h.schedule("lenient", NOW + 5))
    h.clock.now = NOW + 25  # the oscillators were down: the tick comes 20 s late
    h.tick(NOW + 25)
    assert h.fired() == ["lenient"]
    assert [(t.id, r.value) for t, r, _ in h.output.durable.skipped] == [("strict", "late")]
    assert h.skipped("late") == 1
    assert h.pending() == 0


def test_coalesce_after_an_outage_fires_once_then_on_schedule() -> None:
    h = Harness()
    h.requests(h.series("s", every=2))
    h.tick(NOW + 2)
    h.clock.now = NOW + 31
    h.tick(NOW + 31)  # occurrences due at +4 ... +30 missed: one fire, as the newest
    h.clock.now = NOW + 32
    h.tick(NOW + 32)
    assert h.occurrences() == [(1, 2), (15, 30), (16, 32)]
    assert h.output.durable.coalesced == {("s", 15): 13}
    assert h.skipped("coalesced") == 13


def test_all_fires_every_missed_occurrence() -> None:
    h = Harness()
    h.requests(h.series("s", every=2, late="all"))
    h.clock.now = NOW + 9
    h.tick(NOW + 9)
    assert h.occurrences() == [(1, 2), (2, 4), (3, 6), (4, 8)]


def test_the_service_default_policy_applies_where_a_timer_names_none() -> None:
    h = Harness(late_policy=LatePolicy.parse("skip-after 10s, all"))
    h.requests(h.schedule("plain", NOW + 1), h.one_shot("own", NOW + 1, "fire"))
    h.clock.now = NOW + 30
    h.tick(NOW + 30)
    assert h.fired() == ["own"]
    assert [t.id for t, _, _ in h.output.durable.skipped] == ["plain"]


def test_bad_recurrences_are_dead_lettered_with_their_reason() -> None:
    h = Harness()
    h.requests(
        h.series("cron", cron="61 * * * *"),
        h.series("zone", cron="* * * * *", late="whenever"),
        h.series("both", every=5, cron="* * * * *"),
    )
    reasons = [reason.value for _, reason, _ in h.output.durable.dead_letters]
    assert reasons == ["invalid_cron", "invalid_late_policy", "invalid_recurrence"]
    assert h.metrics.rejected.labels(reason="invalid_cron")._value.get() == 1


def test_exactly_once_a_series_fires_and_stores_its_next_occurrence_in_one_transaction() -> None:
    h = Harness(transactional=True)
    h.requests(h.series("s", every=2))
    h.output.abort_next_commit = True
    assert h.tick(NOW + 2) == 0
    assert h.occurrences() == []
    assert h.tick(NOW + 3) == 1  # retried: occurrence 1, and only once
    h.tick(NOW + 4)
    assert h.occurrences() == [(1, 2), (2, 4)]


def pause(h: Harness, timer_id: str, action: int, token: str = "tok") -> RawRecord:
    return h.record(protowire.encode(protowire.Future(id=timer_id, token=token, action=action)))


def test_a_paused_series_waits_across_a_reload_and_resume_fires_the_missed_once() -> None:
    h = Harness()
    h.requests(h.series("s", every=2))
    h.tick(NOW + 2)
    h.requests(
        pause(h, "s", protowire.ACTION_PAUSE, token="nope"),
        pause(h, "s", protowire.ACTION_PAUSE),
        pause(h, "nobody", protowire.ACTION_PAUSE),
    )
    answers = [(a, o) for _, a, o, _, _ in h.output.durable.pauses]
    assert answers == [("pause", "wrong_token"), ("pause", "paused"), ("pause", "not_found")]
    assert [o for _, _, _, _, o in h.output.durable.pauses] == [1, 2, 3]  # request offsets
    for second in range(NOW + 3, NOW + 10):
        h.tick(second)
    assert h.occurrences() == [(1, 2)]  # nothing while paused
    assert h.metrics.timers_paused._value.get() == 1
    h.service.forget_partitions([0])  # a restart or a new owner: the pause is in the store
    for second in range(NOW + 10, NOW + 12):
        h.tick(second)
    assert h.occurrences() == [(1, 2)]
    h.requests(pause(h, "s", protowire.ACTION_RESUME))
    assert h.output.durable.pauses[-1][1:3] == ("resume", "resumed")
    run(h.service.release_gated())  # the release loop's round, woken by the resume
    # The missed occurrences (4, 6, 8, 10) coalesce into one fire, then on schedule.
    assert [seq for seq, _ in h.occurrences()] == [1, 5]
    for second in range(NOW + 12, NOW + 15):
        h.tick(second)
    assert [seq for seq, _ in h.occurrences()] == [1, 5, 6, 7]  # due at +12 and +14
    assert h.metrics.timers_paused._value.get() == 0
    assert h.pending() == 1


def test_a_paused_one_shot_fires_on_resume_and_a_new_version_is_not_paused() -> None:
    h = Harness()
    h.requests(h.schedule("a", NOW + 2), h.schedule("b", NOW + 2))
    h.requests(pause(h, "a", protowire.ACTION_PAUSE), pause(h, "b", protowire.ACTION_PAUSE))
    h.requests(h.schedule("b", NOW + 4))  # b again: a new version, not paused
    for second in range(NOW + 1, NOW + 6):
        h.tick(second)
    assert h.fired() == ["b"]
    h.requests(pause(h, "a", protowire.ACTION_RESUME))
    run(h.service.release_gated())
    assert h.fired() == ["b", "a"]
    h.requests(pause(h, "a", protowire.ACTION_PAUSE))
    assert h.output.durable.pauses[-1][1:3] == ("pause", "already_fired")
    assert h.pending() == 0


def _crashed_mid_unit(h: Harness) -> tuple[RawRecord, RawRecord]:
    """Schedule ``a`` (due NOW + 5) and reschedule it (NOW + 50) in one unit whose flush
    fails: the store holds the newer version, the resume offset is before both."""
    h.tick(NOW + 1)
    first, second = h.schedule("a", NOW + 5), h.schedule("a", NOW + 50)
    h.output.fail_flush = True
    with pytest.raises(DeliveryFailure):
        h.requests(first, second)
    h.output.fail_flush = False
    h.service.forget_partitions([0])  # the restart, on its own data
    return first, second


def test_a_re_read_after_a_crash_never_fires_a_version_a_later_request_replaced() -> None:
    """A batch applied locally and not made durable is read again after the restart;
    if ticks have passed the first version's second meanwhile, it must not fire at once
    before the rest of the re-read replaces it again."""
    h = Harness()
    first, second = _crashed_mid_unit(h)
    h.tick(NOW + 10)  # ticks first: the first version's second has passed
    h.requests(first, second)  # the re-read
    h.requests(h.schedule("b", NOW + 3))  # a request read for the first time fires at once
    for second_ in range(NOW + 11, NOW + 51):
        h.tick(second_)
    assert [(t.id, t.due) for t, _ in h.output.durable.callbacks] == [
        ("b", NOW + 3),
        ("a", NOW + 50),
    ]


def test_a_re_read_split_by_a_tick_never_fires_the_older_version() -> None:
    """The re-read may come in several batches (or a unit pauses for the event loop),
    and a tick may run between the older version and the newer one: the partition fires
    nothing until the re-read reaches the last request applied before the crash."""
    h = Harness()
    first, second = _crashed_mid_unit(h)
    h.requests(first)  # the re-read's first batch: the older version stands again
    assert h.tick(NOW + 11) == 0  # it would fire here, its second passed
    h.requests(second)  # the re-read's end
    h.requests(h.schedule("b", NOW + 3))  # read for the first time: fires at once
    for second_ in range(NOW + 12, NOW + 51):
        h.tick(second_)
    assert [(t.id, t.due) for t, _ in h.output.durable.callbacks] == [
        ("b", NOW + 3),
        ("a", NOW + 50),
    ]


def test_a_re_read_that_never_comes_delays_firing_without_losing_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Records deleted from the request topic while the worker was down are never read
    again: after the patience, the partition fires what it holds (late, not lost)."""
    monkeypatch.setattr("app.worker.service_state.REREAD_PATIENCE_SECONDS", 0)
    h = Harness()
    _crashed_mid_unit(h)
    for second_ in range(NOW + 11, NOW + 51):
        h.tick(second_)
    assert [(t.id, t.due) for t, _ in h.output.durable.callbacks] == [("a", NOW + 50)]


def test_a_unit_of_requests_marks_its_stores_unconfirmed_until_its_flush() -> None:
    """A unit's local writes come before its flush: a store whose flush never came back
    keeps the mark (and is rebuilt, not resumed: app.worker.partition_store)."""
    h = Harness()
    h.requests(h.schedule("a", NOW + 10))
    assert not h.stores.stores[0].unconfirmed
    h.output.fail_flush = True
    with pytest.raises(DeliveryFailure):
        h.requests(h.schedule("b", NOW + 10))
    assert h.stores.stores[0].unconfirmed
    h.output.fail_flush = False
    h.tick(NOW + 1)  # a tick's writes are not a unit of requests': the mark stays
    assert h.stores.stores[0].unconfirmed


def test_partitions_of_one_round_take_turns_so_a_burst_does_not_hold_back_another_topic() -> None:
    """2,000 timers to one topic on partition 0 and 3 to another on partition 1, due in
    one second: the 3 are produced in the round's second turn, not after the 2,000."""
    h = Harness()
    h.requests(*(h.schedule(f"a{i:05d}", NOW + 1, 0, topic="burst") for i in range(2000)))
    h.requests(*(h.schedule(f"z{i}", NOW + 1, 1, topic="other") for i in range(3)))
    assert h.tick(NOW + 1, 0, 1) == 2003
    fired = h.fired()
    assert sorted(fired) == sorted([f"a{i:05d}" for i in range(2000)] + ["z0", "z1", "z2"])
    assert [fired.index(f"z{i}") for i in range(3)] == [FAIR_TURN, FAIR_TURN + 1, FAIR_TURN + 2]
