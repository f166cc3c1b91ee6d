"""The bulk writer stores exactly what the worker stores for the benchmark's requests."""

from __future__ import annotations

from pathlib import Path

import pytest
from rocksdict import AccessType, Options, Rdict

from app.core.keys import PENDING_END
from app.core.raw_record import RawRecord
from app.core.request_format import parse_request
from app.core.wheel import PartitionWheel
from app.worker import faust_internals
from bench.bulk import BulkTimers, bulk_timer, store_paths, write_timers
from bench.load import TimerSpec, request_record
from bench.rocks import count_pending_keys
from tests.support.memkv import MemoryKV

TOPIC = "capacity-callbacks"


def test_bulk_timer_is_the_timer_the_worker_parses_from_the_request() -> None:
    for n, due in ((0, 1_900_000_000), (123_456_789, 1_900_604_799)):
        timer_id = f"capacity{n:09d}"
        value = request_record(TimerSpec(timer_id, due), TOPIC)
        record = RawRecord("requests", 0, n, 0, timer_id.encode(), value)
        assert bulk_timer(timer_id, due, TOPIC) == parse_request(record)


def test_write_timers_stores_what_the_wheel_stores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The writer applies the worker's patches (in its own process); not in this one.
    monkeypatch.setattr(faust_internals, "apply_patches", lambda: None)
    data_dir = tmp_path / "worker-1"
    for p in (1, 3):  # the stores of the partitions written (a worker held them)
        (data_dir / "v1" / "tables" / f"timers-{p}.db").mkdir(parents=True)
    written = write_timers(
        data_dir,
        4,
        [1, 3],
        10,
        30,
        BulkTimers(prefix="capacity", first_due=1_900_000_000, spread=7, callback_topic=TOPIC),
    )
    assert written == 10  # timers 10..29 whose number is 1 or 3 modulo 4
    assert count_pending_keys(data_dir) == {1: 5, 3: 5}
    # Key for key and value for value what a wheel writes for those timers.
    expected = MemoryKV()
    wheel = PartitionWheel(expected)
    for i in range(11, 30, 4):
        wheel.schedule(bulk_timer(f"capacity{i:09d}", 1_900_000_000 + i % 7, TOPIC))
    path = store_paths(data_dir, [3])[3]
    db = Rdict(str(path), Options(raw_mode=True), access_type=AccessType.read_only())
    try:
        stored = {k: v for k, v in db.items() if k < PENDING_END}
    finally:
        db.close()
    assert stored == expected.data
