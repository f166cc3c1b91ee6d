"""The line between a bad record and a broken system, from both sides.

Whatever one request record makes the worker raise, a bug included, that record is
dead-lettered with a reason and the batch goes on; only a systemic failure leaves the
handler, unacknowledged. The triggers here are planted (a parser that raises), so the
test holds whatever the parsers learn to refuse by themselves.
"""

from __future__ import annotations

from typing import Any

import pytest

from app.core.keys import REQUEST_OFFSET
from app.core.raw_record import RawRecord
from app.kafka.records import to_record
from app.worker import service_requests as service_module
from app.worker.isolation import is_systemic, rejection_for
from app.worker.output import DeliveryFailure
from app.worker.service import TimerService
from kafka_timers_client.errors import RejectReason, SystemicFailure
from tests.unit.test_service import NOW, Harness

POISON = b"poison"


@pytest.fixture
def poisoned_parser(monkeypatch: pytest.MonkeyPatch) -> list[BaseException]:
    """Make the parser raise the next exception of the returned list on a POISON record."""
    raises: list[BaseException] = []
    parse = service_module.parse_request

    def parse_or_raise(record: RawRecord, *args: Any) -> Any:
        if record.value == POISON:
            raise raises.pop(0)
        return parse(record, *args)

    monkeypatch.setattr(service_module, "parse_request", parse_or_raise)
    return raises


@pytest.mark.parametrize(
    "bug",
    [
        ZeroDivisionError("x"),
        UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogates not allowed"),
        RecursionError("deep"),
        OverflowError("big"),
        IsADirectoryError("America"),  # an OSError from a parser is the record's, too
        ValueError("Exceeds the limit (4300 digits)"),
        KeyError("x"),
    ],
)
def test_an_unforeseen_error_dead_letters_the_record_and_the_batch_goes_on(
    poisoned_parser: list[BaseException], bug: Exception
) -> None:
    poisoned_parser.append(bug)
    h = Harness()
    h.requests(h.schedule("before", NOW + 5), h.record(POISON), h.schedule("after", NOW + 5))
    (dead,) = h.output.durable.dead_letters
    assert dead[0] == POISON
    assert dead[1] is RejectReason.INTERNAL_ERROR
    assert dead[2].startswith(type(bug).__name__)
    assert "x" not in dead[2].split(" at ")[0].removeprefix(type(bug).__name__)
    wheel = h.service.wheels()[0]
    assert wheel.lookup("before") is not None and wheel.lookup("after") is not None
    assert h.stores.stores[0].get(REQUEST_OFFSET) == b"2"  # the batch was acknowledged
    assert h.metrics.rejected.labels(reason="internal_error")._value.get() == 1


@pytest.mark.parametrize(
    "failure", [SystemicFailure("disk full"), DeliveryFailure("flush"), MemoryError()]
)
def test_a_systemic_failure_leaves_the_handler_and_nothing_is_acknowledged(
    poisoned_parser: list[BaseException], failure: BaseException
) -> None:
    poisoned_parser.append(failure)
    h = Harness()
    with pytest.raises(type(failure)):
        h.requests(h.schedule("before", NOW + 5), h.record(POISON))
    assert not h.output.durable.dead_letters
    assert h.stores.stores[0].get(REQUEST_OFFSET) is None


def test_a_dead_letter_whose_copy_is_refused_goes_bare_and_a_refused_bare_one_is_systemic(
    poisoned_parser: list[BaseException], monkeypatch: pytest.MonkeyPatch
) -> None:
    poisoned_parser.extend([ValueError("a"), ValueError("b")])
    h = Harness()
    sent: list[RawRecord] = []
    refusals = [RuntimeError("copy too large"), None, RuntimeError("x"), RuntimeError("y")]
    real = h.output.dead_letter

    def dead_letter(record: RawRecord, reason: RejectReason, detail: str) -> None:
        refusal = refusals.pop(0)
        if refusal is not None:
            raise refusal
        sent.append(record)
        real(record, reason, detail)

    monkeypatch.setattr(h.output, "dead_letter", dead_letter)
    h.requests(h.record(POISON))
    (bare,) = sent
    assert (bare.key, bare.value, bare.headers) == (None, None, ())
    assert "the full copy was refused: RuntimeError" in h.output.durable.dead_letters[0][2]
    with pytest.raises(SystemicFailure, match="refused a bare record"):
        h.requests(h.record(POISON))


