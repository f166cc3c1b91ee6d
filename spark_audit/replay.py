"""The worker's request-side rules replayed for one timer id: which version is live, and when.

A **debounced** request (:mod:`app.core.debounce`) over a pending debounced version is
merged into it as the wheel merges it: one version, due one debounce after this request
but no later than the first request's time plus the max-wait, counting one more
request; the version it replaces is superseded, as by any reschedule. A burst of N
requests is thus one final version and one expected fire, not N versions of which N-1
never fire, and a fire at the max-wait's bound is that version's, not an unrequested one.
A pending debounced version that has fired was delivered, and the request starts a new
debounce (:meth:`Replay._delivered`: unless the fire is the one the merge makes, a
max-wait bound kept), however its timestamp compares with the fire: a worker that read
it while the round was under way did exactly that. Bursts apart in time are so judged
each on its own. The audit cannot tell that from a worker that merged a request and
still fired the old version (the merged version, if it never fires, is missing).
A debounced timer restored whole by an import replaces the pending version, as the
wheel does.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple, TypeVar

from app.core.debounce import Debounce
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
    """A span in which one version must not fire: of time, and of the partition's
    request offsets (from the request that replaced or cancelled it to the one that
    requested it again), for a fire that names the newest request its worker had
    applied (``request_offset``)."""

    start: int
    end: int | None
    kind: ViolationKind
    offset: int = -1
    end_offset: int | None = None


class Replay:
    """The request-side state of the worker's wheel for one timer id."""

    def __init__(
        self, reports: Iterable[CancelReport], fired_ms: Mapping[Version, int] | None = None
    ) -> None:
        """``fired_ms``: when each one-shot version first fired (a debounced request over
        a version that fired starts a new debounce)."""
        self.pending: Version | None = None
        self._fired_ms = fired_ms or {}
        #: Each debounced version's debounce: its first request's time, requests merged.
        self.debounces: dict[Version, Debounce] = {}
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

    def _kill(self, version: Version, at_ms: int, kind: ViolationKind, offset: int) -> None:
        spans = self.dead[version]
        if spans and spans[-1].end is None:
            if spans[-1].kind is kind:
                return
            spans[-1] = spans[-1]._replace(end=at_ms, end_offset=offset)
        spans.append(DeadSpan(at_ms, None, kind, offset))

    def _revive(self, version: Version, at_ms: int, offset: int) -> None:
        spans = self.dead.get(version)
        if spans and spans[-1].end is None:
            spans[-1] = spans[-1]._replace(end=at_ms, end_offset=offset)

    def schedule(self, request: RequestEvent) -> None:
        """Apply a schedule request, as the wheel does when it reads one."""
        if request.debounce is not None:
            request = self._debounced(request)
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
            self._kill(version, request.ts_ms, ViolationKind.FIRE_AFTER_CANCEL, request.offset)
            return
        if self.pending != version:
            if self.pending is not None:
                self._kill(self.pending, request.ts_ms, ViolationKind.SUPERSEDED, request.offset)
            self._revive(version, request.ts_ms, request.offset)
            self.live_since[version] = request.ts_ms
        self.pending = version
        self.cancelled_token = None

    def _debounced(self, request: RequestEvent) -> RequestEvent:
        """``request`` as the version it makes: merged into the pending debounced version
        (see the module), or a new debounce."""
        asked = request.debounce
        assert asked is not None and request.due is not None
        pending = self.pending
        held = self.debounces.get(pending) if pending is not None else None
        if held is not None and pending is not None and pending[0] not in ("", request.token):
            held = None  # the token rule: no merge (the request replaces, as any would)
        due = request.due
        if asked.restored or held is None:
            state = Debounce(asked.seconds, asked.max_wait, asked.first_ms, asked.merged)
        else:
            state = Debounce(asked.seconds, asked.max_wait, held.first_ms, held.merged + 1)
            deadline = state.deadline
            if deadline is not None and deadline < due:
                due = deadline
            if pending is not None and self._delivered(pending, request, due):
                self.pending = None  # fired, not replaced: the request starts anew
                state = Debounce(asked.seconds, asked.max_wait, asked.first_ms, asked.merged)
                due = request.due
        self.debounces[(request.token, due)] = state
        return request._replace(due=due, debounce=state)

    def _delivered(self, pending: Version, request: RequestEvent, merged_due: int) -> bool:
        """Whether the pending debounced version had been delivered when the wheel read
        ``request``, so that it started a new debounce rather than merging into it.

        Only a version that fired was, and it was unless the fire is the merged
        version's own (a max-wait bound the merge kept): so when the request came at or
        after its due second (the round had taken it), when the merge would have made
        another version (this one would then not have fired), or when the request's own
        version fired too."""
        assert request.due is not None
        if pending not in self._fired_ms:
            return False
        return (
            request.ts_ms >= pending[1] * 1000
            or (request.token, merged_due) != pending
            or (request.token, request.due) in self._fired_ms
        )

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
        self._kill(self.pending, effective_ms, ViolationKind.FIRE_AFTER_CANCEL, request.offset)
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

    def dead_span(
        self, version: Version, at_ms: int, request_offset: int | None = None
    ) -> DeadSpan | None:
        """The span in which ``version`` must not fire that holds a fire at ``at_ms``, if
        any: by the fire's ``request_offset`` when it has one (the requests its worker
        had applied: one past it had not reached the worker), else by time."""
        for span in self.dead.get(version, ()):
            if request_offset is not None:
                if span.offset <= request_offset and (
                    span.end_offset is None or request_offset < span.end_offset
                ):
                    return span
            elif span.start <= at_ms and (span.end is None or at_ms < span.end):
                return span
        return None
