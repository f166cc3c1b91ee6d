"""Issue 16: request lag that Kafka's own tools see, with a worker stopped while requests come.

Two workers split the partitions. One is frozen (SIGSTOP: no heartbeats, no reads; the
session timeout is long enough that its partitions stay with it) while requests keep
arriving on every partition. Its partner's ``kafka_timers_request_group_lag_records``
and the informational group's committed offsets (what ``kafka-consumer-groups
--describe`` reads) both show its partitions' backlog. Then it is killed and restarted
on its own data directory: once it is back, both drain to zero, and every worker's own
``kafka_timers_request_lag_records`` says so too.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import replace

import pytest
from confluent_kafka import Producer

from app.core.routing import owner_of
from app.kafka.config import confluent_producer
from app.settings import Settings
from kafka_timers_client import protowire
from tests.support.probes import committed_offsets, get_json, metric_by_partition, start_probed
from tests.support.stack import Stack, running_stack
from tests.support.waiting import wait_until

GROUP_LAG = "kafka_timers_request_group_lag_records"
OWN_LAG = "kafka_timers_request_lag_records"
#: Long enough that a frozen worker keeps its partitions for the whole check (which
#: waits at most BACKLOG_TIMEOUT; measured: the backlog showed 3.4 s after the freeze).
#: The killed member's partitions move only once it has run out: 1.5 times this.
SESSION_TIMEOUT = 15.0
BACKLOG_TIMEOUT = 10.0
STARTUP = 120.0


class Requests:
    """Sends timer requests to every partition in turn until stopped; knows each end."""

    def __init__(self, settings: Settings, topic: str, per_second: int) -> None:
        self._settings = settings
        self._topic = topic
        self._interval = 1 / per_second
        self._producer = Producer(confluent_producer(settings, **{"linger.ms": 0}))
        self.end: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _delivered(self, err: object, msg: object) -> None:
        if err is None:
            p, offset = msg.partition(), msg.offset()  # type: ignore[attr-defined]
            self.end[p] = max(self.end.get(p, 0), offset + 1)

    def _run(self) -> None:
        i, due = 0, int(time.time()) + 86400
        while not self._stop.is_set():
            value = protowire.encode(
                protowire.Future(
                    callback_topic=self._topic, callback=b"x", id=f"lag-{i}", token="t", due=due
                )
            )
            # On the partition that owns the id: a request elsewhere would be forwarded
            # there (app.core.routing), and the copy would move the ends measured here.
            p = owner_of(f"lag-{i}", self._settings.partitions)
            self._producer.produce(
                self._settings.topics.requests, value, partition=p, on_delivery=self._delivered
            )
            self._producer.poll(0)
            i += 1
            self._stop.wait(self._interval)

    def __enter__(self) -> Requests:
        self._thread.start()
        return self

    def stop(self) -> dict[int, int]:
        self._stop.set()
        self._thread.join()
        assert self._producer.flush(30) == 0
        return dict(self.end)

    def __exit__(self, *exc: object) -> None:
        if not self._stop.is_set():
            self.stop()


def committed(settings: Settings) -> dict[int, int]:
    """The informational group's committed offsets, as ``kafka-consumer-groups`` reads them."""
    return committed_offsets(settings, settings.request_group, settings.topics.requests)


@pytest.fixture
def slow_stack(settings: Settings, tmp_path: object) -> object:
    with running_stack(replace(settings, session_timeout=SESSION_TIMEOUT), tmp_path) as s:  # type: ignore[arg-type]
        yield s


def test_a_frozen_workers_backlog_shows_in_metrics_and_group_offsets_then_drains(
    slow_stack: Stack,
) -> None:
    stack = slow_stack
    settings = stack.settings
    topic = stack.callback_topic(f"cb-lag-{settings.app_id}")
    a = start_probed(stack, "worker", "w-a")
    b = start_probed(stack, "worker", "w-b")

    def held(worker: object) -> list[int]:
        status, body = get_json(worker.web + "/readyz")  # type: ignore[attr-defined]
        return body["partitions"] if status == 200 else []

    wait_until(
        lambda: (
            held(a) and held(b) and sorted(held(a) + held(b)) == list(range(settings.partitions))
        ),
        STARTUP,
        "both workers ready with the partitions split between them",
    )
    frozen = set(held(b))
    with Requests(settings, topic, per_second=80) as requests:
        wait_until(
            lambda: all(committed(settings).get(p, -1) > 0 for p in range(settings.partitions)),
            30,
            "every partition's applied offset committed to the informational group",
        )
        os.kill(b.process.process.pid, signal.SIGSTOP)
        stopped_at = time.monotonic()
        try:

            def backlog_seen() -> bool:
                lag = metric_by_partition(a.metrics, GROUP_LAG)
                offsets, end = committed(settings), dict(requests.end)
                return all(lag.get(p, 0) >= 20 for p in frozen) and all(
                    end.get(p, 0) - offsets.get(p, 0) >= 20 for p in frozen
                )

            wait_until(
                backlog_seen,
                BACKLOG_TIMEOUT,
                "the frozen worker's backlog in the partner's metric and the group",
            )
            seen_after = time.monotonic() - stopped_at
            lag_seen = metric_by_partition(a.metrics, GROUP_LAG)
            offsets, end = committed(settings), dict(requests.end)
            # The running worker's partitions keep up: its own lag stays small.
            own = metric_by_partition(a.metrics, OWN_LAG)
            assert set(own) == set(range(settings.partitions)) - frozen
            assert all(n < 20 for n in own.values()), own
        finally:
            b.process.kill()  # kill -9 of the stopped process: it never comes back
        b = start_probed(stack, "worker", "w-b", log_name="w-b-restarted")
        resumed_at = time.monotonic()
        end = requests.stop()

    def drained() -> bool:
        offsets = committed(settings)
        lags = [metric_by_partition(w.metrics, GROUP_LAG) for w in (a, b)]
        own = {**metric_by_partition(a.metrics, OWN_LAG), **metric_by_partition(b.metrics, OWN_LAG)}
        return (
            all(offsets.get(p) == end[p] for p in end)
            and all(lag and not any(lag.values()) for lag in lags)
            and set(own) == set(range(settings.partitions))
            and not any(own.values())
        )

    # The killed member keeps its partitions for a session timeout, then the group
    # rebalances (the dev broker holds the join for half a session more).
    wait_until(
        drained, 3 * SESSION_TIMEOUT, "committed offsets at the end and every lag metric at 0"
    )
    drained_after = time.monotonic() - resumed_at
    print(
        f"\nfrozen {sorted(frozen)} for {resumed_at - stopped_at:.1f} s: backlog seen after "
        f"{seen_after:.1f} s; partner's group lag {[lag_seen.get(p) for p in sorted(frozen)]}, "
        f"committed vs end {[(offsets.get(p), end.get(p)) for p in sorted(frozen)]}; "
        f"all drained to 0 {drained_after:.1f} s after the restart"
    )
