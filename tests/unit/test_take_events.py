"""The tick agent's batching: Faust's take_events, without waking while nothing arrives.

Runs a real Faust agent in Faust's own test context (no broker): what the agent sees
must be what ``Stream.take_events`` gives, and an idle stream must not be woken.
"""

from __future__ import annotations

import asyncio
from typing import Any

import faust

from app.worker.faust_internals.streams import take_events_when_ready
from tests.support.waiting import wait_until_async

MAX = 3
WITHIN = 0.05


def _app() -> faust.App:
    # Never connects: agent.test_context() delivers events in memory.
    return faust.App("t-take", broker="kafka://127.0.0.1:1", autodiscover=False, loghandlers=[])


def test_batches_are_taken_as_faust_takes_them_at_most_max_each() -> None:
    app = _app()
    batches: list[list[int]] = []
    acks_during: list[bool] = []

    @app.agent()
    async def agent(stream: Any) -> Any:
        async for events in take_events_when_ready(stream, MAX, WITHIN):
            acks_during.append(stream.enable_acks)
            batches.append([e.value for e in events])
            yield len(events)

    async def scenario() -> None:
        async with agent.test_context() as ctx:
            for value in range(5):
                await ctx.put(value, wait=False)
            await wait_until_async(lambda: sum(map(len, batches)) == 5, 5, "five events taken")
            await ctx.put(10, wait=False)
            await wait_until_async(lambda: sum(map(len, batches)) == 6, 5, "the sixth event taken")

    asyncio.run(scenario())
    assert batches == [[0, 1, 2], [3, 4], [10]]
    assert acks_during == [False, False, False]  # acked by the batcher, after each batch


def test_an_idle_stream_is_not_woken_until_an_event_arrives() -> None:
    app = _app()
    waits: list[float | None] = []
    batches: list[list[int]] = []

    @app.agent()
    async def agent(stream: Any) -> Any:
        wait_for_stopped = stream.wait_for_stopped

        async def counted(*args: Any, timeout: float | None = None) -> Any:
            waits.append(timeout)
            return await wait_for_stopped(*args, timeout=timeout)

        stream.wait_for_stopped = counted
        async for events in take_events_when_ready(stream, MAX, 0.002):
            batches.append([e.value for e in events])
            yield len(events)

    async def scenario() -> None:
        async with agent.test_context() as ctx:
            await asyncio.sleep(
                0.3
            )  # an idle spell to count wake-ups in (Faust: ~150), not a wait for a result
            idle_waits = len(waits)
            await ctx.put(7, wait=False)
            await wait_until_async(
                lambda: batches == [[7]], 5, "the event after the idle spell taken"
            )
            assert idle_waits == 1
            assert waits[0] is None  # the first event is awaited without a timeout

    asyncio.run(scenario())
