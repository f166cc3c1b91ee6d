"""Real oscillator and worker processes for one test, stopped (and their logs shown) after."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from app.core.fired import FiredRecord
from app.dev.stack import ServiceProcess, start_oscillator, start_worker, wait_until_firing
from app.kafka.config import confluent_producer
from app.kafka.records import Record, TopicReader
from app.kafka.topics import ensure_topics
from app.settings import Settings
from kafka_timers_client.client import TimerClient
from tests.support.clock import moved_clock


class Stack:
    """Starts services on demand; :meth:`close` stops whatever is still running."""

    def __init__(self, settings: Settings, base_dir: Path) -> None:
        self.settings = settings
        self.base_dir = base_dir
        self.services: list[ServiceProcess] = []

    def worker(
        self, name: str = "worker-1", *, clock_offset: float = 0.0, **options: Any
    ) -> ServiceProcess:
        """Start a worker: the one way tests do. ``options`` are those of
        :func:`app.dev.stack.start_worker` (log level, data directory, ports, log name)
        and settings applied on top of the stack's; ``clock_offset`` moves its wall clock
        that many seconds ahead."""
        return self._start(start_worker, name, clock_offset, options)

    def oscillator(
        self, name: str = "oscillator-1", *, clock_offset: float = 0.0, **options: Any
    ) -> ServiceProcess:
        """Start an oscillator, its wall clock ``clock_offset`` seconds ahead; ``options``
        as for :meth:`worker` (:func:`app.dev.stack.start_oscillator`'s)."""
        return self._start(start_oscillator, name, clock_offset, options)

    def firing_client(
        self, probe_topic: str, *, probes: int = 32, timeout: float = 90.0, **worker: Any
    ) -> TimerClient:
        """Start an oscillator and a worker (``worker``: options as for :meth:`worker`),
        and return a client once they fire on every partition: ``probes`` timers due now
        on ``probe_topic`` fired within ``timeout`` s (:func:`app.dev.stack.wait_until_firing`)."""
        self.oscillator()
        self.worker(**worker)
        client = TimerClient(self.settings)
        wait_until_firing(self.settings, client, probe_topic, probes=probes, timeout=timeout)
        return client

    def _start(
        self,
        start: Callable[..., ServiceProcess],
        name: str,
        clock_offset: float,
        options: dict[str, Any],
    ) -> ServiceProcess:
        clock = moved_clock(clock_offset)
        service = start(
            self.settings,
            name,
            self.base_dir,
            env=clock.env,
            python_path=clock.python_path,
            **options,
        )
        self.services.append(service)
        return service

    def callback_topic(self, name: str) -> str:
        """A callback topic of this test's own: ``name`` with the stack's app id (unique
        per test) appended, unless ``name`` holds it already. A named broker
        (``KAFKA_BOOTSTRAP_SERVERS``) outlives a run, and a fixed name read another
        run's callbacks there (an id fired "before its second", counted twice)."""
        topic = name if self.settings.app_id in name else f"{name}-{self.settings.app_id}"
        ensure_topics(self.settings, [topic])
        return topic

    def reader(self, topic: str) -> TopicReader:
        return TopicReader(self.settings, topic)

    def producer(self) -> Producer:
        return Producer(confluent_producer(self.settings))

    def logs(self) -> str:
        return "\n".join(f"===== {s.name} =====\n{s.log_text()[-4000:]}" for s in self.services)

    def close(self) -> None:
        """Stop every service still running, all asked at once (SIGTERM), then each
        waited for: one by one, each worker that left handed its partitions to those
        still running, which recovered them only to be stopped in turn (seconds a test)."""
        for service in self.services:
            service.terminate()
        for service in self.services:
            service.stop()


@contextmanager
def running_stack(settings: Settings, base_dir: Path) -> Iterator[Stack]:
    stack = Stack(settings, base_dir)
    try:
        yield stack
    except BaseException:
        print(stack.logs())
        raise
    finally:
        stack.close()


def fired_records(records: Iterable[Record]) -> Iterator[FiredRecord]:
    """The fired topic's records read as :class:`FiredRecord`, in order; a record that
    is not one (empty, not JSON, no ``event``) is passed over."""
    for record in records:
        try:
            yield FiredRecord.from_json(record.value or b"{}")
        except ValueError:
            continue


def fired_ids(records: list[Record]) -> list[str]:
    """The ``timer-id`` header of each callback, duplicates kept."""
    return [(r.header("timer-id") or b"").decode() for r in records]
