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
import json
import math
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.core.bounds import MAX_SECONDS
from app.core.errors import RejectedRequest, RejectReason
from app.core.request_format import RawRecord, parse_request
from app.core.timer import Cancel, Timer

JS_DIR = Path(__file__).resolve().parents[2] / "clients" / "js"
SCRIPT = JS_DIR / "dist" / "test" / "requests.js"
SENT_MS = 1_800_000_000_250
VALID_CRONS = ["*/10 * * * * *", "0 9 * * MON-FRI", "0 0 1 1 *"]
BAD_CRONS = ["bad", "61 * * * *", ""]
VALID_ZONES = ["UTC", "Europe/Paris"]
BAD_ZONES = ["Mars/Olympus", ""]


class Node:
    """The request builder in one ``node`` process: a case a line in, an answer a line out."""

    def __init__(self) -> None:
        node = shutil.which("node")
        assert node is not None, "node (v18+) is needed: install nodejs"
        assert SCRIPT.exists(), f"{SCRIPT} is missing: run `make js-client` (npm ci, tsc)"
        self.process = subprocess.Popen(
            [node, str(SCRIPT)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            encoding="utf-8",
            errors="surrogatepass",
            cwd=JS_DIR,
        )

    def ask(self, case: dict[str, Any]) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps(case, allow_nan=False) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        assert line, "the request builder stopped"
        answer: dict[str, Any] = json.loads(line)
        return answer

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=10)


@pytest.fixture(scope="module")
def node() -> Iterator[Node]:
    made = Node()
    yield made
    made.close()


def special(number: float) -> Any:
    """A number as the builder's input carries it (JSON has no NaN or infinities)."""
    return number if math.isfinite(number) else {"$num": str(number).replace("inf", "Infinity")}


def buf(data: bytes) -> dict[str, str]:
    return {"$buf": base64.b64encode(data).decode()}


def mostly(
    valid: st.SearchStrategy[Any], hostile: st.SearchStrategy[Any]
) -> st.SearchStrategy[Any]:
    """``valid`` five times in six, else ``hostile``: one bad field in an otherwise good
    request is what tests the client's checks one at a time (all-hostile requests are
    refused by their first bad field, and the rest is never looked at)."""
    return st.integers(0, 5).flatmap(lambda n: hostile if n == 0 else valid)


NOW_S = SENT_MS / 1000
good_numbers = st.one_of(
    st.floats(min_value=NOW_S - 10**6, max_value=NOW_S + 10**8),
    st.integers(int(NOW_S) - 10**6, int(NOW_S) + 10**8),
)
bad_numbers = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(2**60), 2**60),
    st.sampled_from([MAX_SECONDS, MAX_SECONDS + 1, MAX_SECONDS + 0.5, -1, 0, 1e-7, 2**53 + 1]),
)
numbers = mostly(good_numbers, bad_numbers).map(lambda n: special(n) if isinstance(n, float) else n)
good_instants = st.one_of(
    numbers,
    numbers.map(lambda n: {"$date": n if isinstance(n, dict) else special(float(n) * 1000)}),
    st.sampled_from(
        ["2027-01-01T09:00:00", "2027-01-01T09:00:00Z", "2027-01-01T09:00:00+02:00", "2027-01-01"]
    ),
    good_numbers.map(str),
)
bad_instants = st.one_of(
    st.sampled_from(
        ["2027-02-30T00:00:00Z", " 1800000100 ", "0x10", "1e400", "Infinity", "Dec 25 2027", ""]
    ),
    st.text(max_size=12),
)
instants = mostly(good_instants, bad_instants)
good_durations = st.one_of(
    st.integers(1, 10**6),
    st.from_regex(r"\s?\d{1,6}(\.\d{1,3})?\s?(ms|s|m|h|d|w)?", fullmatch=True),
)
bad_durations = st.one_of(
    numbers,
    st.sampled_from(["1e300", "-5s", "0.5s", "0", "1.5", "3162240001", "100000w"]),
    st.from_regex(r"\s?\d{1,13}(\.\d{1,3})?\s?(ms|s|m|h|d|w)?", fullmatch=True),
    st.text(max_size=8),
)
durations = mostly(good_durations, bad_durations)
#: Good items, then items the worker refuses (no duration, 0.1 ms, 0.5 ms: rounded to 0).
late_words = st.sampled_from(
    [
        *("fire", "all", "coalesce", "skip-after 5m", "Skip-After  30 s", "FIRE"),
        *("skip-after", "skip-after0.0001s", "skip-after 0.0005s", "skip-after 0.5ms", "5m"),
    ]
)
lates = mostly(
    st.lists(late_words, max_size=3).map(" ,\t".join),
    st.one_of(
        st.lists(st.one_of(late_words, st.text(max_size=4)), max_size=3).map(", ".join),
        st.text(max_size=12),
    ),
)
good_texts = st.one_of(
    st.from_regex(r"[a-z0-9._-]{1,20}", fullmatch=True),
    st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=20),
)
texts = mostly(
    good_texts,
    st.one_of(
        st.text(max_size=20),
        st.sampled_from(["\ud800", "a\udfffb", "😀" * 1024, "x" * 1025, "😀" * 1025, ""]),
    ),
)
header_names = mostly(
    good_texts, st.one_of(texts, st.sampled_from(["timer-id", "Scheduler-Key", "TIMER-x"]))
)
wrong_types = st.one_of(st.none(), st.booleans(), st.lists(st.integers(), max_size=2))
headers = mostly(
    st.dictionaries(header_names, mostly(good_texts, st.one_of(texts, wrong_types)), max_size=3),
    st.integers(255, 258).map(lambda n: {f"h{i}": "v" for i in range(n)}),
)


