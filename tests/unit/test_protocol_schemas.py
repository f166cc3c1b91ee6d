"""docs/protocol.md's schemas hold for what the clients and the worker actually write.

- ``docs/timer-request.schema.json``: every JSON request the JavaScript client sends
  (generated options, run through its compiled builder in node) and every JSON request
  ``kafka-timers import`` writes validates, whenever the worker takes it as a timer or a
  cancel; and requests the worker refuses by format fail it.
- ``future.proto``: every protobuf request the Python client sends decodes with code
  generated from the ``.proto`` (as a Java or Go producer's would), with no field the
  file does not declare.
- ``docs/timer-fired.schema.json``: every kind of record the worker writes to the fired
  topic validates (the kcat test also validates the ones a real worker wrote).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import jsonschema
import pytest
from google.protobuf.unknown_fields import UnknownFieldSet
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.core.debounce import Debounce
from app.core.policy import is_legal_topic
from app.core.raw_record import RawRecord
from app.core.request_format import parse_request
from app.core.timer import Cancel, Timer
from kafka_timers_client import TimerClient
from kafka_timers_client.errors import KafkaTimersError, RejectedRequest
from kafka_timers_client.fired import FiredKind, FiredRecord, SkipReason
from tests.support.node import NodeScript, node_script
from tests.support.proto import compiled_future_proto, offline_client
from tests.unit.test_client_schedule import NOW, calls, texts
from tests.unit.test_js_requests import SENT_MS, Case, schedule_cases

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _validator(name: str) -> jsonschema.Draft202012Validator:
    schema = json.loads((DOCS / name).read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())


REQUEST = _validator("timer-request.schema.json")
FIRED = _validator("timer-fired.schema.json")


def _errors(validator: jsonschema.Draft202012Validator, doc: Any) -> list[str]:
    return [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(doc)
    ]


@pytest.fixture(scope="module")
def node() -> Iterator[NodeScript]:
    with node_script("requests.js") as script:
        yield script


def _worker_takes(key: str, value: bytes) -> Timer | Cancel | None:
    try:
        read = parse_request(RawRecord("timer-request", 0, 1, SENT_MS, key.encode(), value, ()))
    except RejectedRequest:
        return None
    if isinstance(read, Timer) and not is_legal_topic(read.topic):
        return None  # dead-lettered invalid_topic by the worker's policy
    return read


@settings(max_examples=800, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=schedule_cases())
def test_every_request_the_js_client_sends_validates(node: NodeScript, case: Case) -> None:
    answer = node.ask({"schedule": [case.topic, case.value, case.options, SENT_MS]})
    if "refused" in answer:  # a crash fails in node.ask
        return
    if _worker_takes(answer["id"], answer["sent"].encode()) is None:
        return
    doc = json.loads(answer["sent"])
    assert not _errors(REQUEST, doc), (doc, _errors(REQUEST, doc))


@settings(max_examples=200, deadline=None)
@given(timer_id=texts, token=texts)
def test_every_cancel_the_js_client_sends_validates(
    node: NodeScript, timer_id: str, token: str
) -> None:
    answer = node.ask({"cancel": [timer_id, token]})
    if "refused" in answer:  # a crash fails in node.ask
        return
    doc = json.loads(answer["sent"])
    assert not _errors(REQUEST, doc), (doc, _errors(REQUEST, doc))


@pytest.mark.parametrize(
    "doc",
    [
        {"topic": "t", "in": "30s", "headers": {"timer-id": "forged"}},  # reserved header
        {"topic": "t"},  # no due time at all
        {"topic": "t", "at": 1, "in": "5s"},  # two due times
        {"topic": "t", "every": "5s", "cron": "* * * * *"},  # two recurrences
        {"topic": "t", "at": 1, "count": 3},  # a count without a series
        {"topic": "no spaces", "in": "5s"},  # not a topic name
        {"topic": "t", "in": "soon"},  # not a duration
        {"topic": "t", "in": "5s", "unknown": 1},  # a field the worker ignores: a typo
        {"cancel": "x"},  # a cancel without its token
        {"cancel": "x", "token": "y", "topic": "t"},  # a cancel and a schedule
        {"topic": "t", "at": 1, "debounce": 5},  # a debounce with a due time
        {"topic": "t", "debounce": 5, "debounce_first_ms": 1, "debounce_merged": 2},  # no at
        {"topic": "t", "at": 1, "debounce": 5, "debounce_first_ms": 1},  # no merged count
    ],
)
def test_requests_the_worker_refuses_fail_the_schema(doc: dict[str, Any]) -> None:
    assert _errors(REQUEST, doc)


def test_the_protocol_docs_examples_validate() -> None:
    """Each JSON request and fired record in docs/protocol.md's examples validates."""
    text = (DOCS / "protocol.md").read_text()
    examples = [line for line in text.splitlines() if line.startswith(("{", "echo '{"))]
    assert len(examples) >= 8
    for line in examples:
        doc = json.loads(line[line.index("{") : line.rindex("}") + 1])
        schema = FIRED if "event" in doc else REQUEST
        assert not _errors(schema, doc), (line, _errors(schema, doc))


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    """Python code generated from the shipped future.proto, as docs/protocol.md says."""
    return compiled_future_proto(tmp_path_factory.mktemp("generated"), "schema_future_pb2")


