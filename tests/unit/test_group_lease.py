"""The group lease: a worker whose session may have lapsed fires no tick until renewed."""

from __future__ import annotations

import asyncio

import aiokafka.errors
from aiokafka.protocol.group import HeartbeatRequest, JoinGroupRequest, SyncGroupRequest

from app.worker.faust_internals import group as group_patches
from app.worker.group_lease import GroupLease
from tests.support.fake_clock import ManualClock as Monotonic
from tests.unit.test_service import NOW, Harness


def test_a_lease_never_renewed_is_held_so_nothing_is_checked_before_the_first_join() -> None:
    assert GroupLease(6.0, Monotonic()).held()


def test_a_lease_lasts_one_session_timeout_from_the_send_of_the_answered_heartbeat() -> None:
    clock = Monotonic()
    lease = GroupLease(6.0, clock)
    lease.renew(sent_at=100.0)
    clock.now = 105.9
    assert lease.held() and lease.lapsed_for() == 0.0
    clock.now = 106.5
    assert not lease.held()
    assert abs(lease.lapsed_for() - 0.5) < 1e-9
    lease.renew(sent_at=90.0)  # a late answer to an older heartbeat moves nothing back
    assert not lease.held()
    lease.renew(sent_at=106.4)
    assert lease.held()


def test_ticks_after_the_lease_ran_out_fire_nothing_and_a_later_tick_fires_their_seconds() -> None:
    clock = Monotonic()
    lease = GroupLease(6.0, clock)
    h = Harness(lease=lease)
    h.requests(h.schedule("a", NOW + 1), h.schedule("b", NOW + 2))
    lease.renew(sent_at=clock.now)
    clock.now += 7  # frozen past its session: the group may have moved on
    assert h.tick(NOW + 1) == 0 and h.tick(NOW + 2) == 0
    assert h.fired() == []
    assert h.metrics.ticks_unowned._value.get() == 2
    lease.renew(sent_at=clock.now)  # the broker answered a heartbeat: still the owner
    assert h.tick(NOW + 3) == 2
    assert h.fired() == ["a", "b"]


class _Response:
    def __init__(self, error_code: int) -> None:
        self.error_code = error_code
        self.leader_id = self.member_id = "m"  # a JoinGroup answer: this member leads


class _Coordinator:
    group_id = "kt"

    def __init__(self, error_code: int) -> None:
        self.error_code = error_code


def _send(request: object, error_code: int, lease: GroupLease) -> None:
    async def answered(self: object, request: object) -> _Response:
        return _Response(error_code)

    original = group_patches._AIOKAFKA_SEND_REQ
    group_patches._AIOKAFKA_SEND_REQ = answered
    group_patches.watch_group_session("kt", lease)
    try:
        asyncio.run(group_patches._send_req(_Coordinator(error_code), request))
    finally:
        group_patches._AIOKAFKA_SEND_REQ = original
        group_patches.watch_group_session("kt", None)


def test_answered_heartbeats_and_syncs_renew_the_lease_from_their_send_time() -> None:
    clock = Monotonic()
    heartbeat = HeartbeatRequest("kt", 1, "m")
    rebalancing = aiokafka.errors.RebalanceInProgressError.errno
    unknown_member = aiokafka.errors.UnknownMemberIdError.errno
    for request, code, renews in (
        (heartbeat, 0, True),
        (heartbeat, rebalancing, True),  # still a member while the group rebalances
        (heartbeat, unknown_member, False),  # evicted: the lease must not move
        (SyncGroupRequest("kt", 1, "m", None, []), 0, True),
        (JoinGroupRequest("kt", 6000, 6000, "m", None, "consumer", []), 0, False),
    ):
        lease = GroupLease(6.0, clock)
        _send(request, code, lease)
        assert lease.started is renews, (request, code)
        if renews:
            clock.now += 5.9
            assert lease.held()
            clock.now -= 5.9