@st.composite
def schedule_options(draw: st.DrawFn) -> tuple[Any, dict[str, bool]]:
    """The options of one ``schedule`` call, and what the worker alone may refuse."""
    options: dict[str, Any] = {}
    worker_judges = {"cron": False, "end": False}
    kind = draw(
        mostly(st.sampled_from(["at", "delay", "every", "cron"]), st.sampled_from(["none", "both"]))
    )
    if kind in ("at", "both"):
        options["at"] = draw(instants)
    if kind in ("delay", "both"):
        options["delay"] = draw(mostly(st.integers(0, 10**6), numbers))
    if kind in ("every", "cron"):
        if kind == "every":
            edges = st.sampled_from([3162240000, 3162240001, "100000w", "0.5s", 0])
            options["every"] = draw(st.one_of(good_durations, edges, bad_durations))
        else:
            options["cron"] = draw(mostly(st.sampled_from(VALID_CRONS), st.sampled_from(BAD_CRONS)))
            worker_judges["cron"] = options["cron"] in BAD_CRONS
            if draw(st.booleans()):
                options["tz"] = draw(
                    mostly(st.sampled_from(VALID_ZONES), st.sampled_from(BAD_ZONES))
                )
                worker_judges["cron"] |= options["tz"] in BAD_ZONES
        for name in ("start", "end"):
            if draw(st.booleans()):
                options[name] = draw(instants)
        # A cron series may have no occurrence before its end, or at all from a start
        # near the year 9999 (the last a calendar holds): cron's to compute, the worker's.
        worker_judges["end"] = "end" in options or "start" in options
        if draw(st.booleans()):
            options["count"] = draw(mostly(st.integers(1, 100), st.one_of(numbers, wrong_types)))
    for name, values in (
        ("spread", mostly(st.integers(0, 30), durations)),
        ("late", mostly(lates, wrong_types)),
        ("key", st.one_of(texts, st.binary(max_size=8).map(buf))),
        ("id", texts),
        ("token", texts),
        ("headers", headers),
    ):
        if draw(st.booleans()):
            options[name] = draw(values)
    if draw(st.integers(0, 29)) == 0:  # no options object at all (null, a number, a list)
        return draw(wrong_types), worker_judges
    return options, worker_judges


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    case=schedule_options(),
    topic=texts,
    value=st.one_of(texts, st.binary(max_size=8).map(buf)),
)
def test_what_the_js_client_sends_the_worker_reads_as_the_timer_it_returned(
    node: Node, case: tuple[Any, dict[str, bool]], topic: str, value: Any
) -> None:
    options, worker_judges = case
    answer = node.ask({"schedule": [topic, value, options, SENT_MS]})
    assert "crash" not in answer, answer["crash"]
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
        if worker_judges["cron"]:
            judged |= {RejectReason.INVALID_CRON, RejectReason.UNKNOWN_TIME_ZONE}
        if worker_judges["end"] and "cron" in options:
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


@settings(max_examples=300, deadline=None)
@given(timer_id=st.one_of(texts, wrong_types), token=st.one_of(texts, wrong_types))
def test_a_cancel_the_js_client_sends_names_its_timer_as_the_worker_reads_it(
    node: Node, timer_id: Any, token: Any
) -> None:
    answer = node.ask({"cancel": [timer_id, token]})
    assert "crash" not in answer, answer["crash"]
    if "refused" in answer:
        assert answer["refused"] and "\n" not in answer["refused"]
        return
    read = parse_request(
        RawRecord("timer-request", 0, 1, SENT_MS, timer_id.encode(), answer["sent"].encode(), ())
    )
    assert isinstance(read, Cancel)
    assert (read.id, read.token) == (timer_id, token)
