"""A whole consumer group restarted at once gets its partitions back within seconds.

On the dev broker (Tansu 0.6.0), a leader whose LeaveGroup arrives while its group is
rebalancing (the follower left just before) stays the group's leader after it has gone:
every later JoinGroup names it, and the new members' SyncGroup fail with
REBALANCE_IN_PROGRESS until a chance race in the broker clears it (seen: over 350 s).
The worker's patch to aiokafka's group coordinator
(``app.worker.faust_internals.group._send_req``) gets the broker to evict the departed leader.
Plain aiokafka consumers are enough to show it (ported from ``research-restart``).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from app.worker.faust_internals import apply_patches, remove_patches
from tests.support.broker import BrokerInfo
from tests.support.waiting import wait_until_async

#: Generous for a 2-core machine: the recovery itself takes about 12 s on Tansu (its
#: join hold of half a session timeout, then the session timeout before the eviction).
RECOVERY_TIMEOUT = 40.0


def _consumer(bootstrap: str, group: str, topic: str) -> AIOKafkaConsumer:
    return AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        session_timeout_ms=6000,
        heartbeat_interval_ms=1000,
        enable_auto_commit=False,
    )


async def _restart_whole_group(bootstrap: str) -> float | None:
    group, topic = f"g-{uuid.uuid4().hex[:8]}", f"t-{uuid.uuid4().hex[:8]}"
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, 4, 1)])
    finally:
        await admin.close()
    first, second = _consumer(bootstrap, group, topic), _consumer(bootstrap, group, topic)
    await first.start()
    await second.start()
    await wait_until_async(
        lambda: len(first.assignment()) == 2 and len(second.assignment()) == 2,
        60,
        "the first group never formed",
        interval=0.1,
    )
    leader = first if first._coordinator._group_subscription is not None else second
    follower = second if leader is first else first
    # the follower leaves first, so the leader's LeaveGroup reaches a rebalancing group
    await follower.stop()
    await leader.stop()
    new = [_consumer(bootstrap, group, topic) for _ in range(2)]
    start = time.monotonic()

    async def start_later(consumer: AIOKafkaConsumer, delay: float) -> None:
        # Half a second apart, as separate processes would be: requests that reach the
        # broker in the same instant can clear the departed leader by chance.
        await asyncio.sleep(delay)  # pacing the starts (the load), not a wait for a result
        await consumer.start()  # returns once it has joined and has partitions

    try:
        await asyncio.wait_for(
            asyncio.gather(*(start_later(c, 0.5 * i) for i, c in enumerate(new))),
            RECOVERY_TIMEOUT,
        )
    except asyncio.TimeoutError:
        return None
    finally:
        for c in new:
            await asyncio.wait_for(c.stop(), 30)
    return time.monotonic() - start


@pytest.fixture
def patched_aiokafka() -> Iterator[None]:
    """The worker's aiokafka patches in this process, for this test only."""
    apply_patches()
    try:
        yield
    finally:
        remove_patches()


@pytest.mark.usefixtures("patched_aiokafka")
def test_a_group_restarted_at_once_gets_its_partitions_back(broker: BrokerInfo) -> None:
    took = asyncio.run(_restart_whole_group(broker.bootstrap))
    assert took is not None, f"the restarted group had no partitions after {RECOVERY_TIMEOUT} s"
    print(f"[group restart] both new members had partitions after {took:.1f} s")
