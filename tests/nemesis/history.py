"""What a nemesis run was promised, what it did to the processes, and what the topics said.

Three kinds of entries, each one JSON object a line in the run's files, Jepsen style:

- **promises** (``history.jsonl``, written by the load as they happen): every version
  of a one-shot timer sent (with when the broker acknowledged it), every series, every
  cancel with the answer it got and when;
- **faults** (``history.jsonl`` too, written by the nemesis): what was done to which
  process, from when to when, and which clock each worker incarnation ran on;
- **observations** (``observed.jsonl``, written once at the end): every callback on the
  callback topics, every ``fired`` record on ``timer-fired``, and where each request for
  a timer reached its owner partition.

Nothing here reads a topic or a clock: :mod:`tests.nemesis.checker` judges these values.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

__all__ = [
    "Arrival",
    "Callback",
    "CancelOp",
    "DeadLetter",
    "Fault",
    "Fire",
    "History",
    "Incarnation",
    "Observed",
    "SeriesOp",
    "Version",
    "read_history",
    "read_observed",
    "version_payload",
    "write_line",
]


def version_payload(timer_id: str, version: int) -> str:
    """The callback value of one version of a one-shot timer: what tells versions apart."""
    return f"{timer_id}/v{version}"


def series_payload(timer_id: str) -> str:
    return f"{timer_id}/s"


@dataclass(frozen=True)
class Version:
    """One schedule request of a one-shot timer (the first, or a reschedule)."""

    id: str
    #: 1 for the first request of the id, then 2, 3... in the order the load sent them.
    version: int
    token: str
    #: The requested second.
    due: int
    #: The second it must not fire before: ``due``, or its spread second.
    fire_at: int
    #: ``any``: sent by librdkafka's default partitioner (may be forwarded);
    #: ``owner``: sent to the id's owner partition (murmur2), as the clients do.
    route: str
    #: Real time the load produced it, epoch ms.
    sent_ms: int
    #: Real time the broker acknowledged it; None: never acknowledged (indeterminate).
    acked_ms: int | None
    #: The partition it landed on (None when not acknowledged).
    partition: int | None = None
    #: Its callback topic's kind: ``plain``, ``spread`` or ``limited``.
    kind: str = "plain"

    @property
    def payload(self) -> str:
        return version_payload(self.id, self.version)


@dataclass(frozen=True)
class SeriesOp:
    """An ``every`` series of ``count`` occurrences from ``first_due``, late policy ``all``
    (every occurrence fires, however late)."""

    id: str
    token: str
    first_due: int
    every: int
    count: int
    sent_ms: int
    acked_ms: int | None

    def due_of(self, seq: int) -> int:
        return self.first_due + (seq - 1) * self.every


@dataclass(frozen=True)
class CancelOp:
    """A cancel with the timer's token, sent to its owner, and the answer it got."""

    id: str
    token: str
    sent_ms: int
    #: Real time the answer was read, epoch ms; None: no answer within the wait.
    answered_ms: int | None
    #: The answer's outcome (``cancelled``, ``already_fired``...); None: no answer.
    outcome: str | None


@dataclass(frozen=True)
class Fault:
    """One fault the nemesis injected: ``kind`` on ``target`` from ``start_ms`` to
    ``end_ms`` (real time, epoch ms; ``end_ms`` = ``start_ms`` for an instant)."""

    kind: str
    target: str
    start_ms: int
    end_ms: int
    detail: str = ""


@dataclass(frozen=True)
class Incarnation:
    """A worker id the nemesis started, and how far ahead of real time its clock ran."""

    worker: str
    offset_s: float


@dataclass(frozen=True)
class Callback:
    """One record on a callback topic."""

    id: str
    #: The record's value, decoded (the version's or series' payload).
    payload: str
    #: ``timer-seq`` (series only).
    seq: int | None
    #: ``timer-fired-at``: the firing worker's clock, epoch ms.
    fired_at_ms: int
    topic: str
    partition: int
    offset: int


