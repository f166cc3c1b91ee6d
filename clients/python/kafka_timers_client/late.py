"""The late-fire policy: what to do with a fire that comes late, per timer.

Two independent choices, written as one comma-separated text in every input format
(``"skip-after 5m"``, ``"all"``, ``"skip-after 30s, coalesce"``):

- how late a fire may be: ``fire`` (however late: the default) or ``skip-after
  <duration>`` (a fire that would be later than that past its due second is not
  delivered; it is reported on the fired topic as skipped, and counted);
- for a series, what occurrences missed during an outage do: ``coalesce`` (one fire,
  as the newest of them, then on schedule: the default) or ``all`` (each fires, in
  order, then on schedule).

A timer names either, both or neither; what it leaves out is the service's default
(``KAFKA_TIMERS_LATE_POLICY``). ``coalesce`` is the default for series because a series
is a "keep doing this" — a reminder, a poll, a report — where a backlog of identical
fires after an outage is a burst nobody asked for (Quartz's default for cron triggers,
"fire once now", and systemd's ``Persistent=`` timers do the same); receivers see how
many were folded in from the ``timer-seq`` gap or the ``timer-coalesced`` header. A
series whose every occurrence matters (billing per period) asks for ``all``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from kafka_timers_client.due import parse_duration
from kafka_timers_client.errors import InvalidTimeSpec, RejectedRequest, RejectReason

__all__ = ["DEFAULT_POLICY", "FIRE_HOWEVER_LATE", "CatchUp", "LatePolicy"]

#: ``skip_after_ms`` of ``fire``: never skip.
FIRE_HOWEVER_LATE = 0


class CatchUp(str, Enum):
    """How a series fires occurrences missed during an outage."""

    #: One fire, as the newest missed occurrence, standing for all of them.
    COALESCE = "coalesce"
    #: Every missed occurrence fires, in order.
    ALL = "all"


@dataclass(frozen=True)
class LatePolicy:
    """A timer's late-fire policy; a field left ``None`` takes the service default."""

    #: A fire later than this many ms past its due second is skipped; 0: ``fire``.
    skip_after_ms: int | None = None
    #: What a series does with occurrences missed during an outage.
    catch_up: CatchUp | None = None

    @classmethod
    def parse(cls, text: str) -> LatePolicy:
        """Read ``fire`` / ``skip-after <duration>`` and ``coalesce`` / ``all``, comma-separated.

        Raises :class:`RejectedRequest` (``invalid_late_policy``) otherwise.
        """
        skip: int | None = None
        catch_up: CatchUp | None = None
        for raw in text.split(","):
            item = " ".join(raw.split()).lower()
            if not item:
                continue
            if item == "fire":
                new_skip: int | None = FIRE_HOWEVER_LATE
            elif item.startswith("skip-after"):
                new_skip = _skip_ms(item.removeprefix("skip-after"), text)
            elif item in (CatchUp.COALESCE.value, CatchUp.ALL.value):
                if catch_up is not None:
                    raise _bad(text, "names coalesce/all twice")
                catch_up = CatchUp(item)
                continue
            else:
                raise _bad(text, f"unknown item {item!r}")
            if skip is not None:
                raise _bad(text, "names fire/skip-after twice")
            skip = new_skip
        return cls(skip, catch_up)

    def over(self, default: LatePolicy) -> LatePolicy:
        """This policy with what it leaves out taken from ``default``."""
        return LatePolicy(
            self.skip_after_ms if self.skip_after_ms is not None else default.skip_after_ms,
            self.catch_up if self.catch_up is not None else default.catch_up,
        )

    @property
    def is_empty(self) -> bool:
        """Whether it names nothing (the service default in full)."""
        return self.skip_after_ms is None and self.catch_up is None

    def skips(self, lateness_ms: float) -> bool:
        """Whether a fire this late (ms past its due second) is skipped."""
        return bool(self.skip_after_ms) and lateness_ms > (self.skip_after_ms or 0)

    def text(self) -> str:
        """The canonical text, e.g. ``skip-after 5s, all`` (``""`` when empty)."""
        items = []
        if self.skip_after_ms == FIRE_HOWEVER_LATE:
            items.append("fire")
        elif self.skip_after_ms is not None:
            ms = self.skip_after_ms
            items.append(f"skip-after {ms // 1000}s" if ms % 1000 == 0 else f"skip-after {ms}ms")
        if self.catch_up is not None:
            items.append(self.catch_up.value)
        return ", ".join(items)


#: The service's default when ``KAFKA_TIMERS_LATE_POLICY`` is not set.
DEFAULT_POLICY = LatePolicy(FIRE_HOWEVER_LATE, CatchUp.COALESCE)


def _bad(text: str, why: str) -> RejectedRequest:
    return RejectedRequest(
        RejectReason.INVALID_LATE_POLICY,
        f"late-fire policy {text!r} {why}: use fire or skip-after <duration>, "
        "and/or coalesce or all",
    )


def _skip_ms(duration: str, text: str) -> int:
    try:
        seconds = parse_duration(duration.strip())
    except InvalidTimeSpec as exc:
        raise _bad(text, f"has no duration after skip-after ({exc})") from exc
    ms = round(seconds * 1000)
    if ms < 1:
        raise _bad(text, "skips after 0: use a positive duration")
    return ms
