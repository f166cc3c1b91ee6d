"""Move this interpreter's wall clock by ``KAFKA_TIMERS_TEST_CLOCK_OFFSET`` seconds, from start-up.

Test-only. :func:`tests.support.clock.moved_clock` puts this directory first on a child
process's ``PYTHONPATH`` and sets the variable. Python imports ``sitecustomize`` while
it starts (module ``site``), before ``-m app`` or any other code, so every
``time.time()`` / ``datetime.now()`` the process ever reads is moved, including clocks
bound earlier as default arguments (time-machine patches the C functions themselves).

What does not move (measured, see platform-notes "Moving a process's clock"): monotonic
clocks (``time.monotonic``, ``loop.time()``), C libraries (librdkafka sets record
timestamps on real time, RocksDB), the kernel (file mtimes) and other processes. A child
of this process inherits the variable and is moved by the same offset.

Why not libfaketime: it hangs librdkafka (``list_topics`` and ``flush`` never return).
This file shadows any other ``sitecustomize`` on the path; none is used here.
"""

from __future__ import annotations

import os

_OFFSET = os.environ.get("KAFKA_TIMERS_TEST_CLOCK_OFFSET")
if _OFFSET and float(_OFFSET) != 0.0:
    import time

    import time_machine

    # tick=True: the moved clock runs on at the real rate from the moved start.
    _TRAVELLER = time_machine.travel(time.time() + float(_OFFSET), tick=True)
    _TRAVELLER.start()  # never stopped: the clock stays moved for the life of the process
    # Read it at once: time-machine starts the ticking at the first read, not at start(),
    # and until then the moved clock stands still. Left to the first read by the
    # service (after seconds of imports), the clock would lag real time + offset by those
    # seconds, differently in every process: measured, a worker fired 436 ms before the
    # second its oscillator had ticked.
    time.time()
