"""The demo behind ``make run``: a whole dev stack on this machine, and timers firing.

Starts the embedded dev broker, two oscillators and two workers as separate processes,
prints where each worker's status page and metrics are, schedules a few dozen timers a
few seconds out, and prints each callback as it arrives with its lateness. Ctrl-C,
SIGTERM or a closed terminal (SIGHUP) stops everything (workers leave their group
gracefully); on Linux a ``kill -9`` of the demo takes its children with it too
(:mod:`app.dev.lifetime`). While it runs, a discovery file tells every
``kafka-timers`` client command in another shell where its broker and workers are
(:mod:`app.dev.discovery`), so the README's quickstart works as typed; it creates the
quickstart's callback topics and prints their callbacks too, and prints the
``export KAFKA_BOOTSTRAP_SERVERS=...`` line other Kafka tools need.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import statistics
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from app.dev.broker import DevBroker, free_port
from app.dev.discovery import DemoStack, remove_demo_stack, write_demo_stack
from app.dev.stack import ServiceProcess, start_oscillator, start_worker, wait_until_firing
from app.kafka.records import Record, TopicReader
from app.kafka.topics import ensure_topics
from app.settings import Settings
from kafka_timers_client.client import TimerClient
from kafka_timers_client.errors import KafkaTimersError

__all__ = ["run_demo"]

DEMO_TOPIC = "demo-callbacks"
#: The callback topics the README's quickstart names: the demo creates them and prints
#: every callback that reaches them, so each quickstart command, typed in another
#: shell, shows its result here.
QUICKSTART_TOPICS = ("payments-retry", "reminders")
DEMO_APP_ID = "kafka-timers-demo"
BASE_DIR = Path(".kafka-timers/demo")


def _say(text: str) -> None:
    # After a SIGHUP the terminal is gone and a write fails (EIO): the stop goes on.
    with contextlib.suppress(OSError):
        print(text, flush=True)


def _stop_on(stop: threading.Event) -> None:
    """Set ``stop`` on Ctrl-C, SIGTERM and SIGHUP (the terminal closed), but leave a
    SIGHUP that ``nohup`` ignores ignored: the user asked the demo to outlive the shell."""

    def on_signal(_signum: int, _frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:
        signal.signal(signal.SIGHUP, on_signal)


def _describe(record: Record) -> str:
    due = int(record.header("timer-due") or b"0")
    late_ms = record.timestamp_ms - due * 1000
    clock = time.strftime("%H:%M:%S", time.localtime(due))
    key = (record.key or b"").decode(errors="replace")
    where = "" if record.topic == DEMO_TOPIC else f"{record.topic}: "
    return (
        f"  fired {where}{key:<10} due {clock}  late {late_ms / 1000:+.3f}s  "
        f"partition {record.partition}"
    )


def run_demo(
    *,
    timers: int = 36,
    duration: float | None = None,
    partitions: int = 8,
    demo_file: Path | None = None,
) -> int:
    """Run the demo; return 0 when every timer fired on time, 1 otherwise.

    ``demo_file``: where to tell other commands the stack's addresses while it runs
    (:attr:`app.settings.Settings.demo_file`); ``None`` tells nobody.
    """
    stop = threading.Event()
    _stop_on(stop)
    shutil.rmtree(BASE_DIR, ignore_errors=True)
    BASE_DIR.mkdir(parents=True)
    services: list[ServiceProcess] = []
    with DevBroker() as broker:
        settings = replace(
            Settings(),
            bootstrap_servers=broker.bootstrap,
            partitions=partitions,
            session_timeout=6.0,
            app_id=DEMO_APP_ID,
            # Its own credential, so get and list can look timers up (the discovery file
            # hands it to them); /status needs none.
            operator_token=secrets.token_hex(24),
            # Its own control secret: the workers apply only control records signed
            # with it; the discovery file hands it to pause, resume, rate and cancel-bulk.
            control_secret=secrets.token_hex(24),
        )
        _say(f"dev broker on {broker.bootstrap}; logs in {BASE_DIR}/")
        ensure_topics(settings)
        ensure_topics(settings, [DEMO_TOPIC, DEMO_TOPIC + "-probe", *QUICKSTART_TOPICS])
        client: TimerClient | None = None
        try:
            # From this (the main) thread: each child dies with the demo, even a kill -9.
            for n in (1, 2):
                services.append(
                    start_oscillator(settings, f"oscillator-{n}", BASE_DIR, die_with_parent=True)
                )
                services.append(
                    start_worker(
                        settings,
                        f"worker-{n}",
                        BASE_DIR,
                        metrics_port=free_port(),
                        die_with_parent=True,
                    )
                )
            _announce(broker, settings, services, demo_file)
            _say("started 2 oscillators and 2 workers; waiting for them to join...")
            client = TimerClient(settings)
            try:
                wait_until_firing(settings, client, DEMO_TOPIC + "-probe", stop=stop)
            except TimeoutError as exc:
                raise KafkaTimersError(f"{exc}: see {BASE_DIR}/*.log") from exc
            if stop.is_set():
                return 130
            return _show_timers(settings, client, timers, duration, stop)
        finally:
            if client is not None:  # before the broker goes, or librdkafka logs it
                with contextlib.suppress(KafkaTimersError):  # keep the first error
                    client.close()
            if demo_file is not None:
                remove_demo_stack(demo_file)
            _say("stopping workers and oscillators...")
            for service in services:
                service.stop()
            _say("stopped.")


def _announce(
    broker: DevBroker, settings: Settings, services: list[ServiceProcess], demo_file: Path | None
) -> None:
    """Print where each worker's status page and metrics are, and write them to
    ``demo_file`` for ``kafka-timers status``, ``get`` and ``list`` in another shell."""
    workers = [s for s in services if s.settings is not None and s.name.startswith("worker")]
    webs = [f"http://127.0.0.1:{s.settings.web_port}" for s in workers if s.settings]
    scrapes = [f"http://127.0.0.1:{s.settings.metrics_port}/metrics" for s in workers if s.settings]
    # The file first: whoever reads the addresses printed can already use them.
    where = ""
    if demo_file is not None:
        stack = DemoStack(
            pid=os.getpid(),
            bootstrap=broker.bootstrap,
            app_id=DEMO_APP_ID,
            workers=tuple(webs),
            metrics=tuple(scrapes),
            operator_token=settings.operator_token,
            control_secret=settings.control_secret,
        )
        try:
            write_demo_stack(demo_file, stack)
            where = f"kafka-timers status, get and list find these workers through {demo_file}"
        except OSError as exc:  # the demo runs on; other commands then need --url
            where = f"could not write {demo_file} ({exc}): give kafka-timers status --url"
    for service, web, scrape in zip(workers, webs, scrapes, strict=True):
        _say(f"{service.name}: status page {web}/status   metrics {scrape}")
    if where:
        _say(where)


def _show_timers(
    settings: Settings,
    client: TimerClient,
    count: int,
    duration: float | None,
    stop: threading.Event,
) -> int:
    now = time.time()
    due: dict[str, int] = {}
    with contextlib.ExitStack() as readers:
        reader = readers.enter_context(TopicReader(settings, DEMO_TOPIC, from_end=True))
        # The quickstart's topics are read from now on: a command typed in another shell
        # while the demo's own timers still fire shows its callback here all the same.
        quickstart = [
            readers.enter_context(TopicReader(settings, t, from_end=True))
            for t in QUICKSTART_TOPICS
        ]
        for each in (reader, *quickstart):
            each.poll(0.2)  # take the assignment before the first callback can arrive
        for i in range(count):
            at = now + 3 + (i % 12) * 0.75 + 0.123  # spread over ~9 s, with fractions
            timer = client.schedule(DEMO_TOPIC, f"payload-{i}".encode(), f"demo-{i}", at=at)
            due[timer.id] = timer.due
        client.flush()
        _say(f"scheduled {count} timers due in 3-12 s (fractions round up); callbacks:")
        seen: dict[str, int] = {}
        lateness: list[float] = []
        deadline = time.monotonic() + 60
        while len(seen) < count and not stop.is_set() and time.monotonic() < deadline:
            for record in reader.poll(0.2):
                timer_id = (record.header("timer-id") or b"").decode()
                seen[timer_id] = seen.get(timer_id, 0) + 1
                lateness.append(record.timestamp_ms / 1000 - due.get(timer_id, 0))
                _say(_describe(record))
        fired = sum(1 for t in due if t in seen)
        early = sum(1 for x in lateness if x < 0)
        dupes = sum(n - 1 for n in seen.values())
        summary: dict[str, Any] = {
            "scheduled": count,
            "fired": fired,
            "early": early,
            "duplicates": dupes,
        }
        if lateness:
            ordered = sorted(lateness)
            summary["lateness_p50_s"] = round(statistics.median(ordered), 3)
            summary["lateness_max_s"] = round(ordered[-1], 3)
        _say("summary: " + json.dumps(summary))
        ok = fired == count and early == 0
        if duration is None and not stop.is_set():
            _say(
                "stack keeps running; in another shell (the README's quickstart):\n"
                "  source .venv/bin/activate\n"
                "  kafka-timers schedule --topic payments-retry --key order-7 "
                "--value '{\"attempt\":2}' --in 10s\n"
                "  kafka-timers status\n"
                "kafka-timers finds this demo by itself; other Kafka tools need its address:\n"
                f"  export KAFKA_BOOTSTRAP_SERVERS={settings.bootstrap_servers}\n"
                f"callbacks to {', '.join(QUICKSTART_TOPICS)} and {DEMO_TOPIC} show here. "
                "Ctrl-C stops everything."
            )
            while not stop.is_set():
                for each in (reader, *quickstart):
                    for record in each.poll(0.2):
                        _say(_describe(record))
        elif duration:
            stop.wait(duration)
        return 0 if ok else 1
