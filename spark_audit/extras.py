"""Judging the fires a trigger or a backfill asked for (:mod:`kafka_timers_client.extra_fires`).

Their fired records say what they are (``extra``: ``trigger`` or ``backfill``), and each
is judged by it, not by a schedule:

- a **triggered one-shot** fires its own version (id, token and due second kept) when
  the trigger asks, before its second: not early, unless it fired before the worker
  applied a trigger of it (its ``triggered`` answer on the fired topic; with no answer
  left to read, not judged early). It is the timer's fire: the timer must not fire
  again at its second (a duplicate), and is ``fired``;
- a **series' extra fire** — the extra occurrence a trigger fires (id
  ``<id>@trigger:<request offset>``, due the trigger's second) or an occurrence a
  backfill fires (``<id>@backfill:<second>``, due that second) — is judged with series
  ``<id>``: *unrequested* unless a series with its token was requested under that id
  (and, for a backfill, its due second is the one its id names); *early* if it fired
  before its due second or before its trigger was applied; a *duplicate* if the same
  extra id fired twice. It is no occurrence of the series (the series' own numbering
  and its missing occurrences are unchanged by it) and a cancel of the series does
  not concern it: once stored, an extra fire is a timer of its own.

Each extra id is counted once (``extra_triggered``, ``extra_backfilled``). Its lateness
is counted from when the worker applied the request (its answer), where known, and is
left out of the lateness statistics: it is as late as the request made it, not the
schedule (a backfill of thousands drains through its topic's rate limit).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from kafka_timers_client.extra_fires import BACKFILL, TRIGGER
from kafka_timers_client.outcome import BackfillOutcome, TriggerOutcome
from spark_audit.replay import Replay
from spark_audit.verdicts import ExtraAnswer, FireEvent, Violation, ViolationKind, utc_text

__all__ = [
    "APPLIED_OUTCOMES",
    "ExtraJudgement",
    "applied_ms",
    "judge_series_extras",
    "trigger_early",
]

#: The outcome of a trigger or a backfill the worker applied.
_APPLIED = {TRIGGER: TriggerOutcome.TRIGGERED.value, BACKFILL: BackfillOutcome.BACKFILLED.value}
#: The answers that say a trigger or a backfill was applied.
APPLIED_OUTCOMES = tuple(_APPLIED.values())


def applied_ms(
    answers: Sequence[ExtraAnswer], kind: str, token: str, offset: int | None = None
) -> list[int]:
    """When the worker applied each ``kind`` request of ``token`` (at request ``offset``
    only, if given), by its answers, in time order."""
    outcome = _APPLIED[kind]
    return sorted(
        a.at_ms
        for a in answers
        if a.kind == kind
        and a.outcome == outcome
        and a.token == token
        and (offset is None or a.request_offset == offset)
    )


def _lateness(fire: FireEvent, applied: list[int]) -> int:
    """Time from the request that asked for ``fire`` being applied to the fire: the last
    applied at or before it, else the first (negative: it came before); from its due
    second when no answer is left to read."""
    before = [at for at in applied if at <= fire.fired_at_ms]
    if before:
        return fire.fired_at_ms - before[-1]
    if applied:
        return fire.fired_at_ms - applied[0]
    return fire.fired_at_ms - fire.due * 1000


def trigger_early(fire: FireEvent, answers: Sequence[ExtraAnswer]) -> tuple[int, str | None]:
    """A triggered one-shot's lateness (from its trigger) and, if it fired before any
    trigger of it was applied, why that is early."""
    applied = applied_ms(answers, TRIGGER, fire.token)
    early = None
    if applied and fire.fired_at_ms < applied[0]:
        early = f"fired {applied[0] - fire.fired_at_ms} ms before its trigger was applied"
    return _lateness(fire, applied), early


class ExtraJudgement:
    """What the extra fires of one series id come to."""

    def __init__(self) -> None:
        self.violations: list[Violation] = []
        self.rows: list[dict[str, Any]] = []
        self.triggered = 0
        self.backfilled = 0


def judge_series_extras(
    fires: Sequence[FireEvent], replay: Replay, answers: Sequence[ExtraAnswer]
) -> ExtraJudgement:
    """Judge the fires whose ids derive from this timer's id (each ``extra_n`` set), in
    time order: see the module."""
    out = ExtraJudgement()
    by_id: dict[tuple[str | None, int | None], list[FireEvent]] = defaultdict(list)
    for fire in sorted(fires, key=lambda f: (f.fired_at_ms, f.due, f.extra_n or 0)):
        key = (fire.extra, fire.extra_n)
        by_id[key].append(fire)
        offset = fire.extra_n if fire.extra == TRIGGER else None
        applied = applied_ms(answers, fire.extra or TRIGGER, fire.token, offset)
        out.rows.append(
            {
                "token": fire.token,
                "due": fire.due,
                "fired_at_ms": fire.fired_at_ms,
                "topic": fire.topic,
                "worker": fire.worker,
                "lateness_ms": _lateness(fire, applied),
                "first": by_id[key][0] is fire,
                "extra": fire.extra,
            }
        )
        if fire.fired_at_ms < fire.due * 1000:
            out.violations.append(
                Violation.of_fire(
                    ViolationKind.EARLY,
                    fire,
                    f"fired {fire.due * 1000 - fire.fired_at_ms} ms before its due second",
                )
            )
        elif fire.extra == TRIGGER and applied and fire.fired_at_ms < applied[0]:
            out.violations.append(
                Violation.of_fire(
                    ViolationKind.EARLY,
                    fire,
                    f"fired {applied[0] - fire.fired_at_ms} ms before its trigger was applied",
                )
            )
        unrequested = _unrequested(fire, replay)
        if unrequested is not None:
            out.violations.append(Violation.of_fire(ViolationKind.UNREQUESTED, fire, unrequested))
    for (kind, number), fired in by_id.items():
        if kind == TRIGGER:
            out.triggered += 1
            what = f"trigger at request offset {number}"
        else:
            out.backfilled += 1
            what = f"backfilled occurrence at {utc_text((number or 0) * 1000)}"
        if len(fired) > 1:
            times = ", ".join(utc_text(f.fired_at_ms) for f in fired)
            out.violations.append(
                Violation(
                    ViolationKind.DUPLICATE,
                    fired[0].token,
                    fired[0].due,
                    fired[1].fired_at_ms,
                    f"the {what} fired {len(fired)} times (at {times})",
                )
            )
    return out


def _unrequested(fire: FireEvent, replay: Replay) -> str | None:
    """Why no request asked for this extra fire, if none did."""
    what = "triggered" if fire.extra == TRIGGER else "backfilled"
    if replay.final is None:
        return f"{what} for a series never requested under this id"
    if not replay.series_by_token.get(fire.token):
        return f"{what} for a series never requested with this token"
    if fire.extra == BACKFILL and fire.due != fire.extra_n:
        return f"a backfilled occurrence due at {fire.due}, not the second its id names"
    return None
