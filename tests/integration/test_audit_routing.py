"""The audit follows requests where the workers route them: a planted history of
forwarded copies, replays and late reschedules, and a real run whose requests come from
confluent-kafka's default partitioner (most land off their owner and are forwarded)."""

from __future__ import annotations

import json
import time
import zlib
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, Message, Producer

from app.core.fired import FiredRecord
from app.core.routing import HOP_HEADER, owner_of
from app.core.timer import Timer
from app.kafka.config import confluent_common
from app.kafka.records import TopicReader
from app.settings import Settings
from kafka_timers_client import protowire
from spark_audit.baseline import reconcile_in_process
from spark_audit.verdicts import Rules
from tests.integration.test_audit import History, last_hour, spark  # noqa: F401 (fixture)
from tests.support.audit_run import run_audit
from tests.support.stack import Stack

#: Every test here runs the audit on the one local Spark of test_audit.
pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("spark")]

FIRE_TIMEOUT = 90.0


class Routed(History):
    """A history written as routing workers leave it: originals where a producer put
    them, copies with ``timer-hop`` on the owner, fires from the owner's partition."""

    @property
    def partitions(self) -> int:
        assert self.settings.partitions is not None
        return self.settings.partitions

    def owner(self, timer_id: str) -> int:
        return owner_of(timer_id, self.partitions)

    def off_owner(self, timer_id: str) -> int:
        return (self.owner(timer_id) + 1) % self.partitions

    def put(
        self, timer_id: str, value: bytes, ts_s: float, partition: int, hop: tuple[int, int] | None
    ) -> tuple[int, int]:
        headers = [] if hop is None else [(HOP_HEADER, b"%d:%d" % hop)]
        return self.request(timer_id, value, ts_s, headers, partition)

    def schedule_at(
        self, timer_id: str, token: str, due: int, ts_s: float, partition: int, hop: Any = None
    ) -> tuple[int, int]:
        future = protowire.Future(
            callback_topic="cb", callback=b"x", id=timer_id, token=token, due=due
        )
        return self.put(timer_id, protowire.encode(future), ts_s, partition, hop)

    def forwarded(self, timer_id: str, token: str, due: int, ts_s: float) -> tuple[int, int]:
        """An original off its owner and its copy on the owner; the copy's place."""
        landed = self.schedule_at(timer_id, token, due, ts_s, self.off_owner(timer_id))
        return self.schedule_at(timer_id, token, due, ts_s, self.owner(timer_id), landed)

    def fire(
        self, timer_id: str, token: str, due: int, at_ms: int, partition: int, applied: int
    ) -> None:
        timer = Timer(timer_id, due, "cb", None, None, token)
        record = FiredRecord.fired(
            timer, partition=partition, worker="w1", fired_at_ms=at_ms, request_offset=applied
        )
        self._audit_record(record, at_ms)


def test_a_routed_history_is_reconciled_where_the_workers_applied_each_request(
    settings: Settings, tmp_path: Path
) -> None:
    h, now, t0 = last_hour(settings, Routed)
    # Forwarded: the original is not reconciled where it landed (no fires there).
    home = h.owner("fw")
    _, copy = h.forwarded("fw", "k", t0 + 600, t0)
    h.fire("fw", "k", t0 + 600, (t0 + 600) * 1000 + 20, home, copy)
    # Replayed: v1's copy, v2 straight to the owner, v1's copy again (its forwarder was
    # killed before its batch was durable): the owner drops the replay, v2 fires.
    home = h.owner("rp")
    v1 = h.schedule_at("rp", "v1", t0 + 610, t0, h.off_owner("rp"))
    h.schedule_at("rp", "v1", t0 + 610, t0, home, v1)
    h.schedule_at("rp", "v2", t0 + 620, t0 + 1, home)
    _, replay = h.schedule_at("rp", "v1", t0 + 610, t0, home, v1)
    h.fire("rp", "v2", t0 + 620, (t0 + 620) * 1000 + 20, home, replay)
    # Reached late: v2's copy was held up on its way; v1 fired with the requests before
    # it applied, then v2 fired.
    home = h.owner("late")
    h.schedule_at("late", "v1", t0 + 630, t0, home)
    _, v2_copy = h.forwarded("late", "v2", t0 + 640, t0 + 2)
    h.fire("late", "v1", t0 + 630, (t0 + 630) * 1000 + 20, home, v2_copy - 1)
    h.fire("late", "v2", t0 + 640, (t0 + 640) * 1000 + 20, home, v2_copy)
    # Kept where it landed (its id pending there): no copy, fired from there.
    stayed = h.off_owner("stay")
    h.schedule_at("stay", "k", t0 + 650, t0, stayed)
    h.fire("stay", "k", t0 + 650, (t0 + 650) * 1000 + 20, stayed, 0)
    # An id-less JSON request: the copy derives the id from its hop. (One whose derived
    # id happens to be owned where it landed stays there, as on a worker.)
    doc = json.dumps({"topic": "cb", "value": "x", "at": t0 + 660}).encode()
    at_home = 0
    while True:
        landed = h.put("", doc, t0, 1, None)
        derived = f"{settings.topics.requests}-{landed[0]}-{landed[1]}"
        fired_ms = (t0 + 660) * 1000 + 20
        if h.owner(derived) == 1:
            h.fire(derived, "", t0 + 660, fired_ms, 1, landed[1])
            at_home += 1
            continue
        _, at = h.put("", doc, t0, h.owner(derived), landed)
        h.fire(derived, "", t0 + 660, fired_ms, h.owner(derived), at)
        break

    code, summary = run_audit(settings, tmp_path, "--as-of", str(now))

    assert summary["violations"] == [] and code == 0
    assert summary["statuses"] == {"fired": 5 + at_home}
    assert summary["routing"] == {
        "owner": 2 + at_home,  # rp's v2, late's v1
        "forwarded": 4,  # fw, rp's v1, late's v2, the id-less one
        "copy": 4,
        "replayed": 1,
        "stayed": 1,
        "reached_late": 1,
    }
    baseline = reconcile_in_process(settings, Rules(as_of_ms=int(now * 1000)))
    assert (baseline.timers, baseline.violation_counts) == (5 + at_home, {})


