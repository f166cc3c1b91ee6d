"""The export line format: every timer the worker can store survives a line exactly."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.debounce import Debounce
from app.core.stored import pack_timer, unpack_timer
from app.core.timer import Timer
from app.ops.import_ import read_lines
from app.ops.jsonl import LineError, decode_line, encode_line
from kafka_timers_client.calendars import Calendar, SkipPolicy
from kafka_timers_client.late import CatchUp, LatePolicy
from kafka_timers_client.recurrence import Recurrence

texts = st.text(max_size=20)
data = st.binary(max_size=20) | texts.map(str.encode)
seconds = st.integers(min_value=0, max_value=10**11)
lates = st.none() | st.builds(
    LatePolicy,
    st.none() | st.integers(min_value=0, max_value=10**9),
    st.none() | st.sampled_from(CatchUp),
).filter(lambda p: p is None or not p.is_empty)
recurrences = (
    st.none()
    | st.builds(
        Recurrence,
        every=st.integers(min_value=1, max_value=10**6),
        start=seconds,
        end=st.none() | seconds,
        count=st.none() | st.integers(min_value=1, max_value=10**6),
    )
    | st.builds(
        Recurrence,
        cron=st.sampled_from(["*/10 * * * * *", "0 0 9 * * MON-FRI", "30 2 * * *"]),
        tz=st.sampled_from(["UTC", "Europe/Paris", "America/Argentina/Buenos_Aires"]),
        start=seconds,
        end=st.none() | seconds,
        count=st.none() | st.integers(min_value=1, max_value=10**6),
    )
    | st.builds(  # a series with a calendar (stored in layout 3)
        lambda cron, tz, start, count, calendar: Recurrence(
            cron, tz, None if cron else 60, start, None, count, calendar
        ),
        cron=st.sampled_from([None, "0 0 9 * * MON-FRI"]),
        tz=st.sampled_from(["UTC", "Europe/Paris"]),
        start=seconds,
        count=st.none() | st.integers(min_value=1, max_value=10**6),
        calendar=st.builds(
            Calendar,
            holidays=st.none() | st.sampled_from(["FR", "US-CA"]),
            dates=st.lists(st.dates(), min_size=1, max_size=5),
            policy=st.sampled_from(SkipPolicy),
        ),
    )
)


@st.composite
def stored_timers(draw: st.DrawFn) -> Timer:
    """Any timer the worker stores: what unpack_timer(pack_timer(t)) keeps."""
    recurrence = draw(recurrences)
    timer = Timer(
        id=draw(st.text(min_size=1, max_size=20)),
        due=draw(seconds),
        topic=draw(texts),
        key=draw(st.none() | data),
        value=draw(data),
        token=draw(texts),
        headers=tuple(draw(st.lists(st.tuples(texts, data), max_size=4))),
        recurrence=recurrence,
        seq=draw(st.integers(min_value=1, max_value=10**6)) if recurrence else 0,
        fired_before=draw(st.integers(min_value=0, max_value=10**6)) if recurrence else 0,
        late=draw(lates),
    )
    if recurrence is None and draw(st.booleans()):  # a debounced one-shot
        window = draw(st.integers(min_value=1, max_value=10**6))
        timer = replace(
            timer,
            debounce=Debounce(
                window,
                draw(st.none() | st.integers(min_value=window, max_value=10**7)),
                draw(st.integers(min_value=0, max_value=10**14)),
                draw(st.integers(min_value=1, max_value=10**9)),
                draw(st.integers(min_value=-1, max_value=10**9)),
            ),
        )
    return unpack_timer(pack_timer(timer))


@settings(max_examples=400, deadline=None)
@given(stored_timers(), st.none() | st.integers(min_value=0, max_value=255))
def test_every_stored_timer_survives_its_line_exactly(timer: Timer, partition: int | None) -> None:
    line = encode_line(timer, partition)
    assert "\n" not in line
    if timer.debounce is not None:  # all but its last request's offset, in another partition
        timer = replace(timer, debounce=replace(timer.debounce, last_offset=-1))
    assert decode_line(line) == timer


def test_a_line_reads_as_the_request_formats_fields() -> None:
    series = Timer(
        id="digest",
        due=1_800_000_000,
        topic="reports",
        key=b"k",
        value=b"\xff\x00",
        token="t",
        headers=(("a", b"1"), ("a", b"\x80")),
        recurrence=Recurrence(cron="0 0 9 * * MON-FRI", tz="Europe/Paris", start=1_799_000_000),
        seq=4,
        fired_before=3,
        late=LatePolicy(300_000, CatchUp.ALL),
    )
    doc = json.loads(encode_line(series, 3))
    assert doc == {
        "id": "digest",
        "token": "t",
        "topic": "reports",
        "key": "k",
        "value_b64": "/wA=",
        "headers": [{"name": "a", "value": "1"}, {"name": "a", "value_b64": "gA=="}],
        "due": 1_800_000_000,
        "late": "skip-after 300s, all",
        "cron": "0 0 9 * * MON-FRI",
        "tz": "Europe/Paris",
        "start": 1_799_000_000,
        "seq": 4,
        "fired_before": 3,
        "partition": 3,
    }
    one_shot = Timer(id="x", due=5, topic="t", key=None, value=b"v")
    assert json.loads(encode_line(one_shot)) == {
        "id": "x",
        "token": "",
        "topic": "t",
        "key": None,
        "value": "v",
        "headers": [],
        "due": 5,
    }


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("[1]", "JSON object"),
        ("{", "not JSON"),
        ('{"id": "x", "topic": "t", "key": null, "value": "v"}', "'due'"),
        ('{"id": "", "topic": "t", "key": null, "value": "v", "due": 1}', "'id'"),
        ('{"id": "x", "topic": "t", "key": null, "value": "v", "due": "1"}', "'due'"),
        ('{"id": "x", "topic": "t", "value": "v", "due": 1}', "'key'"),
        ('{"id": "x", "topic": "t", "key": null, "value_b64": "!", "due": 1}', "base64"),
        ('{"id": "x", "topic": "t", "key": null, "value": "v", "due": 1, "late": "soon"}', "late"),
        ('{"id": "x", "topic": "t", "key": null, "value": "v", "due": 1, "every": 5}', "'start'"),
        (
            '{"id": "x", "topic": "t", "key": null, "value": "v", "due": 1, "every": 5, '
            '"start": 1, "seq": 0}',
            "'seq'",
        ),
        ('{"id": "x", "topic": "t", "key": null, "value": "v", "due": 1, "headers": {}}', "list"),
        # A lone surrogate (a JSON escape, or stdin's bytes that are not UTF-8) in any
        # text: it stopped the import with a traceback once the request was encoded.
        ('{"id": "\\ud800", "topic": "t", "key": null, "value": "v", "due": 1}', "'id'"),
        ('{"id": "x", "topic": "t\udcff", "key": null, "value": "v", "due": 1}', "'topic'"),
        (
            '{"id": "x", "topic": "t", "key": null, "value": "v", "due": 1, "token": "\\udfff"}',
            "'token'",
        ),
        (
            '{"id": "x", "topic": "t", "key": null, "value": "v", "due": 1, '
            '"headers": [{"name": "\\ud800", "value": "v"}]}',
            "'name'",
        ),
        # A debounced timer's line: its window as a request's, its first request's time
        # and merged count, all whole numbers; never a series.
        (
            '{"id": "x", "topic": "t", "key": null, "value": "v", "due": 1, "debounce": 0, '
            '"debounce_first_ms": 0, "debounce_merged": 1}',
            "'debounce'",
        ),
        (
            '{"id": "x", "topic": "t", "key": null, "value": "v", "due": 1, "debounce": 9, '
            '"max_wait": 5, "debounce_first_ms": 0, "debounce_merged": 1}',
            "max_wait",
        ),
        (
            '{"id": "x", "topic": "t", "key": null, "value": "v", "due": 1, "debounce": 9, '
            '"debounce_first_ms": 0}',
            "'debounce_merged'",
        ),
        (
            '{"id": "x", "topic": "t", "key": null, "value": "v", "due": 1, "debounce": 9, '
            '"debounce_first_ms": 0, "debounce_merged": 0}',
            "'debounce_merged'",
        ),
        (
            '{"id": "x", "topic": "t", "key": null, "value": "v", "due": 1, "debounce": 9, '
            '"debounce_first_ms": -1, "debounce_merged": 2}',
            "'debounce_first_ms'",
        ),
        (
            '{"id": "x", "topic": "t", "key": null, "value": "v", "due": 1, "every": 5, '
            '"start": 1, "seq": 1, "debounce": 9, "debounce_first_ms": 0, "debounce_merged": 2}',
            "series",
        ),
    ],
)
def test_a_line_that_is_no_timer_is_refused_with_why(line: str, why: str) -> None:
    with pytest.raises(LineError, match=why):
        decode_line(line)


def test_a_bad_line_is_named_by_its_number_and_blank_lines_are_skipped() -> None:
    good = encode_line(Timer(id="x", due=5, topic="t", key=None, value=b"v"))
    assert len(read_lines([good, "\n", good])) == 2
    with pytest.raises(LineError, match=r"^line 3: "):
        read_lines([good, "", "{}"])
