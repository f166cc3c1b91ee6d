"""An idle worker's CPU by thread: what wakes a worker with nothing due.

``python -m bench.idle [seconds]`` starts a fresh dev broker, one oscillator and one
worker (8 partitions, nothing pending), waits until every partition ticks, settles, and
then reads each thread's scheduler counter (``/proc/<pid>/task/<tid>/schedstat``) over
``seconds`` (20 by default). It prints each thread's share of one core and the whole
process's, with the thread's name as the kernel has it (librdkafka names its own,
``rdk:main``, ``rdk:broker1``; Python threads share the interpreter's name, so those are
told apart by py-spy, which the script runs once at the end when it is installed).

The full benchmark's ``idle`` row (``bench.capacity``) is the figure that counts; this
is the tool for finding where an idle worker's CPU goes, and for A/B runs of a change.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from bench.procstat import thread_cpu_ns, thread_names, thread_shares, thread_wakeups
from bench.stack import BenchStack, wait_serving

__all__ = ["measure"]

SETTLE_SECONDS = 5.0


def _record(pid: int, seconds: float) -> subprocess.CompletedProcess[str] | None:
    """py-spy's samples of ``pid`` over ``seconds`` (not pausing it), folded by thread."""
    if not shutil.which("py-spy"):
        return None
    out = Path(".kafka-timers/bench/idle/profile.txt")
    return subprocess.run(
        [
            "py-spy",
            "record",
            "--pid",
            str(pid),
            "--duration",
            str(int(seconds)),
            "--rate",
            "250",
            "--nonblocking",
            "--threads",
            "--format",
            "raw",
            "--output",
            str(out),
        ],
        capture_output=True,
        text=True,
        check=False,
    )


def measure(seconds: float = 20.0, *, record: bool = False) -> dict[str, object]:
    """Start an idle stack, measure the worker's CPU (a share of one core) and wakeups
    (a second) by thread over ``seconds`` (with ``record``, py-spy samples it meanwhile
    into ``.kafka-timers/bench/idle/profile.txt``, idle stacks left out: what remains is
    where the CPU went)."""
    with BenchStack("idle", Path(".kafka-timers/bench")) as stack:
        stack.oscillator()
        worker = stack.worker("worker-1")
        wait_serving([worker], stack.partitions)
        time.sleep(SETTLE_SECONDS)  # the settled idle state is what is measured
        names = thread_names(worker.pid)
        woke = thread_wakeups(worker.pid)
        began, before = time.monotonic(), thread_cpu_ns(worker.pid)
        profile = _record(worker.pid, seconds) if record else None
        if profile is None:
            time.sleep(seconds)  # the measured window itself
        wall, after = time.monotonic() - began, thread_cpu_ns(worker.pid)
        threads = thread_shares(names, (before, after), (woke, thread_wakeups(worker.pid)), wall)
        dump = ""
        if shutil.which("py-spy"):
            dump = subprocess.run(
                ["py-spy", "dump", "--pid", str(worker.pid)],
                capture_output=True,
                text=True,
                check=False,
            ).stdout
        return {
            "share": sum(share for share, _ in threads.values()),
            "threads": threads,
            "py_spy": dump,
        }


def main() -> None:
    args = [a for a in sys.argv[1:] if a != "--record"]
    seconds = float(args[0]) if args else 20.0
    result = measure(seconds, record="--record" in sys.argv)
    print(json.dumps({k: v for k, v in result.items() if k != "py_spy"}, indent=1))
    if result["py_spy"]:
        print(result["py_spy"])


if __name__ == "__main__":
    main()
