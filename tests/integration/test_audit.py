"""The PySpark audit against a real broker: planted violations, a clean history, a real run."""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from confluent_kafka import KafkaError, Message, Producer

from app.core.fired import FiredKind, FiredRecord
from app.core.routing import owner_of
from app.core.timer import Timer
from app.dev.stack import wait_until_firing
from app.kafka.config import confluent_producer
from app.kafka.records import TopicReader
from app.settings import Settings
from kafka_timers_client import protowire
from kafka_timers_client.client import TimerClient
from kafka_timers_client.extra_fires import BACKFILL_HEADER, TRIGGER_HEADER, backfill_id, trigger_id
from kafka_timers_client.outcome import BackfillOutcome, TriggerOutcome
from spark_audit.baseline import reconcile_in_process
from spark_audit.errors import AuditError, AuditSetupError
from spark_audit.main import main as audit_main
from spark_audit.reading import read_topic
from spark_audit.verdicts import Rules
from tests.support.audit_run import local_spark, run_audit
from tests.support.faults import deliberate_fault_window
from tests.support.stack import Stack
from tests.support.waiting import wait_until

pytestmark = pytest.mark.spark

FIRE_TIMEOUT = 60.0

#: One of each violation, on its own timer (see :func:`write_planted`).
PLANTED = {
    ("duplicate", "v-dup"),
    ("early", "v-early"),
    ("missing", "v-missing"),
    ("fire_after_cancel", "v-after-cancel"),
    ("superseded_fire", "v-superseded"),
}


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local Spark for every audit test; the audit reuses it instead of starting its own."""
    with local_spark() as session:
        yield session


class History:
    """Writes a prepared history straight to the topics: requests as users send them, and
    the fired and cancel records a worker would have written, all with chosen timestamps."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._producer = Producer(confluent_producer(settings))

    def partition_of(self, timer_id: str) -> int:
        return zlib.crc32(timer_id.encode()) % self.settings.partitions

    def request(
        self,
        key: str,
        value: bytes | None,
        ts_s: float,
        headers: list[tuple[str, bytes]] | None = None,
        partition: int | None = None,
    ) -> tuple[int, int]:
        """Produce one request record; return its (partition, offset)."""
        delivered: list[tuple[int, int]] = []

        def on_delivery(err: KafkaError | None, msg: Message) -> None:
            assert err is None, err
            delivered.append((msg.partition() or 0, msg.offset() or 0))

        self._producer.produce(
            self.settings.topics.requests,
            value,
            key.encode(),
            partition=self.partition_of(key) if partition is None else partition,
            timestamp=int(ts_s * 1000),
            headers=headers or [],
            on_delivery=on_delivery,
        )
        self._producer.flush(10)
        assert delivered, "request not acknowledged"
        return delivered[0]

    def schedule(self, timer_id: str, token: str, due: int, ts_s: float) -> None:
        future = protowire.Future(
            callback_topic="cb", callback=b"x", id=timer_id, token=token, due=due
        )
        self.request(timer_id, protowire.encode(future), ts_s)

    def cancel(self, timer_id: str, token: str, ts_s: float) -> None:
        future = protowire.Future(id=timer_id, token=token, action=protowire.ACTION_CANCEL)
        self.request(timer_id, protowire.encode(future), ts_s)

    def _audit_record(self, record: FiredRecord, at_ms: int) -> None:
        self._producer.produce(
            self.settings.topics.fired, record.to_json(), record.id.encode(), timestamp=at_ms
        )
        self._producer.flush(10)

    def fired(
        self,
        timer_id: str,
        token: str,
        due: int,
        at_ms: int,
        partition: int | None = None,
        *,
        raw_token: bool = False,
        headers: tuple[tuple[str, bytes], ...] = (),
        seq: int = 0,
    ) -> None:
        timer = Timer(timer_id, due, "cb", None, None, token, headers, seq=seq)
        partition = self.partition_of(timer_id) if partition is None else partition
        record = FiredRecord.fired(timer, partition=partition, worker="w1", fired_at_ms=at_ms)
        if raw_token:  # as releases before token digests wrote it
            record = dataclasses.replace(record, token=token)
        self._audit_record(record, at_ms)

    def report(
        self,
        timer_id: str,
        token: str,
        outcome: str,
        at_ms: int,
        kind: FiredKind = FiredKind.CANCEL,
        request_offset: int | None = None,
    ) -> None:
        record = FiredRecord.cancel(
            timer_id,
            token,
            outcome,
            partition=self.partition_of(timer_id),
            worker="w1",
            at_ms=at_ms,
            request_offset=request_offset,
            kind=kind,
        )
        self._audit_record(record, at_ms)

    def series(self, timer_id: str, token: str, every: int, start: int, count: int) -> None:
        future = protowire.Future(
            callback_topic="cb", callback=b"x", id=timer_id, token=token, every=every,
            start=start, count=count,
        )  # fmt: skip
        self.request(timer_id, protowire.encode(future), start - 600)

    def debounced(self, timer_id: str, ts_s: float, seconds: int, max_wait: int | None) -> None:
        """A debounced request, token-less as the clients send one."""
        future = protowire.Future(
            callback_topic="cb", callback=b"x", id=timer_id, token="", debounce=seconds,
            max_wait=max_wait,
        )  # fmt: skip
        self.request(timer_id, protowire.encode(future), ts_s)

    def trigger(self, timer_id: str, token: str, ts_s: int, answered: bool = True) -> int:
        """A trigger request, and the worker's answer a moment later; its offset."""
        future = protowire.Future(id=timer_id, token=token, action=protowire.ACTION_TRIGGER)
        _, offset = self.request(timer_id, protowire.encode(future), ts_s)
        if answered:
            self.report(timer_id, token, "triggered", ts_s * 1000 + 5, FiredKind.TRIGGER, offset)
        return offset

    def backfill(self, timer_id: str, token: str, low: int, high: int, ts_s: int) -> None:
        future = protowire.Future(
            id=timer_id, token=token, action=protowire.ACTION_BACKFILL, backfill_from=low,
            backfill_to=high,
        )  # fmt: skip
        _, offset = self.request(timer_id, protowire.encode(future), ts_s)
        self.report(timer_id, token, "backfilled", ts_s * 1000 + 5, FiredKind.BACKFILL, offset)


