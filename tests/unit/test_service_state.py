"""The worker's state stays O(pending): store keys by kind, through the service.

On memory stores and a fake output (see tests/unit/test_service.py): ids are forgotten
a window after their fire or cancel, the store-key gauge follows every change, and each
partition's store is marked caught up as ticks arrive.
"""

from __future__ import annotations

from app.core.keys import APPLYING, REQUEST_OFFSET, WATERMARK
from app.worker.service import CAUGHT_UP_INTERVAL
from tests.unit.test_service import NOW, Harness

WINDOW = 100


def harness() -> Harness:
    return Harness(remember_seconds=WINDOW)


def gauge(h: Harness, partition: int, kind: str) -> float:
    value: float = h.metrics.store_keys.labels(str(partition), kind)._value.get()
    return value


def test_store_keys_by_kind_follow_fires_and_the_window() -> None:
    h = harness()
    h.requests(*(h.schedule(f"t{i}", NOW + 1) for i in range(10)), h.cancel("never"))
    assert h.service.store_keys_by_partition() == {
        0: {"pending": 20, "remembered": 2, "bookkeeping": 2}  # R and A
    }
    assert gauge(h, 0, "pending") == 20
    h.tick(NOW + 1)
    assert gauge(h, 0, "pending") == 0
    # the cancel's index entry and expiry key, the ten fired ids' index entries and the
    # one expiry batch that holds them all (app.core.expiry_batch)
    assert gauge(h, 0, "remembered") == 2 + 10 + 1
    assert gauge(h, 0, "bookkeeping") == 3  # R, A and W
    h.tick(NOW + WINDOW)  # the cancel (at NOW, before any tick) expires
    assert gauge(h, 0, "remembered") == 11
    h.tick(NOW + 1 + WINDOW)
    assert gauge(h, 0, "remembered") == 0
    store = h.stores.stores[0]
    assert set(store.data) == {REQUEST_OFFSET, APPLYING, WATERMARK}
    # what a compacted changelog keeps: nothing but the bookkeeping (the last tombstones
    # are produced, not yet flushed: idle ticks do not wait for acknowledgements)
    newest: dict[bytes, bytes | None] = {}
    for _, key, value in h.output.durable.changelog + h.output.pending.changelog:
        newest[key] = value
    assert {k for k, v in newest.items() if v is not None} == {
        REQUEST_OFFSET,
        APPLYING,
        WATERMARK,
    }


def test_a_reloaded_partition_counts_its_keys_once_and_goes_on() -> None:
    h = harness()
    h.requests(h.schedule("a", NOW + 1), h.schedule("b", NOW + 50))
    h.tick(NOW + 1)
    h.service.forget_partitions([0])
    h.tick(NOW + 2)  # reloaded: counted from the store
    assert h.service.store_keys_by_partition()[0] == {
        "pending": 2,
        "remembered": 2,
        "bookkeeping": 3,
    }


def test_stores_are_marked_caught_up_as_ticks_arrive() -> None:
    h = harness()
    h.requests(h.schedule("a", NOW + 500))
    store = h.stores.stores[0]
    h.tick(NOW)
    assert store.caught_up_marks == 1
    h.tick(NOW + CAUGHT_UP_INTERVAL - 1)
    assert store.caught_up_marks == 1
    h.tick(NOW + CAUGHT_UP_INTERVAL)
    assert store.caught_up_marks == 2
