"""The request an import or a migration sends recreates the timer exactly, as the worker
reads it; and the worker keeps one timer when it gets that request twice."""

from __future__ import annotations

import json
from dataclasses import replace
from itertools import islice

from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.debounce import Debounce
from app.core.keys import timer_key
from app.core.request_format import parse_request
from app.core.stored import pack_timer
from app.core.timer import Cancel, Timer
from app.core.wheel import CancelOutcome, PartitionWheel, Scheduled
from app.ops.import_ import read_lines, requests_of
from app.ops.jsonl import LineError
from app.ops.requests import as_request, continued
from app.ops.snapshot import _pending_of
from kafka_timers_client.bounds import MAX_SECONDS
from kafka_timers_client.late import CatchUp, LatePolicy
from kafka_timers_client.recurrence import Recurrence
from tests.support.memkv import MemoryKV

NOW = 1_800_000_000
TOPIC = "timer-request"

texts = st.text(st.characters(exclude_categories=["Cs"]), max_size=12)
names = texts.filter(lambda n: not n.lower().startswith(("timer-", "scheduler-")))


def read_back(timer: Timer, now: float = NOW) -> Timer | Cancel:
    """What the worker makes of the request for ``timer``, read at ``now``."""
    request = as_request(timer, int(now * 1000))
    record = request.read_from(TOPIC, offset=7)
    return parse_request(record, now)


@settings(max_examples=300, deadline=None)
@given(
    st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=12),
    st.integers(min_value=0, max_value=NOW + 10**8),
    st.none() | st.binary(max_size=8) | texts.map(str.encode),
    st.binary(max_size=8),
    texts,
    st.lists(st.tuples(names, st.binary(max_size=6)), max_size=3),
    st.none() | st.sampled_from([LatePolicy(0, None), LatePolicy(5000, None)]),
)
def test_a_one_shot_timer_comes_back_as_itself(
    timer_id: str,
    due: int,
    key: bytes | None,
    value: bytes,
    token: str,
    headers: list[tuple[str, bytes]],
    late: LatePolicy | None,
) -> None:
    timer = Timer(timer_id, due, "cb", key, value, token, tuple(headers), late=late)
    binary_key = key is not None and not _utf8(key)
    if binary_key and (
        len({n for n, _ in headers}) != len(headers) or not all(_utf8(v) for _, v in headers)
    ):
        return  # no request format carries both (only a JSON request makes a binary key)
    assert read_back(timer) == timer


def _utf8(data: bytes) -> bool:
    try:
        data.decode()
    except UnicodeDecodeError:
        return False
    return True


def test_an_etf1_timer_comes_back_as_an_etf1_timer_with_its_provenance() -> None:
    timer = Timer(
        id="order-7",
        due=NOW + 60,
        topic="out",
        key=b"\xfftarget",
        value=b"payload",
        token="",
        headers=(
            ("scheduler-timestamp", b"%d" % (NOW - 5)),
            ("scheduler-key", b"order-7"),
            ("scheduler-topic", TOPIC.encode()),
            ("trace", b"\x01"),
        ),
    )
    request = as_request(timer, NOW * 1000)
    assert dict(request.headers)["scheduler-epoch"] == b"%d" % (NOW + 60)
    assert read_back(timer) == timer


@settings(max_examples=200, deadline=None)
@given(
    every=st.integers(min_value=1, max_value=86400),
    seq=st.integers(min_value=1, max_value=50),
    ahead=st.integers(min_value=-3000, max_value=10**6),
    count=st.none() | st.integers(min_value=0, max_value=50),
    end_after=st.none() | st.integers(min_value=0, max_value=10**7),
)
def test_a_series_comes_back_from_its_pending_occurrence_numbered_from_1(
    every: int, seq: int, ahead: int, count: int | None, end_after: int | None
) -> None:
    due = NOW + ahead  # its pending occurrence: ahead, or overdue by up to 50 minutes
    start = due - (seq - 1) * every
    recurrence = Recurrence(
        every=every,
        start=start,
        end=None if end_after is None else due + end_after,
        count=None if count is None else seq + count,
    )
    timer = Timer(
        "s",
        due,
        "cb",
        b"k",
        b"v",
        "tok",
        recurrence=recurrence,
        seq=seq,
        fired_before=seq - 1,
        late=LatePolicy(None, CatchUp.ALL),
    )
    back = read_back(timer)
    assert back == continued(timer)
    assert isinstance(back, Timer) and back.due == due and back.seq == 1
    assert back.recurrence is not None and back.recurrence.start == due
    # The same callbacks at the same seconds: occurrence n + k is the new 1 + k.
    assert list(islice(recurrence.occurrences(due, seq), 3)) == list(
        ((s + seq - 1, d) for s, d in islice(back.recurrence.occurrences(due, 1), 3))
    )


