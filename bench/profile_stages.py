"""Where a worker's time goes: py-spy on one worker while it ingests, then while it fires.

``python -m bench.profile_stages [--requests N] [--out DIR]`` preloads N protobuf requests
(as :mod:`bench.ingest` does, all due in one second), starts one worker, records it with
py-spy (``--idle`` off: on-CPU samples only, native frames included) from its first
stored request to its last, then sends the bucket's tick and records the firing. The
raw collapsed stacks go to ``DIR/ingest.txt`` and ``DIR/fire.txt``; :mod:`bench.stages`
attributes them to stages. Needs ``py-spy`` (``pip install py-spy``) and the right to
trace the worker (root, or ``ptrace_scope`` 0).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time
import zlib
from pathlib import Path

from bench import fire
from bench.ingest import cpu_while_storing
from bench.load import RequestLoad, TimerSpec, timer_ids
from bench.scan import next_offsets, read_topic, timestamp_ms
from bench.stack import BenchStack, Worker, wait_until
from bench.stats import rate

__all__ = ["main"]


def _spy(pid: int, out: Path, rate: int, extra: list[str]) -> subprocess.Popen[bytes] | None:
    if rate <= 0:  # no profile: the worker's CPU figures alone (an A/B of a change)
        return None
    exe = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    # Native frames need the process paused while its stacks are read.
    cmd = [exe, "record", "-r", str(rate), "--format", "raw", *(extra or ["--nonblocking"])]
    cmd += ["-o", str(out), "-p", str(pid)]
    log = out.with_suffix(".log").open("wb")
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds (user + system) of each thread of ``pid``, summed by thread name."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        name = name.rstrip("0123456789")
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return out


def _threads_line(before: dict[str, float], after: dict[str, float], count: int) -> str:
    spent = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
    total = sum(spent.values()) or 1.0
    parts = [
        f"{k}: {v / count * 1e6:.1f} µs ({100 * v / total:.0f}%)"
        for k, v in sorted(spent.items(), key=lambda kv: -kv[1])
        if v > 0
    ]
    return "; ".join(parts)


def _stop(spy: subprocess.Popen[bytes] | None) -> None:
    if spy is None:
        return
    spy.send_signal(signal.SIGINT)
    spy.wait(30)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument(
        "--rate", type=int, default=250, help="py-spy samples per second (0: no py-spy)"
    )
    parser.add_argument("--out", type=Path, default=Path(".kafka-timers/profile"))
    parser.add_argument(
        "--crc32",
        action="store_true",
        help="place requests as librdkafka's default partitioner does: most are forwarded",
    )
    parser.add_argument("--native", action="store_true", help="py-spy --native")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    count = args.requests
    # --gil: only the thread holding the GIL is sampled, so a sample is Python CPU
    # (waits in select or in librdkafka's poll, which release it, are not counted).
    extra = ["--native"] if args.native else ["--nonblocking", "--gil"]
    with BenchStack("profile", Path(".kafka-timers/bench")) as stack:
        callbacks = stack.topic("profile-callbacks")
        due = int(time.time()) + 2
        load = RequestLoad(stack, callbacks)
        partitions = stack.settings.partition_count
        load.send(
            TimerSpec(
                timer_id,
                due,
                partition=zlib.crc32(timer_id.encode()) % partitions if args.crc32 else None,
            )
            for timer_id in timer_ids("profile", count)
        )
        load.flush()
        worker: Worker = stack.worker("worker-1")
        wait_until(lambda: worker.metric("kafka_timers_scheduled_total") > 0, 120, "a request")
        spy = _spy(worker.pid, args.out / "ingest.txt", args.rate, extra)
        threads = thread_cpu(worker.pid)
        cpu = cpu_while_storing(worker, count, "every request stored")
        _stop(spy)
        print("ingest threads:", _threads_line(threads, thread_cpu(worker.pid), count))
        print(f"ingest: {cpu / count * 1e6:.1f} µs worker CPU per request", flush=True)
        records = read_topic(
            stack.settings,
            stack.changelog,
            lambda m: (m.partition() or 0, m.offset() or 0, timestamp_ms(m)),
        )
        stamps = [t for _, _, t in records]
        print(f"ingest: {rate(count - 1, (max(stamps) - min(stamps)) / 1000):,.0f} stored/s")
        spy = _spy(worker.pid, args.out / "fire.txt", args.rate, extra)
        threads = thread_cpu(worker.pid)
        fired = fire.fire_bucket(
            stack, worker, callbacks, due, count, next_offsets((p, o) for p, o, _ in records)
        )
        _stop(spy)
        print("fire threads:", _threads_line(threads, thread_cpu(worker.pid), count))
        print(
            f"fire: {fired['worker_cpu_us_per_timer']:.1f} µs worker CPU per timer, "
            f"{fired['rate']:,.0f} delivered/s",
            flush=True,
        )


if __name__ == "__main__":
    main()
