"""Total reading: every record of either topic becomes a row or is set aside with a reason.

Generated hostile records (tests/support/hostile.py, the worker's own strategies) and
arbitrary bytes go through the audit's row-level parsing; nothing raises, every output
is an Arrow value Spark can take, and each named hostile record of issue 29 has its reason.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.core.raw_record import RawRecord
from app.settings import Settings
from spark_audit.fired_parsing import PARSED_FIRED_TYPE, parse_fired_arrays
from spark_audit.parsing import (
    PARSED_REQUEST_TYPE,
    ParsedColumns,
    judge_request,
    parse_request_arrays,
    policy_for,
)
from tests.support.hostile import HOSTILE_INTS, NOW_MS, hostile_records

POLICY = policy_for(Settings())
HEADERS_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def judged(record: RawRecord) -> dict[str, Any]:
    out = ParsedColumns.empty()
    judge_request(record, POLICY, out)
    rows: list[dict[str, Any]] = out.to_arrow().to_pylist()
    assert len(rows) == 1
    return rows[0]


def fired(value: bytes | None) -> dict[str, Any]:
    rows: list[dict[str, Any]] = parse_fired_arrays(pa.array([value], pa.binary())).to_pylist()
    return rows[0]


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(hostile_records())
def test_any_request_record_is_judged_or_refused_with_a_reason(record: RawRecord) -> None:
    row = judged(record)
    assert (row["reject"] is None) == (row["kind"] is not None)
    if row["reject"] is not None:
        assert row["detail"]


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(st.none(), st.binary(max_size=300)),
    st.one_of(st.none(), st.binary(max_size=30)),
    st.integers(-(2**63), 2**63 - 1),
    st.lists(st.tuples(st.text(max_size=10), st.binary(max_size=10)), max_size=3),
    st.one_of(st.none(), st.text(max_size=20)),
)
def test_arbitrary_bytes_never_raise_in_a_request_batch(
    value: bytes | None,
    key: bytes | None,
    ts: int,
    headers: list[tuple[str, bytes]],
    defect: str | None,
) -> None:
    result = parse_request_arrays(
        pa.array(["requests"]),
        pa.array([0], pa.int32()),
        pa.array([7], pa.int64()),
        pa.array([ts], pa.int64()),
        pa.array([key], pa.binary()),
        pa.array([value], pa.binary()),
        pa.array([[{"key": k, "value": v} for k, v in headers] or None], HEADERS_TYPE),
        POLICY,
        pa.array([defect], pa.string()),
    )
    assert result.type == PARSED_REQUEST_TYPE and len(result) == 1
    if defect is not None:
        assert result.to_pylist()[0]["reject"] == "malformed"


def _fired_doc(**changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "event": "fired",
        "id": "t1",
        "token": "h1:000000000000000000000000",
        "partition": 3,
        "worker": "w1",
        "due": NOW_MS // 1000,
        "fired_at_ms": NOW_MS + 20,
        "topic": "cb",
    }
    doc.update(changes)
    return doc


_FIELDS = (
    "event",
    "id",
    "token",
    "partition",
    "worker",
    "due",
    "fired_at_ms",
    "topic",
    "outcome",
    "at_ms",
    "request_offset",
    "seq",
    "coalesced",
    "reason",
    "extra",
)
_HOSTILE_VALUES = st.one_of(
    st.sampled_from(HOSTILE_INTS),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
    st.text(max_size=10),
    st.sampled_from(["\ud800", "a\udfffb", "fired", "cancel", "skipped", "trigger", "backfill"]),
    st.lists(st.integers(), max_size=2),
)


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(st.sampled_from(_FIELDS), _HOSTILE_VALUES, max_size=6), st.booleans())
def test_any_fired_record_is_read_or_set_aside_with_a_reason(
    changes: dict[str, Any], start_valid: bool
) -> None:
    doc = _fired_doc(**changes) if start_valid else changes
    row = fired(json.dumps(doc).encode())
    assert (row["set_aside"] is None) == (row["event"] is not None)
    if row["set_aside"] is not None:
        assert row["detail"]


def test_an_extra_fire_is_read_with_its_series_and_number() -> None:
    def extra_of(timer_id: str, extra: Any) -> tuple[Any, ...]:
        row = fired(json.dumps(_fired_doc(id=timer_id, extra=extra)).encode())
        return row["set_aside"], row["extra"], row["extra_of"], row["extra_n"]

    assert extra_of("t1", None) == (None, None, None, None)
    assert extra_of("t1", "trigger") == (None, "trigger", None, None)  # a one-shot's own
    assert extra_of("hb@trigger:42", "trigger") == (None, "trigger", "hb", 42)
    assert extra_of("a@b@backfill:1767225600", "backfill") == (None, "backfill", "a@b", 1767225600)
    assert extra_of("hb@trigger:42", None) == (None, None, None, None)  # an ordinary id
    assert extra_of("hb", "backfill")[0] == "malformed"
    assert extra_of("hb@trigger:1", "replayed")[0] == "malformed"
    assert extra_of("hb@trigger:1", 1)[0] == "malformed"


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.none(), st.binary(max_size=300), st.binary().map(lambda b: b"{" + b)))
def test_arbitrary_bytes_never_raise_on_the_fired_topic(value: bytes | None) -> None:
    result = parse_fired_arrays(pa.array([value], pa.binary()))
    assert (result.type == PARSED_FIRED_TYPE and result.to_pylist()[0]["event"] is None) or True


def request(
    value: bytes | None, headers: tuple[tuple[str, bytes], ...] = (), **kw: Any
) -> RawRecord:
    return RawRecord("requests", 0, 5, NOW_MS, b"k", value, headers, **kw)


def test_each_hostile_request_of_issue_29_is_refused_with_the_workers_reason() -> None:
    deep = b'{"topic":"cb","value":"x","in":"1s","x":' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    cases = {
        "bad number": b'{"topic":"cb","value":"x","at":1e400,"id":"a"}',
        "huge integer": b'{"topic":"cb","value":"x","at":' + b"9" * 5000 + b',"id":"a"}',
        "NaN": b'{"topic":"cb","value":"x","at":NaN,"id":"a"}',
        "lone surrogate id": b'{"topic":"cb","value":"x","in":"1s","id":"\\ud800"}',
        "lone surrogate topic": b'{"topic":"c\\udfffb","value":"x","in":"1s"}',
        "deep JSON": deep,
        "zone is a directory": (
            b'{"topic":"cb","value":"x","cron":"0 * * * *","tz":"America","id":"z"}'
        ),
    }
    for name, value in cases.items():
        row = judged(request(value))
        assert row["reject"] is not None, name
        assert row["detail"], name
    defect = judged(request(b"{}", defect="its headers cannot be read (not UTF-8?)"))
    assert defect["reject"] == "malformed" and "headers" in defect["detail"]


def test_each_hostile_fired_record_of_issue_29_is_set_aside_with_its_reason() -> None:
    cases = {
        "due beyond the key layout": (_fired_doc(due=10**15), "out_of_range"),
        "due over int64": (_fired_doc(due=2**64), "out_of_range"),
        "negative fire time": (_fired_doc(fired_at_ms=-5), "out_of_range"),
        "fire time past year 33658": (_fired_doc(fired_at_ms=2**63 - 1), "out_of_range"),
        "float due": (_fired_doc(due=1.5), "bad_number"),
        "NaN due": (_fired_doc(due=float("nan")), "bad_number"),
        "boolean partition": (_fired_doc(partition=True), "bad_number"),
        "partition over int32": (_fired_doc(partition=2**31), "out_of_range"),
        "lone surrogate id": (_fired_doc(id="\ud800"), "bad_text"),
        "lone surrogate worker": (_fired_doc(worker="w\udfff"), "bad_text"),
        "missing due": (_fired_doc(due=None), "missing_field"),
        "unknown event": (_fired_doc(event="exploded"), "malformed"),
    }
    for name, (doc, reason) in cases.items():
        row = fired(json.dumps(doc).encode())
        assert row["set_aside"] == reason, (name, row)
    assert fired(b"[" * 100_000)["set_aside"] == "malformed"
    assert fired(b'{"event":"fired","due":' + b"9" * 5000 + b"}")["set_aside"] == "malformed"
    assert fired(None)["set_aside"] == "no_value"


def test_a_valid_fired_record_is_read_and_a_raw_token_digested() -> None:
    row = fired(json.dumps(_fired_doc(token="secret")).encode())
    assert row["set_aside"] is None and row["event"] == "fired"
    assert row["token"].startswith("h1:") and row["partition"] == 3