H = TypeVar("H", bound=History)


def write_clean(h: History, t0: int, now: float) -> None:
    """Every format and every legitimate turn of events; nothing here is a violation."""
    for i in range(8):
        h.schedule(f"ok-{i}", f"k{i}", t0 + 600 + i, t0)
        h.fired(f"ok-{i}", f"k{i}", t0 + 600 + i, (t0 + 600 + i) * 1000 + 20 + 10 * i)
    # JSON, with a fraction of a second that rounds up
    doc = {"topic": "cb", "value": "x", "at": t0 + 610.5, "id": "json-1", "token": "tj"}
    h.request("json-1", json.dumps(doc).encode(), t0)
    # written by a release before tokens were digested: the token itself, still matched
    h.fired("json-1", "tj", t0 + 611, (t0 + 611) * 1000 + 35, raw_token=True)
    # the article's format: id from topic, partition and offset; due from the key
    article = protowire.Future(callback_topic="cb", callback_key="k", callback=b"x")
    partition, offset = h.request(str(t0 + 612), protowire.encode(article), t0, partition=1)
    derived = f"{h.settings.topics.requests}-{partition}-{offset}"
    h.fired(derived, "", t0 + 612, (t0 + 612) * 1000 + 40, partition=partition)
    # etf1: a schedule that fires, and one that a tombstone cancels
    target = [("scheduler-target-topic", b"cb")]
    h.request("etf1-a", b"p", t0, [("scheduler-epoch", b"%d" % (t0 + 613)), *target])
    h.fired("etf1-a", "", t0 + 613, (t0 + 613) * 1000 + 15)
    h.request("etf1-b", b"p", t0, [("scheduler-epoch", b"%d" % (t0 + 614)), *target])
    h.request("etf1-b", None, t0 + 1)
    h.report("etf1-b", "", "cancelled", (t0 + 1) * 1000 + 5)
    # cancelled in time
    h.schedule("cancel-ok", "kc", t0 + 615, t0)
    h.cancel("cancel-ok", "kc", t0 + 1)
    h.report("cancel-ok", "kc", "cancelled", (t0 + 1) * 1000 + 5)
    # rescheduled: only the new version fires
    h.schedule("resched-ok", "r1", t0 + 616, t0)
    h.schedule("resched-ok", "r2", t0 + 646, t0 + 2)
    h.fired("resched-ok", "r2", t0 + 646, (t0 + 646) * 1000 + 25)
    # a cancel with the wrong token is refused: the timer fires
    h.schedule("wrong-token", "kw", t0 + 617, t0)
    h.cancel("wrong-token", "nope", t0 + 1)
    h.report("wrong-token", "nope", "wrong_token", (t0 + 1) * 1000 + 5)
    h.fired("wrong-token", "kw", t0 + 617, (t0 + 617) * 1000 + 30)
    # a cancel that came after the fire
    h.schedule("too-late", "kl", t0 + 618, t0)
    h.fired("too-late", "kl", t0 + 618, (t0 + 618) * 1000 + 30)
    h.cancel("too-late", "kl", t0 + 619)
    h.report("too-late", "kl", "already_fired", (t0 + 619) * 1000 + 5)
    # a cancel that came before its request: the request is dropped
    h.cancel("advance", "ka", t0)
    h.report("advance", "ka", "cancelled_in_advance", t0 * 1000 + 5)
    h.schedule("advance", "ka", t0 + 619, t0 + 1)
    # not due yet
    h.schedule("pending", "kp", int(now) + 3600, t0)
    # requested long after its due second: fires at once, not "late"
    h.schedule("past-due", "kd", t0 - 1000, now - 100)
    h.fired("past-due", "kd", t0 - 1000, int((now - 100) * 1000) + 40)
    # requests the worker refuses never fire
    h.request("junk", b"\xff\xfe\xfd", t0)
    internal = protowire.Future(callback_topic="__consumer_offsets", id="internal", due=t0 + 620)
    h.request("internal", protowire.encode(internal), t0)
    # one fire record written twice by a producer retry is one fire
    h.schedule("retried", "kr", t0 + 621, t0)
    h.fired("retried", "kr", t0 + 621, (t0 + 621) * 1000 + 50)
    h.fired("retried", "kr", t0 + 621, (t0 + 621) * 1000 + 50)


