"""The Python client: schedule and cancel timers by producing to the request topic.

A cancel can wait for its answer: the worker that applies it writes what it did to the
fired topic (:class:`kafka_timers_client.fired.FiredRecord`), on the partition numbered like the
request's, naming the request's offset. The client takes that partition's end *before*
sending, sends the cancel to the partition it computed (murmur2, like every producer of
the request topic), learns the request's offset from the delivery report, and reads on
from that end until the record that names that offset.
"""

from __future__ import annotations

import secrets
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from pathlib import Path
from types import TracebackType
from typing import Any, overload

from confluent_kafka import KafkaError, Message, Producer

from kafka_timers_client import protowire
from kafka_timers_client.bounds import (
    MAX_ID_CHARS,
    MAX_SECONDS,
    MAX_TOKEN_CHARS,
    checked_text,
)
from kafka_timers_client.calendars import SkipPolicy
from kafka_timers_client.config import (
    ClientConfig,
    ClientConfigSource,
    confluent_producer,
)
from kafka_timers_client.debounce import debounced_due
from kafka_timers_client.due import due_second
from kafka_timers_client.errors import BrokerUnavailable, CancelNotAnswered, KafkaTimersError
from kafka_timers_client.extra_fires import ExtraFires
from kafka_timers_client.fired import FiredRecord, defines_state
from kafka_timers_client.fired_reader import FiredPartitionReader
from kafka_timers_client.late import LatePolicy
from kafka_timers_client.outcome import BackfillOutcome, CancelOutcome, PauseOutcome, TriggerOutcome
from kafka_timers_client.partitioner import partition_for
from kafka_timers_client.recurrence import Recurrence
from kafka_timers_client.request_checks import check_named, checked_headers, key_text
from kafka_timers_client.request_options import RequestOptions
from kafka_timers_client.spread import spread_second

__all__ = ["CancelOutcome", "ScheduledTimer", "TimerClient"]

#: The outcome each request that waits for its answer is read as.
_OUTCOMES: dict[str, type[CancelOutcome | PauseOutcome | TriggerOutcome | BackfillOutcome]] = {
    "cancel": CancelOutcome,
    "trigger": TriggerOutcome,
    "backfill": BackfillOutcome,
}


@dataclass(frozen=True)
class ScheduledTimer:
    """What :meth:`TimerClient.schedule` promises: keep ``token`` to cancel."""

    #: The timer's id (generated unless given); the callback carries it as ``timer-id``.
    id: str
    #: The token this version was scheduled with; cancels must present it.
    token: str
    #: Epoch second at or after which the callback is produced (a series: its first).
    due: int
    #: The series, for a recurring timer (its ``start`` is ``due``).
    recurrence: Recurrence | None = None
    #: The spread asked for, seconds (0: none).
    spread: int = 0

    @property
    def fire_at(self) -> int:
        """The second the worker fires it at (its first occurrence, for a series):
        ``due``, or for a spread timer the second in ``[due, due + spread]`` its id
        fixes (:mod:`kafka_timers_client.spread`)."""
        seq = 0 if self.recurrence is None else 1
        return spread_second(self.id, seq, self.due, self.spread)