def test_the_classification() -> None:
    assert is_systemic(SystemicFailure("x")) and is_systemic(KeyboardInterrupt())
    assert not is_systemic(OSError("x")) and not is_systemic(RecursionError())
    try:
        raise TypeError("secret payload")
    except TypeError as exc:
        reason, detail = rejection_for(exc, "t[0]@1")
    assert reason is RejectReason.INTERNAL_ERROR
    assert detail.startswith("TypeError at test_isolation.py:") and "secret" not in detail


class _Message:
    """A consumed confluent-kafka message whose headers cannot be decoded."""

    def __init__(self) -> None:
        self._headers: Any = None

    def headers(self) -> Any:
        if self._headers is None:
            raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte")
        return self._headers

    def set_headers(self, headers: Any) -> None:
        self._headers = headers

    def key(self) -> bytes:
        return b"k"

    def value(self) -> bytes:
        return b"{}"

    def topic(self) -> str:
        return "requests"

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return 7

    def timestamp(self) -> tuple[int, int]:
        return (1, NOW * 1000)


def test_a_record_whose_header_names_are_not_utf8_is_read_and_dead_lettered() -> None:
    record = to_record(_Message())  # type: ignore[arg-type]
    assert record.defect is not None and record.headers == ()
    h = Harness()
    h.requests(record, h.schedule("after", NOW + 5))
    (dead,) = h.output.durable.dead_letters
    assert dead[1] is RejectReason.MALFORMED and "headers cannot be read" in dead[2]
    assert h.service.wheels()[0].lookup("after") is not None


def _real_output(captured: list[dict[str, Any]]) -> Any:
    """An OutputProducer on librdkafka's real producer (no broker needed: produce()
    checks the size locally and queues), recording each produce's arguments."""
    from app.worker.output import OutputProducer

    output = OutputProducer(
        {"bootstrap.servers": "127.0.0.1:9", "message.timeout.ms": 1000, "log_level": 0},
        worker_id="w",
        fired_topic="fired",
        dlq_topic="dlq",
    )
    producer = output._producer
    real = producer.produce

    class Recording:
        def __getattr__(self, name: str) -> Any:
            return getattr(producer, name)

        def produce(self, topic: str, *args: Any, **kw: Any) -> None:
            real(topic, *args, **kw)  # raises as librdkafka would
            # confluent-kafka's parameters after the topic, by position or by name
            names = ("value", "key", "partition", "callback", "on_delivery", "timestamp", "headers")
            given = dict(zip(names[: len(args)], args, strict=True))
            captured.append({"topic": topic, **given, **kw})

    output._producer = Recording()  # type: ignore[assignment]
    return output


@pytest.mark.parametrize("size", [999_000, 1_000_000, 1_048_576, 1_048_588])
def test_a_request_at_or_over_the_producer_limit_is_dead_lettered_cut_down(size: int) -> None:
    captured: list[dict[str, Any]] = []
    output = _real_output(captured)
    headers = (("h", b"x" * 1000),)
    record = RawRecord("requests", 3, 9, NOW * 1000, b"k" * 100, b"v" * size, headers)
    output.dead_letter(record, RejectReason.PAYLOAD_TOO_LARGE, "too large")
    (sent,) = captured
    names = dict(sent["headers"])
    assert names["dlq-reason"] == b"payload_too_large"
    assert names["dlq-source-offset"] == b"9"
    assert names["dlq-truncated"] == f"was: value {size} bytes, key 100 bytes".encode()
    assert sent["value"] == b"v" * len(sent["value"]) and len(sent["value"]) > 990_000
    assert sent["key"] == b"k" * 100 and names["h"] == b"x" * 1000


def test_a_small_rejected_request_is_copied_unchanged() -> None:
    captured: list[dict[str, Any]] = []
    output = _real_output(captured)
    record = RawRecord("requests", 0, 1, NOW * 1000, b"key", b"value", (("h", b"1"),))
    output.dead_letter(record, RejectReason.MALFORMED, "bad \ud800")
    (sent,) = captured
    assert (sent["key"], sent["value"]) == (b"key", b"value")
    assert "dlq-truncated" not in dict(sent["headers"])
    assert dict(sent["headers"])["dlq-detail"] == b"bad \\ud800"


