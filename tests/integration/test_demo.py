"""``kafka-timers demo`` and ``kafka-timers broker`` as a user runs them: the demo says
where its workers are, ``status`` and ``get`` find them without flags, and neither
command leaves a broker or a worker behind, whether it is stopped by a closed terminal
(SIGHUP) or killed with ``kill -9`` (issue 25).

Each test starts its own demo (its own broker, on free ports) from a directory of its
own, told where to write its discovery file, with no Kafka variable of the session's.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from app.dev.broker import free_port
from app.dev.discovery import read_demo_stack
from tests.support.waiting import wait_until

#: A demo here joins its two workers in 15-25 s, more when the suite loads the machine.
START_TIMEOUT = 180.0
#: The kernel sends the parent-death signal at once; this only covers a loaded machine.
DEATH_TIMEOUT = 30.0


def clean_env(demo_file: Path) -> dict[str, str]:
    """This environment without any Kafka or kafka-timers variable (the session's broker
    must not be what the commands find), and with the test's own discovery file."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("KAFKA_", "METRICS_")) and k != "XDG_RUNTIME_DIR"
    }
    env["KAFKA_TIMERS_DEMO_FILE"] = str(demo_file)
    return env


class Output:
    """A child's stdout, read line by line in a thread, so a test polls what it printed."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        assert process.stdout is not None
        stream = process.stdout
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self.lines.append(line.rstrip("\n"))

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    def matches(self, pattern: str) -> list[re.Match[str]]:
        return [m for line in list(self.lines) if (m := re.search(pattern, line))]


def _sighup_at_its_default() -> None:
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


@contextmanager
def started(args: list[str], cwd: Path, env: dict[str, str]) -> Iterator[subprocess.Popen[str]]:
    """``kafka-timers <args>`` as a child; killed at the end if the test left it running.

    The child starts with SIGHUP at its default, as from a terminal: a test run started
    under ``nohup`` passes SIGHUP ignored to its children, and the demo keeps an ignored
    SIGHUP ignored (the user asked it to outlive the shell), so the SIGHUP test would
    wait for a stop that never comes.
    """
    process = subprocess.Popen(
        [sys.executable, "-m", "app", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=_sighup_at_its_default,
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def children(pid: int) -> set[int]:
    """The process ids of ``pid``'s children (Linux ``/proc``)."""
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        found.update(int(c) for c in (task / "children").read_text().split())
    return found


