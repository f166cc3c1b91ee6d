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
from dataclasses import dataclass

from confluent_kafka import Message

from app.settings import Settings
from bench.report import Figure, fmt_ms
from bench.scan import read_topic
from bench.stats import Summary, summarize

__all__ = ["Tick", "figures", "read_ticks"]

#: p99 tick delay target, seconds.
TARGET_P99 = 0.010


@dataclass(frozen=True)
class Tick:
    """One tick as sent (partition 0's copy: every partition gets the same record)."""

    second: int
    oscillator: str
    #: Seconds after the boundary of ``second`` that the oscillator sent it.
    delay: float


def _tick(msg: Message) -> Tick | None:
    if msg.partition() != 0:
        return None
    value = json.loads(msg.value() or b"{}")
    return Tick(value["second"], value["oscillator"], value["sent_ms"] / 1000 - value["second"])


def read_ticks(settings: Settings, first: int, last: int) -> list[Tick]:
    """Every oscillator's tick for seconds ``first..last``."""
    ticks = read_topic(settings, settings.topics.ticks, _tick)
    return [t for t in ticks if t is not None and first <= t.second <= last]


def figures(sent: list[Tick], wakeups: list[tuple[int, float]]) -> list[Figure]:
    """The oscillator rows: p50 and p99 tick delay beside the bare sleeper's."""
    ticks: Summary = summarize([t.delay for t in sent])
    sleeper: Summary | None = summarize([w for _, w in wakeups]) if wakeups else None
    detail = {
        "ticks": ticks.as_dict(),
        "sleeper": sleeper.as_dict() if sleeper else None,
        # Late ticks the bare sleeper was on time for: the oscillator's own share.
        "late_while_sleeper_on_time": sum(
            1
            for t in sent
            if t.delay > TARGET_P99 and dict(wakeups).get(t.second, 1.0) <= TARGET_P99 / 2
        ),
        # Which ticks were late, and was the bare sleeper late at the same boundary?
        "late_ticks": [
            {
                "second": t.second,
                "oscillator": t.oscillator,
                "delay": t.delay,
                "sleeper": dict(wakeups).get(t.second),
            }
            for t in sent
            if t.delay > TARGET_P99
        ],
    }
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
