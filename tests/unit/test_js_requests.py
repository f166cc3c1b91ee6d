"""What the JavaScript client sends, the worker reads as the very timer it promised.

Generated cases, not listed ones: any ``schedule`` options a JavaScript caller can pass
(numbers with NaN and infinities, Dates, ISO and decimal text, durations, counts, late
policies, spreads, ids, tokens, keys and headers with lone surrogates, and values of the
wrong type), and any cancel. ``node`` runs the compiled client's request builder
(``clients/js/test/requests.ts``, no broker); each case either raises
``KafkaTimersError`` with one line, or gives a record value that the worker's reader
(:func:`parse_request`) takes as a timer with the id, token, due second, spread, topic,
key, value and headers the client returned. The one exception is what only the worker
can judge, having the cron and tz databases the client lacks: a cron expression's
fields, a time zone's name, and whether a cron series has an occurrence at all (before
its end, or from a start near the year 9999); those are dead-lettered there with
``invalid_cron``, ``unknown_time_zone`` or ``no_occurrence``.

Before this test the client sent ``every: 1e300`` (dead-lettered), ``count: 1.5`` and
``count: 0``, an end before its start, an unparsed late policy and spread, reserved or
over-long header names and ids, and lone surrogates (which the worker cannot encode).
``make test`` and ``make unit`` build the client first (the Makefile's ``js-client``).
"""

from __future__ import annotations

import base64
import math
from collections.abc import Iterator
from typing import Any, NamedTuple

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.core.raw_record import RawRecord
from app.core.request_format import parse_request
from app.core.timer import Cancel, Timer
from kafka_timers_client.bounds import MAX_SECONDS
from kafka_timers_client.client import TimerClient
from kafka_timers_client.debounce import debounced_due
from kafka_timers_client.errors import KafkaTimersError, RejectedRequest, RejectReason
from tests.support.node import NodeScript, node_script

SENT_MS = 1_800_000_000_250
VALID_CRONS = ["*/10 * * * * *", "0 9 * * MON-FRI", "0 0 1 1 *"]
BAD_CRONS = ["bad", "61 * * * *", ""]
VALID_ZONES = ["UTC", "Europe/Paris"]
BAD_ZONES = ["Mars/Olympus", ""]
#: Header names like the service's own (compared without case).
RESERVED = ["timer-id", "Scheduler-Key", "TIMER-x"]


@pytest.fixture(scope="module")
def node() -> Iterator[NodeScript]:
    with node_script("requests.js") as script:
        yield script


def special(number: float) -> Any:
    """A number as the builder's input carries it (JSON has no NaN or infinities)."""
    return number if math.isfinite(number) else {"$num": str(number).replace("inf", "Infinity")}


def buf(data: bytes) -> dict[str, str]:
    return {"$buf": base64.b64encode(data).decode()}


