"""The worker's patches to aiokafka's group coordinator, against a fake broker client.

Ported from the research branch ``research-restart`` (the dev broker's departed-leader
bug: see ``app.worker.faust_internals.group._send_req``).
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka.protocol.admin import DescribeGroupsRequest
from aiokafka.protocol.group import JoinGroupRequest, LeaveGroupRequest

from app.worker.faust_internals import group as group_patches
from app.worker.faust_internals.group import FOLLOWER_LEAVE_DELAY, _maybe_leave_group, _send_req

GROUP = "kt-group"
PROTOCOLS = [("faust", b"metadata")]


class FakeClient:
    """Answers JoinGroup, DescribeGroups and LeaveGroup like a broker would."""

    def __init__(self, members: list[str], impostor_leader: str | None = None) -> None:
        self.members = members
        self.impostor_leader = impostor_leader
        self.sent: list[Any] = []
        self.describe_fails = False

    async def send(self, node_id: int, request: Any, **_: Any) -> Any:
        self.sent.append(request)
        if isinstance(request, DescribeGroupsRequest):
            if self.describe_fails:
                raise RuntimeError("unsupported")
            members = [(m, "client", "/127.0.0.1", b"", b"") for m in self.members]
            return SimpleNamespace(
                groups=[(0, GROUP, "PreparingRebalance", "consumer", "", members)]
            )
        if isinstance(request, JoinGroupRequest):
            member = request._member_id
            leader = self.impostor_leader or member
            return SimpleNamespace(
                error_code=0, generation_id=4, leader_id=leader, member_id=member
            )
        if isinstance(request, LeaveGroupRequest):
            return SimpleNamespace(error_code=0)
        raise AssertionError(f"unexpected request {request!r}")


def coordinator(client: FakeClient) -> Any:
    return SimpleNamespace(
        _client=client,
        coordinator_id=111,
        group_id=GROUP,
        _session_timeout_ms=6000,
        _rebalance_timeout_ms=60000,
        coordinator_dead=lambda: None,
    )


def join(member: str) -> JoinGroupRequest:
    return JoinGroupRequest(GROUP, 6000, 60000, member, None, "consumer", PROTOCOLS)


def run_join(client: FakeClient, me: str, leader: str) -> Any:
    """Our JoinGroup, answered with ``leader`` as the group's leader."""
    real_send = client.send

    async def send(node_id: int, request: Any, **kw: Any) -> Any:
        if isinstance(request, JoinGroupRequest) and request._member_id == me:
            client.sent.append(request)
            return SimpleNamespace(error_code=0, generation_id=4, leader_id=leader, member_id=me)
        return await real_send(node_id, request, **kw)

    client.send = send  # type: ignore[method-assign]
    return asyncio.run(_send_req(coordinator(client), join(me)))


def impostor_joins(client: FakeClient) -> list[str]:
    return [r._member_id for r in client.sent[1:] if isinstance(r, JoinGroupRequest)]


def test_a_follower_of_a_live_leader_only_asks() -> None:
    client = FakeClient(members=["me", "leader"])
    response = run_join(client, "me", "leader")
    assert response.leader_id == "leader"
    assert [type(r) for r in client.sent] == [JoinGroupRequest, DescribeGroupsRequest]


def test_the_leader_itself_does_not_ask() -> None:
    client = FakeClient(members=["me", "other"])
    run_join(client, "me", "me")
    assert [type(r) for r in client.sent] == [JoinGroupRequest]


def test_a_departed_leader_is_joined_once_under_its_id_and_left_silent() -> None:
    client = FakeClient(members=["me", "other"])
    response = run_join(client, "me", "gone")
    assert response.leader_id == "gone"  # aiokafka carries on with what the broker said
    assert impostor_joins(client) == ["gone"]
    impostor = next(r for r in client.sent[1:] if isinstance(r, JoinGroupRequest))
    assert impostor._group_protocols == PROTOCOLS
    assert not any(isinstance(r, LeaveGroupRequest) for r in client.sent)


def test_an_impostor_the_broker_did_not_make_leader_leaves_again() -> None:
    client = FakeClient(members=["me", "other"], impostor_leader="other")
    run_join(client, "me", "gone")
    leaves = [r for r in client.sent if isinstance(r, LeaveGroupRequest)]
    assert [r._member_id for r in leaves] == ["gone"]


def test_a_failed_check_does_not_break_the_join() -> None:
    client = FakeClient(members=["me"])
    client.describe_fails = True
    response = run_join(client, "me", "gone")
    assert response.member_id == "me"
    assert impostor_joins(client) == []


def leaving(leader: bool) -> tuple[list[Any], list[float], Any]:
    """A coordinator about to leave, as the group's leader or a follower."""
    sent: list[Any] = []
    slept: list[float] = []

    async def send_req(request: Any) -> Any:
        sent.append(request)
        return SimpleNamespace(error_code=0)

    me = SimpleNamespace(
        generation=0,  # the dev broker's first generation: it leaves all the same
        member_id="me",
        group_id=GROUP,
        _group_instance_id=None,
        _group_subscription={"topic"} if leader else None,
        _send_req=send_req,
        reset_generation=lambda: None,
    )
    return sent, slept, me


@pytest.mark.parametrize("leader", [True, False], ids=["leader", "follower"])
def test_the_leader_leaves_at_once_and_a_follower_a_moment_later(
    leader: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent, slept, me = leaving(leader)

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    monkeypatch.setattr(group_patches.asyncio, "sleep", sleep)
    asyncio.run(_maybe_leave_group(me))
    assert [type(r) for r in sent] == [LeaveGroupRequest]
    assert slept == ([] if leader else [FOLLOWER_LEAVE_DELAY])
