"""Requests meet by id whatever partition they land on (issue 28): a request read off
its id's owner partition is forwarded there, unchanged but for ``timer-hop``."""

from __future__ import annotations

import asyncio
import hashlib
import json
import marshal
import time
from dataclasses import replace

import pytest

from app.core.budget import record_bytes
from app.core.keys import origin_key
from app.core.quotas import QuotaBook, QuotaPolicy
from app.core.raw_record import RawRecord
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
from kafka_timers_client.errors import RejectedRequest
from tests.unit.test_service import NOW, Harness, run

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


@pytest.mark.parametrize("key", [None, b"", b"k" * 7])
@pytest.mark.parametrize("value", [None, b"", b"x" * 1000])
@pytest.mark.parametrize("headers", [(), (("h", b"v" * 20),)])
def test_a_copy_is_refused_exactly_where_it_would_not_fit(
    key: bytes | None, value: bytes | None, headers: tuple[tuple[str, bytes], ...]
) -> None:
    # The count of a copy without headers comes from two lengths: the same as budget's.
    record = RawRecord("requests", 0, 0, NOW * 1000, key, value, headers)
    size = record_bytes(key, value, [*headers, (HOP_HEADER, b"0" * 80)])
    for limit in (size - 1, size, size + 1):
        if limit >= size:
            check_forwardable(record, limit)
        else:
            with pytest.raises(RejectedRequest, match="record_too_large"):
                check_forwardable(record, limit)


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


def test_a_hop_no_worker_wrote_names_nothing() -> None:
    """Read as a request that landed there: applied, and no origin's number moves."""
    h = Harness(request_partitions=PARTITIONS)
    ids = ids_owned_by(3, 6)
    for timer_id, value in zip(
        ids, (b"3:5", b"9:5", b"x:1", b"1", b"1:-2", b"1:" + b"9" * 60), strict=True
    ):
        record = h.schedule(timer_id, NOW + 5, partition=3)
        h.requests(replace(record, headers=((HOP_HEADER, value),)))
    assert h.output.durable.dead_letters == []
    assert all(h.service.wheels()[3].get_pending(i) is not None for i in ids)
    assert not [k for _, k, _ in h.output.durable.changelog if k.startswith(b"O")]


def test_split_hop_and_is_replayed() -> None:
    record = RawRecord("requests", 2, 9, 0, b"k", b"v", (("a", b"b"), (HOP_HEADER, b"1:42")))
    bare, origin = split_hop(record, PARTITIONS)
    assert bare.headers == (("a", b"b"),) and bare.origin == (1, 42) and origin == Origin(1, 42)
    assert split_hop(record, None) == (replace(bare, origin=None), None)
    bare = replace(bare, origin=None)
    assert split_hop(bare, PARTITIONS) == (bare, None)
    applied: dict[int, int] = {}
    assert not is_replayed(Origin(1, 42), applied) and applied == {1: 42}
    assert is_replayed(Origin(1, 42), applied) and is_replayed(Origin(1, 3), applied)
    assert not is_replayed(Origin(0, 3), applied) and not is_replayed(Origin(1, 43), applied)
    assert applied == {1: 43, 0: 3}


SECRET = "a-deployment-secret-of-some-length"


def test_with_the_secret_only_a_signed_hop_is_a_copy() -> None:
    """A ``timer-hop`` anyone could write must not make the owner drop real copies."""
    h = Harness(request_partitions=PARTITIONS, hop_secret=SECRET)
    ids = ids_owned_by(3, 3)
    h.requests(h.schedule(ids[0], NOW + 5, partition=0))
    ((genuine, _),) = h.output.durable.forwarded
    (signed,) = h.output.durable.hops
    assert signed.startswith(b"0:0:") and len(signed.split(b":")[2]) == 32
    arrived = replace(genuine, partition=3, headers=(*genuine.headers, (HOP_HEADER, signed)))
    bare, origin = split_hop(arrived, PARTITIONS, SECRET)
    assert origin == Origin(0, 0) and bare == replace(genuine, partition=3, origin=(0, 0))
    # A forged hop (unsigned, or signed for another record) names no origin: the request
    # is applied as one that landed there, and the owner's highest offset stays.
    forged = h.schedule(ids[1], NOW + 5, partition=3)
    h.requests(replace(forged, headers=((HOP_HEADER, b"0:999999"),)))
    other = h.schedule(ids[2], NOW + 5, partition=3)
    h.requests(replace(other, headers=((HOP_HEADER, signed),)))
    assert h.stores.stores[3].get(origin_key(0)) is None
    assert h.service.wheels()[3].get_pending(ids[1]) is not None
    assert h.service.wheels()[3].get_pending(ids[2]) is not None
    # The real copy is still applied, once.
    copy = h.record(genuine.value, partition=3, key=genuine.key or b"")
    copy = replace(copy, headers=(*genuine.headers, (HOP_HEADER, signed)))
    h.requests(copy, replace(copy, offset=copy.offset + 1))
    assert h.service.wheels()[3].get_pending(ids[0]) is not None
    assert h.metrics.forwards_replayed._value.get() == 1
    assert h.stores.stores[3].get(origin_key(0)) == b"0"
    assert h.output.durable.dead_letters == []


