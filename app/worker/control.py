"""The worker's side of the control topic: pauses and rate limits set while it runs.

At start, before the worker fires anything, the control topic is read to its end and
what it says is applied to :class:`~app.worker.topic_gates.TopicGates` (so a topic
paused before a restart is still paused on the first tick after it: its due timers are
held in the wheel again, never fired). Then a thread tails the topic and hands each
record to the event loop, which applies it to the gates (they are not thread-safe).
Every worker reads the whole topic (one partition), so every worker holds the same
pauses and limits; each applies them to the partitions it owns.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Mapping

from app.core.control import ControlRecord, ControlState
from app.kafka.control import ControlReader
from app.settings import Settings
from app.worker.topic_gates import TopicGates

__all__ = ["ControlFollower"]

log = logging.getLogger(__name__)

#: Longest a poll of the tail waits (and so how long a stop waits for the thread).
POLL_SECONDS = 0.5
#: Pause after the tail failed, before it tries again.
RETRY_SECONDS = 2.0


class ControlFollower:
    """Applies the control topic to ``gates``: :meth:`load` once, then :meth:`start`."""

    def __init__(
        self, settings: Settings, gates: TopicGates, configured: Mapping[str, float]
    ) -> None:
        self._settings = settings
        self._gates = gates
        #: The limits of KAFKA_TIMERS_TOPIC_RATE_LIMITS: a cleared rate record goes back
        #: to these.
        self._configured = dict(configured)
        self.state = ControlState()
        self._reader: ControlReader | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def load(self, timeout: float) -> None:
        """Read the control topic to its end and apply it (before the event loop runs)."""
        reader = ControlReader(self._settings)
        try:
            count = reader.read_to_end(self.state.apply, timeout)
        except BaseException:
            reader.close()
            raise
        self._reader = reader
        for topic in sorted(self.state.rates):
            self._gates.set_rate(topic, self.state.limit_of(topic, self._configured))
        for topic in sorted(self.state.paused):
            self._gates.pause(topic)
        log.info(
            "control topic %s read (%d records): paused %s, limits set at run time %s",
            reader.topic,
            count,
            sorted(self.state.paused),
            dict(sorted(self.state.rates.items())),
        )

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Tail the control topic in a thread, applying each record on ``loop``."""
        reader = self._reader
        assert reader is not None, "load() first"

        def handed(record: ControlRecord) -> None:
            loop.call_soon_threadsafe(self.apply, record)

        def tail() -> None:
            while not self._stop.is_set():
                try:
                    reader.poll(handed, POLL_SECONDS)
                except Exception:
                    log.exception("tailing control topic %s; trying again", reader.topic)
                    self._stop.wait(RETRY_SECONDS)
            reader.close()

        self._thread = threading.Thread(target=tail, name="kafka-timers-control", daemon=True)
        self._thread.start()

    def apply(self, record: ControlRecord) -> None:
        """Apply one record to the gates (on the event loop)."""
        if not self.state.apply(record):
            return
        topic = record.topic
        if record.kind == "pause":
            if topic in self.state.paused:
                self._gates.pause(topic)
                log.warning("callback topic %r paused (control topic)", topic)
            else:
                self._gates.resume(topic)
                log.warning("callback topic %r resumed (control topic)", topic)
        elif record.kind == "rate":
            limit = self.state.limit_of(topic, self._configured)
            self._gates.set_rate(topic, limit)
            log.warning(
                "callback topic %r limit now %s (control topic)",
                topic,
                "none" if limit is None else f"{limit:g}/s",
            )

    def stop(self, timeout: float = 2 * POLL_SECONDS) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        elif self._reader is not None:
            self._reader.close()