def write_planted(h: History, t0: int) -> None:
    """Exactly the violations in :data:`PLANTED`."""
    h.schedule("v-dup", "d", t0 + 630, t0)
    h.fired("v-dup", "d", t0 + 630, (t0 + 630) * 1000 + 10)
    h.fired("v-dup", "d", t0 + 630, (t0 + 630) * 1000 + 700)
    h.schedule("v-early", "e", t0 + 631, t0)
    h.fired("v-early", "e", t0 + 631, (t0 + 631) * 1000 - 250)
    h.schedule("v-missing", "m", t0 + 632, t0)
    h.schedule("v-after-cancel", "c", t0 + 633, t0)
    h.cancel("v-after-cancel", "c", t0 + 1)
    h.report("v-after-cancel", "c", "cancelled", (t0 + 1) * 1000 + 4)
    h.fired("v-after-cancel", "c", t0 + 633, (t0 + 633) * 1000 + 15)
    h.schedule("v-superseded", "s1", t0 + 634, t0)
    h.schedule("v-superseded", "s2", t0 + 664, t0 + 2)
    h.fired("v-superseded", "s1", t0 + 634, (t0 + 634) * 1000 + 12)
    h.fired("v-superseded", "s2", t0 + 664, (t0 + 664) * 1000 + 12)


def write_extras(h: History, t0: int) -> set[tuple[str, str]]:
    """Triggers and backfills, as a worker answers and fires them, and three violations
    among their fires; returns those (kind, id)."""
    trig = ((TRIGGER_HEADER, b"%d" % (t0 + 10)),)
    # a one-shot triggered ten minutes before its second: fired then, and not again
    h.schedule("x-one", "o", t0 + 610, t0)
    h.trigger("x-one", "o", t0 + 10)
    h.fired("x-one", "o", t0 + 610, (t0 + 11) * 1000 + 3, headers=trig)
    # a series of two occurrences, triggered once and backfilled over two seconds
    h.series("x-hb", "s", 10, t0 + 620, 2)
    for seq in (1, 2):
        due = t0 + 610 + 10 * seq
        h.fired("x-hb", "s", due, due * 1000 + 7, seq=seq)
    offset = h.trigger("x-hb", "s", t0 + 20)
    parent = h.partition_of("x-hb")
    marked = ((TRIGGER_HEADER, b"%d" % (t0 + 20)),)
    h.fired(trigger_id("x-hb", offset), "s", t0 + 20, (t0 + 21) * 1000, parent, headers=marked)
    h.backfill("x-hb", "s", t0 - 100, t0 - 80, t0 + 30)
    for second in (t0 - 100, t0 - 90):
        filled = ((BACKFILL_HEADER, b"%d" % second),)
        h.fired(backfill_id("x-hb", second), "s", second, (t0 + 31) * 1000, parent, headers=filled)
    # violations: a one-shot fired by a trigger before the trigger was applied, ...
    h.schedule("x-early", "e", t0 + 630, t0)
    h.fired("x-early", "e", t0 + 630, (t0 + 39) * 1000, headers=trig)
    h.trigger("x-early", "e", t0 + 40)
    # ... a backfilled occurrence fired twice, and an extra fire of a series never requested
    h.series("x-twice", "s", 10, t0 + 640, 1)
    h.fired("x-twice", "s", t0 + 640, (t0 + 640) * 1000 + 7, seq=1)
    h.backfill("x-twice", "s", t0 - 100, t0 - 90, t0 + 50)
    twice = backfill_id("x-twice", t0 - 100)
    filled = ((BACKFILL_HEADER, b"%d" % (t0 - 100)),)
    for at_s in (t0 + 51, t0 + 52):
        h.fired(twice, "s", t0 - 100, at_s * 1000, h.partition_of("x-twice"), headers=filled)
    stray = trigger_id("x-stray", 99)
    h.fired(stray, "s", t0 + 60, (t0 + 61) * 1000, h.partition_of("x-stray"), headers=marked)
    return {("early", "x-early"), ("duplicate", "x-twice"), ("unrequested_fire", "x-stray")}


