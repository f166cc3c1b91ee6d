"""At start, compare the oscillator's clock with the broker's, where the broker says its time.

A tick for second S is sent when this process's clock reaches S; an oscillator whose
clock is wrong sends ticks from the future or the past. Workers hold ticks from the
future (so nothing fires early) and fire late on ticks from the past, but either way the
operator should hear it from the oscillator itself, at start. The Kafka protocol shows the
broker's clock in one portable way: on a topic created with
``message.timestamp.type=LogAppendTime`` the broker stamps each record as it appends it
and returns that stamp in the delivery report. Some brokers also answer ListOffsets
"latest" with the append time of the newest record (the dev broker Tansu 0.6.0 does,
and ignores ``LogAppendTime``; Apache Kafka answers -1 there). So the first few ticks
are the probe: ``broker stamp - our send time`` is the delivery delay minus our clock's
offset, and the smallest over a few ticks is the best estimate of the offset. Where the
broker shows no clock (a ``CreateTime`` topic on Apache Kafka, Kafka's default) the
oscillator says so instead.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

__all__ = ["LOG_APPEND_TIME", "BrokerClockCheck", "ClockVerdict"]

log = logging.getLogger(__name__)

#: ``confluent_kafka.TIMESTAMP_LOG_APPEND_TIME``: the broker set the record's timestamp.
LOG_APPEND_TIME = 2
#: Ticks whose delivery reports are looked at before the verdict.
PROBE_TICKS = 5


@dataclass(frozen=True)
class ClockVerdict:
    """What the first ticks' delivery reports say about this oscillator's clock."""

    #: Whether the broker stamped the ticks (LogAppendTime); if not, nothing is known.
    measured: bool
    #: This oscillator's clock minus the broker's, seconds (positive: ahead).
    offset: float | None = None


class BrokerClockCheck:
    """Fed the delivery reports of the first ticks; logs one verdict, then ignores the rest."""

    def __init__(self, topic: str, threshold: float, probes: int = PROBE_TICKS) -> None:
        self._topic = topic
        self._threshold = threshold
        self._probes = probes
        self._deltas: list[float] = []
        self._unstamped = 0
        self._how = ""
        #: The verdict, once enough ticks were delivered.
        self.verdict: ClockVerdict | None = None

    @property
    def done(self) -> bool:
        return self.verdict is not None

    def delivered(self, broker_ms: int | None, sent_ms: int, how: str = "LogAppendTime") -> None:
        """One delivered tick: ``sent_ms`` by this oscillator's clock, ``broker_ms`` by the
        broker's (``None`` where the broker showed no clock), learnt from ``how``."""
        if self.done:
            return
        if broker_ms is not None and broker_ms >= 0:
            self._deltas.append((broker_ms - sent_ms) / 1000)
            self._how = how
        else:
            self._unstamped += 1
        if len(self._deltas) + self._unstamped < self._probes:
            return
        if self._deltas:
            # broker - sent = delay - offset; the smallest delay is the best estimate.
            self.verdict = ClockVerdict(True, -min(self._deltas))
        else:
            self.verdict = ClockVerdict(False)
        self._report(self.verdict)

    def _report(self, verdict: ClockVerdict) -> None:
        if verdict.offset is None:
            log.info(
                "the broker shows no clock on topic %s (it keeps the producers' CreateTime), "
                "so this oscillator cannot compare its clock with the broker's; create the "
                "topic with message.timestamp.type=LogAppendTime to have that checked at start",
                self._topic,
            )
        elif abs(verdict.offset) > self._threshold:
            log.warning(
                "this oscillator's clock is %.3fs %s the broker's (%s on %s): %s; "
                "check NTP on this host",
                abs(verdict.offset),
                "ahead of" if verdict.offset > 0 else "behind",
                self._how,
                self._topic,
                "workers hold its ticks until their own clocks reach each second"
                if verdict.offset > 0
                else "timers it alone drives fire that much late",
            )
        else:
            log.info(
                "this oscillator's clock is within %.3fs of the broker's (%+.3fs, %s on %s)",
                self._threshold,
                verdict.offset,
                self._how,
                self._topic,
            )
