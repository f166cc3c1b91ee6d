"""Requests meet by id whatever partition they land on (issue 28): a request read off
its id's owner partition is forwarded there, unchanged but for ``timer-hop``."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from app.core.errors import RejectedRequest
from app.core.raw_record import RawRecord
from app.core.routing import HOP_HEADER, check_forwardable, owner_of, without_hop
from tests.unit.test_service import NOW, Harness

PARTITIONS = 4


def ids_owned_by(partition: int, count: int) -> list[str]:
    return [i for i in (f"id-{n}" for n in range(1000)) if owner_of(i, PARTITIONS) == partition][
        :count
    ]


def test_a_request_on_its_owner_partition_is_applied_there() -> None:
    h = Harness(request_partitions=PARTITIONS)
    (mine,) = ids_owned_by(2, 1)
    h.requests(h.schedule(mine, NOW + 5, partition=2))
    assert h.output.durable.forwarded == []
    assert h.service.wheels()[2].get_pending(mine) is not None
    assert h.metrics.forwarded._value.get() == 0


def test_requests_off_their_owner_are_forwarded_unchanged_and_not_applied() -> None:
    h = Harness(request_partitions=PARTITIONS)
    (timer_id,) = ids_owned_by(3, 1)
    schedule = h.schedule(timer_id, NOW + 5, partition=0)
    cancel = h.cancel(timer_id, partition=1)
    h.requests(schedule, cancel)
    assert [(r, p) for r, p in h.output.durable.forwarded] == [(schedule, 3), (cancel, 3)]
    assert h.service.wheels()[0].get_pending(timer_id) is None
    assert h.output.durable.cancels == []  # only the owner answers a cancel
    assert h.metrics.forwarded._value.get() == 2
    # The copies, read on the owner with their hop marker, are applied there: the
    # schedule, then the cancel, which answers "cancelled".
    copies = [
        RawRecord(r.topic, 3, n, r.timestamp_ms, r.key, r.value, (*r.headers, (HOP_HEADER, b"0:0")))
        for n, (r, _) in enumerate(h.output.durable.forwarded)
    ]
    h.requests(*copies)
    assert [outcome for _, _, outcome, _ in h.output.durable.cancels] == ["cancelled"]
    assert h.service.wheels()[3].get_pending(timer_id) is None


def test_a_request_without_an_id_is_stored_at_its_derived_ids_owner() -> None:
    """Its id is where it was sent (``requests-<p>-<offset>``); it is forwarded to that
    id's owner, which derives the same id from the copy's hop marker and stores it
    there, where a cancel by that id goes and is answered ``cancelled``."""
    h = Harness(request_partitions=PARTITIONS)
    body = json.dumps({"topic": "cb", "at": NOW + 5, "value": "v"}).encode()
    records = [h.record(body, partition=1) for _ in range(8)]
    h.requests(*records)
    moved = [r for r in records if owner_of(f"requests-1-{r.offset}", PARTITIONS) != 1]
    assert moved, "some derived id is owned elsewhere"
    assert [(r, owner_of(f"requests-1-{r.offset}", PARTITIONS)) for r in moved] == [
        (r, p) for r, p in h.output.durable.forwarded
    ]
    for record, owner in list(h.output.durable.forwarded):
        derived = f"requests-1-{record.offset}"
        assert h.service.wheels()[1].get_pending(derived) is None
        copy = RawRecord(
            record.topic,
            owner,
            1000 + record.offset,
            record.timestamp_ms,
            record.key,
            record.value,
            (*record.headers, (HOP_HEADER, b"1:%d" % record.offset)),
        )
        h.requests(copy)
        assert h.service.wheels()[owner].get_pending(derived) is not None
        h.requests(h.cancel(derived, token="", partition=owner))
    assert [outcome for _, _, outcome, _ in h.output.durable.cancels] == ["cancelled"] * len(moved)


def test_an_id_still_pending_off_its_owner_is_applied_where_its_timer_is() -> None:
    """Timers stored by a release before routing stay reachable by cancel and reschedule."""
    (timer_id,) = ids_owned_by(3, 1)
    h = Harness()  # no routing: as an earlier release stored it
    h.requests(h.schedule(timer_id, NOW + 5, partition=0))
    routed = Harness(request_partitions=PARTITIONS)
    routed.output, routed.stores, routed.service = (
        h.output,
        h.stores,
        type(h.service)(
            policy=h.service._policy,
            output=h.output,
            metrics=routed.metrics,
            stores=h.stores,
            clock=h.clock,
            request_partitions=PARTITIONS,
        ),
    )
    routed._offsets = h._offsets
    routed.requests(routed.cancel(timer_id, partition=0))
    assert routed.output.durable.forwarded == []
    assert [outcome for _, _, outcome, _ in routed.output.durable.cancels] == ["cancelled"]


def test_the_hop_marker_is_taken_off_before_the_request_is_read() -> None:
    etf1 = RawRecord(
        "requests",
        0,
        7,
        NOW * 1000,
        b"k",
        b"v",
        (("scheduler-epoch", b"%d" % (NOW + 5)), ("scheduler-target-topic", b"cb")),
    )
    hopped = replace(etf1, headers=(*etf1.headers, (HOP_HEADER, b"1:2")))
    assert without_hop(hopped) == replace(etf1, origin=(1, 2))
    assert without_hop(etf1) is etf1
    for forged in (b"", b"1", b"a:2", b"1:-2", b"1:2:3", b"9" * 11 + b":1"):
        assert without_hop(replace(etf1, headers=(*etf1.headers, (HOP_HEADER, forged)))) == etf1
    h = Harness()
    h.requests(hopped)  # etf1 copies record headers onto the callback: not the hop marker
    assert h.output.durable.dead_letters == []
    assert h.service.wheels()[0].get_pending("k") is not None


def test_a_request_whose_copy_would_not_fit_is_refused() -> None:
    record = RawRecord("requests", 0, 0, NOW * 1000, b"k", b"x" * 1000)
    check_forwardable(record, 2000)
    with pytest.raises(RejectedRequest, match="record_too_large"):
        check_forwardable(record, 1050)
