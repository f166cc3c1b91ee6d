"""Where the bridge puts an old request record on the new request topic."""

from __future__ import annotations

import json

from app.core.raw_record import RawRecord
from app.core.routing import HOP_HEADER, without_hop
from app.ops.migrate import placement
from kafka_timers_client import protowire
from kafka_timers_client.partitioner import partition_for


def record(key: bytes | None, value: bytes | None, partition: int = 3, **kw: object) -> RawRecord:
    return RawRecord("old", partition, 41, 1_800_000_000_000, key, value, **kw)  # type: ignore[arg-type]


def test_a_request_goes_to_its_ids_owner_for_the_new_count_whatever_its_key() -> None:
    future = protowire.Future(callback_topic="cb", callback=b"", id="order-7", token="t", due=5)
    for key in (b"order-7", b"a business key", None):
        assert placement(record(key, protowire.encode(future)), 16) == partition_for(b"order-7", 16)
    cancel = protowire.Future(id="order-7", token="t", action=protowire.ACTION_CANCEL)
    assert placement(record(b"x", protowire.encode(cancel)), 16) == partition_for(b"order-7", 16)
    assert placement(record(b"order-7", None), 16) == partition_for(b"order-7", 16)  # etf1


def test_a_forwarded_copy_loses_its_hop_and_goes_to_the_owner_too() -> None:
    doc = {"topic": "cb", "value": "v", "at": 5, "id": "j-1"}
    forwarded = record(
        b"elsewhere", json.dumps(doc).encode(), headers=(("h", b"1"), (HOP_HEADER, b"0:9"))
    )
    bare = without_hop(forwarded)
    assert bare.headers == (("h", b"1"),)
    assert placement(bare, 16) == partition_for(b"j-1", 16)


def test_a_record_no_worker_can_read_goes_where_its_key_or_partition_puts_it() -> None:
    assert placement(record(b"k", b"\xff\xfe not a request"), 16) == partition_for(b"k", 16)
    assert placement(record(None, b"\xff\xfe not a request", partition=21), 16) == 5