def test_headers_that_alone_exceed_half_the_room_are_dropped_from_the_copy() -> None:
    captured: list[dict[str, Any]] = []
    output = _real_output(captured)
    headers = tuple((f"h{i}", b"x" * 100_000) for i in range(6))
    record = RawRecord("requests", 0, 1, NOW * 1000, b"k", b"v" * 500_000, headers)
    output.dead_letter(record, RejectReason.MALFORMED, "bad")
    (sent,) = captured
    names = dict(sent["headers"])
    assert names["dlq-truncated"].endswith(b"6 headers (dropped)")
    assert "h0" not in names and sent["value"] == b"v" * 500_000


def test_a_request_whose_records_would_not_fit_is_refused_whole_before_it_is_stored() -> None:
    from kafka_timers_client import protowire

    h = Harness()
    h.output.max_record_bytes = 5_000
    fits = protowire.Future(callback_topic="cb", callback=b"v" * 1000, id="fits", due=NOW + 5)
    big_key = protowire.Future(
        callback_topic="cb",
        callback=b"v" * 1000,
        id="big-key",
        due=NOW + 5,
        callback_key="k" * 3_500,
    )
    headers = protowire.Future(
        callback_topic="cb",
        callback=b"v",
        id="headers",
        due=NOW + 5,
        headers=[(f"h{i}", b"x" * 200) for i in range(20)],
    )
    h.requests(*(h.record(protowire.encode(f)) for f in (fits, big_key, headers)))
    dead = {reason for _, reason, _ in h.output.durable.dead_letters}
    assert dead == {RejectReason.RECORD_TOO_LARGE}
    assert len(h.output.durable.dead_letters) == 2
    wheel = h.service.wheels()[0]
    assert wheel.lookup("fits") is not None
    assert wheel.lookup("big-key") is None and wheel.lookup("headers") is None
    h.tick(NOW + 5)
    assert h.fired() == ["fits"]


