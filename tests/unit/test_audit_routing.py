"""The audit follows requests where the workers route them, and judges a fire against the
requests its worker had applied (its ``request_offset``)."""

from __future__ import annotations

import json

import pyarrow as pa

from app.core.raw_record import RawRecord
from app.core.routing import HOP_HEADER, Origin, owner_of
from app.settings import Settings
from kafka_timers_client import protowire
from spark_audit.parsing import ParsedColumns, judge_request, parse_request_arrays, policy_for
from spark_audit.reconcile import judge
from spark_audit.routing import Place, where_reconciled
from spark_audit.verdicts import FireEvent, RequestEvent, Rules, Status, ViolationKind

PARTITIONS = 8
T0 = 1_767_225_600
DUE = T0 + 100
AS_OF = Rules(as_of_ms=(T0 + 3600) * 1000)
POLICY = policy_for(Settings())


def future(timer_id: str, token: str = "k", due: int = DUE) -> bytes:
    return protowire.encode(
        protowire.Future(callback_topic="cb", callback=b"x", id=timer_id, token=token, due=due)
    )


def parsed(record: RawRecord, partitions: int | None = PARTITIONS) -> dict[str, object]:
    out = ParsedColumns.empty()
    judge_request(record, POLICY, out, partitions)
    row: dict[str, object] = out.to_arrow().to_pylist()[0]
    return row


def off_owner(timer_id: str) -> int:
    """A partition that does not own ``timer_id``."""
    return (owner_of(timer_id, PARTITIONS) + 1) % PARTITIONS


# -- reading a copy ------------------------------------------------------------------


def test_an_original_names_its_owner_and_a_copy_its_origin_too() -> None:
    home = owner_of("a", PARTITIONS)
    original = RawRecord("requests", off_owner("a"), 7, T0 * 1000, b"a", future("a"))
    row = parsed(original)
    assert (row["reject"], row["id"], row["owner"]) == (None, "a", home)
    assert (row["origin_partition"], row["origin_offset"]) == (None, None)

    hop = (HOP_HEADER, b"%d:7" % off_owner("a"))
    copy = RawRecord("requests", home, 40, T0 * 1000, b"a", future("a"), (hop,))
    row = parsed(copy)
    assert (row["reject"], row["id"], row["owner"]) == (None, "a", home)
    assert (row["origin_partition"], row["origin_offset"]) == (off_owner("a"), 7)


def test_a_request_without_an_id_is_owned_by_the_id_its_landing_place_derives() -> None:
    doc = json.dumps({"topic": "cb", "value": "x", "at": DUE}).encode()
    original = RawRecord("requests", 5, 7, T0 * 1000, None, doc)
    derived = "requests-5-7"
    row = parsed(original)
    assert (row["id"], row["owner"]) == (derived, owner_of(derived, PARTITIONS))
    # The copy on the owner derives the same id from its hop, not from where it is.
    home = owner_of(derived, PARTITIONS)
    copy = RawRecord("requests", home, 90, T0 * 1000, None, doc, ((HOP_HEADER, b"5:7"),))
    assert parsed(copy)["id"] == derived


def test_a_hop_that_names_nothing_is_no_copy_and_nothing_is_routed_without_a_count() -> None:
    home = owner_of("a", PARTITIONS)
    for value in (b"%d:3" % home, b"99:3", b"x:3", b"1:2:3:4"):  # itself, out of range, junk
        record = RawRecord(
            "requests", home, 9, T0 * 1000, b"a", future("a"), ((HOP_HEADER, value),)
        )
        assert parsed(record)["origin_partition"] is None, value
    copy = RawRecord("requests", home, 9, T0 * 1000, b"a", future("a"), ((HOP_HEADER, b"0:3"),))
    unrouted = parsed(copy, partitions=None)
    assert (unrouted["owner"], unrouted["origin_partition"]) == (None, None)


def test_a_refused_copy_still_names_its_origin() -> None:
    """The worker checks a copy for a replay before it parses it: refused copies count."""
    copy = RawRecord("requests", 2, 9, T0 * 1000, b"a", b"\xff\xfe", ((HOP_HEADER, b"6:3"),))
    row = parsed(copy)
    assert row["reject"] is not None and row["owner"] is None
    assert (row["origin_partition"], row["origin_offset"]) == (6, 3)


def test_the_batch_parser_passes_the_partition_count_on() -> None:
    hop = pa.array([[{"key": HOP_HEADER, "value": b"6:3"}]], PARSED_HEADERS)
    result = parse_request_arrays(
        pa.array(["requests"]),
        pa.array([2], pa.int32()),
        pa.array([9], pa.int64()),
        pa.array([T0 * 1000], pa.int64()),
        pa.array([b"a"], pa.binary()),
        pa.array([future("a")], pa.binary()),
        hop,
        POLICY,
        None,
        PARTITIONS,
    ).to_pylist()[0]
    assert (result["owner"], result["origin_partition"]) == (owner_of("a", PARTITIONS), 6)


PARSED_HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


# -- where each request is reconciled -------------------------------------------------


def test_a_forwarded_original_is_reconciled_where_its_copy_is() -> None:
    places = [
        Place(1, 10, 3, None),  # off its owner, forwarded: its copy is at 3@20
        Place(3, 20, 3, Origin(1, 10)),
        Place(3, 21, 3, None),  # on its owner
    ]
    assert where_reconciled(places) == [False, True, True]