def test_triggered_and_backfilled_fires_are_extra_fires_judged_by_what_they_are(
    spark: Any, settings: Settings, tmp_path: Path
) -> None:
    history, now, t0 = last_hour(settings, History)
    write_clean(history, t0, now)
    planted = write_extras(history, t0)

    summary = audit_finds_only(settings, tmp_path, now, planted)
    # x-one, x-early (one-shots); x-hb: 1 trigger, 2 backfilled; x-twice: 1; x-stray: 1
    assert summary["extra_fires"] == {"triggered": 4, "backfilled": 3}
    statuses = summary["statuses"]
    assert statuses == {"fired": 16 + 4, "cancelled": 3, "pending": 1, "unrequested": 1}
    # one each for x-one, x-early, x-twice, and x-hb's two: extra fires are no occurrences
    assert summary["occurrences"]["fired"] == 16 + 1 + 1 + 1 + 2
    # and no lateness samples: the clean history's 16, x-hb's 2 and x-twice's 1
    assert summary["lateness_overall"]["fires"] == 16 + 2 + 1
    assert_the_baseline_agrees(settings, summary)


def last_hour(settings: Settings, kind: type[H]) -> tuple[H, float, int]:
    """A history of ``kind`` on ``settings``' topics, now, and the second an hour ago
    (where the written histories begin)."""
    now = time.time()
    return kind(settings), now, int(now) - 3600


def audit_finds_only(
    settings: Settings, out: Path, now: float, planted: set[tuple[str, str]]
) -> dict[str, Any]:
    """The audit as of ``now`` fails, finding the ``planted`` violations (kind, id) and
    no other; its summary."""
    code, summary = run_audit(settings, out, "--as-of", str(now))
    assert {(v["kind"], v["id"]) for v in summary["violations"]} == planted
    assert summary["total_violations"] == len(planted) and code == 1
    return summary


def assert_the_baseline_agrees(settings: Settings, summary: dict[str, Any]) -> None:
    """The scale tool's single-process yardstick reads the same records the same way:
    the same timers, violations and refusals as the Spark audit's ``summary``."""
    since_ms = summary["since_ms"]
    rules = Rules(as_of_ms=summary["as_of_ms"], grace_ms=summary["grace_ms"], since_ms=since_ms)
    baseline = reconcile_in_process(settings, rules)
    assert (baseline.timers, baseline.violation_counts, baseline.refused) == (
        summary["timers"],
        summary["violation_counts"],
        summary["refused"],
    )


def write_debounced(h: History, t0: int) -> set[tuple[str, str]]:
    """Debounced ids as a worker merges and fires them (one fire per burst), and two
    violations among them; returns those (kind, id)."""
    # a burst of three, 10 s apart at most: one fire, 10 s after the last request
    for n in range(3):
        h.debounced("db-burst", t0 + 2 * n, 10, None)
    h.fired("db-burst", "", t0 + 14, (t0 + 14) * 1000 + 20)
    # capped by its max-wait: the last two requests are due 12 s after the first
    for n in range(3):
        h.debounced("db-capped", t0 + 4 * n, 10, 12)
    h.fired("db-capped", "", t0 + 12, (t0 + 12) * 1000 + 20)
    # two bursts apart in time: each one fire, each max-wait from its own first request
    for start in (t0, t0 + 100):
        h.debounced("db-apart", start, 10, 12)
        h.debounced("db-apart", start + 4, 10, 12)
        h.fired("db-apart", "", start + 12, (start + 12) * 1000 + 20)
    # violations: fired before 10 s after its last request, and a burst that never fired
    h.debounced("db-early", t0, 10, None)
    h.debounced("db-early", t0 + 4, 10, None)
    h.fired("db-early", "", t0 + 14, (t0 + 14) * 1000 - 300)
    h.debounced("db-missing", t0, 10, 12)
    h.debounced("db-missing", t0 + 4, 10, 12)
    return {("early", "db-early"), ("missing", "db-missing")}


