"""Instructions a fired timer costs the worker's output, in-process: run as a script.

``bench/fire_path_probe.py`` counts the service's own work on a fake output; this counts
what it leaves out: :meth:`OutputProducer.callback` and the unit's audit records
(``_produce_audits``) for ``timers`` timers due in one second, on a real librdkafka
producer whose broker never answers (``produce`` only queues, as it does in a worker
before the flush sends). ``python bench/output_probe.py <timers>`` with ``PYTHONPATH``
set to a tree, under ``valgrind --tool=callgrind --collect-atstart=no
--toggle-collect=_PyEval_CallTracing``: only the produce calls inside
``sys.call_tracing`` are counted (:func:`bench.callgrind.counted_instructions` runs it
so; ``python -m bench.output_probe [timers]`` prints the count a timer for this tree).

Not counted: the flush (librdkafka's threads, the delivery reports it serves), which
needs a broker. Imports only ``app`` and confluent-kafka, never ``bench``, when run as a
script.
"""

from __future__ import annotations

import gc
import sys

#: The callbacks' fire time and due second: one round's, as a release round's are.
DUE = 1_767_225_600


def _count(timers: int) -> None:
    from app.core.timer import Timer
    from app.worker.output import OutputProducer

    output = OutputProducer(
        {
            "bootstrap.servers": "127.0.0.1:1",  # nothing listens: produce only queues
            "queue.buffering.max.messages": 2 * timers + 10,
            "queue.buffering.max.kbytes": 2_000_000,
        },
        worker_id="worker-1",
        fired_topic="fired",
        dlq_topic="dlq",
    )
    batch = [
        Timer(
            id=f"t{i:09d}",
            due=DUE,
            topic="callbacks",
            key=f"t{i:09d}".encode(),
            value=b'{"pad":"' + b"x" * 88 + b'"}',
            token=f"{i:016x}",
        )
        for i in range(timers)
    ]

    def produce() -> None:
        for timer in batch:
            output.callback(timer, partition=3, fired_at_ms=DUE * 1000 + 123)
        output._produce_audits()

    gc.collect()
    sys.call_tracing(produce, ())  # counted: this alone


def main(argv: list[str]) -> int:
    """As ``python -m bench.output_probe [timers]``: the count a timer for this tree."""
    from bench.callgrind import COUNTED_TIMERS, REPO, counted_instructions

    timers = int(argv[0]) if argv else COUNTED_TIMERS
    counted = counted_instructions(REPO / "bench" / "output_probe.py", [str(timers)], REPO)
    if counted is None:
        print("valgrind is not installed: nothing counted")
        return 1
    print(f"{counted / timers:,.0f} instructions a callback and its audit ({timers:,} timers)")
    return 0


if __name__ == "__main__":
    if __package__:  # python -m bench.output_probe
        sys.exit(main(sys.argv[1:]))
    _count(int(sys.argv[1]))  # python bench/output_probe.py <timers>, under callgrind
