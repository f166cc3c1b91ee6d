"""The nemesis's checker on hand-made histories: clean ones pass, each kind of broken one
fails it for the right reason (tests/nemesis/checker.py)."""

from __future__ import annotations

import io

from tests.nemesis.audit import compare, skewed_ids
from tests.nemesis.checker import Verdict, check
from tests.nemesis.history import (
    Answer,
    Arrival,
    Callback,
    CancelOp,
    DeadLetter,
    Fault,
    Fire,
    History,
    Incarnation,
    Observed,
    SeriesOp,
    Version,
    parse_history,
    parse_observed,
    series_payload,
    version_payload,
    write_line,
)

T0 = 1_800_000_000  # a second; the run's clock starts here
MS = 1000


def version(
    timer_id: str, n: int, due: int, sent: int, *, fire_at: int | None = None, kind: str = "plain"
) -> Version:
    """Version ``n`` of ``timer_id`` due at T0 + ``due``, sent at T0 + ``sent`` (seconds),
    acknowledged 20 ms later."""
    at = T0 + due
    return Version(
        timer_id,
        n,
        "tok",
        at,
        fire_at if fire_at is not None else at,
        "any",
        (T0 + sent) * MS,
        (T0 + sent) * MS + 20,
        3,
        kind,
    )


def rescheduled(timer_id: str, due: int, new_due: int) -> list[Version]:
    """Version 1 of ``timer_id`` due at T0 + ``due``, sent at T0, and version 2 due at
    T0 + ``new_due``, sent 5 s later."""
    return [version(timer_id, 1, due, 0), version(timer_id, 2, new_due, 5)]


def fired(
    observed: Observed,
    timer_id: str,
    payload: str,
    at_ms: int,
    worker: str = "worker-1",
    seq: int | None = None,
) -> None:
    """A callback stamped ``at_ms`` on the worker's clock, with its ``fired`` record."""
    observed.callbacks.append(
        Callback(timer_id, payload, seq, at_ms, "cb", 0, len(observed.callbacks))
    )
    observed.fires.append(Fire(timer_id, seq, at_ms, worker))


def test_a_clean_run_passes_and_counts_its_duplicates_by_cause() -> None:
    history = History(
        versions=[
            version("a", 1, 30, 0),
            version("b", 1, 30, 0),
            version("b", 2, 60, 5),  # rescheduled well before its first second
            version("c", 1, 40, 0),
            version("d", 1, 20, 0),
            version("e", 1, 25, 0),
        ],
        series=[SeriesOp("s", "tok", T0 + 10, 5, 3, T0 * MS, T0 * MS + 20)],
        cancels=[
            CancelOp("c", "tok", (T0 + 10) * MS, (T0 + 10) * MS + 60, "cancelled"),
            CancelOp("e", "tok", (T0 + 26) * MS, None, None),  # no answer: either is right
        ],
        faults=[Fault("kill -9", "worker-2", (T0 + 21) * MS, (T0 + 30) * MS)],
    )
    observed = Observed()
    fired(observed, "a", version_payload("a", 1), (T0 + 30) * MS + 150)
    fired(observed, "b", version_payload("b", 2), (T0 + 60) * MS + 90)
    fired(observed, "d", version_payload("d", 1), (T0 + 20) * MS + 40, "worker-2")
    # fired again by the worker that took over after worker-2's kill
    fired(observed, "d", version_payload("d", 1), (T0 + 31) * MS, "worker-3")
    # one produce sent twice by librdkafka: the same stamp, one fired record
    observed.callbacks.append(
        Callback("a", version_payload("a", 1), None, (T0 + 30) * MS + 150, "cb", 1, 99)
    )
    for seq in (1, 2, 3):
        fired(observed, "s", series_payload("s"), (T0 + 5 + 5 * seq) * MS + 10, seq=seq)
    observed.arrivals += [Arrival("b", version_payload("b", 1), 4, True)]

    verdict = check(history, observed)

    assert verdict.ok, verdict.lines()
    assert verdict.timers == 6
    assert verdict.indeterminate == 1
    assert verdict.duplicates == {"kill -9": 1, "producer resend": 1}
    assert verdict.max_late_ms == 150