def test_a_debounced_burst_is_one_timer_fired_once_within_its_window(
    spark: Any, settings: Settings, tmp_path: Path
) -> None:
    """N requests, one fire: no earlier than the last request plus the debounce (or the
    first plus the max-wait, which bounds it), the other requests neither missing nor
    their fire unrequested. Before, a burst capped by its max-wait was an unrequested
    fire and a missing timer, and a second burst merged into the first one's bound."""
    history, now, t0 = last_hour(settings, History)
    planted = write_debounced(history, t0)

    summary = audit_finds_only(settings, tmp_path, now, planted)
    assert summary["statuses"] == {"fired": 4, "missing": 1}
    assert_the_baseline_agrees(settings, summary)


def test_each_planted_violation_is_found_with_its_timer_and_nothing_else(
    spark: Any, settings: Settings, tmp_path: Path
) -> None:
    history, now, t0 = last_hour(settings, History)
    write_clean(history, t0, now)
    write_planted(history, t0)

    summary = audit_finds_only(settings, tmp_path, now, PLANTED)

    assert summary["statuses"]["missing"] == 1
    table = spark.read.parquet(str(tmp_path / "violations")).select("kind", "id").collect()
    assert {(row["kind"], row["id"]) for row in table} == PLANTED
    report = (tmp_path / "report.html").read_text()
    assert report.count("<svg") == 3 and "v-superseded" in report  # lateness, kinds, rate


def test_a_clean_history_passes_and_duplicates_can_be_allowed(
    spark: Any, settings: Settings, tmp_path: Path
) -> None:
    history, now, t0 = last_hour(settings, History)
    write_clean(history, t0, now)

    code, summary = run_audit(settings, tmp_path / "clean", "--as-of", str(now))

    assert (code, summary["total_violations"], summary["violations"]) == (0, 0, [])
    assert summary["statuses"] == {"fired": 16, "cancelled": 3, "pending": 1}
    assert summary["reads"]["rejected_requests"] == 2
    assert summary["lateness_overall"]["fires"] == 16
    assert summary["lateness_overall"]["max_ms"] == 90  # ok-7; past-due counts from its request

    # At-least-once delivery may fire twice: reported, but it need not fail the deploy.
    history.fired("ok-3", "k3", t0 + 603, (t0 + 603) * 1000 + 900)
    code, summary = run_audit(
        settings, tmp_path / "allowed", "--as-of", str(now), "--allow-duplicates"
    )
    assert code == 0
    assert summary["violation_counts"] == {"duplicate": 1}
    assert [(v["kind"], v["id"]) for v in summary["violations"]] == [("duplicate", "ok-3")]


def test_an_empty_history_is_clean(spark: Any, settings: Settings, tmp_path: Path) -> None:
    code, summary = run_audit(settings, tmp_path)
    assert (code, summary["timers"], summary["total_violations"]) == (0, 0, 0)
    assert summary["lateness_overall"] is None and summary["fires_per_minute"] == []
    assert "no data" in (tmp_path / "report.html").read_text()


def test_the_python_source_reads_every_partition_to_its_end_in_offset_ranges(
    spark: Any, settings: Settings
) -> None:
    topic = settings.topics.dlq
    producer = Producer(confluent_producer(settings))
    sent = set()
    for i in range(100):
        partition = i % 3
        producer.produce(
            topic,
            None if i == 7 else b"v%d" % i,
            b"k%d" % i,
            partition=partition,
            timestamp=1_767_225_600_000 + i,
            headers=[("h", b"%d" % i)],
        )
        producer.flush(10)  # one batch per record: the broker's end offsets are then exact
        sent.add((partition, b"k%d" % i))

    frame = read_topic(spark, settings, topic, max_offsets_per_partition=10)
    rows = frame.collect()

    assert frame.rdd.getNumPartitions() == 3 * 4 + 5, "partitions 0-2 in 4 ranges, 3-7 in one"
    assert {(r["partition"], r["key"]) for r in rows} == sent
    assert len(rows) == 100
    by_key = {r["key"]: r for r in rows}
    assert by_key[b"k7"]["value"] is None
    assert by_key[b"k9"]["value"] == b"v9"
    assert [(h["key"], h["value"]) for h in by_key[b"k9"]["headers"]] == [("h", b"9")]
    assert int(by_key[b"k9"]["timestamp"].timestamp() * 1000) == 1_767_225_600_009


