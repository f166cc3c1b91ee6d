"""The topic directory: callbacks to topics that do not exist are found before producing."""

from __future__ import annotations

import asyncio
from collections.abc import Collection

from app.worker.topic_directory import TopicDirectory
from tests.support.fake_clock import ManualClock as Clock
from tests.unit.test_service import NOW, Harness


class Broker:
    """A metadata source that counts lookups and can fail."""

    def __init__(self, *topics: str) -> None:
        self.topics = set(topics)
        self.lookups = 0
        self.down = False

    def list_topics(self, timeout: float) -> Collection[str]:
        self.lookups += 1
        if self.down:
            raise RuntimeError("no broker")
        return set(self.topics)


def test_a_missing_topic_is_reported_and_lookups_are_rate_limited() -> None:
    broker, clock = Broker("orders"), Clock()
    directory = TopicDirectory(broker.list_topics, clock=clock)
    assert asyncio.run(directory.missing({"orders", "nope"})) == {"nope"}
    assert asyncio.run(directory.missing({f"nope-{i}" for i in range(200)})) == {
        f"nope-{i}" for i in range(200)
    }
    assert broker.lookups == 1  # 201 unseen topics within a second: one metadata request
    assert asyncio.run(directory.missing({"orders"})) == set()
    assert broker.lookups == 1  # a topic seen is not looked up again
    broker.topics.add("created-later")
    assert asyncio.run(directory.missing({"created-later"})) == {"created-later"}
    clock.now += 1.0
    assert asyncio.run(directory.missing({"created-later"})) == set()
    assert broker.lookups == 2


def test_a_failed_lookup_declares_nothing_missing() -> None:
    broker, clock = Broker("orders"), Clock()
    broker.down = True
    directory = TopicDirectory(broker.list_topics, clock=clock)
    assert asyncio.run(directory.missing({"nope"})) == set()
    broker.down = False
    assert asyncio.run(directory.missing({"nope"})) == {"nope"}  # retried at once


def test_timers_for_a_missing_topic_are_dead_lettered_and_the_rest_fire() -> None:
    broker = Broker("orders")
    h = Harness(topics=TopicDirectory(broker.list_topics, clock=Clock()))
    h.requests(
        h.schedule("kept", NOW + 5, topic="orders"),
        *(h.schedule(f"lost-{i}", NOW + 5, topic=f"new-{i}") for i in range(20)),
        h.series("lost-series", every=1),
    )
    h.tick(NOW + 5)
    assert h.fired() == ["kept"]
    dead = {(timer_id, reason.value) for timer_id, reason in h.output.durable.dead_timers}
    assert dead == {(f"lost-{i}", "unknown_topic") for i in range(20)} | {
        ("lost-series", "unknown_topic")
    }
    assert h.service.wheels()[0].get_pending("lost-series") is None  # the series ended
    assert broker.lookups == 1
    assert h.metrics.rejected.labels(reason="unknown_topic")._value.get() == 21