NOW_S = SENT_MS / 1000
good_numbers = st.one_of(
    st.floats(min_value=NOW_S - 10**6, max_value=NOW_S + 10**8),
    st.integers(int(NOW_S) - 10**6, int(NOW_S) + 10**8),
)
bad_numbers = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(special),
    st.integers(-(2**60), 2**60),
    st.sampled_from([MAX_SECONDS, MAX_SECONDS + 1, -1, 0, 1e-7, 2**53 + 1]),
    st.sampled_from([MAX_SECONDS + 0.5, math.nan, math.inf, -math.inf]).map(special),
)
wrong_types = st.one_of(st.none(), st.booleans(), st.lists(st.integers(), max_size=2))
good_instants = st.one_of(
    good_numbers,
    good_numbers.map(lambda n: {"$date": n * 1000}),
    st.sampled_from(
        ["2027-01-01T09:00:00", "2027-01-01T09:00:00Z", "2027-01-01T09:00:00+02:00", "2027-01-01"]
    ),
    good_numbers.map(str),
)
bad_instants = st.one_of(
    bad_numbers,
    bad_numbers.map(lambda n: {"$date": n if isinstance(n, dict) else special(float(n) * 1000)}),
    st.sampled_from(
        ["2027-02-30T00:00:00Z", " 1800000100 ", "0x10", "1e400", "Infinity", "Dec 25 2027", ""]
    ),
    st.text(max_size=12),
    wrong_types,
)
good_durations = st.one_of(
    st.integers(1, 10**6),
    st.from_regex(r"\s?[1-9]\d{0,5}\s?(s|m|h|d|w)?", fullmatch=True),
)
bad_durations = st.one_of(
    bad_numbers,
    st.sampled_from(["1e300", "-5s", "0.5s", "0", "1.5"]),
    st.sampled_from([3162240001, "3162240001", "100000w", "86401", 86401]),  # past the bounds
    st.from_regex(r"\s?\d{1,13}(\.\d{1,3})?\s?(ms|s|m|h|d|w)?", fullmatch=True),
    st.text(max_size=8),
    wrong_types,
)
#: A late policy the worker reads: at most one of fire/skip-after and one of coalesce/all.
good_lates = st.tuples(
    st.sampled_from(["", "fire", "FIRE", "skip-after 5m", "Skip-After  30 s", "skip-after 2ms"]),
    st.sampled_from(["", "all", "coalesce"]),
    st.booleans(),
).map(lambda t: " ,\t".join(x for x in (t[:2] if t[2] else t[1::-1]) if x))
#: Items the worker refuses (no duration, 0.1 ms, 0.5 ms: rounded to 0), among good ones.
late_words = st.sampled_from(
    [
        *("fire", "all", "coalesce", "skip-after 5m", "5m", "skip-after"),
        *("skip-after0.0001s", "skip-after 0.0005s", "skip-after 0.5ms", "skip-after 1e3s"),
    ]
)
bad_lates = st.one_of(
    st.sampled_from(["skip-after0.0001s", "skip-after 0.0005s", "skip-after 0.5ms", "all, all"]),
    st.lists(st.one_of(late_words, st.text(max_size=4)), min_size=1, max_size=3).map(", ".join),
    st.text(max_size=12),
    wrong_types,
)
good_texts = st.one_of(
    st.from_regex(r"[a-z0-9._]{1,20}", fullmatch=True),
    st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=20),
)
bad_texts = st.one_of(
    st.text(max_size=20),
    st.sampled_from(["\ud800", "a\udfffb", "x" * 1025, "😀" * 1025, ""]),
    wrong_types,
)
good_headers = st.dictionaries(
    good_texts.filter(lambda n: not n[:10].lower().startswith(("timer-", "scheduler-"))),
    good_texts,
    max_size=3,
)
bad_headers = st.one_of(
    st.dictionaries(st.sampled_from(RESERVED), good_texts, min_size=1, max_size=2),
    st.dictionaries(bad_texts.filter(lambda n: isinstance(n, str)), good_texts, min_size=1),
    st.dictionaries(good_texts, bad_texts, min_size=1, max_size=3),
    st.integers(257, 260).map(lambda n: {f"h{i}": "v" for i in range(n)}),
    wrong_types,
)
good_keys = st.one_of(good_texts, st.binary(max_size=8).map(buf))
#: The fields of a case, each as (valid values, hostile values).
FIELDS: dict[str, tuple[st.SearchStrategy[Any], st.SearchStrategy[Any]]] = {
    "topic": (good_texts, bad_texts),
    "value": (good_keys, bad_texts),
    "kind": (
        st.sampled_from(["at", "delay", "every", "cron", "debounce"]),
        # neither due time nor series; both due times; a max-wait alone; a debounce with
        # a due time
        st.sampled_from(["none", "both", "max_wait_alone", "debounce_at"]),
    ),
    "at": (good_instants, bad_instants),
    "delay": (st.integers(0, 10**6), st.one_of(bad_numbers, st.just("5"))),
    # Past the longest interval, by itself too: among all bad durations it is rarely drawn.
    "every": (good_durations, st.one_of(st.sampled_from([3162240001, "100000w"]), bad_durations)),
    "cron": (st.sampled_from(VALID_CRONS), st.sampled_from(BAD_CRONS)),
    "tz": (st.sampled_from(VALID_ZONES), st.sampled_from(BAD_ZONES)),
    "start": (good_instants, bad_instants),
    "end": (good_instants, bad_instants),
    "count": (st.integers(1, 100), st.one_of(bad_numbers, wrong_types, st.just(1.5))),
    "spread": (st.integers(0, 30), bad_durations),
    "debounce": (
        st.one_of(st.integers(1, 3600), st.sampled_from(["30s", " 5m", "1 h", "1000ms", 2.0])),
        st.one_of(bad_durations, st.sampled_from([MAX_SECONDS, "0s", "1100ms", 0.5, 0])),
    ),
    "maxWait": (
        st.one_of(st.integers(3600, 10**7), st.sampled_from(["1h", "2d", "1w"])),
        st.one_of(bad_durations, st.sampled_from([0, "1s", "0s", 59.5])),
    ),
    "late": (good_lates, bad_lates),
    "key": (good_keys, bad_texts),
    "id": (good_texts, bad_texts),
    "token": (good_texts, bad_texts),
    "headers": (good_headers, bad_headers),
    "options": (st.just(None), wrong_types),
}
#: The kind of request a field is read in (any other field: any kind).
KIND_OF = {"at": "at", "delay": "delay", "every": "every", "cron": "cron", "tz": "cron"}
KIND_OF.update({"start": "every", "end": "every", "count": "every"})
KIND_OF.update({"debounce": "debounce", "maxWait": "debounce"})
#: Fields a series may take, and fields any request may take, each present or not.
SERIES_FIELDS = ("start", "end", "count")
OPTIONAL_FIELDS = ("spread", "late", "key", "id", "token", "headers")


