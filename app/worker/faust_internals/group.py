"""Patches of aiokafka's group coordination: LeaveGroup, the group lease, a departed leader."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import aiokafka.errors
from aiokafka.consumer.group_coordinator import GroupCoordinator
from aiokafka.protocol.admin import DescribeGroupsRequest
from aiokafka.protocol.group import (
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    SyncGroupRequest,
)

__all__ = ["FOLLOWER_LEAVE_DELAY", "watch_group_session"]


log = logging.getLogger(__name__)


#: How long a follower waits before its LeaveGroup, so that when every worker stops at
#: once the leader's LeaveGroup reaches the broker first (see :func:`_send_req`).
FOLLOWER_LEAVE_DELAY = 0.5


async def _maybe_leave_group(self: Any) -> None:
    """aiokafka's ``GroupCoordinator._maybe_leave_group``, for generation 0 too, leader first.

    aiokafka leaves only ``if self.generation > 0``: Kafka numbers generations from 1,
    the dev broker (Tansu) from 0, so a worker stopped in a group's first generation
    left without a word and its partitions waited out a whole session timeout.

    A follower (a member that did not compute the last assignment: aiokafka keeps
    ``_group_subscription`` only on the leader) leaves :data:`FOLLOWER_LEAVE_DELAY`
    later. The dev broker keeps as leader a leader whose LeaveGroup reaches a group that
    is already rebalancing, which is what a follower's LeaveGroup just before makes it:
    when every worker stops at once, the leader must leave first (see :func:`_send_req`).
    """
    if (
        self.generation >= 0
        and self.member_id != JoinGroupRequest.UNKNOWN_MEMBER_ID
        and self._group_instance_id is None
    ):
        if self._group_subscription is None:
            await asyncio.sleep(FOLLOWER_LEAVE_DELAY)
        try:
            await self._send_req(LeaveGroupRequest(self.group_id, self.member_id))
        except aiokafka.errors.KafkaError as err:
            log.error("LeaveGroup request failed: %s", err)
        else:
            log.info("LeaveGroup request succeeded")
    self.reset_generation()


#: aiokafka's own ``GroupCoordinator._send_req``, which :func:`_send_req` wraps.
_AIOKAFKA_SEND_REQ = GroupCoordinator._send_req


#: The leases renewed by :func:`_send_req`, by group id (see :func:`watch_group_session`).
_LEASES: dict[str, Any] = {}


#: Answers that prove the broker still counts the sender a member: none, and (to a
#: heartbeat) REBALANCE_IN_PROGRESS, which aiokafka answers by rejoining while it keeps
#: heartbeating.
_MEMBER_ERROR_CODES = {
    HeartbeatRequest: frozenset({0, aiokafka.errors.RebalanceInProgressError.errno}),
    SyncGroupRequest: frozenset({0}),
}


def watch_group_session(group_id: str, lease: Any) -> None:
    """Renew ``lease`` (a :class:`~app.worker.group_lease.GroupLease`) with the send time
    of every heartbeat and SyncGroup of ``group_id`` that the broker answers as from a
    member; ``None`` stops it."""
    if lease is None:
        _LEASES.pop(group_id, None)
    else:
        _LEASES[group_id] = lease


async def _send_req(self: Any, request: Any) -> Any:
    """aiokafka's ``GroupCoordinator._send_req``, renewing the group lease and clearing a
    departed leader the dev broker still names.

    Every request of the group goes through here, so it is where a heartbeat or a
    SyncGroup the broker answered renews the worker's :class:`GroupLease
    <app.worker.group_lease.GroupLease>` (from the time it was sent).

    Tansu 0.6.0 keeps a leader that leaves with LeaveGroup while its group is
    rebalancing (another member left just before: every worker stopped at once). Every
    later JoinGroup names that departed member as leader, no member ever sends the
    assignment, and the followers' SyncGroup fail with REBALANCE_IN_PROGRESS until a
    chance race inside the broker reloads the group, minutes later.
    Tansu drops a leader otherwise only when it evicts it as a member that stopped
    heartbeating. So a follower told of a leader that DescribeGroups does not list as a
    member joins once under that member id (making it a member again) and goes silent:
    a session timeout later the broker evicts it, drops it as leader, and the next
    JoinGroup elects a live member. Several followers doing it at once are one broker-side
    member, which nobody heartbeats. On Apache Kafka the leader named at the end of a join
    is a member, and a JoinGroup under an unknown member id is refused: this does nothing
    there.
    """
    lease = _LEASES.get(self.group_id)
    sent_at = lease.now() if lease is not None else time.monotonic()
    response = await _AIOKAFKA_SEND_REQ(self, request)
    if lease is not None:
        accepted = _MEMBER_ERROR_CODES.get(type(request))
        if accepted is not None and response.error_code in accepted:
            lease.renew(sent_at)
    if (
        isinstance(request, JoinGroupRequest)
        and response.error_code == 0
        and response.leader_id not in ("", response.member_id)
    ):
        try:
            await _rejoin_as_departed_leader(self, request, response.leader_id)
        except Exception as err:  # never let the workaround break a join
            log.debug("could not check the group leader: %r", err)
    return response


async def _rejoin_as_departed_leader(self: Any, request: Any, leader: str) -> None:
    client, node = self._client, self.coordinator_id
    described = await client.send(node, DescribeGroupsRequest([self.group_id]))
    error, _, state, _, _, members = described.groups[0][:6]
    if error or leader in {member[0] for member in members}:
        return
    log.warning(
        "group %s (%s): the broker names %s as leader, but it is not a member (it left); "
        "joining once under its id so that the broker evicts it and elects a member",
        self.group_id,
        state,
        leader,
    )
    joined = await client.send(
        node,
        JoinGroupRequest(
            self.group_id,
            self._session_timeout_ms,
            self._rebalance_timeout_ms,
            leader,
            None,
            request._protocol_type,
            request._group_protocols,
        ),
    )
    if joined.error_code == 0 and joined.leader_id != leader:
        # The broker had elected someone else meanwhile: do not leave a silent member
        # behind for the new leader to assign partitions to.
        await client.send(node, LeaveGroupRequest(self.group_id, leader))
