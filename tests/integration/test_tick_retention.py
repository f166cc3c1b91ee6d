"""The tick topic keeps one hour: a worker whose tick offset is gone still catches up.

On Apache Kafka a worker (group) away for longer than the tick topic's retention comes
back to a committed offset that no longer exists (OFFSET_OUT_OF_RANGE: the consumer
resets to the oldest tick kept). The dev broker has no retention and no DeleteRecords,
so the test does what has the same effect there: the tick topic is deleted and created
again while the worker is down, which removes the group's committed offsets with it
(Kafka does the same). Whatever tick the worker then reads first covers every second
before it: everything due in its absence fires at once, exactly once, none early.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict

from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient  # type: ignore[attr-defined]

from app.kafka.config import confluent_common
from app.kafka.topic_config import topic_specs
from app.kafka.topics import describe_topic_configs, ensure_topics, partition_count
from tests.support.faults import FireWatch, deliberate_fault_window, schedule_spread
from tests.support.probes import committed_offsets, metric_total, start_probed
from tests.support.stack import Stack
from tests.support.waiting import wait_until

FIRE_TIMEOUT = 120.0


def committed_tick_offsets(stack: Stack) -> dict[int, int]:
    """The workers' group's committed offsets on the tick topic (absent ones left out)."""
    settings = stack.settings
    offsets = committed_offsets(settings, settings.app_id, settings.topics.ticks)
    return {p: offset for p, offset in offsets.items() if offset >= 0}


def requests_all_durable(stack: Stack) -> bool:
    """Whether every request is durably applied: the request-progress group's committed
    offsets (written after a batch is durable, app/worker/request_progress.py) reached
    each partition's end. A request applied but not yet durable at a stop is read again
    after the restart and fires on the tick after that, not in the catch-up tick."""
    from confluent_kafka import Consumer

    settings = stack.settings
    partitions = [
        TopicPartition(settings.topics.requests, p) for p in range(settings.partition_count)
    ]
    committed = committed_offsets(settings, settings.request_group, settings.topics.requests)
    consumer = Consumer({**confluent_common(settings), "group.id": f"{settings.app_id}-probe"})
    try:
        ends = {
            tp.partition: consumer.get_watermark_offsets(tp, timeout=10)[1] for tp in partitions
        }
    finally:
        consumer.close()
    return all(committed.get(p, -1) >= end for p, end in ends.items() if end > 0)


def test_a_worker_whose_tick_offset_is_gone_catches_up_from_the_next_tick(
    stack: Stack,
) -> None:
    settings = stack.settings
    ticks = settings.topics.ticks
    # what was set on the topic: Apache Kafka also describes its defaults (36 keys)
    assert describe_topic_configs(settings, [ticks])[ticks].set_on_topic() == dict(
        topic_specs(settings)[ticks].config
    )
    callbacks = stack.callback_topic("tick-retention-callbacks")
    oscillator = stack.oscillator()
    worker = start_probed(stack, "worker", "worker-1")
    watch = FireWatch(settings, callbacks)
    now = int(time.time())
    warm = schedule_spread(settings, callbacks, 16, now, now, prefix="warm")
    watch.wait(lambda w: w.fired_ids() >= set(warm), FIRE_TIMEOUT, "the worker to start firing")
    # due while the worker is away, and after it is back
    absent = schedule_spread(settings, callbacks, 400, now + 8, now + 20, prefix="gone")
    later = schedule_spread(settings, callbacks, 80, now + 45, now + 50, prefix="later")
    wait_until(
        lambda: len(committed_tick_offsets(stack)) == settings.partition_count,
        30,
        "the worker to commit tick offsets",
    )
    # Stored before the worker goes: a request it had not stored yet is read again after
    # the restart and fires on the first tick after it is stored, not on the first tick.
    # (counted as accepted, not as pending: under load some are due and fire meanwhile)
    wait_until(
        lambda: (
            metric_total(worker.metrics, "kafka_timers_scheduled")
            >= len(warm) + len(absent) + len(later)
        ),
        60,
        "every request stored before the stop",
    )
    wait_until(lambda: requests_all_durable(stack), 60, "every request durable before the stop")
    assert worker.process.stop() == 0
    assert oscillator.stop() == 0  # a running producer would re-create the topic

    admin = AdminClient(confluent_common(settings))
    admin.delete_topics([ticks])[ticks].result(15)
    wait_until(lambda: partition_count(settings, ticks) is None, 30, "the tick topic to go")
    ensure_topics(settings, [ticks])
    assert committed_tick_offsets(stack) == {}, "the group's tick offsets went with the topic"
    last_absent = max(p.due for p in absent.values())
    deliberate_fault_window(max(0.0, last_absent + 1 - time.time()))  # all of them now due

    # the same worker, on its own RocksDB directory, as after a long absence
    restarted_ms = int(time.time() * 1000)
    stack.worker("worker-1", loglevel="info", data_dir=stack.base_dir / "worker-1", log_name="w1b")
    stack.oscillator("oscillator-2")
    everything = {**warm, **absent, **later}
    watch.wait(lambda w: w.fired_ids() >= set(everything), FIRE_TIMEOUT, "every timer to fire")
    watch.poll(1.0)
    fires = watch.fires()
    counts = Counter(f.id for f in fires)
    assert counts == Counter(dict.fromkeys(everything, 1)), "lost or fired twice"
    early = [f for f in fires if f.fired_at_ms < everything[f.id].due * 1000]
    assert early == []
    # Timers due before the stop (the absence's first seconds, while the setup ran) fired
    # then; every other one fires in the first tick the restarted worker handles: one
    # fire time per partition.
    restart_fires = [f for f in fires if f.id in absent and f.fired_at_ms >= restarted_ms]
    assert len(restart_fires) >= len(absent) // 2, "most of the absence fired before the stop"
    fire_times: dict[int, set[int]] = defaultdict(set)
    for fire in restart_fires:
        fire_times[fire.partition].add(fire.fired_at_ms)
    spread_ms = max(f.fired_at_ms for f in restart_fires) - min(
        f.fired_at_ms for f in restart_fires
    )
    print(
        f"\n{len(restart_fires)} of {len(absent)} timers due in the absence fired after the "
        f"restart, {spread_ms} ms from the first to the last, "
        f"{min(f.fired_at_ms for f in restart_fires) - restarted_ms} ms after the restart began"
    )
    assert all(len(times) == 1 for times in fire_times.values()), (
        f"the catch-up took more than one tick: fire times per partition {dict(fire_times)}"
    )