def test_a_repeat_by_a_worker_back_from_a_cut_is_put_down_to_the_cut() -> None:
    """worker-2 was cut off the broker before the first copy; worker-3 (42 s ahead)
    fired its timer meanwhile, and worker-2 fired it again once back: the cut, under way
    at the first copy and on the repeat's worker, is the cause (it was ``unexplained``
    when only faults beginning after the first copy, on its own worker, were counted)."""
    history = History(
        versions=[version("a", 1, 30, 0)],
        faults=[Fault("partition reset", "worker-2", (T0 + 20) * MS, (T0 + 34) * MS)],
        incarnations=[Incarnation("worker-3~p42", 42.0)],
    )
    observed = Observed()
    fired(observed, "a", version_payload("a", 1), (T0 + 30 + 42) * MS, "worker-3~p42")
    fired(observed, "a", version_payload("a", 1), (T0 + 38) * MS, "worker-2")

    verdict = check(history, observed)

    assert verdict.ok, verdict.lines()
    assert verdict.duplicates == {"partition reset": 1}


def test_a_lost_timer_fails_it() -> None:
    history = History(versions=[version("a", 1, 30, 0), version("b", 1, 30, 0)])
    observed = Observed()
    fired(observed, "a", version_payload("a", 1), (T0 + 30) * MS)

    verdict = check(history, observed)

    assert not verdict.ok
    assert [line.split(" ")[0] for line in verdict.lost] == ["b"]


def test_an_early_fire_fails_it_even_when_its_worker_clock_hid_it() -> None:
    """worker-3~p45 ran 45 s ahead: its stamp says the second had come, real time says
    it was 40 s early. A worker running behind (worker-3~m30) is late, not early."""
    history = History(
        versions=[version("a", 1, 60, 0), version("b", 1, 60, 0), version("c", 1, 60, 0)],
        incarnations=[Incarnation("worker-3~p45", 45.0), Incarnation("worker-3~m30", -30.0)],
    )
    observed = Observed()
    fired(observed, "a", version_payload("a", 1), (T0 + 65) * MS, "worker-3~p45")
    fired(observed, "b", version_payload("b", 1), (T0 + 60) * MS, "worker-3~m30")
    fired(observed, "c", version_payload("c", 1), (T0 + 59) * MS + 900)

    verdict = check(history, observed)

    assert not verdict.ok
    assert [e.split(" ")[0] for e in verdict.early] == ["a", "c"]
    assert "40000 ms before" in verdict.early[0]
    assert verdict.max_late_ms == 30_000  # b: on time by its clock, 30 s late really


def test_a_spread_timer_is_judged_by_its_spread_second() -> None:
    history = History(versions=[version("a", 1, 30, 0, fire_at=T0 + 41, kind="spread")])
    observed = Observed()
    fired(observed, "a", version_payload("a", 1), (T0 + 35) * MS)

    assert check(history, observed).early


def test_a_fire_after_a_cancel_was_answered_cancelled_fails_it() -> None:
    history = History(
        versions=[version("c", 1, 40, 0)],
        cancels=[CancelOp("c", "tok", (T0 + 10) * MS, (T0 + 10) * MS + 60, "cancelled")],
    )
    observed = Observed()
    fired(observed, "c", version_payload("c", 1), (T0 + 40) * MS)

    verdict = check(history, observed)

    assert not verdict.ok
    assert len(verdict.after_cancel) == 1
    assert verdict.lost == []  # a cancelled timer is not expected