def test_a_signature_covers_the_whole_record() -> None:
    record = RawRecord("requests", 1, 7, 0, b"k", b"v", (("h", b"x"),))
    hop = hop_value(record, SECRET)
    for changed in (
        replace(record, key=None),
        replace(record, key=b"k2"),
        replace(record, value=b"w"),
        replace(record, headers=(("h", b"y"),)),
        replace(record, headers=()),
        replace(record, topic="other"),
    ):
        copy = replace(changed, partition=2, headers=(*changed.headers, (HOP_HEADER, hop)))
        assert split_hop(copy, PARTITIONS, SECRET)[1] is None
    copy = replace(record, partition=2, headers=(*record.headers, (HOP_HEADER, hop)))
    assert split_hop(copy, PARTITIONS, SECRET)[1] == Origin(1, 7)
    assert split_hop(copy, PARTITIONS, "another-secret-entirely")[1] is None


def test_a_signature_covers_the_hop_as_written_and_how_the_record_is_cut() -> None:
    """The same bytes cut into other fields, an absent part for an empty one, or the hop
    written otherwise (``07`` for ``7``) is not the record the worker signed."""
    record = RawRecord("requests", 7, 5, 0, b"k", b"", (("ab", b"c"),))
    hop = hop_value(record, SECRET)
    for changed in (
        replace(record, value=None),
        replace(record, key=b"", value=b"k"),
        replace(record, headers=(("a", b"bc"),)),
        replace(record, headers=(("ab", b"c"), ("ab", b"c"))),
    ):
        copy = replace(changed, partition=2, headers=(*changed.headers, (HOP_HEADER, hop)))
        assert split_hop(copy, 8, SECRET)[1] is None
    for forged in (b"0" + hop, hop.upper(), hop + b"0", hop[:-1], hop.replace(b":", b":0:", 1)):
        copy = replace(record, partition=2, headers=(*record.headers, (HOP_HEADER, forged)))
        assert split_hop(copy, 8, SECRET)[1] is None
    copy = replace(record, partition=2, headers=(*record.headers, (HOP_HEADER, hop)))
    assert split_hop(copy, 8, SECRET)[1] == Origin(7, 5)


def test_a_copy_rebuilt_from_other_objects_is_still_signed() -> None:
    """The owner reads the copy into objects of its own (a topic not interned, one bytes
    object per field): equal values, the same signature."""
    shared = b"same"
    name = "trace"
    record = RawRecord("requests", 1, 7, 0, shared, shared, ((name, shared), (name, shared)))
    hop = hop_value(record, SECRET)
    rebuilt = RawRecord(
        "".join(["requ", "ests"]),
        2,
        7,
        0,
        bytes(bytearray(b"same")),
        bytes(bytearray(b"same")),
        (
            ("".join(["tra", "ce"]), bytes(bytearray(b"same"))),
            ("".join(["tr", "ace"]), bytes(bytearray(b"same"))),
            (HOP_HEADER, hop),
        ),
    )
    assert rebuilt.topic is not record.topic and rebuilt.headers[0][0] is not name
    assert split_hop(rebuilt, PARTITIONS, SECRET)[1] == Origin(1, 7)


def test_a_signature_is_the_same_on_every_worker() -> None:
    """Known answers: workers on other Pythons (or builds) of one release sign alike. The
    signature is keyed BLAKE2b-128, its key SHA-256 of the domain and the secret, over
    0x03 and the ``marshal`` (version 2) of the hop, topic, key, value and headers."""
    signed = RawRecord("requests", 3, 1234, 0, b"order-7", b'{"id": 7}', (("tp", b"00-ab"),))
    bare = RawRecord("requests", 3, 1234, 0, None, None, ())
    assert hop_value(signed, SECRET) == b"3:1234:b83c33101515fc70773219d0c5fb8f29"
    assert hop_value(bare, SECRET) == b"3:1234:48afdc4e99acf843623f1a52f6666560"
    key = hashlib.sha256(b"kafka-timers timer-hop v3\0" + SECRET.encode()).digest()
    message = (b"3:1234", "requests", b"order-7", b'{"id": 7}', (("tp", b"00-ab"),))
    mac = hashlib.blake2b(b"\x03" + marshal.dumps(message, 2), key=key, digest_size=16)
    assert hop_value(signed, SECRET) == b"3:1234:" + mac.hexdigest().encode()


def test_a_copy_that_waits_for_a_share_of_a_quota_is_applied_once_it_comes() -> None:
    """A forwarded copy under a quota, on an owner with no share of it yet: its unit ends
    before it and it is read again once a share comes. Its origin is not taken as
    applied meanwhile (read again, it would be dropped as a replay: a lost request)."""
    book = QuotaBook(QuotaPolicy({"cb": 10}))
    h = Harness(request_partitions=PARTITIONS, quotas=book)
    (timer_id,) = ids_owned_by(3, 1)
    h.requests(h.schedule(timer_id, NOW + 5, partition=0))  # forwarded, not counted there
    copies = copies_on(h, 3)

    async def share_comes() -> None:
        applying = asyncio.ensure_future(h.service.handle_requests(copies))
        for _ in range(1000):  # a few turns of the loop: the unit ends at the copy
            if book.leases.wanted:
                break
            await asyncio.sleep(0)
        assert book.leases.wanted == {(3, "topic:cb"): pytest.approx(time.monotonic(), abs=5)}
        assert h.service.wheels()[3].lookup(timer_id) is None
        book.leases.shares[(3, "topic:cb")] = 1
        h.service.quota_shares_grew()
        await asyncio.wait_for(applying, 5)

    run(share_comes())
    assert h.service.wheels()[3].lookup(timer_id) == ("pending", NOW + 5, "tok")
    assert h.metrics.forwards_replayed._value.get() == 0
    assert h.stores.stores[3].get(origin_key(0)) == b"0"
    assert book.leases.wanted == {}
