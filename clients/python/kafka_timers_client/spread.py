"""Spread: a timer fires at a second in ``[due, due + spread]`` chosen from its id.

A request may ask for its callback to be spread (``"spread": "60s"``): many timers due
in one second then fire over the window instead of all at once, as EventBridge
Scheduler's flexible time window, Temporal's jitter and systemd's
``RandomizedDelaySec`` do. The second is deterministic, so the same request always
lands on the same second: its offset is a stable hash (MurmurHash2, Kafka's, seeded
like Kafka's partitioner but over ``<id>\\0<seq>``, so it is independent of the id's
partition) of the timer id and the occurrence's number (0 for a one-shot timer, ``seq``
for a series: each occurrence gets its own offset), modulo ``spread + 1``. Never
before ``due``, never after ``due + spread``; ``due`` itself (the ``timer-due`` header,
the fired record's ``due``, the version's identity) stays the requested second.
"""

from __future__ import annotations

from kafka_timers_client.bounds import MAX_SECONDS
from kafka_timers_client.partitioner import placement

__all__ = ["MAX_SPREAD_SECONDS", "spread_offset", "spread_second"]

#: The widest spread a request may ask for: one day. A spread is a smoothing window for
#: a burst, not a way to postpone; wider ones are refused (``invalid_spread``).
MAX_SPREAD_SECONDS = 86_400


def spread_offset(timer_id: str, seq: int, spread: int) -> int:
    """The offset, ``0 <= offset <= spread``, of occurrence ``seq`` (0: a one-shot
    timer) of timer ``timer_id``: the same on every process, release and run."""
    if spread <= 0:
        return 0
    return placement(b"%s\x00%d" % (timer_id.encode(), seq), spread + 1)


def spread_second(timer_id: str, seq: int, due: int, spread: int) -> int:
    """The second occurrence ``seq`` of ``timer_id``, due at ``due``, fires at: ``due``
    plus its :func:`spread_offset`, never past the last second a store key holds."""
    if spread <= 0:
        return due
    return min(due + spread_offset(timer_id, seq, spread), max(due, MAX_SECONDS))