def test_an_older_version_replayed_after_its_reschedule_fails_it() -> None:
    """The lost update of a forwarding worker killed mid-batch: v1's copy reached the
    owner again after v2, so v1 fired at its old second and v2 never did (the pattern
    the nemesis found on real processes, seed 3)."""
    history = History(versions=rescheduled("r", 30, 90))
    observed = Observed()
    fired(observed, "r", version_payload("r", 1), (T0 + 30) * MS + 100)
    observed.arrivals += [
        Arrival("r", version_payload("r", 1), 10, True),
        Arrival("r", version_payload("r", 2), 12, True),
        Arrival("r", version_payload("r", 1), 17, True),  # the replayed copy
    ]

    verdict = check(history, observed)

    assert not verdict.ok
    assert len(verdict.undone) == 1 and "never fired" in verdict.undone[0]
    assert len(verdict.lost) == 1


def test_a_reschedule_that_raced_its_tick_or_its_producer_is_reported_not_failed() -> None:
    history = History(
        versions=[
            # v2 acknowledged 3 s before v1's second: the tick may win
            *rescheduled("x", 8, 60),
            # v2 sent by another route reached the owner before v1's copy
            *rescheduled("y", 30, 90),
        ]
    )
    observed = Observed()
    fired(observed, "x", version_payload("x", 1), (T0 + 8) * MS)
    fired(observed, "x", version_payload("x", 2), (T0 + 60) * MS)
    fired(observed, "y", version_payload("y", 1), (T0 + 30) * MS)
    observed.arrivals += [
        Arrival("y", version_payload("y", 2), 3, False),
        Arrival("y", version_payload("y", 1), 9, True),
    ]

    verdict = check(history, observed)

    assert verdict.ok, verdict.lines()
    assert verdict.raced == ["x v1"] and verdict.misordered == ["y v1"]


def test_a_reschedule_that_reached_the_owner_after_the_old_fire_is_reported_not_failed() -> None:
    """v2 of "late" was acknowledged long before v1's second but reached the owner
    partition (offset 8) only after v1 fired there with requests applied through 5:
    held up on its way, not undone. v2 of "undone" was there (offset 4) when v1 fired."""
    history = History(versions=[*rescheduled("late", 30, 90), *rescheduled("undone", 30, 90)])
    observed = Observed()
    for timer_id in ("late", "undone"):
        observed.callbacks.append(
            Callback(timer_id, version_payload(timer_id, 1), None, (T0 + 30) * MS, "cb", 0, 0)
        )
        observed.fires.append(Fire(timer_id, None, (T0 + 30) * MS, "worker-1", 5))
        fired(observed, timer_id, version_payload(timer_id, 2), (T0 + 90) * MS)
    observed.arrivals += [
        Arrival("late", version_payload("late", 1), 2, True),
        Arrival("late", version_payload("late", 2), 8, True),
        Arrival("undone", version_payload("undone", 1), 2, True),
        Arrival("undone", version_payload("undone", 2), 4, True),
    ]

    verdict = check(history, observed)

    assert verdict.reached_late == ["late v1"]
    assert len(verdict.undone) == 1 and verdict.undone[0].startswith("undone v1")


def test_a_lost_timer_says_when_it_was_dead_lettered() -> None:
    history = History(versions=[version("a", 1, 30, 0)])
    observed = Observed(dead=[DeadLetter("a", "delivery_failed", "Local: Message timed out")])

    verdict = check(history, observed)

    assert verdict.lost == [
        "a v1 (second 1800000030, plain, 1 version(s), route any), dead-lettered "
        "delivery_failed: Local: Message timed out"
    ]
    assert verdict.dead_lettered == {"delivery_failed": 1}