def test_a_missing_topic_or_connector_is_one_clear_line(
    spark: Any, settings: Settings, tmp_path: Path
) -> None:
    base = ["--bootstrap", settings.bootstrap_servers, "--output", str(tmp_path)]
    with pytest.raises(AuditError, match="topic 'no-such-topic' does not exist") as missing:
        audit_main([*base, "--requests-topic", "no-such-topic"])
    assert "\n" not in str(missing.value)
    topics = ["--requests-topic", settings.topics.requests, "--fired-topic", settings.topics.fired]
    with pytest.raises(AuditSetupError, match="--source python"):
        audit_main([*base, *topics, "--source", "kafka"])


def test_the_audit_of_a_real_run_finds_no_violations(
    spark: Any, stack: Stack, tmp_path: Path
) -> None:
    settings = stack.settings
    topic = stack.callback_topic("audited-callbacks")
    stack.oscillator()
    stack.worker()
    client = TimerClient(settings)
    # Wait for the worker to be up and ticking: a request it reads late for a second already
    # ticked fires at once, which could make the reschedule below race with its first version.
    warm_up = client.schedule(topic, b"warm-up", at=time.time())
    client.flush()
    with TopicReader(settings, settings.topics.fired) as reader:
        reader.wait_for(
            lambda rs: any(warm_up.id.encode() in (r.value or b"") for r in rs), FIRE_TIMEOUT
        )
    start = time.time()
    expected: set[str] = {warm_up.id}
    for i in range(30):
        timer = client.schedule(topic, b"v%d" % i, f"k{i}", at=start + 2 + (i % 6) * 0.5)
        expected.add(timer.id)
    client.schedule(topic, b"old", at=start + 3, timer_id="moved", token="t1")
    client.schedule(topic, b"new", at=start + 4.5, timer_id="moved", token="t1")
    doomed = client.schedule(topic, b"never", at=start + 3600, timer_id="doomed")
    client.cancel("doomed", doomed.token)
    client.flush()
    as_json = {"topic": topic, "value": "j", "in": "2s", "id": "json-timer", "token": "tj"}
    producer = stack.producer()
    producer.produce(settings.topics.requests, json.dumps(as_json).encode(), b"json-timer")
    producer.flush(10)
    expected |= {"moved", "json-timer"}

    def done(records: list[Any]) -> bool:
        events = [json.loads(r.value or b"{}") for r in records]
        fired = {e["id"] for e in events if e["event"] == "fired"}
        cancels = {e["id"] for e in events if e["event"] == "cancel"}
        return fired >= expected and "doomed" in cancels

    with TopicReader(settings, settings.topics.fired) as reader:
        reader.wait_for(done, FIRE_TIMEOUT)

    code, summary = run_audit(settings, tmp_path)

    assert summary["violations"] == [] and summary["total_violations"] == 0
    assert code == 0
    assert summary["statuses"] == {"fired": len(expected), "cancelled": 1}
    assert summary["lateness_overall"]["fires"] == len(expected)


def test_the_audit_of_a_real_run_with_a_trigger_and_a_backfill_counts_them_as_extra_fires(
    spark: Any, stack: Stack, tmp_path: Path
) -> None:
    settings = stack.settings
    topic = stack.callback_topic("extra-audited")
    client = stack.firing_client(topic, probes=4)
    one = client.schedule(topic, b"one", delay=600, token="t")
    hb = client.schedule(topic, b"hb", every=5, token="t")
    client.flush()

    def fired(records: list[Any], prefix: str) -> list[str]:
        ids = [(r.header("timer-id") or b"").decode() for r in records]
        return [i for i in ids if i == prefix or i.startswith(prefix + "@")]

    with TopicReader(settings, topic) as reader:
        reader.wait_for(lambda rs: hb.id in fired(rs, hb.id), FIRE_TIMEOUT)
        assert client.trigger(one.id, "t", wait=30) is TriggerOutcome.TRIGGERED
        assert client.trigger(hb.id, "t", wait=30) is TriggerOutcome.TRIGGERED
        low = hb.due - 100  # the 5 s grid's 10 seconds in [low, low + 50), before the series
        outcome = client.backfill(hb.id, "t", low, low + 50, wait=30)
        assert outcome is BackfillOutcome.BACKFILLED
        extras = 1 + 10  # hb's: its trigger's occurrence and the backfill's (derived ids)
        reader.wait_for(
            lambda rs: (
                bool(fired(rs, one.id)) and sum("@" in i for i in fired(rs, hb.id)) >= extras
            ),
            FIRE_TIMEOUT,
        )
    client.close()
    with TopicReader(settings, settings.topics.fired) as reader:
        docs = [json.loads(r.value or b"{}") for r in reader.read_to_end()]
    extra = sorted(d.get("extra") or "" for d in docs if d["event"] == "fired")
    assert extra.count("trigger") == 2 and extra.count("backfill") == 10

    code, summary = run_audit(settings, tmp_path)

    assert summary["violations"] == [] and summary["total_violations"] == 0 and code == 0
    assert summary["extra_fires"] == {"triggered": 2, "backfilled": 10}
    assert summary["statuses"] == {"fired": 4 + 1, "pending": 1}, "4 probes, one, hb"


