"""``GET /timers`` pages (app.status.listing) and the filters (app.core.timer_filter):
paging with small pages and a tiny scan bound finds exactly what one pass would."""

from __future__ import annotations

from typing import Any

import pytest

from app.core.timer import Timer
from app.core.timer_filter import TimerFilter
from app.core.wheel import PartitionWheel
from app.status.listing import list_page, parse_cursor
from kafka_timers_client.recurrence import Recurrence
from tests.support.memkv import MemoryKV

NOW = 1_800_000_000


def describe(partition: int, timer: Timer) -> dict[str, Any]:
    return {"id": timer.id, "partition": partition}


def wheels() -> dict[int, PartitionWheel]:
    out = {p: PartitionWheel(MemoryKV(), clock=lambda: NOW) for p in range(3)}
    for i in range(300):
        key = f"customer-{i % 7}/{i}".encode()
        out[i % 3].schedule(
            Timer(f"id-{i:04d}", NOW + 10 + i % 50, f"topic-{i % 2}", key, b"x", token="t")
        )
    out[1].schedule(
        Timer(
            "series-1",
            NOW + 20,
            "topic-0",
            b"customer-1/s",
            b"",
            recurrence=Recurrence(every=30, start=NOW + 20),
            seq=1,
        )
    )
    return out


def every_page(flt: TimerFilter, **kw: Any) -> list[str]:
    found: list[str] = []
    cursor = None
    ws = wheels()
    while True:
        page = list_page(ws, flt, cursor=cursor, describe=describe, **kw)
        found.extend(t["id"] for t in page["timers"])
        if page["cursor"] is None:
            return found
        cursor = parse_cursor(page["cursor"])


def one_pass(flt: TimerFilter) -> list[str]:
    return [
        t.id
        for _, w in sorted(wheels().items())
        for t in (w.get_pending(k) for k in _ids(w))
        if t is not None and flt.matches(t)
    ]


def _ids(wheel: PartitionWheel) -> list[str]:
    from app.core.keys import parse_timer_key

    return [parse_timer_key(k)[1] for k, _ in wheel.scan_pending()]


@pytest.mark.parametrize(
    "query",
    [
        {},
        {"key_prefix": "customer-3/"},
        {"key": "customer-1/8"},
        {"topic": "topic-1", "key_prefix": "customer-2"},
        {"id_prefix": "id-01"},
        {"due_from": str(NOW + 20), "due_to": str(NOW + 25)},
        {"series": "true"},
    ],
)
@pytest.mark.parametrize(("limit", "examine"), [(1000, 5000), (7, 5000), (1000, 11), (3, 2)])
def test_paging_finds_exactly_what_one_pass_finds(
    query: dict[str, str], limit: int, examine: int
) -> None:
    flt = TimerFilter.from_query(query)
    paged = every_page(flt, limit=limit, examine_max=examine)
    assert len(paged) == len(set(paged))
    assert sorted(paged) == sorted(one_pass(flt))


def test_counts() -> None:
    assert len(every_page(TimerFilter.from_query({"key_prefix": "customer-3/"}), limit=5)) == 43
    assert every_page(TimerFilter(series=True), limit=5) == ["series-1"]


@pytest.mark.parametrize(
    "query",
    [
        {"key": "a", "key_prefix": "b"},
        {"due_from": "soon"},
        {"due_to": "-1"},
        {"series": "maybe"},
        {"colour": "red"},
        {"topic": "x" * 2000},
    ],
)
def test_bad_filters(query: dict[str, str]) -> None:
    with pytest.raises(ValueError):
        TimerFilter.from_query(query)


@pytest.mark.parametrize("text", ["x", "1:zz", "a:00"])
def test_bad_cursor(text: str) -> None:
    with pytest.raises(ValueError):
        parse_cursor(text)


def test_round_trip_of_a_filter() -> None:
    flt = TimerFilter.from_query(
        {"topic": "t", "key_prefix": "k", "id_prefix": "i", "due_from": "5", "series": "1"}
    )
    assert TimerFilter.from_query(flt.to_query()) == flt


def test_a_worker_url_that_is_no_url_or_answers_no_json_is_a_failed_worker() -> None:
    """``kafka-timers list`` names such a worker in one line, as ``status`` does: a
    ValueError from urllib or from the JSON decoder went past it with a traceback."""
    from app.status.listing import list_workers

    def not_json(url: str, token: str | None = None) -> tuple[int, Any]:
        raise ValueError("Expecting value: line 1 column 1 (char 0)\n<html>")

    count, failed = list_workers(
        ["http://127.0.0.1:1"], TimerFilter(), token=None, emit=lambda _: None, fetch=not_json
    )
    assert count == 0 and len(failed) == 1 and "\n" not in failed[0]
    count, failed = list_workers(["notaurl"], TimerFilter(), token=None, emit=lambda _: None)
    assert count == 0 and len(failed) == 1 and failed[0].startswith("notaurl: ")
