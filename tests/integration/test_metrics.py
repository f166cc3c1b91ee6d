"""Every process's ``/metrics`` moves as timers fire, and agrees with a callback consumer.

The dev stack of the README — two oscillators and two workers, each with its own
``METRICS_PORT`` — runs as real processes. The test scrapes every one before and after
a burst of timers and checks the counters moved by exactly what was done; then it
compares the workers' lateness histogram with the lateness a consumer of the callback
topic measures from each callback's record timestamp: the two must agree to within the
width of the histogram bucket the quantile falls in.
"""

from __future__ import annotations

import json
import math
import time
import urllib.request
from collections.abc import Iterator, Mapping

import pytest
from prometheus_client.parser import text_string_to_metric_families

from app.dev.broker import free_port
from app.status.model import histogram_quantile
from kafka_timers_client.client import TimerClient
from tests.support.stack import Stack, fired_ids
from tests.support.waiting import wait_until

#: Runs alone, in ``make test``'s serial part: it compares tick counts and lateness with the
#: wall clock, which another test's load beside it would move.
pytestmark = pytest.mark.serial

#: Samples of one scrape: (series name, sorted label pairs) -> value.
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]

TIMERS = 120
FIRE_TIMEOUT = 60.0


def scrape(port: int) -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def try_scrape(port: int) -> Samples | None:
    try:
        return scrape(port)
    except OSError:
        return None