@pytest.mark.parametrize("placed", ["owner", "elsewhere"])
def test_requests_a_worker_refused_over_quota_are_counted_refused_not_missing(
    spark: Any, stack: Stack, tmp_path: Path, placed: str
) -> None:
    """A worker with a quota of 5 pending timers on a callback topic; 8 requests for it
    (in one burst, before any is due): 5 stored and fired, 3 answered ``dropped``
    ``over_quota``. The audit takes the answers: no missing timer, 3 refused. Before, it
    expected the 3 to fire and reported them missing. Sent ``elsewhere`` than their
    owner partition, the requests are forwarded, and the answers name the copies. And a
    reschedule refused for another token (``wrong_token``) leaves the version it would
    have replaced to fire: neither superseded nor missing."""
    settings = stack.settings
    topic = stack.callback_topic("quota-audited")
    probe = stack.callback_topic("quota-audited-probe")
    client = stack.firing_client(probe, probes=4, topic_quotas=((topic, 5),))
    due = time.time() + 5
    guarded = f"guarded-{placed}"
    if placed == "owner":
        ids = [client.schedule(topic, b"q%d" % i, f"k{i}", at=due).id for i in range(8)]
        # and, on the probe topic (no quota), a reschedule under another token: refused
        # wrong_token, the first version kept, and fired
        client.schedule(probe, b"a", timer_id=guarded, token="a", at=due)
        client.schedule(probe, b"b", timer_id=guarded, token="b", at=due + 1)
        client.flush()
    else:
        ids = [f"quota-{uuid.uuid4().hex[:12]}" for _ in range(8)]
        producer = stack.producer()
        for i, timer_id in enumerate(ids):
            doc = {"topic": topic, "value": f"q{i}", "at": int(due), "id": timer_id, "token": "k"}
            away = (owner_of(timer_id, settings.partition_count) + 1) % settings.partition_count
            producer.produce(
                settings.topics.requests, json.dumps(doc).encode(), timer_id.encode(), away
            )
        producer.flush(10)

    def settled(records: list[Any]) -> bool:
        events = [json.loads(r.value or b"{}") for r in records]
        fired = {e["id"] for e in events if e["event"] == "fired" and e["id"] in ids}
        refused = {e["id"] for e in events if e.get("outcome") == "over_quota"}
        guards = placed == "elsewhere" or {
            (e["event"], e.get("outcome")) for e in events if e["id"] == guarded
        } >= {("fired", None), ("dropped", "wrong_token")}
        # and past the second plus the grace below: a timer still due would be pending
        passed = time.time() > due + 3
        return len(fired) == 5 and len(refused) == 3 and not fired & refused and passed and guards

    with TopicReader(settings, settings.topics.fired) as reader:
        reader.wait_for(settled, FIRE_TIMEOUT)

    # A grace of 1 s: the 3 refused are long past theirs, and would be missing.
    code, summary = run_audit(settings, tmp_path, "--grace", "1s")
    assert summary["violations"] == [] and summary["total_violations"] == 0
    assert code == 0
    guards = 1 if placed == "owner" else 0
    assert summary["refused"] == {"over_quota": 3, "wrong_token": guards}
    assert summary["statuses"] == {"fired": 5 + 4 + guards, "refused": 3}
    assert summary["routing"]["forwarded"] == (8 if placed == "elsewhere" else 0)
    console = (tmp_path / "report.html").read_text()
    assert "<td>refused: over_quota</td><td>3</td>" in console
    assert_the_baseline_agrees(settings, summary)


def write_before_window(h: History, t_old: int) -> set[tuple[str, str]]:
    """Violations that happened ten days ago; returns them as (kind, id)."""
    h.schedule("old-early", "e", t_old + 10, t_old)
    h.fired("old-early", "e", t_old + 10, (t_old + 10) * 1000 - 300)
    h.schedule("old-dup", "d", t_old + 11, t_old)
    h.fired("old-dup", "d", t_old + 11, (t_old + 11) * 1000 + 5)
    h.fired("old-dup", "d", t_old + 11, (t_old + 11) * 1000 + 900)
    h.schedule("old-missing", "m", t_old + 12, t_old)
    h.fired("old-orphan", "o", t_old + 13, (t_old + 13) * 1000 + 5)  # no request at all
    return {
        ("early", "old-early"),
        ("duplicate", "old-dup"),
        ("missing", "old-missing"),
        ("unrequested_fire", "old-orphan"),
    }