def test_an_original_off_its_owner_without_a_copy_is_reconciled_where_it_landed() -> None:
    """Kept there by the worker (its id pending there), or never forwarded: a loss the
    audit must see, as a missing fire where the request is."""
    assert where_reconciled([Place(1, 10, 3, None)]) == [True]


def test_a_replayed_copy_is_dropped_as_the_owner_drops_it() -> None:
    """A forwarder killed before its batch was durable forwards 1@10 and 1@11 again
    after the owner applied a newer request; a copy at or below the highest origin
    offset seen from that origin partition is a replay, per owner partition."""
    places = [
        Place(3, 20, 3, Origin(1, 10)),
        Place(3, 21, 3, Origin(1, 11)),
        Place(3, 22, 3, None),  # the newer version, sent straight to the owner
        Place(3, 23, 3, Origin(1, 10)),  # replays
        Place(3, 24, 3, Origin(1, 11)),
        Place(3, 25, 3, Origin(2, 5)),  # another origin partition: its own mark
        Place(3, 26, 3, Origin(1, 12)),  # the forwarder goes on past its replays
        Place(4, 30, 4, Origin(1, 10)),  # another owner partition: its own marks
    ]
    assert where_reconciled(places) == [True, True, True, False, False, True, True, True]


def test_partitions_may_interleave_but_each_is_read_in_offset_order() -> None:
    places = [
        Place(3, 20, 3, Origin(1, 10)),
        Place(1, 10, 3, None),
        Place(4, 7, 4, None),
        Place(3, 21, 3, Origin(1, 10)),
    ]
    assert where_reconciled(places) == [True, False, True, False]


# -- judging a fire by the requests its worker had applied ----------------------------


def schedule(offset: int, token: str, due: int, ts_s: float) -> RequestEvent:
    return RequestEvent(offset, int(ts_s * 1000), "schedule", token, due, True, "cb")


def cancel(offset: int, token: str, ts_s: float) -> RequestEvent:
    return RequestEvent(offset, int(ts_s * 1000), "cancel", token, None, True)


def fire(token: str, due: int, at_ms: int, request_offset: int | None) -> FireEvent:
    return FireEvent(token, due, at_ms, "cb", "w1", request_offset=request_offset)


def test_an_older_version_fired_before_its_reschedule_reached_the_worker_is_a_race() -> None:
    """v2 was requested 30 s before v1's second, but its copy sat at offset 97, past the
    newest request the firing worker had applied (90): held up on its way."""
    requests = [schedule(80, "v1", DUE, T0), schedule(97, "v2", DUE + 60, DUE - 30)]
    fires = [fire("v1", DUE, DUE * 1000 + 20, 90), fire("v2", DUE + 60, (DUE + 60) * 1000, 97)]
    verdict = judge(requests, fires, [], AS_OF)
    assert verdict.violations == [] and verdict.status is Status.FIRED
    assert verdict.reached_late == 1


def test_an_older_version_fired_after_its_reschedule_was_applied_is_superseded() -> None:
    """By offset, whatever the clocks say: the record of the reschedule carries a
    timestamp after the fire (a producer clock behind), but the worker had applied it."""
    requests = [schedule(80, "v1", DUE, T0), schedule(97, "v2", DUE + 60, DUE + 5)]
    fires = [fire("v1", DUE, DUE * 1000 + 20, 97), fire("v2", DUE + 60, (DUE + 60) * 1000, 98)]
    verdict = judge(requests, fires, [], AS_OF)
    assert [v.kind for v in verdict.violations] == [ViolationKind.SUPERSEDED]
    assert "offset 97" in verdict.violations[0].detail
    assert verdict.reached_late == 0


def test_a_fire_that_names_no_request_offset_is_judged_by_time_as_before() -> None:
    requests = [schedule(80, "v1", DUE, T0), schedule(97, "v2", DUE + 60, DUE - 30)]
    fires = [fire("v1", DUE, DUE * 1000 + 20, None), fire("v2", DUE + 60, (DUE + 60) * 1000, None)]
    verdict = judge(requests, fires, [], AS_OF)
    assert [v.kind for v in verdict.violations] == [ViolationKind.SUPERSEDED]
    assert verdict.reached_late == 0


def test_a_cancel_past_the_fires_request_offset_reached_the_worker_late() -> None:
    requests = [schedule(80, "v1", DUE, T0), cancel(97, "v1", DUE - 30)]
    late = judge(requests, [fire("v1", DUE, DUE * 1000 + 20, 96)], [], AS_OF)
    assert late.violations == [] and late.reached_late == 1
    applied = judge(requests, [fire("v1", DUE, DUE * 1000 + 20, 97)], [], AS_OF)
    assert [v.kind for v in applied.violations] == [ViolationKind.FIRE_AFTER_CANCEL]


def test_a_version_requested_again_is_live_again_from_that_offset() -> None:
    """v1, replaced by v2 at 90, requested again at 95: a fire of v1 with the requests
    through 96 applied is v1's own; with those through 92 it is superseded."""
    requests = [
        schedule(80, "v1", DUE, T0),
        schedule(90, "v2", DUE + 60, T0 + 1),
        schedule(95, "v1", DUE, T0 + 2),
    ]
    assert judge(requests, [fire("v1", DUE, DUE * 1000, 96)], [], AS_OF).violations == []
    superseded = judge(requests, [fire("v1", DUE, DUE * 1000, 92)], [], AS_OF)
    assert [v.kind for v in superseded.violations] == [ViolationKind.SUPERSEDED]