class Case(NamedTuple):
    topic: Any
    value: Any
    options: Any
    #: What the worker alone may refuse: a cron or zone drawn bad, an occurrence to find.
    cron_judged: bool
    occurrence_judged: bool
    #: A debounce whose fields alone decide (no other field hostile): the JavaScript
    #: client must refuse it exactly when the Python client does.
    debounce_judged: bool


@st.composite
def schedule_cases(draw: st.DrawFn) -> Case:
    """One ``schedule`` call whose fields are all valid but at most one, drawn hostile:
    a request with several bad fields is refused by its first, and the checks of the
    others are never reached. None hostile, a tenth of the time: the valid path itself."""
    hostile = draw(st.sampled_from([None, *FIELDS]))

    def field(name: str) -> Any:
        good, bad = FIELDS[name]
        return draw(bad if name == hostile else good)

    def present(name: str) -> bool:
        return name == hostile or draw(st.booleans())

    options: dict[str, Any] = {}
    # The kind of request the hostile field belongs to, so that it is read at all.
    kind = KIND_OF.get(hostile or "") or field("kind")
    if kind in ("at", "both"):
        options["at"] = field("at")
    if kind in ("delay", "both"):
        options["delay"] = field("delay")
    if kind == "every":
        options["every"] = field("every")
    if kind == "cron":
        options["cron"] = field("cron")
        if present("tz"):
            options["tz"] = field("tz")
    if kind in ("debounce", "debounce_at"):
        options["debounce"] = field("debounce")
        if present("maxWait"):
            options["maxWait"] = field("maxWait")
        if kind == "debounce_at":
            options["at"] = field("at")
    if kind == "max_wait_alone":
        options["maxWait"] = field("maxWait")
    if kind in ("every", "cron"):
        for name in SERIES_FIELDS:
            if present(name):
                options[name] = field(name)
    for name in OPTIONAL_FIELDS:
        if present(name):
            options[name] = field(name)
    junk = field("options")
    return Case(
        topic=field("topic"),
        value=field("value"),
        options=options if junk is None else junk,
        cron_judged=hostile in ("cron", "tz"),
        # A cron series may have no occurrence before its end, or at all from a start
        # near the year 9999 (the last a calendar holds): cron's to compute, the worker's.
        occurrence_judged="cron" in options and ("end" in options or "start" in options),
        debounce_judged=kind == "debounce" and hostile in (None, "debounce", "maxWait"),
    )