def test_a_forwarder_that_never_forwarded_leaves_the_request_missing_where_it_landed(
    settings: Settings, tmp_path: Path
) -> None:
    h, now, t0 = last_hour(settings, Routed)
    lost = h.off_owner("lost")
    h.schedule_at("lost", "k", t0 + 600, t0, lost)

    code, summary = run_audit(settings, tmp_path, "--as-of", str(now))

    assert code == 1
    assert [(v["kind"], v["id"], v["partition"]) for v in summary["violations"]] == [
        ("missing", "lost", lost)
    ]


def test_the_audit_of_a_run_with_requests_placed_by_librdkafka_finds_nothing_missing(
    stack: Stack, tmp_path: Path
) -> None:
    settings = stack.settings
    topic = stack.callback_topic("audit-routed")
    stack.oscillator()
    stack.worker()
    n = settings.partitions
    assert n is not None
    plain = Producer(confluent_common(settings))  # librdkafka's own partitioner: CRC32
    ids = [f"r-{i}" for i in range(60)]
    astray = [i for i in ids if zlib.crc32(i.encode()) % n != owner_of(i, n)]
    assert len(astray) > 30
    placed: list[tuple[int, int]] = []

    def sent(err: KafkaError | None, msg: Message) -> None:
        assert err is None, err
        placed.append((msg.partition() or 0, msg.offset() or 0))

    def produce(key: str | None, **doc: Any) -> None:
        body = json.dumps(doc if "cancel" in doc else {"topic": topic, "value": "x", **doc})
        plain.produce(
            settings.topics.requests,
            body.encode(),
            None if key is None else key.encode(),
            on_delivery=sent,
        )

    start = int(time.time())
    expected: set[str] = set()
    for k, timer_id in enumerate(ids):
        produce(timer_id, id=timer_id, token="t1", at=start + 8 + k % 5)
        expected.add(timer_id)
    for timer_id in ids[:20]:  # rescheduled: the new version only
        produce(timer_id, id=timer_id, token="t1", at=start + 14)
    for timer_id in ids[20:25]:  # cancelled: never fires
        produce(timer_id, cancel=timer_id, token="t1")
        expected.discard(timer_id)
    assert plain.flush(10) == 0
    placed.clear()
    for _ in range(3):  # no id: the worker derives one from where it landed
        produce(None, at=start + 9)
    assert plain.flush(10) == 0
    expected |= {f"{settings.topics.requests}-{p}-{o}" for p, o in placed}

    def done(records: list[Any]) -> bool:
        docs = [json.loads(r.value or b"{}") for r in records]
        fired = {d["id"] for d in docs if d["event"] == "fired"}
        answered = {d["id"] for d in docs if d["event"] == "cancel"}
        return fired >= expected and answered >= set(ids[20:25])

    with TopicReader(settings, settings.topics.fired) as reader:
        reader.wait_for(done, FIRE_TIMEOUT)

    # As of ten minutes on: every timer is past its second and the grace, so one not
    # fired where the audit looks for it is missing.
    code, summary = run_audit(settings, tmp_path, "--as-of", str(time.time() + 600))

    assert summary["violations"] == [] and code == 0
    assert summary["violation_counts"].get("missing", 0) == 0
    assert summary["statuses"] == {"fired": len(expected), "cancelled": 5}
    routing = summary["routing"]
    assert routing["forwarded"] == routing["copy"] >= len(astray)
    assert routing["stayed"] == routing["replayed"] == 0
    baseline = reconcile_in_process(settings, Rules(as_of_ms=summary["as_of_ms"]))
    assert baseline.violation_counts == {} and baseline.timers == sum(summary["statuses"].values())