def test_a_cron_series_in_a_zone_comes_back_at_its_pending_occurrence() -> None:
    rec = Recurrence.cron_series("0 0 9 * * MON-FRI", "Europe/Paris").anchored(NOW)
    assert rec.start is not None
    seq, due = list(islice(rec.occurrences(rec.start, 1), 5))[-1]
    timer = Timer("c", due, "cb", None, b"", "t", recurrence=rec, seq=seq, fired_before=seq - 1)
    assert read_back(timer) == continued(timer)


def wheel_at(second: int) -> PartitionWheel:
    wheel = PartitionWheel(MemoryKV(), clock=lambda: second)
    wheel.begin_tick(second)
    wheel.finish_tick(second, [])
    return wheel


def test_the_same_import_twice_leaves_one_timer_and_fires_nothing_twice() -> None:
    wheel = wheel_at(NOW)
    one_shot = Timer("a", NOW + 10, "cb", None, b"v", "ta")
    assert wheel.schedule(one_shot).outcome is Scheduled.STORED
    again = wheel.schedule(one_shot)  # pending: replaced by itself, still one
    assert again.outcome is Scheduled.STORED and again.replaced
    assert wheel.count_pending() == 1
    fired = wheel.begin_tick(NOW + 10)
    assert fired == [one_shot]
    wheel.finish_tick(NOW + 10, fired)
    assert wheel.schedule(one_shot).outcome is Scheduled.DUPLICATE  # fired: dropped


DEBOUNCED = Timer(
    "d",
    NOW + 30,
    "cb",
    b"k",
    b"edit 3",
    "",
    (("trace", b"\x80"),),
    debounce=Debounce(20, 60, (NOW - 5) * 1000 + 250, 3, 41),
)


def test_a_debounced_timer_comes_back_restored_whole_in_either_format() -> None:
    """Its due second, window, max-wait, first request's time and merged count, with its
    callback: a binary callback key goes as JSON, anything else as protobuf."""
    for timer in (DEBOUNCED, replace(DEBOUNCED, key=b"\xff", headers=(("trace", b"1"),))):
        back = read_back(timer, NOW + 3600)  # read an hour later: its due second holds
        assert isinstance(back, Timer)
        assert back.debounce == Debounce(20, 60, (NOW - 5) * 1000 + 250, 3, 7, restored=True)
        assert replace(back, debounce=None) == replace(timer, debounce=None)
        (checked,) = requests_of([timer], NOW * 1000)  # what an import checks, passes
        assert checked[1] == as_request(timer, NOW * 1000)


def test_a_debounced_timer_imported_fires_with_its_count_and_goes_on_merging() -> None:
    """Imported twice it stays as it was (a restore replaces, it does not merge); a
    request after it merges into it, counted on from the export's count, and the
    max-wait still runs from the first request before the export."""
    wheel = wheel_at(NOW)
    restored = read_back(DEBOUNCED)
    assert isinstance(restored, Timer)
    assert wheel.schedule(restored).outcome is Scheduled.STORED
    again = wheel.schedule(restored)
    assert again.outcome is Scheduled.STORED and again.replaced
    assert wheel.count_pending() == 1
    stored = wheel.get_pending("d")
    assert stored is not None and stored.debounce is not None
    assert (stored.due, stored.debounce.merged) == (NOW + 30, 3)
    # A debounced request sent at NOW + 40 s, due NOW + 60, is capped by the max-wait:
    # 60 s after the first request (NOW - 4.75 s), NOW + 56.
    later = Timer(
        "d", NOW + 60, "cb", b"k", b"edit 4", "", debounce=Debounce(20, 60, (NOW + 40) * 1000, 1, 8)
    )
    assert wheel.schedule(later).outcome is Scheduled.STORED
    merged = wheel.get_pending("d")
    assert merged is not None and merged.debounce is not None
    assert (merged.value, merged.debounce.merged, merged.due) == (b"edit 4", 4, NOW + 56)
    assert merged.debounce.first_ms == (NOW - 5) * 1000 + 250
    assert wheel.begin_tick(NOW + 55) == []
    fired = wheel.begin_tick(NOW + 56) or []
    assert [(t.value, t.debounce.merged) for t in fired if t.debounce] == [(b"edit 4", 4)]