def test_the_audit_window_judges_only_what_happened_in_it(
    spark: Any, settings: Settings, tmp_path: Path
) -> None:
    now = time.time()
    t0 = int(now) - 3600
    t_old = int(now) - 10 * 86400
    history = History(settings)
    old = write_before_window(history, t_old)
    write_clean(history, t0, now)
    # requested 30 days ago (a long timer), fired within the window: judged on its request
    history.schedule("long", "l", t0 + 650, int(now) - 30 * 86400)
    history.fired("long", "l", t0 + 650, (t0 + 650) * 1000 + 40)
    # due inside the grace at the window's end: pending, not missing
    history.schedule("at-the-end", "z", int(now) - 30, t0)
    # one violation inside the window
    history.schedule("new-early", "n", t0 + 651, t0)
    history.fired("new-early", "n", t0 + 651, (t0 + 651) * 1000 - 100)

    code, summary = run_audit(settings, tmp_path / "window", "--as-of", str(now))

    assert summary["since_ms"] == int((now - 7 * 86400) * 1000), "default window: 7 days"
    assert [(v["kind"], v["id"]) for v in summary["violations"]] == [("early", "new-early")]
    assert code == 1
    assert summary["statuses"]["pending"] == 2  # "pending" from write_clean and at-the-end

    code, summary = run_audit(settings, tmp_path / "all", "--as-of", str(now), "--since", "all")
    assert {(v["kind"], v["id"]) for v in summary["violations"]} == old | {("early", "new-early")}

    # The next day's window reports each violation once: none of the above again, but
    # the two timers that were pending at the end of this one and became overdue in it.
    code, summary = run_audit(
        settings, tmp_path / "next", "--as-of", str(now + 86400), "--since", "1d"
    )
    assert {(v["kind"], v["id"]) for v in summary["violations"]} == {
        ("missing", "pending"),
        ("missing", "at-the-end"),
    }


@pytest.mark.fault
def test_a_kill_9_in_the_middle_of_a_series_loses_no_occurrence_and_the_audit_is_clean(
    spark: Any, stack: Stack, tmp_path: Path
) -> None:
    settings = stack.settings
    topic = stack.callback_topic("series-audited")
    stack.oscillator()
    workers = {name: stack.worker(name) for name in ("worker-1", "worker-2")}
    client = TimerClient(settings)
    wait_until_firing(settings, client, topic, probes=8, timeout=FIRE_TIMEOUT + 30)
    series = client.schedule(topic, b"beat", every="2s", count=15, late="all")
    client.flush()

    def fires() -> list[FiredRecord]:
        with TopicReader(settings, settings.topics.fired) as reader:
            records = [FiredRecord.from_json(r.value or b"{}") for r in reader.read_to_end()]
        return [r for r in records if r.event is FiredKind.FIRED and r.id == series.id]

    wait_until(lambda: len(fires()) >= 3, FIRE_TIMEOUT, "3 occurrences")
    holder = fires()[0].worker
    deliberate_fault_window(1.0)  # between two fires, not during one
    workers[holder].kill()
    # the survivor takes the partition over (session timeout, rebalance, catch-up) and,
    # with "all", fires every occurrence missed meanwhile, late, then the rest on time
    wait_until(
        lambda: {r.seq for r in fires()} >= set(range(1, 16)),
        FIRE_TIMEOUT + 30,
        "all 15 occurrences",
    )
    deliberate_fault_window(2.0)  # a duplicate on its way would arrive in this time
    done = fires()

    assert sorted(r.seq or 0 for r in done) == list(range(1, 16)), "each once, none lost"
    assert {r.worker for r in done} == {"worker-1", "worker-2"}, "the series moved"
    for r in done:
        assert r.due == series.due + 2 * ((r.seq or 0) - 1)
        assert r.fired_at_ms is not None and r.fired_at_ms >= r.due * 1000, "never early"
    code, summary = run_audit(settings, tmp_path)
    assert summary["violations"] == [] and code == 0
    assert summary["statuses"] == {"fired": 9}  # 8 probes and the finished series
    assert summary["occurrences"] == {"fired": 8 + 15, "skipped": 0, "coalesced": 0}
