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