def test_callbacks_nobody_asked_for_fail_it() -> None:
    history = History(
        versions=[version("a", 1, 30, 0)],
        series=[SeriesOp("s", "tok", T0 + 10, 5, 2, T0 * MS, T0 * MS + 20)],
    )
    observed = Observed()
    fired(observed, "a", version_payload("a", 1), (T0 + 30) * MS)
    fired(observed, "a", version_payload("a", 7), (T0 + 30) * MS)
    fired(observed, "zz", "zz/v1", (T0 + 30) * MS)
    fired(observed, "s", series_payload("s"), (T0 + 10) * MS, seq=1)
    fired(observed, "s", series_payload("s"), (T0 + 15) * MS, seq=2)
    fired(observed, "s", series_payload("s"), (T0 + 20) * MS, seq=3)

    verdict = check(history, observed)

    assert not verdict.ok
    assert len(verdict.unknown) == 3


def test_a_missing_series_occurrence_fails_it() -> None:
    history = History(series=[SeriesOp("s", "tok", T0 + 10, 5, 3, T0 * MS, T0 * MS + 20)])
    observed = Observed()
    fired(observed, "s", series_payload("s"), (T0 + 10) * MS, seq=1)
    fired(observed, "s", series_payload("s"), (T0 + 20) * MS, seq=3)

    verdict = check(history, observed)

    assert [line.split(" (")[0] for line in verdict.lost] == ["s seq 2"]


def test_histories_survive_their_files() -> None:
    history_file, observed_file = io.StringIO(), io.StringIO()
    entries = [
        version("a", 1, 30, 0),
        SeriesOp("s", "tok", T0, 5, 3, T0 * MS, None),
        CancelOp("a", "tok", T0 * MS, None, None),
        Fault("SIGSTOP", "worker-1", T0 * MS, T0 * MS + 5000, "5.0 s"),
        Incarnation("worker-3~p45", 45.0),
    ]
    for entry in entries:
        write_line(history_file, entry)
    seen = [
        Callback("a", "a/v1", None, 1, "cb", 0, 0),
        Fire("a", None, 1, "w"),
        Arrival("a", "", 3, False),
    ]
    for entry in seen:
        write_line(observed_file, entry)

    history = parse_history(history_file.getvalue().splitlines())
    observed = parse_observed(observed_file.getvalue().splitlines())

    assert [*history.versions, *history.series, *history.cancels, *history.faults] == entries[:4]
    assert history.incarnations == entries[4:]
    assert [*observed.callbacks, *observed.fires, *observed.arrivals] == seen


def test_the_audit_agrees_only_when_it_finds_what_the_checker_found() -> None:
    verdict = Verdict(lost=["a v1 (second 1)"], early=[])
    same = compare(verdict, {"violation_counts": {"missing": 1, "duplicate": 7}}, "audit FAIL")
    assert same.agrees and "lost 1/1" in same.line()
    # every forwarded original reported missing where it landed: a defect of one judge
    apart = compare(verdict, {"violation_counts": {"missing": 18900, "superseded_fire": 3}})
    assert not apart.agrees
    assert "DISAGREES" in apart.line() and "undone 0/3" in apart.line()


def test_audit_findings_on_a_moved_worker_clock_are_set_apart() -> None:
    """The audit reads worker clocks: a cancel answered by a worker the nemesis ran 34 s
    behind looks, to it, like a fire after the cancel; the checker (real time) is right."""
    history = History(incarnations=[Incarnation("worker-2~m34", -34.0)])
    observed = Observed()
    observed.answers.append(Answer("c", "worker-2~m34", "cancelled"))
    summary = {
        "violation_counts": {"fire_after_cancel": 2},
        "violations": [
            {"kind": "fire_after_cancel", "id": "c"},
            {"kind": "fire_after_cancel", "id": "d"},  # on an honest clock: compared
        ],
    }
    agreement = compare(Verdict(), summary, skewed=skewed_ids(history, observed))
    assert agreement.clock == 1
    assert not agreement.agrees and "after_cancel 0/1" in agreement.line()
    summary["violations"] = summary["violations"][:1]  # type: ignore[index]
    summary["violation_counts"] = {"fire_after_cancel": 1}
    assert compare(Verdict(), summary, skewed=skewed_ids(history, observed)).agrees