def gone(pid: int) -> bool:
    """Whether ``pid`` has ended: no such process, or a zombie nobody reaped yet."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def ended(pids: set[int]) -> set[int]:
    return {pid for pid in pids if gone(pid)}


@contextmanager
def never_left(pids: set[int]) -> Iterator[None]:
    """Kill whichever of ``pids`` a failed test leaves running: the machine is shared."""
    try:
        yield
    finally:
        for pid in pids:
            if not gone(pid):
                os.kill(pid, signal.SIGKILL)


def listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def demo_ports(out: Output) -> tuple[int, list[int]]:
    """The broker's port and the workers' web ports, once the demo has printed them."""
    wait_until(
        lambda: len(out.matches(r"status page http://127\.0\.0\.1:\d+/status")) == 2,
        START_TIMEOUT,
        lambda: f"the demo printed its workers' status pages; it printed:\n{out.text}",
    )
    broker = int(out.matches(r"dev broker on 127\.0\.0\.1:(\d+)")[0][1])
    webs = [int(m[1]) for m in out.matches(r"status page http://127\.0\.0\.1:(\d+)/status")]
    assert all(out.matches(r"metrics http://127\.0\.0\.1:\d+/metrics")), out.text
    return broker, webs


def test_the_demo_shows_its_workers_to_status_and_get_and_stops_on_sighup(
    tmp_path: Path,
) -> None:
    demo_file = tmp_path / "run" / "demo.json"
    env = clean_env(demo_file)
    with started(["demo", "--timers", "4"], tmp_path, env) as demo:
        out = Output(demo)
        broker_port, web_ports = demo_ports(out)
        stack = read_demo_stack(demo_file)
        assert stack is not None and stack.pid == demo.pid
        assert stack.workers == tuple(f"http://127.0.0.1:{p}" for p in web_ports)
        assert stack.bootstrap == f"127.0.0.1:{broker_port}"

        # No flag, no variable: status finds the demo's workers (once they have joined).
        def status_answers() -> subprocess.CompletedProcess[str] | None:
            result = cli(env, "status")
            return result if result.returncode == 0 else None

        status = wait_until(status_answers, START_TIMEOUT, "kafka-timers status answers")
        assert "2 worker(s): worker-1, worker-2" in status.stdout, status.stdout

        # A series, scheduled on the broker the demo printed, is pending to get: it reads
        # the workers, the broker and the credential from the discovery file.
        scheduled = cli(
            {**env, "KAFKA_BOOTSTRAP_SERVERS": stack.bootstrap},
            "schedule",
            "--topic",
            "demo-callbacks",
            "--cron",
            "*/2 * * * * *",
            "--id",
            "demo-series",
        )
        assert scheduled.returncode == 0, scheduled.stderr

        def series_fired() -> dict[str, object] | None:
            result = cli(env, "get", "--id", "demo-series")
            shown = json.loads(result.stdout) if result.stdout else {}
            series = shown.get("series")
            fired = isinstance(series, dict) and (series.get("fired") or 0) >= 1
            return shown if result.returncode == 0 and fired else None

        shown = wait_until(series_fired, 60, "get shows the series pending, fired at least once")
        assert shown["state"] == "pending" and shown["sources"] == ["worker"], shown

        kids = children(demo.pid)
        assert len(kids) == 5, kids  # the broker, 2 workers, 2 oscillators
        with never_left(kids):
            demo.send_signal(signal.SIGHUP)
            demo.wait(DEATH_TIMEOUT + 60)  # the workers leave their group first
            wait_until(
                lambda: not listening(broker_port), DEATH_TIMEOUT, "the broker's port closes"
            )
            wait_until(
                lambda: all(gone(pid) for pid in kids),
                DEATH_TIMEOUT,
                "every child of the demo has ended",
            )
            wait_until(
                lambda: not any(listening(p) for p in web_ports),
                DEATH_TIMEOUT,
                "the workers' web ports close",
            )
        assert "stopped." in out.text, out.text
        assert not demo_file.exists(), "the demo removes its discovery file"


def test_kill_9_of_the_demo_ends_its_broker_workers_and_oscillators(tmp_path: Path) -> None:
    demo_file = tmp_path / "demo.json"
    env = clean_env(demo_file)
    with started(["demo", "--timers", "1"], tmp_path, env) as demo:
        out = Output(demo)
        broker_port, web_ports = demo_ports(out)
        # Every child running, each worker serving: then the demo goes without a word.
        wait_until(
            lambda: all(listening(p) for p in web_ports),
            START_TIMEOUT,
            "both workers serve their web port",
        )
        kids = children(demo.pid)
        assert len(kids) == 5, kids
        with never_left(kids):
            demo.kill()
            demo.wait()
            wait_until(
                lambda: not listening(broker_port), DEATH_TIMEOUT, "the broker's port closes"
            )
            wait_until(
                lambda: all(gone(pid) for pid in kids),
                DEATH_TIMEOUT,
                lambda: f"every child of the demo has ended; left: {sorted(kids - ended(kids))}",
            )
            # A killed process shows as a zombie while its last threads still exit and
            # hold its sockets: its ports close a moment later.
            wait_until(
                lambda: not any(listening(p) for p in web_ports),
                DEATH_TIMEOUT,
                "the workers' web ports close",
            )
        # The file it could not remove names a dead process: nobody takes it for a demo.
        assert demo_file.exists()
        assert read_demo_stack(demo_file) is None


def test_kill_9_of_kafka_timers_broker_ends_its_broker(tmp_path: Path) -> None:
    port = free_port()
    env = clean_env(tmp_path / "demo.json")
    with started(["broker", "--port", str(port)], tmp_path, env) as wrapper:
        out = Output(wrapper)
        wait_until(
            lambda: out.matches(r"dev broker listening"),
            60,
            lambda: f"the broker command says it listens; it printed:\n{out.text}",
        )
        assert listening(port)
        (binary,) = children(wrapper.pid)
        with never_left({binary}):
            wrapper.kill()
            wrapper.wait()
            wait_until(lambda: not listening(port), DEATH_TIMEOUT, "the broker's port closes")
            wait_until(lambda: gone(binary), DEATH_TIMEOUT, "the broker binary has ended")


ROOT = Path(__file__).resolve().parents[2]


def readme_quickstart() -> str:
    """The README's quickstart block, exactly as a newcomer copies it."""
    text = (ROOT / "README.md").read_text()
    after = text.split("<!-- quickstart:", 1)[1]
    block = re.search(r"```sh\n(.*?)```", after, re.S)
    assert block is not None, "the README's quickstart block"
    return block.group(1)


def test_every_readme_quickstart_command_works_against_the_demo(tmp_path: Path) -> None:
    """In another shell, at the clone's root, with nothing set: each command of the
    README's quickstart, as typed, reaches the running demo and does what it says."""
    quickstart = readme_quickstart()
    assert "source .venv/bin/activate" in quickstart and "--bootstrap" not in quickstart
    demo_file = tmp_path / "run" / "demo.json"
    env = clean_env(demo_file)
    with started(["demo", "--timers", "2"], tmp_path, env) as demo:
        out = Output(demo)
        wait_until(
            lambda: out.matches(r"^stack keeps running"),
            START_TIMEOUT,
            lambda: f"the demo's own timers fired; it printed:\n{out.text}",
        )
        assert out.matches(r"^  export KAFKA_BOOTSTRAP_SERVERS=127\.0\.0\.1:\d+$"), out.text
        lines = quickstart.splitlines()
        outputs: list[str] = []
        for command in lines:
            # As in the user's shell: the virtualenv activated (the first line), then this.
            script = command if command == lines[0] else f"{lines[0]}\n{command}"
            done = subprocess.run(
                ["bash", "-c", script],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
                timeout=180,
                check=False,
            )
            assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
            outputs.append(done.stdout)
        by_command = dict(zip(lines, outputs, strict=True))
        get = next(o for c, o in by_command.items() if c.startswith("kafka-timers get"))
        assert json.loads(get)["state"] == "pending", get
        listed = next(o for c, o in by_command.items() if c.startswith("kafka-timers list"))
        assert '"id": "remind-42"' in listed, listed
        cancel = next(o for c, o in by_command.items() if c.startswith("kafka-timers cancel"))
        assert json.loads(cancel) == {"id": "remind-42", "outcome": "cancelled"}
        status = by_command["kafka-timers status"]
        assert "2 worker(s)" in status, status
        # The demo's shell shows the callbacks: the retry once, the series three times.
        wait_until(
            lambda: (
                len(out.matches(r"fired reminders: +due")) >= 3
                and out.matches(r"fired payments-retry: order-7 ")
            ),
            60,
            lambda: f"the demo shows the quickstart's callbacks; it printed:\n{out.text}",
        )
        assert len(out.matches(r"fired payments-retry: order-7 ")) == 1, out.text