def test_a_series_imported_again_after_it_fired_is_a_duplicate_not_a_restart() -> None:
    wheel = wheel_at(NOW)
    rec = Recurrence.interval(5, start=NOW + 5)
    series = Timer("s", NOW + 5, "cb", None, b"v", "ts", recurrence=rec, seq=1)
    assert wheel.schedule(series).outcome is Scheduled.STORED
    assert wheel.schedule(series).replaced  # not fired yet: replaced by itself
    fired = wheel.begin_tick(NOW + 5)
    assert fired == [series]
    successor = replace(series, due=NOW + 10, seq=2, fired_before=1)
    wheel.finish_tick(NOW + 5, fired, {"s": successor})
    # The same request again (an import run twice): occurrence 1 must not fire again.
    assert wheel.schedule(series).outcome is Scheduled.DUPLICATE
    assert wheel.get_pending("s") == successor
    # Another version with another token is refused: the series is protected by its own.
    stranger = replace(series, due=NOW + 20, token="other", recurrence=replace(rec, start=NOW + 20))
    assert wheel.schedule(stranger).outcome is Scheduled.WRONG_TOKEN
    assert wheel.get_pending("s") == successor
    # Another first occurrence with its token replaces it.
    other = replace(series, due=NOW + 20, recurrence=replace(rec, start=NOW + 20))
    assert wheel.schedule(other).outcome is Scheduled.STORED
    assert wheel.get_pending("s") == other
    # And a cancel with the token stops it, answered as ever.
    assert wheel.cancel(Cancel("s", "ts")) is CancelOutcome.CANCELLED


def test_the_snapshot_keeps_one_timer_per_id_the_one_the_worker_would_fire() -> None:
    kv = MemoryKV()
    wheel = PartitionWheel(kv, clock=lambda: NOW)
    rec = Recurrence.interval(5, start=NOW + 5)
    series = Timer("s", NOW + 5, "cb", None, b"v", "ts", recurrence=rec, seq=1)
    plain = Timer("p", NOW + 7, "cb", None, b"v", "tp")
    wheel.schedule(series)
    wheel.schedule(plain)
    assert sorted(t.id for t in _pending_of(kv.data)) == ["p", "s"]
    # A unit cut short: the successor written, the fired occurrence not yet deleted.
    successor = replace(series, due=NOW + 10, seq=2, fired_before=1)
    kv.put(timer_key(NOW + 10, "s"), pack_timer(successor))
    assert {t.id: t for t in _pending_of(kv.data)}["s"] == series  # the index names it
    kv.put(b"Is", b"P%012d" % (NOW + 10) + b"ts")
    assert {t.id: t for t in _pending_of(kv.data)}["s"] == successor


#: What a hand-edited or damaged export line can hold in place of a field's value.
hostile_values: st.SearchStrategy[object] = st.one_of(
    st.sampled_from([2**63, 2**64, 2**64 + 7, -1, -(2**64), 10**12, 10**400, 0, 1.5]),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
    st.sampled_from(["\ud800", "", "timer-due", "x" * 1100, None, True, [], {}]),
)
line_fields = st.sampled_from(
    [
        "id",
        "token",
        "topic",
        "key",
        "value",
        "due",
        "late",
        "spread",
        "every",
        "start",
        "end",
        "count",
        "seq",
        "fired_before",
        "cron",
        "tz",
    ]
)


@st.composite
def export_lines(draw: st.DrawFn) -> str:
    """An export line of a plausible timer, with up to three fields replaced by
    hostile values (or added where the timer had none)."""
    doc: dict[str, object] = {
        "id": draw(st.text(min_size=1, max_size=8)),
        "token": draw(texts),
        "topic": "cb",
        "key": None,
        "value": "v",
        "headers": [],
        "due": draw(st.integers(NOW - 3000, NOW + 10**8)),
    }
    if draw(st.booleans()):
        doc.update(every=draw(st.integers(1, 86400)), start=doc["due"], seq=1, fired_before=0)
    for name in draw(st.lists(line_fields, max_size=3)):
        doc[name] = draw(hostile_values)
    return json.dumps(doc)


@settings(max_examples=800, deadline=None)
@given(st.lists(export_lines(), min_size=1, max_size=3))
def test_an_import_refuses_a_line_in_one_line_or_sends_what_the_worker_reads_back_as_it(
    lines: list[str],
) -> None:
    try:
        requests = requests_of(read_lines(lines), NOW * 1000)
    except LineError as refused:
        assert "\n" not in str(refused)
        return
    for timer, request in requests:
        assert 0 <= timer.due <= MAX_SECONDS
        record = request.read_from(TOPIC, offset=7)
        assert parse_request(record) == continued(timer)
