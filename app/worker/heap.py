"""The worker's heap, settled once it serves: startup's objects out of the collector's way.

Python's full collections walk every tracked object: ~84,000 in a worker once Faust,
aiokafka and the stores are up. In the steady scenario (10,000 timers/s due, 2 workers)
they came every second or two, took 40-130 ms each, and most landed inside a fire (its
allocations trigger them): 1.0-1.4 s of pauses a minute, in the callbacks' lateness.
Frozen (``gc.freeze``), that heap is never walked again, and with larger thresholds the
rest is collected in passes of a few ms (measured: no pause over 7 ms; the time from a
tick to its last callback, per 5,000 timers, fell from a median 40-48 ms to 30-32 and a
worst of 150-180 to 75-100). Garbage is still collected, in fewer, larger passes;
reference counting frees almost everything a tick allocates anyway.

Settled before the first tick is fired, not after it (2026-11-28): a worker whose first
tick has many timers due (a restart after an outage, a burst due at start) fired them
under Python's thresholds (700, 10, 10), whose collections walked the unfrozen startup
heap again and again while the fire allocated. ``bench --only series`` (50,000 due at a
worker's first tick), two alternated pairs: one-shot timers fired at 23,628 and
25,150/s before, 33,973 and 34,555/s after (worker CPU 102 and 97 → 83 and 76 µs a
timer); series occurrences 14,177 and 15,494/s → 25,256 and 23,013/s (155 and 143 →
105 and 105 µs). Ticks come only once the worker has recovered and applied its waiting
requests, so startup is over by then.
"""

from __future__ import annotations

import gc

__all__ = ["GC_THRESHOLDS", "settle_heap"]

#: The collector's thresholds once a worker serves; Python's are (700, 10, 10).
GC_THRESHOLDS = (50_000, 20, 100)


def settle_heap() -> None:
    """Collect once, freeze what is left (startup's objects), and collect less often."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
