"""``RawRecord.__init__`` builds the instance's dict from a copy of the defaults: every
field given reads back, every field is in the dict in the declared order, and records
built alike are equal (and hash alike)."""

from __future__ import annotations

import pickle
from dataclasses import fields, replace

from app.core.raw_record import RawRecord, with_headers

NAMES = [f.name for f in fields(RawRecord)]


def test_every_field_given_reads_back_in_the_declared_order() -> None:
    given = {
        "topic": "r",
        "partition": 3,
        "offset": 9,
        "timestamp_ms": 5,
        "key": b"k",
        "value": None,
        "headers": (("h", b"v"),),
        "defect": "broken",
        "origin": (1, 2),
    }
    record = RawRecord(**given)  # type: ignore[arg-type]
    assert vars(record) == given and list(vars(record)) == NAMES
    assert record == RawRecord(**given) and hash(record) == hash(RawRecord(**given))  # type: ignore[arg-type]
    assert pickle.loads(pickle.dumps(record)) == record
    assert replace(record, origin=None).origin is None and record.origin == (1, 2)


def test_defaults_are_in_the_dict_too() -> None:
    record = RawRecord("r", 0, 0, 0, None, b"v")
    assert vars(record) == {
        "topic": "r",
        "partition": 0,
        "offset": 0,
        "timestamp_ms": 0,
        "key": None,
        "value": b"v",
        "headers": (),
        "defect": None,
        "origin": None,
    }
    assert vars(record) is not vars(RawRecord("r", 0, 0, 0, None, b"v"))


def test_with_headers_is_the_record_with_those_two_fields_replaced() -> None:
    record = RawRecord("r", 3, 9, 5, b"k", b"v", (("h", b"v"), ("timer-hop", b"1:2")), "broken")
    for headers, origin in (((("h", b"v"),), (1, 2)), ((), None)):
        copy = with_headers(record, headers, origin)
        expected = replace(record, headers=headers, origin=origin)
        assert copy == expected and hash(copy) == hash(expected)
        assert vars(copy) == vars(expected) and list(vars(copy)) == NAMES
        assert type(copy) is RawRecord and vars(copy) is not vars(record)
    assert record.headers[-1] == ("timer-hop", b"1:2") and record.origin is None  # untouched
