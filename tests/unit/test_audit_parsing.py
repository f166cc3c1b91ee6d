"""The audit reads every request format exactly as the worker does, a batch at a time."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pyarrow as pa

from app.core.debounce import Debounce
from app.core.fired import token_digest
from app.settings import Settings
from kafka_timers_client import protowire
from spark_audit.parsing import (
    CANCEL,
    SCHEDULE,
    parse_request_arrays,
    policy_for,
    schedule_from_json,
)

TS_MS = 1_767_225_600_000
HEADERS_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def parse(
    records: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes]]]],
    settings: Settings | None = None,
) -> list[dict[str, Any]]:
    """Parse ``(key, value, headers)`` records at offsets 0, 1, ... of requests[3]."""
    n = len(records)
    result = parse_request_arrays(
        pa.array(["requests"] * n),
        pa.array([3] * n, pa.int32()),
        pa.array(range(n), pa.int64()),
        pa.array([TS_MS] * n, pa.int64()),
        pa.array([k for k, _, _ in records], pa.binary()),
        pa.array([v for _, v, _ in records], pa.binary()),
        pa.array(
            [[{"key": a, "value": b} for a, b in h] or None for _, _, h in records], HEADERS_TYPE
        ),
        policy_for(settings or Settings()),
    )
    rows: list[dict[str, Any]] = result.to_pylist()
    return rows


def test_every_accepted_format_becomes_a_schedule_or_a_cancel() -> None:
    ours = protowire.encode(
        protowire.Future(callback_topic="cb", callback=b"x", id="p1", token="t1", due=1767225630)
    )
    ours_cancel = protowire.encode(
        protowire.Future(id="p1", token="t1", action=protowire.ACTION_CANCEL)
    )
    article = protowire.encode(
        protowire.Future(callback_topic="cb", callback_key="k", callback=b"x")
    )
    as_json = json.dumps({"topic": "cb", "value": "x", "in": "30s", "id": "j1", "token": "tj"})
    json_cancel = json.dumps({"cancel": "j1", "token": "tj"})
    etf1_headers = [("scheduler-epoch", b"1767225640.2"), ("scheduler-target-topic", b"cb")]
    rows = parse(
        [
            (b"p1", ours, []),
            (b"p1", ours_cancel, []),
            (b"1767225650", article, []),
            (b"j1", as_json.encode(), []),
            (b"j1", json_cancel.encode(), []),
            (b"e1", b"payload", etf1_headers),
            (b"e1", None, []),
        ]
    )
    picked = [(r["kind"], r["id"], r["token"], r["due"], r["check_token"]) for r in rows]
    t1, tj = token_digest("t1"), token_digest("tj")  # the audit compares digests only
    assert picked == [
        (SCHEDULE, "p1", t1, 1767225630, None),
        (CANCEL, "p1", t1, None, True),
        (SCHEDULE, "requests-3-2", "", 1767225650, None),
        (SCHEDULE, "j1", tj, 1767225630, None),
        (CANCEL, "j1", tj, None, True),
        (SCHEDULE, "e1", "", 1767225641, None),
        (CANCEL, "e1", "", None, False),
    ]
    assert all(r["reject"] is None for r in rows)
    assert [r["callback_topic"] for r in rows if r["kind"] == SCHEDULE] == ["cb"] * 4


def test_requests_the_worker_refuses_are_marked_with_its_reason() -> None:
    settings = replace(Settings(), callback_allow=("cb-.*",))
    internal = protowire.encode(protowire.Future(callback_topic="__consumer_offsets", due=1))
    not_allowed = protowire.encode(protowire.Future(callback_topic="elsewhere", due=1))
    rows = parse(
        [(b"x", b"\xff\xff\xff", []), (b"y", internal, []), (b"z", not_allowed, [])], settings
    )
    assert [r["reject"] for r in rows] == ["malformed", "topic_not_allowed", "topic_not_allowed"]
    assert all(r["kind"] is None and r["id"] is None for r in rows)


def test_an_empty_batch_gives_an_empty_result() -> None:
    assert parse([]) == []


def test_a_debounced_request_carries_its_window_through_the_series_column() -> None:
    """Due one debounce after its timestamp; its window (and, restored by an import, its
    first request's time and count) in the ``series`` column, read back by the judge."""
    asked = protowire.Future(callback_topic="cb", callback=b"x", id="d", debounce=30, max_wait=300)
    restored = protowire.Future(
        callback_topic="cb", callback=b"x", id="d", debounce=30, due=1767225650,
        debounce_first_ms=TS_MS - 9000, debounce_merged=4,
    )  # fmt: skip
    rows = parse([(b"d", protowire.encode(asked), []), (b"d", protowire.encode(restored), [])])
    assert [(r["kind"], r["due"]) for r in rows] == [(SCHEDULE, 1767225630), (SCHEDULE, 1767225650)]
    windows = [schedule_from_json(r["series"]) for r in rows]
    assert windows == [
        (None, Debounce(30, 300, TS_MS, 1)),
        (None, Debounce(30, None, TS_MS - 9000, 4, restored=True)),
    ]
    assert schedule_from_json(None) == (None, None)