def total(samples: Samples, name: str, **labels: str) -> float:
    """Sum of the series ``name`` whose labels include ``labels``."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= set(ls))


def summed(scrapes: list[Samples], name: str, **labels: str) -> float:
    return sum(total(s, name, **labels) for s in scrapes)


def labelled(scrapes: list[Samples], name: str) -> Iterator[tuple[dict[str, str], float]]:
    """Each sample of the series ``name`` over all workers: its labels and its value."""
    for samples in scrapes:
        for (series, labels), value in samples.items():
            if series == name:
                yield dict(labels), value


def lateness_buckets(scrapes: list[Samples]) -> dict[float, float]:
    """Cumulative lateness bucket counts, summed over workers: le -> count."""
    out: dict[float, float] = {}
    for labels, value in labelled(scrapes, "kafka_timers_fire_lateness_seconds_bucket"):
        le = float(labels["le"])
        out[le] = out.get(le, 0.0) + value
    return out


def last_ticks(scrapes: list[Samples]) -> dict[int, float]:
    """Newest tick second per partition over all workers (a moved partition reports twice)."""
    out: dict[int, float] = {}
    for labels, value in labelled(scrapes, "kafka_timers_last_tick_seconds"):
        p = int(labels["partition"])
        out[p] = max(out.get(p, 0.0), value)
    return out


def nearest_rank(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def bucket_of(value: float, bounds: list[float]) -> tuple[float, float, float]:
    """The histogram bucket ``(lower, upper]`` holding ``value``, and the bound below it."""
    below, lower = 0.0, 0.0
    for upper in bounds:
        if value <= upper:
            return below, lower, upper
        below, lower = lower, upper
    return below, lower, math.inf


def delta(after: Mapping[float, float], before: Mapping[float, float]) -> list[tuple[float, float]]:
    return sorted((le, after[le] - before.get(le, 0.0)) for le in after)


def test_metrics_move_as_timers_fire_and_lateness_agrees_with_the_consumer(stack: Stack) -> None:
    settings = stack.settings
    topic = stack.callback_topic("metrics-callbacks")
    osc_ports = [free_port(), free_port()]
    worker_ports = [free_port(), free_port()]
    for i, port in enumerate(osc_ports, 1):
        stack.oscillator(f"oscillator-{i}", metrics_port=port)
    for i, port in enumerate(worker_ports, 1):
        stack.worker(f"worker-{i}", metrics_port=port)

    def serving() -> list[Samples] | None:
        """Both workers hold partitions and every partition ticks: the group has settled."""
        scrapes = [try_scrape(p) for p in worker_ports]
        if any(s is None for s in scrapes):
            return None
        ready = [s for s in scrapes if s is not None]
        now = time.time()
        fresh = [{p for p, second in last_ticks([s]).items() if second >= now - 2} for s in ready]
        everyone = set().union(*fresh)
        if all(fresh) and everyone == set(range(settings.partitions)):
            return ready
        return None

    wait_until(serving, 60, "two workers serving every partition, with ticks")
    osc_before = [scrape(p) for p in osc_ports]
    workers_before = [scrape(p) for p in worker_ports]
    started = time.time()

    client = TimerClient(settings)
    scheduled = {}
    for i in range(TIMERS):  # spread over 3 s, with fractions (rounded up to the second)
        timer = client.schedule(topic, b"x", f"k{i}", at=started + 2 + i * 3 / TIMERS)
        scheduled[timer.id] = timer
    keep = client.schedule(topic, b"never", at=started + 600)
    client.cancel(keep.id, keep.token)
    client.flush()
    producer = stack.producer()
    producer.produce(
        settings.topics.requests, json.dumps({"topic": "__nope", "in": "1s"}).encode(), b"bad"
    )
    producer.flush(10)

    with stack.reader(topic) as reader:
        reader.wait_for(lambda rs: set(fired_ids(rs)) >= set(scheduled), FIRE_TIMEOUT)
        records = reader.records
    consumer_lateness = [
        r.timestamp_ms / 1000 - int(r.header("timer-due") or 0)
        for r in records
        if (r.header("timer-id") or b"").decode() in scheduled
    ]
    assert len(consumer_lateness) == TIMERS, "each timer fired once"

    def settled() -> list[Samples] | None:
        """Counters are bumped after the callbacks are acknowledged: wait for the last one."""
        scrapes = [scrape(p) for p in worker_ports]
        fired = summed(scrapes, "kafka_timers_fired_total", callback_topic=topic)
        rejected = summed(scrapes, "kafka_timers_rejected_total")
        before = summed(workers_before, "kafka_timers_rejected_total")
        return scrapes if fired >= TIMERS and rejected > before else None

    workers_after = wait_until(settled, 15, "the workers' counters to count every fire")
    osc_after = [scrape(p) for p in osc_ports]
    elapsed = time.time() - started

    def moved(name: str, **labels: str) -> float:
        return summed(workers_after, name, **labels) - summed(workers_before, name, **labels)

    # Counters moved by exactly what was done.
    assert moved("kafka_timers_fired_total", callback_topic=topic) == TIMERS
    assert moved("kafka_timers_scheduled_total") == TIMERS + 1  # + the one cancelled
    assert moved("kafka_timers_cancelled_total") == 1
    assert moved("kafka_timers_rejected_total", reason="topic_not_allowed") == 1
    assert summed(workers_after, "kafka_timers_pending") == 0
    assert moved("kafka_timers_fire_lateness_seconds_count") == TIMERS
    for samples in workers_after:  # both workers fired some: the load was shared
        assert total(samples, "kafka_timers_fired_total", callback_topic=topic) > 0
    # Every partition's newest tick is recent: the oscillators reach all of them.
    now = time.time()
    assert all(now - s < 3 for s in last_ticks(workers_after).values())
    assert set(last_ticks(workers_after)) == set(range(settings.partitions))
    # Each oscillator ticked about once a second and timed every tick.
    for before, after in zip(osc_before, osc_after, strict=True):
        ticks = total(after, "kafka_timers_oscillator_ticks_total") - total(
            before, "kafka_timers_oscillator_ticks_total"
        )
        assert elapsed - 2 <= ticks <= elapsed + 2
        timed = total(after, "kafka_timers_oscillator_tick_delay_seconds_count") - total(
            before, "kafka_timers_oscillator_tick_delay_seconds_count"
        )
        assert timed == ticks

    # The lateness histogram agrees with the callback consumer's own measurement.
    hist = delta(lateness_buckets(workers_after), lateness_buckets(workers_before))
    bounds = [le for le, _ in hist if not math.isinf(le)]
    report = []
    for q in (0.5, 0.9, 0.99):
        from_metrics = histogram_quantile(q, hist)
        assert from_metrics is not None
        measured = nearest_rank(consumer_lateness, q)
        below, lower, upper = bucket_of(from_metrics, bounds)
        report.append(
            f"p{round(q * 100)}: metrics {from_metrics:.3f}s (bucket {lower}-{upper}), "
            f"consumer {measured:.3f}s"
        )
        # The histogram only knows the quantile's bucket. The worker times each fire a
        # little later than the record's timestamp (after the broker's ack), so the
        # consumer's value lies in that bucket or, near its lower edge, the one below.
        assert below <= measured <= upper, "; ".join(report)
    metric_mean = moved("kafka_timers_fire_lateness_seconds_sum") / TIMERS
    consumer_mean = sum(consumer_lateness) / TIMERS
    report.append(f"mean: metrics {metric_mean:.3f}s, consumer {consumer_mean:.3f}s")
    print("\nlateness, metrics vs consumer:\n  " + "\n  ".join(report))
    # The worker times a fire once the broker acknowledged it, a consumer by the record's
    # timestamp (when it was produced): the worker's figure is the later, by the ack time.
    assert 0 <= metric_mean - consumer_mean < 0.1, report[-1]
