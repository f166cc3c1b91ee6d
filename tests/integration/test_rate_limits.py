"""A rate limit per callback topic on real processes (issue 24, point 1).

Two workers share the 8 partitions, with ``KAFKA_TIMERS_TOPIC_RATE_LIMITS`` limiting one
callback topic to 500/s. 3,000 timers due in one second to it and 300 due in the same
second to an unlimited topic: the limited ones arrive at no more than 550 in any second
(by record timestamp), over about 6 s, none early, none lost, each once; the unlimited
ones all within a second of their due.
"""

from __future__ import annotations

import time
from collections import Counter

import pytest

from kafka_timers_client.client import TimerClient
from tests.support.faults import FireWatch, owners
from tests.support.probes import get_admitted
from tests.support.stack import Stack, fired_ids

#: Runs alone, in ``make test``'s serial part: it gates callbacks a second and the unlimited
#: topic's lateness, which another test's load beside it would move.
pytestmark = pytest.mark.serial

LIMIT = 500
LIMITED = 3000
FREE = 300
STARTUP_TIMEOUT = 60.0
#: From the due second: 6 s at the limit, and room for a loaded machine.
DELIVERY_TIMEOUT = 40.0
WEB_PORTS = (6371, 6372)


def test_a_limited_topic_is_delivered_at_its_limit_and_others_are_not_held(stack: Stack) -> None:
    settings = stack.settings
    limited = stack.callback_topic("lim")
    free = stack.callback_topic("free")
    stack.oscillator()
    workers = {
        name: stack.worker(name, web_port=port, topic_rate_limits=((limited, float(LIMIT)),))
        for name, port in zip(("w-1", "w-2"), WEB_PORTS, strict=True)
    }
    client = TimerClient(settings)
    watch = FireWatch(settings, free)
    try:
        # Both workers firing, sharing every partition: no rebalance during the burst.
        partitions = settings.partition_count
        next_probe = 0.0

        def probe_and_poll() -> None:
            nonlocal next_probe
            if time.monotonic() >= next_probe:
                for _ in range(32):
                    client.schedule(free, b"probe", at=time.time())
                client.flush()
                next_probe = time.monotonic() + 2.0
            watch.poll()

        deadline = time.monotonic() + STARTUP_TIMEOUT
        while not (
            len(o := owners(watch.fires())) == partitions and set(o.values()) == set(workers)
        ):
            assert time.monotonic() < deadline, f"workers never shared the partitions: {o}"
            probe_and_poll()
        # The warm-up fired on every partition, by both workers: the loop above read that
        # from the audit topic (its callbacks may still be on their way to this reader).

        due = int(time.time()) + 4
        planned_limited = {
            client.schedule(limited, b"l", f"k{i}", at=due).id for i in range(LIMITED)
        }
        planned_free = {client.schedule(free, b"f", f"k{i}", at=due).id for i in range(FREE)}
        client.flush()
        assert time.time() < due, "scheduling took too long for the test to mean anything"

        with stack.reader(limited) as reader:
            deadline = time.monotonic() + (due - time.time()) + DELIVERY_TIMEOUT
            while set(fired_ids(reader.records)) < planned_limited:
                assert time.monotonic() < deadline, (
                    f"{len(set(fired_ids(reader.records)))} of {LIMITED} limited callbacks"
                )
                reader.poll(0.5)
                watch.poll(0.0)
            # Status while it drains is checked below; anything extra on its way shows here.
            reader.poll(1.0)
            records = reader.records
        status = [get_admitted(f"http://127.0.0.1:{port}/status/data")[1] for port in WEB_PORTS]
        watch.callbacks.poll(1.0)
        free_records = [
            r
            for r in watch.callbacks.records
            if (r.header("timer-id") or b"").decode() in planned_free
        ]
    finally:
        watch.audit.close()
        watch.callbacks.close()
        client.close()

    counts = Counter(fired_ids(records))
    assert set(counts) == planned_limited, "lost or unknown callbacks"
    assert max(counts.values()) == 1, "a limited callback came twice"
    stamps = sorted(r.timestamp_ms for r in records)
    assert stamps[0] >= due * 1000, "a limited callback came early"
    per_second = Counter(ms // 1000 for ms in stamps)
    took = (stamps[-1] - due * 1000) / 1000
    print(
        f"limited: {LIMITED} at {LIMIT}/s, per second {dict(sorted(per_second.items()))}, "
        f"max {max(per_second.values())}, last {took:.2f} s after due"
    )
    assert max(per_second.values()) <= LIMIT * 1.1, per_second
    assert LIMITED / LIMIT - 1 <= took <= LIMITED / LIMIT * 1.5, took  # about 6 s

    free_counts = Counter(fired_ids(free_records))
    assert set(free_counts) == planned_free and max(free_counts.values()) == 1
    free_late = max(r.timestamp_ms for r in free_records) - due * 1000
    assert min(r.timestamp_ms for r in free_records) >= due * 1000
    print(f"unlimited: {FREE} all out {free_late} ms after due")
    assert free_late < 1000, "the unlimited topic was held back"

    # Each worker shows the limit and what its limit added (both drained by now).
    for data in status:
        gate = data["rate_limits"][limited]
        assert gate["limit_per_second"] == LIMIT and gate["backlog"] == 0
        assert gate["delayed"] > 0 and gate["delay_p99"] >= 1.0
    del workers