def _plain(value: Any) -> bool:
    """A value both languages hold alike (no NaN wrapper, no null, ASCII text: Python's
    ``\\d`` also takes other scripts' digits, which the JavaScript client refuses)."""
    return isinstance(value, (int, float)) or (isinstance(value, str) and value.isascii())


def python_refuses_debounce(options: dict[str, Any]) -> bool:
    """Whether the Python client refuses this debounce (its window, or its due second)."""
    try:
        seconds, _ = TimerClient.debounce_window(options["debounce"], options.get("maxWait"))
    except KafkaTimersError:
        return True
    return debounced_due(SENT_MS, seconds) > MAX_SECONDS


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=schedule_cases())
def test_what_the_js_client_sends_the_worker_reads_as_the_timer_it_returned(
    node: NodeScript, case: Case
) -> None:
    topic, value, options = case.topic, case.value, case.options
    answer = node.ask({"schedule": [topic, value, options, SENT_MS]})
    if case.debounce_judged and all(_plain(options.get(n, 0)) for n in ("debounce", "maxWait")):
        assert ("refused" in answer) == python_refuses_debounce(options), answer
    if "refused" in answer:
        assert answer["refused"] and "\n" not in answer["refused"]
        return
    record = RawRecord(
        "timer-request", 0, 1, SENT_MS, answer["id"].encode(), answer["sent"].encode(), ()
    )
    try:
        read = parse_request(record)
    except RejectedRequest as refused:
        judged = set()
        if case.cron_judged:
            judged |= {RejectReason.INVALID_CRON, RejectReason.UNKNOWN_TIME_ZONE}
        if case.occurrence_judged:
            judged.add(RejectReason.NO_OCCURRENCE)
        assert refused.reason in judged, f"sent {answer['sent'][:300]}, refused: {refused}"
        return
    assert isinstance(read, Timer)
    assert (read.id, read.token, read.spread, read.topic) == (
        answer["id"],
        answer["token"],
        answer["spread"],
        topic,
    )
    if answer.get("due") is not None:  # a cron series' first occurrence is the worker's
        assert read.due == answer["due"]
    assert 0 <= read.due <= MAX_SECONDS
    assert read.value == (
        value.encode() if isinstance(value, str) else base64.b64decode(value["$buf"])
    )
    key = options.get("key")
    assert read.key == (
        None
        if key is None
        else key.encode()
        if isinstance(key, str)
        else base64.b64decode(key["$buf"])
    )
    # By name: a JavaScript object lists integer-like keys first, whatever order they came in.
    assert dict(read.headers) == {n: v.encode() for n, v in options.get("headers", {}).items()}
    assert (read.recurrence is None) == ("every" not in options and "cron" not in options)
    if "debounce" in options:  # the window the Python client sends for the same options
        assert read.debounce is not None
        window = TimerClient.debounce_window(options["debounce"], options.get("maxWait"))
        assert (read.debounce.seconds, read.debounce.max_wait) == window
        assert read.debounce.first_ms == SENT_MS
        assert answer["token"] == options.get("token", "")  # token-less unless given one
    else:
        assert read.debounce is None


@settings(max_examples=300, deadline=None)
@given(timer_id=st.one_of(good_texts, bad_texts), token=st.one_of(good_texts, bad_texts))
def test_a_cancel_the_js_client_sends_names_its_timer_as_the_worker_reads_it(
    node: NodeScript, timer_id: Any, token: Any
) -> None:
    answer = node.ask({"cancel": [timer_id, token]})
    if "refused" in answer:
        assert answer["refused"] and "\n" not in answer["refused"]
        return
    read = parse_request(
        RawRecord("timer-request", 0, 1, SENT_MS, timer_id.encode(), answer["sent"].encode(), ())
    )
    assert isinstance(read, Cancel)
    assert (read.id, read.token) == (timer_id, token)
