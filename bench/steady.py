"""Steady lateness: 10,000 timers/s due continuously for 60 s across 2 workers.

Two oscillators and two workers, as deployed. Requests arrive as a steady stream too:
the timers due in second S are sent during second S-3, in ten slices. Lateness is each
callback's record timestamp (when the worker produced it) minus its due second; every
timer must fire exactly once and none early (checked against the callbacks read back).
Beside it, the raw confluent-kafka echo of :mod:`bench.probes`, running at the same
time: the lateness of a "timer service" that only forwards a record at each boundary.
The oscillators' tick delays are taken from this run too
(:mod:`bench.oscillator_precision`).

The lateness is split in two at each callback's ``timer-fired-at`` header (the worker's
clock when it began producing that partition's callbacks): up to there it is the tick's
way to the worker (the broker, the fetch, a tick agent still busy) and what the worker
did first (reading the partition's timers, the partitions before it in the same tick);
after it, producing the partition's callbacks. Both clocks are the same host's.
"""

from __future__ import annotations

import threading
import time
from collections import Counter

from confluent_kafka import Message

from bench import oscillator_precision
from bench.context import RunContext, ScenarioResult
from bench.load import RequestLoad, TimerSpec
from bench.probes import BoundaryProbe, EchoResponder, echo_lateness
from bench.procstat import cpu_seconds
from bench.report import Figure, fmt_count, fmt_ms
from bench.scan import TopicFollower, header, timestamp_ms
from bench.stats import summarize
from bench.targets import STEADY_MAX, STEADY_P99

__all__ = ["run"]

#: Requests for the timers due in second S are sent during second S - LEAD_SECONDS...
LEAD_SECONDS = 3
#: ...in this many slices spread over that second.
SLICES = 10


class _SteadyLoad(threading.Thread):
    """Sends ``per_second`` requests due in each of ``seconds`` seconds from ``first``."""

    def __init__(self, load: RequestLoad, first: int, seconds: int, per_second: int) -> None:
        super().__init__(name="steady-load", daemon=True)
        self._load = load
        self._first, self._seconds, self._per_second = first, seconds, per_second
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            for due in range(self._first, self._first + self._seconds):
                ids = [f"steady-{due}-{i:05d}" for i in range(self._per_second)]
                for part in range(SLICES):
                    send_at = due - LEAD_SECONDS + part / SLICES
                    delay = send_at - time.time()
                    if delay > 0:
                        time.sleep(delay)  # pacing the load generator, not waiting on a result
                    self._load.send(TimerSpec(i, due) for i in ids[part::SLICES])
            self._load.flush()
        except BaseException as exc:  # reported by the scenario, not lost in a thread
            self.error = exc


def _callback(msg: Message) -> tuple[str, int, int, int]:
    return (
        (header(msg, "timer-id") or b"").decode(),
        int(header(msg, "timer-due") or b"0"),
        timestamp_ms(msg),
        int(header(msg, "timer-fired-at") or b"0"),
    )


def run(ctx: RunContext) -> ScenarioResult:
    cfg = ctx.config
    total = cfg.steady_rate * cfg.steady_seconds
    with ctx.stack("steady") as stack:
        callbacks = stack.topic("steady-callbacks")
        probe_topic, echo_topic = stack.topic("probe-ticks"), stack.topic("probe-echo")
        workers = stack.serving(2)
        first = int(time.time()) + LEAD_SECONDS + 2
        last = first + cfg.steady_seconds - 1
        ctx.say(f"steady: {cfg.steady_rate:,}/s due from second {first} to {last}")
        load = _SteadyLoad(
            RequestLoad(stack, callbacks), first, cfg.steady_seconds, cfg.steady_rate
        )
        probe = BoundaryProbe(stack.settings, probe_topic, cfg.partitions)
        echo = EchoResponder(stack.settings, probe_topic, echo_topic, cfg.partitions)
        cpu_before = {w.name: cpu_seconds(w.pid) for w in workers}
        began = time.monotonic()
        echo.start()
        probe.start()
        load.start()
        try:
            with TopicFollower(stack.settings, callbacks, _callback) as follower:
                follower.wait_for_count(total, cfg.steady_seconds + 60, "steady callbacks")
                load.join(10)
                if load.error is not None:
                    raise load.error
                follower_done = time.monotonic()
                cpu = {
                    w.name: (cpu_seconds(w.pid) - cpu_before[w.name]) / (follower_done - began)
                    for w in workers
                }
                follower.poll(1.0)  # a duplicate of the last second's would arrive by now
                fired = follower.items
        finally:
            probe.stop()
            echo.stop()
        ticks = oscillator_precision.read_ticks(stack.settings, first - LEAD_SECONDS, last)
        echoes = echo_lateness(stack.settings, echo_topic)
    first_fire: dict[str, tuple[float, float]] = {}
    for timer_id, due, stamp, fired_at in fired:
        lateness = stamp / 1000 - due
        if timer_id not in first_fire or lateness < first_fire[timer_id][0]:
            first_fire[timer_id] = (lateness, fired_at / 1000 - due)
    duplicates = sum(n - 1 for n in Counter(t for t, _, _, _ in fired).values())
    late = summarize([lateness for lateness, _ in first_fire.values()])
    began = summarize([began for _, began in first_fire.values()])
    producing = summarize([lateness - began for lateness, began in first_fire.values()])
    raw = summarize(echoes)
    early = sum(1 for x, _ in first_fire.values() if x < 0)
    detail = {
        "timers": total,
        "fired": len(first_fire),
        "duplicates": duplicates,
        "early": early,
        "lateness": late.as_dict(),
        "fire_began": began.as_dict(),
        "fire_began_to_produced": producing.as_dict(),
        "raw_echo_lateness": raw.as_dict(),
        "worker_cpu_utilisation": cpu,
    }
    rows = [
        Figure(
            "steady",
            f"lateness p50 ({cfg.steady_rate:,}/s for {cfg.steady_seconds} s, 2 workers)",
            fmt_ms(late.p50),
            f"raw echo {fmt_ms(raw.p50)}",
            value=late.p50,
            detail=detail,
        ),
        Figure(
            "steady",
            "lateness p99",
            fmt_ms(late.p99),
            f"raw echo {fmt_ms(raw.p99)}",
            f"≤ {fmt_ms(STEADY_P99)}",
            late.p99 <= STEADY_P99,
            value=late.p99,
        ),
        Figure(
            "steady",
            "lateness max",
            fmt_ms(late.max),
            f"raw echo {fmt_ms(raw.max)}",
            f"≤ {fmt_ms(STEADY_MAX)}",
            late.max <= STEADY_MAX,
            value=late.max,
        ),
        Figure(
            "steady",
            "lateness p99 split: tick to its partition's fire / fire to callback",
            f"{fmt_ms(began.p99)} / {fmt_ms(producing.p99)}",
            f"p50 {fmt_ms(began.p50)} / {fmt_ms(producing.p50)}",
            value=began.p99,
        ),
        Figure(
            "steady",
            "fired once each, none early",
            f"{fmt_count(len(first_fire))} of {fmt_count(total)}, {duplicates} dup, {early} early",
            target="all, once, 0 early",
            met=len(first_fire) == total and duplicates == 0 and early == 0,
            value=len(first_fire),
        ),
    ]
    rows.extend(oscillator_precision.figures(ticks, probe.wakeups))
    return ScenarioResult(figures=rows, details={**detail, "ticks": len(ticks)})
