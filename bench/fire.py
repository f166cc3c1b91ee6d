"""Fire: callbacks one worker delivers per second when a large bucket comes due.

Runs on a worker that has just stored N timers all due in one second (see
:mod:`bench.ingest`), with no oscillator: once that second has passed on this machine's
clock (a worker holds a tick from the future until its clock reaches it), the benchmark
sends its tick, as an oscillator would, and follows two topics from the moment before:

- the callback topic. **Delivered**: the last callback readable by a consumer (taken
  from the consumer here: on the broker, acknowledged, to within ~10 ms of polling).
  The target is judged on this rate: N over the time from the tick to then.
- the table's changelog. **Complete**: the bucket is not done when its callbacks are
  out: each fired timer is forgotten — its pending key deleted, its id's index entry
  rewritten and an expiry key added, in RocksDB and in the changelog — and until then
  the worker does not take the next tick. Complete is when the worker reports the tick
  finished on every partition (its last-tick gauge) and the last changelog record of
  that forgetting is readable (the changelog then stays quiet: nothing else writes to
  it here). N over the time from the tick to then is the whole cost of a due bucket.
  Once complete, RocksDB and the pending gauge are checked too: no key of the bucket
  is left.

Also kept, for continuity with earlier figures: the time from the tick to the last
callback's ``produce()`` (its record timestamp), and the worker's CPU time per timer
from the tick to complete (``/proc``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from app.core.keys import bucket_floor
from bench.context import Baselines
from bench.procstat import cpu_seconds
from bench.report import Figure, fmt_rate, fmt_seconds
from bench.rocks import count_pending_keys
from bench.scan import TopicFollower, timestamp_ms
from bench.stack import BenchStack, Worker, wait_until
from bench.stats import rate
from bench.targets import fire_verdict
from bench.ticks import send_tick

__all__ = ["QUIET_SECONDS", "figures", "fire_bucket"]

#: The changelog is complete once quiet this long after the worker reported the bucket
#: gone (its records were produced by then: this covers their way to the broker, a few
#: milliseconds).
QUIET_SECONDS = 0.5
#: Polling interval of the two followers, seconds: the resolution of the arrival times.
POLL_SECONDS = 0.005


def fire_bucket(
    stack: BenchStack,
    worker: Worker,
    callbacks: str,
    due: int,
    count: int,
    changelog_from: Mapping[int, int],
    *,
    pending_after: int = 0,
) -> dict[str, Any]:
    """Tick ``due`` and follow its ``count`` callbacks and its forgetting; the timings.

    The worker must have had no tick yet (none is sent but this one). ``changelog_from``
    is where the changelog ended before the tick (see :func:`bench.scan.next_offsets`);
    ``pending_after`` what the worker's pending gauge must read once the bucket is done
    (0, or the series that go on: checked).
    """
    # A tick for a second this machine's clock has not reached is held by the worker
    # (as one from the future) until it has: send it only once the second has passed.
    wait_until(lambda: time.time() >= due + 1, max(0.0, due + 1 - time.time()) + 5, "due second")
    with (
        TopicFollower(stack.settings, callbacks, timestamp_ms) as fired,
        TopicFollower(stack.settings, stack.changelog, lambda m: m.offset(), changelog_from) as log,
    ):
        fired.poll(0.2)  # take the assignments before the first record
        log.poll(0.2)
        if fired.items or log.items:
            raise RuntimeError(f"records before the tick: {len(fired.items)} callbacks, changelog")
        cpu_before = cpu_after = cpu_seconds(worker.pid)
        tick_at = send_tick(stack.producer(), stack.settings.topics.ticks, stack.partitions, due)
        deadline = time.monotonic() + 60 + count / 500
        done_at: float | None = None  # when the worker reported the tick finished
        next_check = 0.0
        while True:
            fired.poll(POLL_SECONDS)
            log.poll(POLL_SECONDS)
            now = time.monotonic()
            if now > deadline:
                raise TimeoutError(
                    f"fire: {len(fired.items):,} of {count:,} callbacks, "
                    f"{len(log.items):,} changelog records, bucket done: {done_at is not None}"
                )
            if done_at is None and len(fired.items) >= count and now >= next_check:
                next_check = now + 0.05
                ticked = worker.last_ticks()  # set once a partition's tick is finished
                if len(ticked) == stack.partitions and min(ticked.values()) >= due:
                    done_at = time.time()
                    cpu_after = cpu_seconds(worker.pid)
            if done_at is not None and time.time() - max([done_at, *log.arrived[-1:]]) >= (
                QUIET_SECONDS
            ):
                break
        fired.poll(0.5)  # anything extra (a duplicate) would show here
        pending = worker.metric("kafka_timers_pending", default=-1)
    if pending != pending_after:
        raise RuntimeError(
            f"fire: {pending:,.0f} timers pending after the bucket, not {pending_after:,}"
        )
    left = sum(count_pending_keys(worker.data_dir, bucket_floor(due)).values())
    if len(fired.items) != count or left:
        raise RuntimeError(
            f"fire: {len(fired.items):,} callbacks for {count:,} timers; "
            f"{left:,} keys of the bucket left in RocksDB"
        )
    delivered = max(fired.arrived) - tick_at
    assert done_at is not None  # the loop ends only once the worker reported it
    # The forgetting's records are produced before the worker reports the tick done:
    # the last one readable is when it was complete (the report only says to look).
    complete = (max(log.arrived) if log.arrived else done_at) - tick_at
    produced = max(fired.items) / 1000 - tick_at
    return {
        "timers": count,
        "callbacks": len(fired.items),
        "tick_to_delivered_seconds": delivered,
        "tick_to_complete_seconds": complete,
        "tick_to_last_produce_seconds": produced,
        "tick_to_first_produce_seconds": min(fired.items) / 1000 - tick_at,
        "worker_reported_done_seconds": done_at - tick_at,
        "changelog_records": len(log.items),
        "worker_cpu_us_per_timer": (cpu_after - cpu_before) / count * 1e6,
        "rate": rate(count, delivered),
        "complete_rate": rate(count, complete),
        "produce_rate": rate(count, produced),
    }


def figures(fired: dict[str, Any], baselines: Baselines) -> list[Figure]:
    """The fire rows: delivered/s (the target), complete/s, and the times behind them."""
    per_second = fired["rate"]
    baseline, target, met = fire_verdict(per_second, baselines)
    complete = fired["complete_rate"]
    return [
        Figure(
            "fire",
            f"callbacks delivered/s, 1 worker, {fired['timers']:,} due at once",
            fmt_rate(per_second),
            baseline,
            target,
            met,
            value=per_second,
            detail=fired,
        ),
        Figure(
            "fire",
            "fired and forgotten/s (the bucket complete: deletes, index, expiry keys in the "
            "changelog)",
            fmt_rate(complete),
            f"delivered {fmt_rate(per_second)}; worker CPU "
            f"{fired['worker_cpu_us_per_timer']:.0f} µs per timer",
            value=complete,
        ),
        Figure(
            "fire",
            "tick to last callback produced / delivered / complete",
            f"{fmt_seconds(fired['tick_to_last_produce_seconds'])} / "
            f"{fmt_seconds(fired['tick_to_delivered_seconds'])} / "
            f"{fmt_seconds(fired['tick_to_complete_seconds'])}",
            f"produced: {fmt_rate(fired['produce_rate'])}",
            value=fired["tick_to_complete_seconds"],
        ),
    ]
