"""Oscillator precision: how long after its second boundary each tick was sent.

Measured during the steady scenario — two oscillators next to two busy workers on two
cores, which is when precision matters — from the tick records themselves: each carries
the second it stands for and ``sent_ms``, the oscillator's clock when it sent it (the
record's CreateTime agrees to the millisecond). The baseline is a bare thread waking at
the same boundaries with the same wait function in the benchmark process
(:class:`bench.probes.BoundaryProbe`): the machine's own scheduling jitter, same run.
"""

from __future__ import annotations

import json

from confluent_kafka import Message

from app.settings import Settings
from bench.report import Figure, fmt_ms
from bench.scan import read_topic
from bench.stats import Summary, summarize

__all__ = ["figures", "tick_delays"]

#: p99 tick delay target, seconds.
TARGET_P99 = 0.010


def _tick(msg: Message) -> tuple[int, int, float]:
    value = json.loads(msg.value() or b"{}")
    return msg.partition() or 0, value["second"], value["sent_ms"] / 1000 - value["second"]


def tick_delays(settings: Settings, first: int, last: int) -> list[float]:
    """Delay after its boundary of each tick sent for seconds ``first..last``.

    One per oscillator per second: every partition gets the same record, so partition 0
    stands for all.
    """
    ticks = read_topic(settings, settings.topics.ticks, _tick)
    return [delay for p, second, delay in ticks if p == 0 and first <= second <= last]


def figures(delays: list[float], wakeups: list[float]) -> list[Figure]:
    """The oscillator rows: p50 and p99 tick delay beside the bare sleeper's."""
    ticks: Summary = summarize(delays)
    sleeper: Summary | None = summarize(wakeups) if wakeups else None
    detail = {"ticks": ticks.as_dict(), "sleeper": sleeper.as_dict() if sleeper else None}
    rows = []
    for label, mine, base, target in (
        ("tick delay p50", ticks.p50, sleeper.p50 if sleeper else None, ""),
        ("tick delay p99", ticks.p99, sleeper.p99 if sleeper else None, "≤ 10 ms"),
    ):
        rows.append(
            Figure(
                "oscillator",
                f"{label} ({ticks.count} ticks, under steady load)",
                fmt_ms(mine),
                f"bare sleeper {fmt_ms(base)}" if base is not None else "",
                target,
                (mine <= TARGET_P99) if target else None,
                value=mine,
                detail=detail,
            )
        )
    rows.append(
        Figure(
            "oscillator",
            "tick delay max",
            fmt_ms(ticks.max),
            f"bare sleeper {fmt_ms(sleeper.max)}" if sleeper else "",
            value=ticks.max,
            detail=detail,
        )
    )
    return rows
