"""Requests meet by id whatever partition they land on (issue 28): a request read off
its id's owner partition is forwarded there, unchanged but for ``timer-hop``."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from app.core.errors import RejectedRequest, RejectReason
from app.core.keys import origin_key
from app.core.request_format import RawRecord
from app.core.routing import (
    HOP_HEADER,
    Origin,
    check_forwardable,
    hop_value,
    is_replayed,
    owner_of,
    split_hop,
    without_hop,
)
from app.worker.output import DeliveryFailure
from tests.unit.test_service import NOW, Harness

PARTITIONS = 4


def ids_owned_by(partition: int, count: int) -> list[str]:
    return [i for i in (f"id-{n}" for n in range(1000)) if owner_of(i, PARTITIONS) == partition][
        :count
    ]


def hop(record: RawRecord) -> tuple[str, bytes]:
    """The ``timer-hop`` header a forwarding worker appends to ``record``'s copy."""
    return (HOP_HEADER, hop_value(record))


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
        RawRecord(r.topic, 3, n, r.timestamp_ms, r.key, r.value, (*r.headers, hop(r)))
        for n, (r, _) in enumerate(h.output.durable.forwarded)
    ]
    h.requests(*copies)
    assert [outcome for _, _, outcome, _ in h.output.durable.cancels] == ["cancelled"]
    assert h.service.wheels()[3].get_pending(timer_id) is None


def test_a_json_request_without_an_id_stays_where_it_landed() -> None:
    h = Harness(request_partitions=PARTITIONS)
    body = {"topic": "cb", "at": NOW + 5, "value": "v"}
    record = h.record(json.dumps(body).encode(), partition=1)
    h.requests(record)
    assert h.output.durable.forwarded == []
    assert h.service.wheels()[1].get_pending(f"requests-1-{record.offset}") is not None


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
    assert without_hop(hopped) == etf1
    assert without_hop(etf1) is etf1
    h = Harness()
    h.requests(hopped)  # etf1 copies record headers onto the callback: not the hop marker
    assert h.output.durable.dead_letters == []
    assert h.service.wheels()[0].get_pending("k") is not None


def test_a_request_whose_copy_would_not_fit_is_refused() -> None:
    record = RawRecord("requests", 0, 0, NOW * 1000, b"k", b"x" * 1000)
    check_forwardable(record, 2000)
    with pytest.raises(RejectedRequest, match="record_too_large"):
        check_forwardable(record, 1050)


def copies_on(h: Harness, owner: int) -> list[RawRecord]:
    """The forwarded copies as the owner reads them: on its partition, at its next
    offsets, with their hop header."""
    out = []
    for r, p in h.output.durable.forwarded:
        assert p == owner
        out.append(h.record(r.value, partition=owner, key=r.key or b""))
        out[-1] = replace(out[-1], headers=(*r.headers, hop(r)))
    h.output.durable.forwarded.clear()
    return out


def test_a_forwarded_copy_that_arrives_again_is_dropped_and_never_undoes_a_reschedule() -> None:
    h = Harness(request_partitions=PARTITIONS)
    (timer_id,) = ids_owned_by(3, 1)
    h.requests(h.schedule(timer_id, NOW + 5, partition=0))
    first = copies_on(h, 3)
    h.requests(h.schedule(timer_id, NOW + 50, partition=0))
    second = copies_on(h, 3)
    h.requests(*first, *second)
    assert h.service.wheels()[3].lookup(timer_id) == ("pending", NOW + 50, "tok")
    # The forwarding worker was killed before its batches' offset was durable: it reads
    # them again and forwards the same records once more, after the newer version.
    h.requests(*(replace(r, offset=r.offset + 100) for r in first))  # the same origin
    assert h.service.wheels()[3].lookup(timer_id) == ("pending", NOW + 50, "tok")
    assert h.metrics.forwards_replayed._value.get() == 1
    for second_ in range(NOW + 1, NOW + 51):
        h.tick(second_, 3)
    assert [(t.id, t.due) for t, _ in h.output.durable.callbacks] == [(timer_id, NOW + 50)]
    # One number per origin partition, in the changelog: bounded whatever the history.
    assert h.stores.stores[3].get(origin_key(0)) == b"1"  # the second request's offset
    written = [(k, v) for _, k, v in h.output.durable.changelog if k.startswith(b"O")]
    assert written == [(origin_key(0), b"1")]  # one write a batch that advanced it


def test_an_owner_that_replays_its_own_batch_applies_the_copies_again() -> None:
    """The highest origin offset is local only once the batch is durable: a worker that
    restarts on its own data after a failed flush re-reads the batch and applies it."""
    h = Harness(request_partitions=PARTITIONS)
    (timer_id,) = ids_owned_by(3, 1)
    h.requests(h.schedule(timer_id, NOW + 5, partition=0))
    copies = copies_on(h, 3)
    h.output.fail_flush = True
    with pytest.raises(DeliveryFailure):
        h.requests(*copies)
    assert h.stores.stores[3].get(origin_key(0)) is None
    h.service.forget_partitions([3])  # the restart: reloaded from the store
    h.requests(*copies)
    assert h.metrics.forwards_replayed._value.get() == 0
    assert h.service.wheels()[3].lookup(timer_id) == ("pending", NOW + 5, "tok")
    assert h.stores.stores[3].get(origin_key(0)) == b"0"


def test_a_hop_no_worker_wrote_is_refused() -> None:
    h = Harness(request_partitions=PARTITIONS)
    (timer_id,) = ids_owned_by(3, 1)
    for value in (b"3:5", b"9:5", b"x:1", b"1", b"1:-2", b"1:" + b"9" * 60):
        record = h.schedule(timer_id, NOW + 5, partition=3)
        h.requests(replace(record, headers=((HOP_HEADER, value),)))
    reasons = {reason for _, reason, _ in h.output.durable.dead_letters}
    assert reasons == {RejectReason.RESERVED_HEADER}
    assert len(h.output.durable.dead_letters) == 6


def test_split_hop_and_is_replayed() -> None:
    record = RawRecord("requests", 2, 9, 0, b"k", b"v", (("a", b"b"), (HOP_HEADER, b"1:42")))
    bare, origin = split_hop(record, PARTITIONS)
    assert bare.headers == (("a", b"b"),) and origin == Origin(1, 42)
    assert split_hop(record, None) == (bare, None)
    assert split_hop(bare, PARTITIONS) == (bare, None)
    applied: dict[int, int] = {}
    assert not is_replayed(Origin(1, 42), applied) and applied == {1: 42}
    assert is_replayed(Origin(1, 42), applied) and is_replayed(Origin(1, 3), applied)
    assert not is_replayed(Origin(0, 3), applied) and not is_replayed(Origin(1, 43), applied)
    assert applied == {1: 43, 0: 3}
