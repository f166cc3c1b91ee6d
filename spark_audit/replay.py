"""The worker's request-side rules replayed for one timer id: which version is live, and when."""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple, TypeVar

from kafka_timers_client.recurrence import Recurrence
from spark_audit.verdicts import CancelReport, RequestEvent, Version, ViolationKind

__all__ = ["DeadSpan", "Replay", "without_repeats"]


_NO_EFFECT = frozenset({"already_fired", "wrong_token", "not_found", "not_remembered"})


_T = TypeVar("_T")


def without_repeats(items: Iterable[_T], key: Callable[[_T], Any]) -> list[_T]:
    """``items`` without exact repeats, ordered by ``key`` (most timers have 0 or 1)."""
    unique = list(items)
    if len(unique) < 2:
        return unique
    return sorted(set(unique), key=key)


class DeadSpan(NamedTuple):
    """A span of time in which one version must not fire."""

    start: int
    end: int | None
    kind: ViolationKind


class Replay:
    """The request-side state of the worker's wheel for one timer id."""

    def __init__(self, reports: Iterable[CancelReport]) -> None:
        self.pending: Version | None = None
        #: Token of a cancel waiting for its request, or of the version it cancelled, and
        #: that version's due second (0 for a cancel in advance): the wheel's ``C`` entry.
        self.cancelled_token: str | None = None
        self.cancelled_due = 0
        self.final: RequestEvent | None = None
        #: When each version was first requested (the base of its lateness).
        self.first_requested: dict[Version, int] = {}
        #: When each version last became pending (the base of "missing").
        self.live_since: dict[Version, int] = {}
        #: The spread of each version, ms (its newest request's): fires within it are on
        #: time.
        self.spread_ms: dict[Version, int] = {}
        #: The recurrence of each series version, and the series versions by token.
        self.series: dict[Version, Recurrence] = {}
        self.series_by_token: dict[str, list[Version]] = defaultdict(list)
        self.dead: dict[Version, list[DeadSpan]] = defaultdict(list)
        self._reports: dict[str, deque[CancelReport]] = defaultdict(deque)
        for report in without_repeats(reports, lambda r: r.at_ms):
            self._reports[report.token].append(report)

    def _kill(self, version: Version, at_ms: int, kind: ViolationKind) -> None:
        spans = self.dead[version]
        if spans and spans[-1].end is None:
            if spans[-1].kind is kind:
                return
            spans[-1] = spans[-1]._replace(end=at_ms)
        spans.append(DeadSpan(at_ms, None, kind))

    def _revive(self, version: Version, at_ms: int) -> None:
        spans = self.dead.get(version)
        if spans and spans[-1].end is None:
            spans[-1] = spans[-1]._replace(end=at_ms)

    def schedule(self, request: RequestEvent) -> None:
        """Apply a schedule request, as the wheel does when it reads one."""
        assert request.due is not None
        version = (request.token, request.due)
        self.final = request
        self.first_requested.setdefault(version, request.ts_ms)
        if request.spread or version in self.spread_ms:
            self.spread_ms[version] = request.spread * 1000
        if request.recurrence is not None and version not in self.series:
            self.series[version] = request.recurrence
            self.series_by_token[request.token].append(version)
        if (
            self.pending is None
            and self.cancelled_token == request.token
            and self.cancelled_due in (0, request.due)
        ):
            # The wheel drops it: cancelled before it arrived, or this very version again.
            self.live_since.setdefault(version, request.ts_ms)
            self._kill(version, request.ts_ms, ViolationKind.FIRE_AFTER_CANCEL)
            return
        if self.pending != version:
            if self.pending is not None:
                self._kill(self.pending, request.ts_ms, ViolationKind.SUPERSEDED)
            self._revive(version, request.ts_ms)
            self.live_since[version] = request.ts_ms
        self.pending = version
        self.cancelled_token = None

    def cancel(self, request: RequestEvent) -> None:
        """Apply a cancel request, at the time the worker's report gives, if any."""
        queue = self._reports.get(request.token)
        report = queue.popleft() if queue else None
        if report is not None and report.outcome in _NO_EFFECT:
            return
        effective_ms = report.at_ms if report is not None else request.ts_ms
        if self.pending is None:
            if request.check_token:
                self.cancelled_token, self.cancelled_due = request.token, 0
            return
        if request.token != self.pending[0]:
            return  # a tombstone (no token) cancels only a timer stored without one
        self._kill(self.pending, effective_ms, ViolationKind.FIRE_AFTER_CANCEL)
        self.cancelled_token, self.cancelled_due = self.pending
        self.pending = None

    def version_of(self, token: str, due: int, seq: int | None, at_ms: int) -> Version:
        """The version a fire or skip record belongs to: a series occurrence (``seq``
        set) to the series with its token requested last before ``at_ms``."""
        if seq is None:
            return (token, due)
        candidates = self.series_by_token.get(token)
        if not candidates:
            return (token, -1)  # no series with this token: unrequested
        before = [v for v in candidates if self.first_requested[v] <= at_ms]
        return before[-1] if before else candidates[0]

    def dead_span(self, version: Version, at_ms: int) -> DeadSpan | None:
        """The span in which ``version`` must not fire that holds ``at_ms``, if any."""
        for span in self.dead.get(version, ()):
            if span.start <= at_ms and (span.end is None or at_ms < span.end):
                return span
        return None