def _count_commits(h: Harness, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A one-item list counting the units ``h``'s service commits."""
    units = [0]
    commit = h.output.commit

    async def counting_commit(timeout: float = 60.0) -> None:
        units[0] += 1
        await commit(timeout)

    monkeypatch.setattr(h.output, "commit", counting_commit)
    return units


@pytest.mark.parametrize("transactional", [False, True])
def test_a_batch_that_takes_long_lets_the_loop_run_and_loses_nothing(
    monkeypatch: pytest.MonkeyPatch, transactional: bool
) -> None:
    """Past the budget the loop runs: in exactly-once mode the unit (a transaction) ends
    and the rest follows in the next; otherwise the unit pauses and stays one flush."""
    monkeypatch.setattr(service_module, "UNIT_BUDGET_SECONDS", 0.0)
    h = Harness(transactional=transactional)
    units = _count_commits(h, monkeypatch)
    pauses = 0
    let_run = TimerService._let_the_loop_run

    async def counting_pause(parts: Any) -> None:
        nonlocal pauses
        pauses += 1
        await let_run(parts)

    monkeypatch.setattr(TimerService, "_let_the_loop_run", staticmethod(counting_pause))
    h.requests(*(h.schedule(f"t{i}", NOW + 5, partition=i % 2) for i in range(100)))
    # The budget is checked after each 16 records: 6 times in 100.
    assert (units[0], pauses) == ((7, 0) if transactional else (1, 6))
    wheels = h.service.wheels()
    assert all(wheels[i % 2].lookup(f"t{i}") is not None for i in range(100))
    assert h.stores.stores[0].get(REQUEST_OFFSET) == b"49"
    assert h.stores.stores[1].get(REQUEST_OFFSET) == b"49"


def test_a_tick_that_runs_while_a_unit_pauses_fires_what_the_unit_stored_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The unit's writes are applied before it pauses: a tick then scans them, and the
    records after the pause meet a ticked second (fired at once). Each fires once."""
    monkeypatch.setattr(service_module, "UNIT_BUDGET_SECONDS", 0.0)
    h = Harness()
    units = _count_commits(h, monkeypatch)
    ticked: list[int] = []
    let_run = TimerService._let_the_loop_run

    async def tick_in_the_pause(parts: Any) -> None:
        await let_run(parts)
        if not ticked:
            h.clock.now = NOW + 5.01
            ticked.append(await h.service.handle_ticks([(0, NOW + 5, None, "osc")]))

    monkeypatch.setattr(TimerService, "_let_the_loop_run", staticmethod(tick_in_the_pause))
    h.requests(*(h.schedule(f"t{i}", NOW + 5) for i in range(40)))
    assert ticked == [16]  # the 16 records before the first pause, fired by the tick
    assert sorted(h.fired()) == sorted(f"t{i}" for i in range(40))
    assert units[0] == 1
    assert h.pending() == 0


def test_timers_stored_under_wider_rules_are_refused_when_due_and_a_series_ends() -> None:
    """An operator narrows the allow-list and restarts: stored timers stop (issue 22)."""
    h = Harness()
    h.requests(
        h.schedule("kept", NOW + 5, topic="orders"),
        h.schedule("banned", NOW + 5, topic="abused"),
        h.series("banned-series", every=1),
    )
    # The worker restarted with the narrower rules.
    narrowed = h.restart(allow_patterns=("orders", "cb"), deny_patterns=("cb",))
    h.tick(NOW + 5)
    assert h.fired() == ["kept"]
    refused = {(timer_id, reason.value) for timer_id, reason in h.output.durable.dead_timers}
    assert refused == {("banned", "topic_not_allowed"), ("banned-series", "topic_not_allowed")}
    assert {t.id for t, reason, _ in h.output.durable.skipped if reason.value == "not_allowed"} == {
        "banned",
        "banned-series",
    }
    wheel = narrowed.wheels()[0]
    assert wheel.get_pending("banned-series") is None  # the series ended
    h.tick(NOW + 6)
    assert h.fired() == ["kept"]
    assert h.metrics.skipped.labels(reason="not_allowed")._value.get() == 2


def test_timers_stored_under_a_larger_payload_limit_are_refused_when_due() -> None:
    """The payload limit lowered and the workers restarted: a stored timer over it is
    dead-lettered when due, even after a timer to the same topic went out in the same
    tick (the fire path's shortcut for topics that passed still checks the size)."""
    h = Harness()
    # The callback value is the id: "kept" is 4 bytes, "z-too-big" 9 (and after it in
    # the store's key order, so the topic has passed by the time it is fired).
    h.requests(h.schedule("kept", NOW + 5), h.schedule("z-too-big", NOW + 5))
    h.restart(max_payload_bytes=5)
    h.tick(NOW + 5)
    assert h.fired() == ["kept"]
    refused = {(timer_id, reason.value) for timer_id, reason in h.output.durable.dead_timers}
    assert refused == {("z-too-big", "payload_too_large")}


def test_requests_dropped_as_duplicates_or_cancelled_earlier_are_counted() -> None:
    h = Harness()
    h.requests(h.cancel("early"), h.schedule("early", NOW + 5))
    h.requests(h.schedule("twice", NOW + 5))
    h.tick(NOW + 5)
    h.requests(h.schedule("twice", NOW + 5))  # the same version, redelivered after its fire
    dropped = h.metrics.dropped
    assert dropped.labels(reason="cancelled_earlier")._value.get() == 1
    assert dropped.labels(reason="duplicate")._value.get() == 1
    # Answered on the fired topic like a cancel, naming the request (issue 22).
    answers = [(i, outcome) for i, outcome, _, _ in h.output.durable.dropped]
    assert answers == [("early", "cancelled_earlier"), ("twice", "duplicate")]
    assert all(offset is not None for _, _, _, offset in h.output.durable.dropped)


def test_callback_topic_labels_are_bounded() -> None:
    h = Harness(max_topic_labels=2)
    h.requests(*(h.schedule(f"t{i}", NOW + 5, topic=f"topic-{i}") for i in range(5)))
    h.tick(NOW + 5)
    labels = {
        s.labels["callback_topic"]: s.value
        for family in h.metrics.registry.collect()
        for s in family.samples
        if s.name == "kafka_timers_fired_total"
    }
    assert sorted(labels) == ["other", "topic-0", "topic-1"]
    assert sum(labels.values()) == 5 and labels["other"] == 3