@dataclass(frozen=True)
class Fire:
    """One ``fired`` record of ``timer-fired``: which worker fired what, on its clock."""

    id: str
    seq: int | None
    fired_at_ms: int
    worker: str
    #: The newest request the firing worker had applied to the owner partition (the
    #: record's ``request_offset``; None in runs from before it existed).
    request_offset: int | None = None


@dataclass(frozen=True)
class Answer:
    """One cancel answer on ``timer-fired``: which worker answered, stamped on its clock."""

    id: str
    worker: str
    outcome: str


@dataclass(frozen=True)
class Arrival:
    """A request for a timer as it reached the id's owner partition: sent there, or a
    copy a worker forwarded (``copy``)."""

    id: str
    #: The payload of the version it asks for ("" for a cancel).
    payload: str
    offset: int
    copy: bool


@dataclass(frozen=True)
class DeadLetter:
    """A record of the dead-letter topic that names a timer (``timer-id``)."""

    id: str
    #: ``dlq-reason``, e.g. ``delivery_failed``.
    reason: str
    detail: str


@dataclass
class History:
    """Everything the load and the nemesis wrote."""

    versions: list[Version] = field(default_factory=list)
    series: list[SeriesOp] = field(default_factory=list)
    cancels: list[CancelOp] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    incarnations: list[Incarnation] = field(default_factory=list)


@dataclass
class Observed:
    """Everything read from the topics at the end."""

    callbacks: list[Callback] = field(default_factory=list)
    fires: list[Fire] = field(default_factory=list)
    arrivals: list[Arrival] = field(default_factory=list)
    dead: list[DeadLetter] = field(default_factory=list)
    answers: list[Answer] = field(default_factory=list)


_T = TypeVar("_T", "History", "Observed")

#: A line's ``op``: the class it is read as, and the list of History or Observed it joins.
_HISTORY_KINDS: dict[str, tuple[type[Any], str]] = {
    "version": (Version, "versions"),
    "series": (SeriesOp, "series"),
    "cancel": (CancelOp, "cancels"),
    "fault": (Fault, "faults"),
    "incarnation": (Incarnation, "incarnations"),
}
_OBSERVED_KINDS: dict[str, tuple[type[Any], str]] = {
    "callback": (Callback, "callbacks"),
    "fire": (Fire, "fires"),
    "arrival": (Arrival, "arrivals"),
    "dead": (DeadLetter, "dead"),
    "answer": (Answer, "answers"),
}
_KIND_OF: dict[type[Any], str] = {
    cls: kind for kind, (cls, _) in (*_HISTORY_KINDS.items(), *_OBSERVED_KINDS.items())
}


def to_line(entry: Any) -> str:
    """``entry`` as one JSON line, its kind under ``op``."""
    return json.dumps({"op": _KIND_OF[type(entry)], **asdict(entry)}, separators=(",", ":"))


def write_line(out: Any, entry: Any) -> None:
    """Append ``entry`` to the open text file ``out`` and flush: a run killed halfway
    keeps every promise made before."""
    out.write(to_line(entry) + "\n")
    out.flush()


def _parse(lines: Iterable[str], kinds: dict[str, tuple[type[Any], str]], into: _T) -> _T:
    """Each line of ``lines`` read as the class its ``op`` names, appended to its list
    in ``into``."""
    for line in lines:
        if not line.strip():
            continue
        raw = json.loads(line)
        cls, name = kinds[raw.pop("op")]
        getattr(into, name).append(cls(**raw))
    return into


def parse_history(lines: Iterable[str]) -> History:
    return _parse(lines, _HISTORY_KINDS, History())


def parse_observed(lines: Iterable[str]) -> Observed:
    return _parse(lines, _OBSERVED_KINDS, Observed())


def read_history(path: Path) -> History:
    with path.open() as lines:
        return parse_history(lines)


def read_observed(path: Path) -> Observed:
    with path.open() as lines:
        return parse_observed(lines)
