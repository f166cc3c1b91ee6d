"""A stale owner's changelog records, delivered late, never undo a reschedule (issue 56).

What the nemesis found on Apache Kafka (four timers in its second hour, each a timer of
three versions whose second version fired after the third was acknowledged, and the
third never): a worker cut off from the broker while it applies a request has its
changelog records held in the network; it stops (its flush times out), the next owner
takes the partition over, applies the same request and a newer version of the timer,
and only then do the held records arrive, after the new owner's. A compacted changelog
keeps the last record of each key: the stale owner's. Whoever restores the partition
next (a restart, a takeover) got the older version back, fired it, and never the newer.

Here the network is a proxy in front of the dev broker that holds every request of the
first worker's producer (``client.id`` ``kafka-timers-w-stale``) unanswered until the
test lets them through. One partition: the owner is whoever holds it.

1. ``w-stale`` stores ``v1`` of an id (its second far ahead); its producer is held;
   ``v2`` (sooner) is sent and applied, its records held; ``w-stale`` is killed.
2. ``w-next`` takes over: its store holds ``v1``; it applies ``v2`` again, then ``v3``
   (later than ``v2``), and writes both to the changelog.
3. The proxy lets the held requests through: ``w-stale``'s ``v2`` records land after
   ``w-next``'s ``v3`` (checked on the changelog).
4. ``w-next``, idle, finds them and writes what it holds over them; it is killed, and
   ``w-third`` restores the partition from the changelog.

Only ``v3`` may fire, at its second.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from app.kafka.records import TopicReader
from tests.support.kafka_proxy import proxied_stack
from tests.support.probes import Probed, get_json, metric_total, start_probed
from tests.support.waiting import wait_until

pytestmark = [
    pytest.mark.fault,
    pytest.mark.own_broker("reaches it through a proxy that holds one worker's produce requests"),
]

TIMEOUT = 60.0
TIMER_ID = "order-stale-writer"
TOKEN = "tok"


def _request(topic: str, version: str, due: int) -> bytes:
    body = {"id": TIMER_ID, "topic": topic, "value": version, "token": TOKEN, "at": due}
    return json.dumps(body).encode()


def _ready(worker: Probed) -> bool:
    assert worker.process.alive, worker.process.log_text()[-3000:]
    return get_json(worker.metrics + "/readyz")[0] == 200


def _scheduled(worker: Probed) -> float:
    return metric_total(worker.metrics, "kafka_timers_scheduled")


def test_a_stale_owners_late_changelog_records_never_bring_an_older_version_back(
    tmp_path: Path,
) -> None:
    with proxied_stack(tmp_path, partitions=1) as (proxy, stack):
        settings = stack.settings
        topic = stack.callback_topic(f"cb-stale-{settings.app_id}")
        stack.oscillator()
        producer = stack.producer()

        def send(version: str, due: int) -> None:
            producer.produce(settings.topics.requests, _request(topic, version, due), b"k")
            assert producer.flush(10) == 0

        stale = start_probed(stack, "worker", "w-stale")
        wait_until(lambda: _ready(stale), TIMEOUT, "w-stale ready")
        send("v1", int(time.time()) + 600)
        wait_until(lambda: _scheduled(stale) >= 1, TIMEOUT, "v1 stored by w-stale")

        # 1. The stale owner applies v2; its records are held in the network.
        proxy.stall("kafka-timers-w-stale")
        due2 = int(time.time()) + 45
        due3 = due2 + 20
        send("v2", due2)
        wait_until(lambda: _scheduled(stale) >= 2, TIMEOUT, "v2 applied by w-stale")
        wait_until(lambda: proxy.held > 0, TIMEOUT, "a request of w-stale held")
        stale.process.kill()

        # 2. The next owner applies v2 again, then v3.
        nxt = start_probed(stack, "worker", "w-next")
        wait_until(lambda: _ready(nxt) and _scheduled(nxt) >= 1, TIMEOUT, "v2 at w-next")
        send("v3", due3)
        wait_until(lambda: _scheduled(nxt) >= 2, TIMEOUT, "v3 applied by w-next")
        slot2 = b"T%012d\x00" % due2 + TIMER_ID.encode()
        slot3 = b"T%012d\x00" % due3 + TIMER_ID.encode()
        with TopicReader(settings, settings.changelog_topic) as changelog:

            def keyed(key: bytes) -> list[tuple[int, bool]]:
                changelog.poll(0.2)
                return [(r.offset, r.value is not None) for r in changelog.records if r.key == key]

            wait_until(lambda: keyed(slot3), TIMEOUT, "w-next's v3 in the changelog")
            assert keyed(slot2)[-1][1] is False, "w-next replaced v2 with v3"

            # 3. The held records land, after w-next's.
            proxy.resume()
            wait_until(
                # (any such record: the repair may already have written over it)
                lambda: any(put and offset > keyed(slot3)[-1][0] for offset, put in keyed(slot2)),
                TIMEOUT,
                "w-stale's held v2 record in the changelog after w-next's v3",
            )

            # w-next, idle since, finds them by the changelog's end (a busy owner
            # finds them at its next flush) and writes its values over them.
            wait_until(
                lambda: metric_total(nxt.metrics, "kafka_timers_changelog_repairs") >= 1,
                TIMEOUT,
                "w-next repaired its changelog after the late records",
            )
            wait_until(
                lambda: keyed(slot2)[-1][1] is False,
                TIMEOUT,
                "the repair's tombstone of v2 last in the changelog",
            )

        # 4. Whoever restores the partition next must not fire v2, and must fire v3.
        nxt.process.kill()
        third = start_probed(stack, "worker", "w-third")
        wait_until(lambda: _ready(third), TIMEOUT, "w-third ready")
        with TopicReader(settings, topic) as callbacks:

            def fired() -> list[bytes]:
                callbacks.poll(0.5)
                return [r.value or b"" for r in callbacks.records]

            wait_until(
                lambda: b"v3" in fired() or time.time() > due3 + 30,
                due3 - time.time() + 40,
                "v3 fired or its second long past",
            )
            assert fired() == [b"v3"], f"callbacks {fired()}: expected v3 only"
            assert callbacks.records[0].timestamp_ms >= due3 * 1000, "v3 early"
