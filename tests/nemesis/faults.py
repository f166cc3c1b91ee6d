"""The nemesis itself: random faults, overlapping, each written to the history.

Every few seconds (2-12 s apart, drawn from the run's seed) it picks a fault and a target
that no other fault holds, and runs it in a thread of its own for a drawn time:

- ``kill -9`` of a worker or an oscillator, restarted 0-20 s later on its data;
- ``SIGSTOP`` of a worker or an oscillator for 1-20 s (past the 6 s session or not);
- ``broker kill -9``, restarted 1-15 s later on the same storage;
- ``clock jump``: :data:`~tests.nemesis.stack.CLOCK_WORKER` or
  :data:`~tests.nemesis.stack.CLOCK_OSCILLATOR` restarted (SIGTERM) on a clock 5-120 s
  ahead or behind, or back on the right one. Never both ahead at once: the README's
  Clocks section says that a worker's and an oscillator's clocks both ahead fire early
  by the smaller lead, by design;
- ``partition reset`` / ``partition silent``: a worker cut off the broker at the proxy
  for 3-25 s, its connections reset (and new ones refused) or left open with nothing
  passing;
- ``disk full``: the tmpfs under :data:`~tests.nemesis.stack.SMALL_DISK_WORKER`'s state
  filled to the last byte for 5-20 s.

A supervisor restarts any process that exits on its own (``crash``, in the history).
:meth:`Nemesis.heal` ends every fault early and puts every process back, on right clocks.
The seed fixes the draws, not the machine's timing: a replay runs the same plan.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import IO, Any

from tests.nemesis.history import Fault, Incarnation, write_line
from tests.nemesis.stack import (
    CLOCK_OSCILLATOR,
    CLOCK_WORKER,
    OSCILLATORS,
    SMALL_DISK_WORKER,
    WORKERS,
    NemesisStack,
)

__all__ = ["Nemesis"]

#: Relative weights of the faults drawn.
WEIGHTS = {
    "kill -9": 3,
    "SIGSTOP": 2,
    "broker kill -9": 1,
    "clock jump": 2,
    "partition": 2,
    "disk full": 1,
}


def _now_ms() -> int:
    return int(time.time() * 1000)


class Nemesis:
    """Draws and injects faults until :meth:`heal`."""

    def __init__(
        self, stack: NemesisStack, out: IO[str], rng: random.Random, write_lock: threading.Lock
    ) -> None:
        self.stack = stack
        self.rng = rng
        self._out = out
        self._write_lock = write_lock
        self._healing = threading.Event()
        self._busy: set[str] = set()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self.counts: Counter[str] = Counter()
        self._main = threading.Thread(target=self._run, name="nemesis", daemon=True)
        self._supervisor = threading.Thread(target=self._supervise, name="supervisor", daemon=True)

    def _write(self, entry: Any) -> None:
        with self._write_lock:
            write_line(self._out, entry)

    def _record(self, kind: str, target: str, start_ms: int, detail: str = "") -> None:
        self._write(Fault(kind, target, start_ms, _now_ms(), detail))
        self.counts[kind] += 1

    def start(self) -> None:
        for name in WORKERS:
            self._write(Incarnation(self.stack.worker_id(name), 0.0))
        self._main.start()
        self._supervisor.start()

    def heal(self) -> None:
        """End every fault, wait for their threads, and run every process again on a right
        clock."""
        self._healing.set()
        self._main.join(60)
        for thread in self._threads:
            thread.join(120)
        with self._lock:
            self._busy.add("*")  # the supervisor stands aside while we put things back
        proxy = self.stack.proxy
        if proxy is not None:
            proxy.heal()
        with contextlib.suppress(OSError):
            (self.stack.small_disk / "ballast").unlink()
        if self.stack.broker.broker is None or self.stack.broker.broker.poll() is not None:
            self.stack.broker.start_broker()
        for name in (CLOCK_WORKER, CLOCK_OSCILLATOR):
            if self.stack.offsets.get(name):
                self._restart(name, 0.0, graceful=True)
        for name in (*OSCILLATORS, *WORKERS):
            process = self.stack.processes[name]
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.process.pid, signal.SIGCONT)
            if not process.alive:
                self._restart(name, None, graceful=False)
        with self._lock:
            self._busy.discard("*")

    def stop(self) -> None:
        """Stop the supervisor (before the stack is closed)."""
        self._supervisor_stop = True
        self._supervisor.join(10)

    # -- drawing ------------------------------------------------------------------

    def _run(self) -> None:
        while not self._healing.wait(self.rng.uniform(2, 12)):
            kind = self.rng.choices(list(WEIGHTS), list(WEIGHTS.values()))[0]
            plan = self._plan(kind)
            if plan is None:
                continue
            target, action = plan
            thread = threading.Thread(
                target=self._hold, args=(target, action), name=f"fault {kind} {target}"
            )
            self._threads.append(thread)
            thread.start()

    def _free(self, names: tuple[str, ...]) -> list[str]:
        with self._lock:
            return [n for n in names if n not in self._busy and "*" not in self._busy]

    def _pick(self, names: tuple[str, ...]) -> str | None:
        """One of ``names`` free now, drawn by the run's rng; None if none is."""
        free = self._free(names)
        return self.rng.choice(free) if free else None

    def _plan(self, kind: str) -> tuple[str, Callable[[], None]] | None:
        """A target free now and what the fault does to it, or None (nothing free)."""
        rng = self.rng
        if kind in ("kill -9", "SIGSTOP"):
            name = self._pick((*WORKERS, *OSCILLATORS))
            if name is None:
                return None
            if kind == "kill -9":
                down = rng.uniform(0, 20)
                return name, lambda: self._kill(name, down)
            frozen = rng.uniform(1, 20)
            return name, lambda: self._freeze(name, frozen)
        if kind == "broker kill -9":
            if not self._free(("broker",)):
                return None
            away = rng.uniform(1, 15)
            return "broker", lambda: self._broker(away)
        if kind == "clock jump":
            name = self._pick((CLOCK_WORKER, CLOCK_OSCILLATOR))
            if name is None:
                return None
            other = CLOCK_OSCILLATOR if name == CLOCK_WORKER else CLOCK_WORKER
            if self.stack.offsets.get(name) and rng.random() < 0.4:
                offset = 0.0
            else:
                offset = float(rng.randint(5, 120)) * rng.choice((1, -1))
                if offset > 0 and self.stack.offsets.get(other, 0.0) > 0:
                    offset = -offset  # never both ahead (see the module docstring)
            return name, lambda: self._jump(name, offset)
        if kind == "partition":
            name = self._pick(WORKERS)
            if name is None:
                return None
            mode = rng.choice(("reset", "silent"))
            cut = rng.uniform(3, 25)
            return name, lambda: self._partition(name, mode, cut)
        if kind == "disk full":
            if not self._free((SMALL_DISK_WORKER,)):
                return None
            full = rng.uniform(5, 20)
            return SMALL_DISK_WORKER, lambda: self._fill(full)
        raise AssertionError(kind)

    def _hold(self, target: str, action: Callable[[], None]) -> None:
        with self._lock:
            if target in self._busy:
                return
            self._busy.add(target)
        try:
            action()
        except Exception as exc:  # a fault that failed is reported, the run goes on
            print(f"nemesis: a fault on {target} failed: {exc!r}", flush=True)
        finally:
            with self._lock:
                self._busy.discard(target)

    def _wait(self, seconds: float) -> None:
        """The fault's own length (it is the fault, not a wait for a result); cut short
        by :meth:`heal`."""
        self._healing.wait(seconds)

    # -- the faults ---------------------------------------------------------------

    def _restart(self, name: str, offset: float | None, *, graceful: bool) -> None:
        process = self.stack.processes[name]
        if graceful:
            process.stop(timeout=20)
        else:
            process.kill()
        self.stack.start_process(name, offset)
        if name in WORKERS and offset is not None:
            self._write(Incarnation(self.stack.worker_id(name), offset))

    def _kill(self, name: str, down: float) -> None:
        start = _now_ms()
        self.stack.processes[name].kill()
        self._wait(down)
        self.stack.start_process(name)
        self._record("kill -9", name, start, f"down {down:.1f} s")

    def _freeze(self, name: str, frozen: float) -> None:
        start = _now_ms()
        pid = self.stack.pid(name)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGSTOP)
        self._wait(frozen)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
        self._record("SIGSTOP", name, start, f"{frozen:.1f} s")

    def _broker(self, away: float) -> None:
        start = _now_ms()
        self.stack.broker.kill()
        self._wait(away)
        self.stack.broker.start_broker()
        self._record("broker kill -9", "broker", start, f"away {away:.1f} s")

    def _jump(self, name: str, offset: float) -> None:
        start = _now_ms()
        self._restart(name, offset, graceful=True)
        self._record("clock jump", name, start, f"to {offset:+.0f} s")

    def _partition(self, name: str, mode: str, cut: float) -> None:
        proxy = self.stack.proxy
        assert proxy is not None
        start = _now_ms()
        pid = self.stack.pid(name)
        links = proxy.cut({pid}, mode)
        self._wait(cut)
        proxy.heal({pid})
        self._record(f"partition {mode}", name, start, f"{cut:.1f} s, {links} connections")

    def _fill(self, full: float) -> None:
        start = _now_ms()
        ballast = self.stack.small_disk / "ballast"
        written = 0
        fd = os.open(ballast, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            for size in (1 << 20, 4096, 1):  # to the last byte
                block = b"\0" * size
                while True:
                    try:
                        written += os.write(fd, block)
                    except OSError:  # ENOSPC: full at this block size
                        break
            self._wait(full)
        finally:
            os.close(fd)
            with contextlib.suppress(OSError):
                ballast.unlink()
        self._record("disk full", SMALL_DISK_WORKER, start, f"{full:.1f} s, {written >> 20} MiB")

    # -- the supervisor -----------------------------------------------------------

    _supervisor_stop = False

    def _supervise(self) -> None:
        """Restart a process that exited by itself (not one a fault holds down)."""
        while not self._supervisor_stop:
            time.sleep(1.0)  # a poll interval: it watches for exits
            for name in (*WORKERS, *OSCILLATORS):
                with self._lock:
                    if name in self._busy or "*" in self._busy:
                        continue
                    process = self.stack.processes[name]
                    if process.alive:
                        continue
                    self._busy.add(name)
                try:
                    start = _now_ms()
                    code = process.process.returncode
                    self.stack.start_process(name)
                    self._record("crash", name, start, f"exit {code}, restarted")
                finally:
                    with self._lock:
                        self._busy.discard(name)
