"""The nemesis's load: a mix of timer requests, each promise written to the history.

- one-shot timers due 3-90 s ahead, to a plain, a spread and a rate-limited topic;
- reschedules of pending ones (same id and token, a later second, a new payload);
- cancels with the token, waiting for the answer on ``timer-fired`` (a thread of their
  own, with the service's client);
- ``every`` series with late policy ``all``;
- now and then a burst: a few hundred timers, all rescheduled a couple of seconds later
  through the other route (the pattern in which a forwarding worker's crash undoes
  reschedules).

Schedules go out by two routes: most through a producer with librdkafka's default
partitioner (``consistent_random``, CRC32 of the key: most land on a partition that is
not their id's owner and are forwarded), the rest straight to the owner partition, as
the clients send. A version is written to the history when the broker acknowledged it
(or refused it: then it is indeterminate).
"""

from __future__ import annotations

import queue
import random
import secrets
import threading
import time
from dataclasses import dataclass
from typing import IO, Any

from confluent_kafka import KafkaError, Message, Producer

from app.core.routing import owner_of
from app.kafka.config import confluent_producer
from app.kafka.records import Record
from app.settings import Settings
from kafka_timers_client import protowire
from kafka_timers_client.client import TimerClient
from kafka_timers_client.errors import KafkaTimersError
from kafka_timers_client.spread import spread_second
from tests.nemesis.history import (
    CancelOp,
    SeriesOp,
    Version,
    series_payload,
    version_payload,
    write_line,
)
from tests.nemesis.stack import LIMITED_TOPIC, PARTITIONS, PLAIN_TOPIC, SPREAD_TOPIC

__all__ = ["Load"]

#: Operations a second, on average (a burst comes on top).
RATE = 5.0
#: How long a cancel waits for its answer.
CANCEL_WAIT = 20.0
#: Cancels waiting their turn at most (more are not sent while the broker is away).
CANCEL_BACKLOG = 20


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class _Timer:
    """A one-shot timer the load may still reschedule or cancel."""

    id: str
    token: str
    version: int
    due: int
    fire_at: int
    topic: str
    kind: str
    spread: int
    #: ``queued``, ``sent``, or the answer of its cancel (``unanswered`` for none).
    cancel: str = ""
    #: When its newest version was sent (time.time()).
    sent_at: float = 0.0
    #: Its newest version the broker acknowledged (0: none yet).
    acked: int = 0
    #: The route its newest version was sent by (``any`` or ``owner``).
    route: str = ""