class TimerClient(ExtraFires, RequestOptions):
    """Schedules timers. Requests are keyed by timer id, so timers due in the same
    second spread over all partitions, and a cancel or reschedule of an id lands on the
    partition that holds it (murmur2, like Java and Faust).

    Threads may share a client; cancels that wait for their answers take turns (one
    reader of the fired topic per client), so give each busy thread its own client.
    """

    def __init__(
        self,
        config: ClientConfig | ClientConfigSource | str,
        *,
        clock: Callable[[], float] = time.time,
        producer_conf: Mapping[str, Any] | None = None,
    ) -> None:
        """``config``: where the service is, as a :class:`ClientConfig`, the service's
        own settings (anything with ``client_config()``), or only a bootstrap address
        (the service's default topics, no security)."""
        if isinstance(config, str):
            config = ClientConfig(bootstrap_servers=config)
        elif not isinstance(config, ClientConfig):
            config = config.client_config()
        self.config = config
        self._topic = config.request_topic
        self._clock = clock
        self._producer = Producer(confluent_producer(config, **dict(producer_conf or {})))
        self._errors: list[str] = []
        #: Made on the first cancel that waits for its answer, then reused.
        self._answers: FiredPartitionReader | None = None
        self._request_partitions: int | None = None
        #: One reader, so one wait at a time: threads sharing a client take turns.
        self._wait_lock = threading.Lock()

    def _on_delivery(self, err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            self._errors.append(str(err))

    def _send(
        self,
        key: str,
        value: bytes | None,
        partition: int | None = None,
        on_delivery: Callable[[KafkaError | None, Message], None] | None = None,
        timestamp_ms: int | None = None,
    ) -> None:
        # Every argument by position (partition, callback, on_delivery, timestamp; -1 and
        # 0 are librdkafka's "the partitioner chooses" and "now"): with any keyword,
        # confluent-kafka looks each keyword it has up in a dict by a str made from a C
        # string, a third of a produce's instructions (callgrind).
        args = (
            self._topic,
            value,
            key.encode(),
            -1 if partition is None else partition,
            on_delivery or self._on_delivery,
            None,
            timestamp_ms or 0,
        )
        while True:
            try:
                self._producer.produce(*args)
                break
            except BufferError:
                self._producer.poll(0.05)
        self._producer.poll(0)

    def schedule(
        self,
        topic: str,
        value: bytes,
        key: bytes | str | None = None,
        *,
        at: float | Decimal | None = None,
        delay: float | None = None,
        cron: str | None = None,
        tz: str | None = None,
        every: float | str | None = None,
        start: float | Decimal | str | None = None,
        end: float | Decimal | str | None = None,
        count: int | None = None,
        late: str | LatePolicy | None = None,
        spread: float | str | None = None,
        timer_id: str | None = None,
        token: str | None = None,
        headers: Mapping[str, str | bytes] | Iterable[tuple[str, bytes]] | None = None,
        skip_holidays: str | None = None,
        skip_dates: Iterable[date | str] = (),
        skip_ics: str | Path | bytes | None = None,
        skip_policy: SkipPolicy | str | None = None,
        debounce: float | str | None = None,
        max_wait: float | str | None = None,
    ) -> ScheduledTimer:
        """Ask for ``value`` to reach ``topic`` (with ``key``) at ``at`` or after ``delay``,
        on every occurrence of a recurrence, or once a burst of requests is over.

        A one-shot timer takes exactly one of ``at`` (epoch seconds) or ``delay``
        (seconds). A recurring timer takes ``cron`` (5 fields, or 6 with the seconds
        first, in time zone ``tz``, UTC by default) or ``every`` (seconds, or a duration
        such as ``"30s"``), and optionally ``start`` and ``end`` (epoch seconds or ISO
        8601) and ``count``; the first occurrence is computed here, exactly as the worker
        will, and returned as ``due``. ``late`` is the timer's late-fire policy, e.g.
        ``"skip-after 5m"`` or ``"all"`` (default: the service's). ``spread`` (seconds,
        or a duration such as ``"60s"``, whole seconds up to a day) lets the callback
        fire at a second in ``[due, due + spread]`` fixed by the timer id (and, for a
        series, each occurrence's number): never early, the same second every time the
        same request is sent; ``due`` and ``timer-due`` stay the requested second.

        A series may skip dates, read in its zone (``tz``, which an ``every`` series
        then takes too): ``skip_holidays`` (a country or country-subdivision code of the
        ``holidays`` package: ``"FR"``, ``"US-CA"``), ``skip_dates`` (dates or
        ``YYYY-MM-DD``) and ``skip_ics`` (an iCalendar file's path or bytes: the dates
        its events cover, read here; the request carries the dates). ``skip_policy``:
        ``"skip"`` (the default: that occurrence is dropped) or, for ``cron``,
        ``"next"`` (moved to the same local time on the next date not skipped; see
        :class:`~kafka_timers_client.calendars.SkipPolicy`). Needs the ``[calendars]``
        extra.

        A debounced timer takes ``debounce`` (seconds, or a duration such as ``"30s"``;
        whole seconds, at least 1) instead of a due time, and optionally ``max_wait``
        (at least ``debounce``): it is due one debounce after this request, and each
        later debounced request for the same ``timer_id`` while it is pending moves it
        to one debounce after that request (never past this first request plus
        ``max_wait``) and makes the callback its own; the callback carries a
        ``timer-debounced: <n>`` header, the requests merged (see
        :mod:`kafka_timers_client.debounce`). Without a ``token`` a debounced request
        sends none (not a random one): every request for the id then merges. With one,
        only requests carrying it merge (others are refused ``wrong_token``). The
        ``due`` returned is this request's alone, as if none followed.

        A due time with a fraction of a second is rounded up: a timer never fires early.
        Scheduling again with the same ``timer_id`` and the pending version's ``token``
        replaces it (a whole series); with another token (or none, which draws a new
        one) the worker refuses it (``wrong_token``, answered on the fired topic and
        dead-lettered) and the pending version stays. Call :meth:`flush` (or use the
        client as a context manager) to be sure it was accepted. A bad recurrence or
        policy raises :class:`KafkaTimersError` here.
        """
        timer_id = checked_text(timer_id or uuid.uuid4().hex, "the id", MAX_ID_CHARS)
        debounced = debounce is not None or max_wait is not None
        if debounced and token is None:
            token = ""  # token-less: the id's next debounced request merges into it
        elif not debounced:
            token = token or secrets.token_hex(8)
        assert token is not None
        token = checked_text(token, "the token", MAX_TOKEN_CHARS)
        checked_text(topic, "the topic", len(topic))  # UTF-8: the policy judges the name
        header_list = checked_headers(headers)
        key = key_text(key)
        policy = late.text() if isinstance(late, LatePolicy) else late
        if policy:
            LatePolicy.parse(policy)  # refused here, not dead-lettered later
        spread_seconds = self.spread_seconds(spread, every)
        future = protowire.Future(
            callback_topic=topic,
            callback_key=key,
            callback=value,
            id=timer_id,
            token=token,
            headers=header_list,
            late=policy or None,
            spread=spread_seconds or None,
        )
        calendar = self.build_calendar(skip_holidays, skip_dates, skip_ics, skip_policy)
        if debounced:
            if at is not None or delay is not None or cron is not None or every is not None:
                raise KafkaTimersError("debounce= takes no at=, delay=, cron= or every=")
            if start is not None or end is not None or count is not None or tz is not None:
                raise KafkaTimersError("start, end, count and tz need cron= or every=")
            if calendar is not None:
                raise KafkaTimersError("skip_* need cron= or every=")
            seconds, longest = self.debounce_window(debounce, max_wait)
            future.debounce, future.max_wait = seconds, longest
            # Due one debounce after the request's timestamp: set it, and compute the due
            # second here from the same millisecond.
            sent_ms = int(self._clock() * 1000)
            due = debounced_due(sent_ms, seconds)
            if not 0 <= due <= MAX_SECONDS:
                raise KafkaTimersError(
                    f"debounce {debounce!r}: due past epoch second {MAX_SECONDS}"
                )
            self._send(timer_id, protowire.encode(future), timestamp_ms=sent_ms)
            return ScheduledTimer(id=timer_id, token=token, due=due, spread=spread_seconds)
        if cron is None and every is None:
            if start is not None or end is not None or count is not None or tz is not None:
                raise KafkaTimersError("start, end, count and tz need cron= or every=")
            if calendar is not None:
                raise KafkaTimersError("skip_* need cron= or every=")
            if (at is None) == (delay is None):
                raise KafkaTimersError("give exactly one of at=, delay=, cron= or every=")
            future.due = self._due_second(at, delay)
            self._send(timer_id, protowire.encode(future))
            return ScheduledTimer(id=timer_id, token=token, due=future.due, spread=spread_seconds)
        if at is not None or delay is not None:
            raise KafkaTimersError("a recurring timer takes start=, not at= or delay=")
        recurrence = self.build_recurrence(cron, tz, every, start, end, count, calendar=calendar)
        # The worker anchors the series at the request's timestamp: set it, and anchor
        # here from the same millisecond, so both find the same first occurrence.
        sent_ms = int(self._clock() * 1000)
        anchored = recurrence.anchored(-(-sent_ms // 1000))
        future.cron, future.every = recurrence.cron, recurrence.every
        future.tz = recurrence.tz if recurrence.cron or calendar is not None else None
        future.start, future.end, future.count = recurrence.start, recurrence.end, count
        if calendar is not None:
            future.skip_holidays = calendar.holidays
            future.skip_dates = [day.isoformat() for day in calendar.dates]
            future.skip_policy = calendar.policy.value
        self._send(timer_id, protowire.encode(future), timestamp_ms=sent_ms)
        assert anchored.start is not None
        return ScheduledTimer(
            id=timer_id,
            token=token,
            due=anchored.start,
            recurrence=anchored,
            spread=spread_seconds,
        )

    def _due_second(self, at: float | Decimal | None, delay: float | None) -> int:
        """The second a one-shot timer is due at (``at``, or ``delay`` from now, rounded
        up), within what every deployment's policy accepts: 0 to ``MAX_SECONDS``.

        Checked as a number before it is rounded or encoded: a due of 2**64 went out as a
        varint that the worker reads back as second 0 (fired at once), NaN and infinities
        raised from ``math.ceil``, and ``Decimal("1e999999999")`` would be rounded to a
        billion digits.
        """
        try:
            when = (
                Decimal(str(at))
                if at is not None
                else Decimal(str(self._clock())) + Decimal(str(delay))
            )
            within = when.is_finite() and 0 <= when <= MAX_SECONDS
        except (ArithmeticError, ValueError):  # not a number; an int too long for str()
            within = False
        if not within:
            given = f"at={at!r}" if at is not None else f"delay={delay!r}"
            raise KafkaTimersError(
                f"{given[:60]}: the due time must be epoch seconds from 0 to {MAX_SECONDS}"
            )
        return due_second(when)

    @overload
    def cancel(self, timer_id: str, token: str, wait: None = None) -> None: ...

    @overload
    def cancel(self, timer_id: str, token: str, wait: float) -> CancelOutcome: ...

    def cancel(self, timer_id: str, token: str, wait: float | None = None) -> CancelOutcome | None:
        """Ask for timer ``timer_id`` never to fire; refused unless ``token`` matches.

        Without ``wait`` the cancel is queued and this returns at once (:meth:`flush` to
        be sure the broker took it). With ``wait`` (seconds) it blocks until the worker
        answers and returns what the cancel did: :attr:`CancelOutcome.CANCELLED` (it
        will not fire), ``ALREADY_FIRED`` (it lost the race with its tick: the callback
        was or is being delivered), ``WRONG_TOKEN`` (refused: it still fires),
        ``CANCELLED_IN_ADVANCE`` (no such timer yet: a request with this id and token
        that comes later is dropped). Raises :class:`CancelNotAnswered` if no answer
        came within ``wait`` (the cancel was sent and will still be applied), and
        :class:`BrokerUnavailable` if the broker did not take it.
        """
        check_named(timer_id, token)
        future = protowire.Future(id=timer_id, token=token, action=protowire.ACTION_CANCEL)
        return self._cancel(timer_id, protowire.encode(future), wait)

    @overload
    def tombstone(self, timer_id: str, wait: None = None) -> None: ...

    @overload
    def tombstone(self, timer_id: str, wait: float) -> CancelOutcome: ...

    def tombstone(self, timer_id: str, wait: float | None = None) -> CancelOutcome | None:
        """Cancel ``timer_id`` as kafka-message-scheduler (etf1) producers do: a record
        with a null value keyed by the id.

        A tombstone carries no token, so it cancels only a timer scheduled without one
        (etf1's, or ``token=""``): a timer its producer protected with a token answers
        :attr:`CancelOutcome.WRONG_TOKEN`. Answers like :meth:`cancel` otherwise, except
        that an unknown id is :attr:`CancelOutcome.NOT_FOUND` (nothing is remembered).
        """
        check_named(timer_id, "")
        return self._cancel(timer_id, None, wait)

    @overload
    def pause(self, timer_id: str, token: str, wait: None = None) -> None: ...

    @overload
    def pause(self, timer_id: str, token: str, wait: float) -> PauseOutcome: ...

    def pause(self, timer_id: str, token: str, wait: float | None = None) -> PauseOutcome | None:
        """Pause timer ``timer_id`` (a one-shot or a series; refused unless ``token``
        matches): its occurrences wait when due, durably, until :meth:`resume`. An
        occurrence already on its way goes out. Scheduling the id again (a new version)
        ends the pause. ``wait``: as for :meth:`cancel`, the worker's answer."""
        return self._pause_or_resume(timer_id, token, protowire.ACTION_PAUSE, wait)

    @overload
    def resume(self, timer_id: str, token: str, wait: None = None) -> None: ...

    @overload
    def resume(self, timer_id: str, token: str, wait: float) -> PauseOutcome: ...

    def resume(self, timer_id: str, token: str, wait: float | None = None) -> PauseOutcome | None:
        """Resume the paused timer ``timer_id``: what came due meanwhile fires at once,
        by its late policy (a series' missed occurrences coalesce by default), then it
        goes on on schedule. ``wait``: as for :meth:`cancel`."""
        return self._pause_or_resume(timer_id, token, protowire.ACTION_RESUME, wait)

    def _pause_or_resume(
        self, timer_id: str, token: str, action: int, wait: float | None
    ) -> PauseOutcome | None:
        check_named(timer_id, token)
        value = protowire.encode(protowire.Future(id=timer_id, token=token, action=action))
        if wait is None:
            self._send(timer_id, value)
            return None
        what = "pause" if action == protowire.ACTION_PAUSE else "resume"
        return PauseOutcome(self._answer(timer_id, value, wait, what))

    def _cancel(
        self, timer_id: str, value: bytes | None, wait: float | None
    ) -> CancelOutcome | None:
        if wait is None:
            self._send(timer_id, value)
            return None
        return CancelOutcome(self._answer(timer_id, value, wait, "cancel"))

    def _answer(self, timer_id: str, value: bytes | None, wait: float, what: str) -> str:
        """Send a request naming ``timer_id`` and wait up to ``wait`` s for the worker's
        answer (its ``outcome``)."""
        if wait <= 0:
            raise KafkaTimersError(f"wait must be a positive number of seconds, not {wait}")
        deadline = time.monotonic() + wait
        if not self._wait_lock.acquire(timeout=wait):
            raise KafkaTimersError(
                f"the {what} of timer {timer_id!r} was not sent: other requests of this "
                f"client waited for their answers for all of {wait:g}s"
            )
        try:
            return self._send_and_wait(timer_id, value, deadline, wait, what)
        finally:
            self._wait_lock.release()

    def _send_and_wait(
        self, timer_id: str, value: bytes | None, deadline: float, wait: float, what: str
    ) -> str:
        answers = self._reader(deadline)
        assert self._request_partitions is not None
        key = timer_id.encode()
        # The partition every murmur2 producer (this client's schedule() among them) put
        # the timer's requests on; sent there explicitly, so it is where we read.
        partition = partition_for(key, self._request_partitions)
        # The end is taken before sending: the answer can only come after it.
        _, start = answers.watermarks(partition, deadline - time.monotonic())
        answers.follow(partition, start)
        offset = self._send_acknowledged(timer_id, value, partition, deadline)
        answer = answers.wait_for(
            key, lambda record: record.answers(timer_id, partition, offset), deadline
        )
        if answer is None:
            raise CancelNotAnswered(
                f"no answer to the {what} of timer {timer_id!r} within {wait:g}s "
                f"({self._topic}[{partition}] offset {offset}); it was sent and will be "
                "applied when a worker reads that partition: is one running?"
            )
        known = _OUTCOMES.get(what, PauseOutcome)
        try:
            return str(known(answer.outcome).value)
        except ValueError:
            raise KafkaTimersError(
                f"the worker answered the {what} of {timer_id!r} with {answer.outcome!r}, "
                "which this client does not know: upgrade it"
            ) from None

    def _send_acknowledged(
        self, timer_id: str, value: bytes | None, partition: int, deadline: float
    ) -> int:
        """Send one request to ``partition``; its offset once the broker acknowledged it."""
        report: list[tuple[KafkaError | None, int | None]] = []

        def delivered(err: KafkaError | None, msg: Message) -> None:
            report.append((err, msg.offset()))

        self._send(timer_id, value, partition, delivered)
        while not report and time.monotonic() < deadline:
            self._producer.poll(min(0.05, max(0.0, deadline - time.monotonic())))
        if not report:
            raise BrokerUnavailable(
                f"the cancel of timer {timer_id!r} was not acknowledged by the broker in time; "
                "it is still queued and may yet be applied"
            )
        err, offset = report[0]
        if err is not None or offset is None:
            raise BrokerUnavailable(f"the broker refused the cancel of {timer_id!r}: {err}")
        return offset

    def lookup(
        self, timer_id: str, *, since: float = 7 * 86400, timeout: float = 10.0
    ) -> FiredRecord | None:
        """What became of ``timer_id``, as the fired topic tells: the newest record of its
        fire (``event`` ``fired``, with ``due``, ``fired_at_ms`` and the worker), or of a
        cancel that removed it or waits for it (``event`` ``cancel``, ``outcome``), written
        in the last ``since`` seconds; ``None`` when there is none: the timer is pending,
        unknown, or older than that. Reads the one partition of the fired topic that holds
        the id's records (murmur2 of the id, like its requests), newest first.

        The worker holding the timer knows more (a pending timer's due second):
        ``kafka-timers get`` asks it first, then reads the fired topic the same way.
        Raises :class:`BrokerUnavailable` if the topic cannot be read within ``timeout``.
        """
        deadline = time.monotonic() + timeout
        if not self._wait_lock.acquire(timeout=timeout):
            raise KafkaTimersError(f"the lookup of {timer_id!r}: the client stayed busy")
        try:
            answers = self._reader(deadline)
            assert self._request_partitions is not None
            key = timer_id.encode()
            return answers.newest(
                partition_for(key, self._request_partitions),
                key,
                defines_state,
                floor_ms=int((self._clock() - since) * 1000),
                deadline=deadline,
            )
        finally:
            self._wait_lock.release()

    def _reader(self, deadline: float) -> FiredPartitionReader:
        """The client's one reader of the fired topic, and the request topic's partition
        count, both found on first use."""
        if self._answers is None:
            self._answers = FiredPartitionReader(self.config)
        if self._request_partitions is None:
            self._request_partitions = self._answers.partition_count(
                self._topic, deadline - time.monotonic()
            )
        return self._answers

    def flush(self, timeout: float = 15.0) -> None:
        """Wait until every request is acknowledged; raise if the broker did not take them."""
        remaining = self._producer.flush(timeout)
        if remaining or self._errors:
            detail = self._errors[0] if self._errors else f"{remaining} requests unacknowledged"
            self._errors = []
            raise BrokerUnavailable(f"timer requests not accepted by the broker: {detail}")

    def close(self) -> None:
        """Flush what is still queued, then release the producer's connections."""
        try:
            self.flush()
        finally:
            self._producer.close()
            if self._answers is not None:
                self._answers.close()

    def __enter__(self) -> TimerClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.close()