@pytest.fixture(scope="module")
def client() -> Iterator[TimerClient]:
    yield from offline_client(NOW)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kwargs=calls(),
    action=st.sampled_from(["schedule", "cancel", "pause", "resume", "trigger", "backfill"]),
)
def test_every_request_the_python_client_sends_decodes_with_code_from_the_proto(
    client: TimerClient, generated: ModuleType, kwargs: dict[str, Any], action: str
) -> None:
    sent: list[bytes] = []
    setattr(client, "_send", lambda _key, value, *_, **__: sent.append(value))  # noqa: B010
    try:
        if action == "schedule":
            client.schedule("payments-retry", b"payload", **kwargs)
        elif action == "backfill":
            client.backfill(kwargs.get("timer_id") or "t-1", kwargs.get("token") or "s", 60, 120)
        else:
            getattr(client, action)(kwargs.get("timer_id") or "t-1", kwargs.get("token") or "s")
    except KafkaTimersError:
        return
    [value] = sent
    message = generated.Future.FromString(value)
    assert len(UnknownFieldSet(message)) == 0, "a field future.proto does not declare"
    assert message.Action.Name(message.action) == action.upper()


def _timers() -> Iterator[Timer]:
    from kafka_timers_client.recurrence import Recurrence

    yield Timer(id="a", due=1_800_000_000, topic="t", key=b"k", value=b"v", token="s")
    every = Recurrence.interval(30, start=1_800_000_000, count=3)
    yield Timer(id="b", due=1_800_000_000, topic="t", key=None, value=b"", recurrence=every, seq=2)
    # a triggered one-shot and a backfilled occurrence: their records carry "extra"
    yield Timer("c", 1_800_000_000, "t", None, b"v", "s", (("timer-trigger", b"1"),))
    yield Timer("b@backfill:5", 5, "t", None, b"v", "s", (("timer-backfill", b"5"),))


def test_every_kind_of_fired_record_validates() -> None:
    records = []
    for timer in _timers():
        records.append(
            FiredRecord.fired(timer, partition=3, worker="w1", fired_at_ms=1_800_000_000_100)
        )
        records.append(
            FiredRecord.fired(
                timer, partition=3, worker="w1", fired_at_ms=1_800_000_000_100, request_offset=7
            )
        )
        records.append(
            FiredRecord.skipped(timer, SkipReason.LATE, partition=3, worker="w1", at_ms=1)
        )
        records.append(FiredRecord.dropped(timer, "duplicate", partition=3, worker="w", at_ms=1))
        records.append(FiredRecord.dropped(timer, "over_quota", partition=3, worker="w", at_ms=1))
    for kind, outcome in (
        (FiredKind.CANCEL, "cancelled"),
        (FiredKind.CANCEL, "cancelled_in_advance"),
        (FiredKind.PAUSE, "paused"),
        (FiredKind.RESUME, "wrong_token"),
        (FiredKind.TRIGGER, "triggered"),
        (FiredKind.BACKFILL, "backfilled"),
        (FiredKind.BACKFILL, "too_many"),
        (FiredKind.BACKFILL, "not_a_series"),
    ):
        records.append(
            FiredRecord.cancel(
                "a", "s", outcome, partition=3, worker="w", at_ms=1, request_offset=7, kind=kind
            )
        )
    for record in records:
        doc = json.loads(record.to_json())
        assert not _errors(FIRED, doc), (doc, _errors(FIRED, doc))
    assert {r.extra for r in records} == {None, "trigger", "backfill"}
    extra = next(json.loads(r.to_json()) for r in records if r.extra)
    assert _errors(FIRED, {**extra, "extra": "replayed"})
    bulk = {
        "event": "bulk_cancel", "id": "cancel-bulk/r1", "token": "", "partition": 0,
        "worker": "w1", "outcome": "dry_run", "at_ms": 1, "request": "r1", "matched": 2,
        "cancelled": 0,
    }  # fmt: skip
    assert not _errors(FIRED, bulk)
    assert _errors(FIRED, {**bulk, "event": "exploded"})
    assert _errors(FIRED, {"event": "fired", "id": "a", "token": "s3cret", "partition": 0})


def test_the_json_requests_import_writes_validate() -> None:
    """``kafka-timers import`` sends JSON for a timer whose callback key is not UTF-8."""
    from app.ops.requests import as_request
    from kafka_timers_client.late import LatePolicy
    from kafka_timers_client.recurrence import Recurrence

    binary = {"key": b"\xff\x00", "value": b"v", "token": "s", "headers": (("h", b"1"),)}
    timers = [
        Timer(id="one", due=1_800_000_000, topic="t", **binary),  # type: ignore[arg-type]
        Timer(
            id="series",
            due=1_800_000_000,
            topic="t",
            recurrence=Recurrence.cron_series("0 9 * * *", "Europe/Paris", start=1_800_000_000),
            seq=1,
            late=LatePolicy.parse("skip-after 5m"),
            **binary,  # type: ignore[arg-type]
        ),
        Timer(
            id="every",
            due=1_800_000_000,
            topic="t",
            recurrence=Recurrence.interval(60, start=1_800_000_000, count=5),
            seq=1,
            **binary,  # type: ignore[arg-type]
        ),
        Timer(
            id="debounced",
            due=1_800_000_030,
            topic="t",
            debounce=Debounce(30, 300, 1_800_000_000_250, 4, 17),
            **binary,  # type: ignore[arg-type]
        ),
    ]
    for timer in timers:
        record = as_request(timer, 1_800_000_000_000)
        assert record.value[:1] == b"{", "a binary key goes as JSON"
        doc = json.loads(record.value)
        assert not _errors(REQUEST, doc), (doc, _errors(REQUEST, doc))