class Load:
    """Sends the mix from a thread until :meth:`stop`; writes the history to ``out``."""

    def __init__(
        self,
        settings: Settings,
        out: IO[str],
        rng: random.Random,
        write_lock: threading.Lock,
        requests: list[Record],
    ) -> None:
        """``requests``: the request topic's records as they are read (a
        :class:`~tests.nemesis.tailing.Tail`'s, growing), for the arrivals at owners."""
        self.settings = settings
        self.rng = rng
        self._out = out
        self._write_lock = write_lock
        base = confluent_producer(settings, **{"linger.ms": 5})
        self._any = Producer({**base, "partitioner": "consistent_random"})
        self._owner = Producer(base)
        self._timers: dict[str, _Timer] = {}
        self._cancels: queue.Queue[_Timer] = queue.Queue()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, name="nemesis-load", daemon=True),
            threading.Thread(target=self._cancel_loop, name="nemesis-cancels", daemon=True),
        ]
        self._n = 0
        self._requests = requests
        #: How many of ``requests`` were looked at.
        self._requests_seen = 0
        self._series_expected: set[tuple[tuple[str, int], frozenset[str]]] = set()
        #: Payloads of the versions that reached their owner partition.
        self._arrived: set[str] = set()
        self._bursts: list[tuple[float, list[str]]] = []
        #: What was sent, for the run's report.
        self.sent: dict[str, int] = {}
        #: The latest second anything sent may fire at.
        self.last_second = 0

    # -- writing the history ------------------------------------------------------

    def _write(self, entry: Any) -> None:
        with self._write_lock:
            write_line(self._out, entry)

    def _count(self, what: str) -> None:
        self.sent[what] = self.sent.get(what, 0) + 1

    # -- running ------------------------------------------------------------------

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self, flush_timeout: float = 120.0) -> int:
        """Stop sending; wait for every acknowledgement. Returns requests never answered."""
        self._stop.set()
        for thread in self._threads:
            thread.join(CANCEL_WAIT + 10)
        return self._any.flush(flush_timeout) + self._owner.flush(flush_timeout)

    def _run(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            next_at += self.rng.expovariate(RATE)
            self._step()
            self._any.poll(0)
            self._owner.poll(0)
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    def _step(self) -> None:
        now = time.time()
        self._follow_arrivals()
        waiting = []
        for since, ids in self._bursts:
            if since > now:
                waiting.append((since, ids))
                continue
            left = []
            for timer_id in ids:
                burst = self._timers[timer_id]
                if burst.cancel or burst.fire_at < now + 5:
                    continue  # too late to reschedule it
                if self._arrived_at_owner(burst):
                    self._reschedule(burst, "owner")
                else:
                    left.append(timer_id)
            if left:
                waiting.append((since, left))
        self._bursts = waiting
        roll = self.rng.random()
        if roll < 0.45:
            self._new_one_shot()
        elif roll < 0.70:
            timer = self._pick(min_ahead=4)
            if timer is not None:
                route = self.rng.choice(("any", "any", "owner"))
                # by the other route only once the last version reached the owner: the
                # README leaves two routes' race to the producer (two producers: one
                # retrying past a broker restart lands after the other's newer record)
                if route == timer.route or self._arrived_at_owner(timer):
                    self._reschedule(timer, route)
        elif roll < 0.85:
            timer = self._pick(min_ahead=-30)
            # a version sent by the other route may still be on its way to the owner,
            # where the cancel would overtake it: cancel what reached the owner
            if (
                timer is not None
                and self._arrived_at_owner(timer)
                and self._cancels.qsize() < CANCEL_BACKLOG
            ):
                timer.cancel = "queued"
                self._cancels.put(timer)
        elif roll < 0.90:
            self._new_series()
        elif roll < 0.903:
            self._burst(self.rng.randint(100, 300))

    def _follow_arrivals(self) -> None:
        """Note which versions have reached their id's owner partition (sent there, or a
        worker's forwarded copy)."""
        fresh = self._requests[self._requests_seen :]
        self._requests_seen += len(fresh)
        for record in fresh:
            try:
                future = protowire.decode(record.value or b"")
            except ValueError:
                continue
            if future.id and owner_of(future.id, PARTITIONS) == record.partition:
                self._arrived.add((future.callback or b"").decode(errors="replace"))

    def _arrived_at_owner(self, timer: _Timer) -> bool:
        return version_payload(timer.id, timer.version) in self._arrived

    def _pick(self, min_ahead: float) -> _Timer | None:
        """A random timer of the last few hundred, not cancelled, due ``min_ahead`` s from
        now or later."""
        if not self._timers:
            return None
        ids = list(self._timers)[-400:]
        now = time.time()
        for _ in range(5):
            timer = self._timers[self.rng.choice(ids)]
            if not timer.cancel and timer.fire_at >= now + min_ahead:
                return timer
        return None

    def expected(self) -> dict[tuple[str, int], frozenset[str]]:
        """The callbacks that must come (call after :meth:`stop`), by ``(id, seq)``, each
        with the payloads that count as it: every occurrence of an acknowledged series,
        and for each timer whose cancel was not answered ``cancelled`` (nor left
        unanswered) its newest acknowledged version, or any version sent after it (a
        request the broker took without the acknowledgement reaching the load).

        A request never acknowledged is not waited for: the broker may never have taken
        it (in the hour on Apache Kafka, 202 such callbacks were all of requests that are
        not in the request topic; the drain waited its whole ten minutes for them). The
        checker judges those versions from the history (indeterminate)."""
        out = dict(self._series_expected)
        for timer in self._timers.values():
            if timer.cancel in ("cancelled", "cancelled_in_advance", "unanswered", "sent"):
                continue
            if not timer.acked:
                continue
            out[(timer.id, 0)] = frozenset(
                version_payload(timer.id, number)
                for number in range(timer.acked, timer.version + 1)
            )
        return out

    def _new_id(self, prefix: str) -> str:
        self._n += 1
        return f"{prefix}{self._n:06d}-{self.rng.getrandbits(24):06x}"

    def _new_one_shot(self, route: str | None = None, due_in: float | None = None) -> _Timer:
        kind = self.rng.choices(("plain", "spread", "limited"), (6, 2, 2))[0]
        topic = {"plain": PLAIN_TOPIC, "spread": SPREAD_TOPIC, "limited": LIMITED_TOPIC}[kind]
        spread = self.rng.randint(5, 30) if kind == "spread" else 0
        timer_id = self._new_id("t")
        due = int(time.time() + (due_in if due_in is not None else self.rng.uniform(3, 90))) + 1
        timer = _Timer(
            timer_id,
            secrets.token_hex(6),
            0,
            due,
            spread_second(timer_id, 0, due, spread),
            topic,
            kind,
            spread,
        )
        self._timers[timer_id] = timer
        self._send_version(timer, route or self.rng.choice(("any",) * 4 + ("owner",)))
        self._count("schedules")
        return timer

    def _reschedule(self, timer: _Timer, route: str) -> None:
        timer.due += self.rng.randint(5, 60)
        timer.fire_at = spread_second(timer.id, 0, timer.due, timer.spread)
        self._send_version(timer, route)
        self._count("reschedules")

    def _send_version(self, timer: _Timer, route: str) -> None:
        timer.version += 1
        timer.route = route
        timer.sent_at = time.time()
        number, due, fire_at = timer.version, timer.due, timer.fire_at
        self.last_second = max(self.last_second, fire_at)
        value = protowire.encode(
            protowire.Future(
                callback_topic=timer.topic,
                callback_key=timer.id,
                callback=version_payload(timer.id, number).encode(),
                id=timer.id,
                token=timer.token,
                due=due,
                spread=timer.spread or None,
            )
        )
        sent_ms = _now_ms()

        def delivered(err: KafkaError | None, msg: Message) -> None:
            ok = err is None
            if ok:
                timer.acked = max(timer.acked, number)
            self._write(
                Version(
                    timer.id,
                    number,
                    timer.token,
                    due,
                    fire_at,
                    route,
                    sent_ms,
                    _now_ms() if ok else None,
                    msg.partition() if ok else None,
                    timer.kind,
                )
            )

        self._produce(route, timer.id, value, delivered)

    def _produce(self, route: str, timer_id: str, value: bytes, delivered: Any, **kw: Any) -> None:
        producer = self._any if route == "any" else self._owner
        if route == "owner":
            kw["partition"] = owner_of(timer_id, PARTITIONS)
        while True:
            try:
                producer.produce(
                    self.settings.topics.requests,
                    value,
                    timer_id.encode(),
                    on_delivery=delivered,
                    **kw,
                )
                return
            except BufferError:
                producer.poll(0.05)

    def _new_series(self) -> None:
        timer_id = self._new_id("s")
        every = self.rng.randint(2, 6)
        count = self.rng.randint(3, 10)
        start = int(time.time()) + self.rng.randint(5, 20)
        token = secrets.token_hex(6)
        value = protowire.encode(
            protowire.Future(
                callback_topic=PLAIN_TOPIC,
                callback_key=timer_id,
                callback=series_payload(timer_id).encode(),
                id=timer_id,
                token=token,
                every=every,
                start=start,
                count=count,
                late="all",
            )
        )
        sent_ms = _now_ms()
        self.last_second = max(self.last_second, start + (count - 1) * every)

        def delivered(err: KafkaError | None, _msg: Message) -> None:
            acked = _now_ms() if err is None else None
            self._write(SeriesOp(timer_id, token, start, every, count, sent_ms, acked))
            if acked is not None:
                self._series_expected.update(
                    ((timer_id, seq), frozenset({series_payload(timer_id)}))
                    for seq in range(1, count + 1)
                )

        self._produce("any", timer_id, value, delivered, timestamp=sent_ms)
        self._count("series")

    def _burst(self, size: int) -> None:
        """``size`` timers due 20-40 s ahead by the default partitioner, each rescheduled
        straight to its owner 2 s later."""
        ids = [self._new_one_shot("any", self.rng.uniform(20, 40)).id for _ in range(size)]
        self._bursts.append((time.time() + 2.0, ids))
        self._count("bursts")

    def _cancel_loop(self) -> None:
        client = TimerClient(self.settings)
        try:
            while not self._stop.is_set():
                try:
                    timer = self._cancels.get(timeout=0.2)
                except queue.Empty:
                    continue
                sent_ms = _now_ms()
                timer.cancel = "sent"
                try:
                    answer = client.cancel(timer.id, timer.token, wait=CANCEL_WAIT)
                    outcome: str | None = answer.value
                    answered: int | None = _now_ms()
                except KafkaTimersError:  # no answer in time, or the broker did not take it
                    outcome, answered = None, None
                timer.cancel = outcome or "unanswered"
                self._write(CancelOp(timer.id, timer.token, sent_ms, answered, outcome))
                self._count(f"cancels {outcome or 'unanswered'}")
        finally:
            with_timeout = threading.Thread(target=client.close, daemon=True)
            with_timeout.start()
            with_timeout.join(30)
