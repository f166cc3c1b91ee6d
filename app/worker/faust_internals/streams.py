"""Faust's consumer and streams: paced fetch wait, read_committed, batches without idle wake-ups."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import faust
from aiokafka.consumer.fetcher import READ_COMMITTED, Fetcher

__all__ = ["take_events_when_ready", "tune_fetcher"]


log = logging.getLogger(__name__)


#: aiokafka's own ``Fetcher._get_actions_per_node``, which :func:`_paced_fetch_actions` wraps.
_AIOKAFKA_FETCH_ACTIONS = Fetcher._get_actions_per_node


#: Where :func:`tune_fetcher` leaves the pacing function on a fetcher.
_PACE_ATTRIBUTE = "_kafka_timers_fetch_wait_ms"


def _paced_fetch_actions(self: Any, assignment: Any) -> Any:
    """aiokafka's ``Fetcher._get_actions_per_node``, with each fetch's wait asked anew.

    aiokafka builds every fetch request there from ``_fetch_max_wait_ms``; a fetcher that
    :func:`tune_fetcher` gave a pacing function has that attribute set from it first.
    """
    pace: Callable[[], int] | None = getattr(self, _PACE_ATTRIBUTE, None)
    if pace is not None:
        self._fetch_max_wait_ms = pace()
    return _AIOKAFKA_FETCH_ACTIONS(self, assignment)


def tune_fetcher(app: faust.App, *, fetch_wait_ms: Callable[[], int], read_committed: bool) -> bool:
    """Pace the fetch wait (and set read_committed) of Faust's aiokafka consumer.

    Faust fixes aiokafka's fetch wait at 1,500 ms and has no setting for either.
    ``fetch_wait_ms`` is asked before every fetch request, in Faust's consumer thread
    (see :mod:`app.core.fetch_pacing`). Returns False if the fetcher could not be reached
    (not started yet).
    """
    fetcher = getattr(
        getattr(getattr(app.consumer, "_thread", None), "_consumer", None), "_fetcher", None
    )
    if fetcher is None or not hasattr(fetcher, "_fetch_max_wait_ms"):
        return False
    fetcher._fetch_max_wait_ms = fetch_wait_ms()
    setattr(fetcher, _PACE_ATTRIBUTE, fetch_wait_ms)
    if read_committed:
        fetcher._isolation_level = READ_COMMITTED
    return True


async def take_events_when_ready(
    stream: Any,
    max_: int,
    within: float,
    complete: Callable[[list[Any]], bool] | None = None,
) -> AsyncIterator[list[Any]]:
    """Faust's ``Stream.take_events(max_, within)``, asleep while no event arrives.

    Faust's version waits for a full buffer with a timeout of ``within`` in a loop, so
    it wakes every ``within`` seconds whether or not an event came: at the tick agent's
    2 ms that is 500 wake-ups a second, each building futures and tasks in mode's
    ``wait_first``, and that is most of an idle worker's CPU. This one waits without a
    timeout for the *first* event, then at most ``within`` for the rest of the batch:
    one wake-up per batch; ``complete`` (given the batch's events so far) ends the wait
    for the rest as soon as it says the batch is whole. Everything else is Faust's: the
    buffering processor, acks disabled while it runs and every event of a batch
    acknowledged once the caller is done with it (so at-least-once is unchanged), and
    the stream restored afterwards.
    """
    buffer: list[Any] = []
    events: list[Any] = []
    buffer_full = asyncio.Event()
    buffer_nonempty = asyncio.Event()
    buffer_consumed = asyncio.Event()
    consuming: asyncio.Future[None] | None = None
    enable_acks = stream.enable_acks
    channel_it = stream.channel.__aiter__()

    async def add_to_buffer(value: Any) -> Any:
        nonlocal consuming
        try:
            if consuming is not None:  # the caller is processing a batch: wait for it
                try:
                    await consuming
                finally:
                    consuming = None
            buffer.append(value)
            event = stream.current_event
            if event is None:
                raise RuntimeError("take buffer found no current event")
            events.append(event)
            buffer_nonempty.set()
            if complete is not None and len(buffer) < max_ and complete(events):
                buffer_full.set()  # whole: taken now; later events join it until yielded
            if len(buffer) >= max_:
                # Never more than max_ in a batch: wait until this one is consumed.
                buffer_full.set()
                buffer_consumed.clear()
                await stream.wait(buffer_consumed)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("error adding to the take buffer: %r", exc)
            await stream.crash(exc)
        return value

    stream.enable_acks = False  # acked here, once the caller has processed each batch
    stream.add_processor(add_to_buffer)
    stream._enable_passive(channel_it)
    try:
        while not stream.should_stop:
            await stream.wait_for_stopped(buffer_nonempty)
            if not buffer_full.is_set():
                await stream.wait_for_stopped(buffer_full, timeout=within)
            if not buffer:
                buffer_nonempty.clear()
                continue
            # Events arriving while the caller processes this batch wait for the next.
            consumed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            consuming = consumed
            try:
                yield list(events)
            finally:
                buffer.clear()
                for event in events:
                    await stream.ack(event)
                events.clear()
                buffer_nonempty.clear()
                if not consumed.done():
                    consumed.set_result(None)
                buffer_full.clear()
                buffer_consumed.set()
    finally:
        stream.enable_acks = enable_acks
        stream._processors.remove(add_to_buffer)
