"""Which pending timers an operator means: the filters of ``kafka-timers list`` (and of a
bulk cancel). Pure: parsed from query parameters, matched against a stored timer.

All given filters must hold: callback ``topic`` (exact), callback ``key`` (exact) or
``key_prefix``, ``id_prefix``, ``due_from``/``due_to`` (epoch seconds, inclusive, on the
timer's due second: a series' next occurrence), ``series`` (series only). No filter at
all matches every pending timer. An empty prefix is refused, never read as "every
timer": it is what an unset shell variable gives (``--id-prefix "$PREFIX"``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from app.core.timer import Timer

__all__ = ["MAX_FILTER_CHARS", "TimerFilter"]

#: Longest filter text accepted (topic, key, prefixes).
MAX_FILTER_CHARS = 1024
_TEXT = ("topic", "key", "key_prefix", "id_prefix")
_PREFIXES = ("key_prefix", "id_prefix")
_SECONDS = ("due_from", "due_to")


@dataclass(frozen=True)
class TimerFilter:
    """The filters given (``None``: not given). Built by :meth:`from_query`, which
    refuses an empty prefix."""

    topic: str | None = None
    key: bytes | None = None
    key_prefix: bytes | None = None
    id_prefix: str | None = None
    due_from: int | None = None
    due_to: int | None = None
    series: bool = False

    @classmethod
    def from_query(cls, query: Mapping[str, str]) -> TimerFilter:
        """From query parameters (or a JSON object's strings); ``ValueError`` with one
        line for a bad one."""
        known = {*_TEXT, *_SECONDS, "series"}
        values: dict[str, object] = {}
        for name in _TEXT:
            text = query.get(name)
            if text is None:
                continue
            if len(text) > MAX_FILTER_CHARS:
                raise ValueError(f"{name} is longer than {MAX_FILTER_CHARS} characters")
            if not text and name in _PREFIXES:
                raise ValueError(f"{name} is empty: an empty prefix matches every timer")
            values[name] = text.encode() if name in ("key", "key_prefix") else text
        for name in _SECONDS:
            raw = query.get(name)
            if raw is None:
                continue
            try:
                second = int(raw)
            except (TypeError, ValueError):
                raise ValueError(f"{name} must be whole epoch seconds, got {raw!r:.40}") from None
            if not 0 <= second < 10**12:
                raise ValueError(f"{name} out of range")
            values[name] = second
        series = query.get("series")
        if series is not None:
            if str(series).lower() not in ("1", "true", "0", "false"):
                raise ValueError("series must be true or false")
            values["series"] = str(series).lower() in ("1", "true")
        if "key" in values and "key_prefix" in values:
            raise ValueError("give key or key_prefix, not both")
        unknown = [name for name in query if name not in known]
        if unknown:
            raise ValueError(f"unknown filter {unknown[0][:40]!r}")
        return cls(**values)  # type: ignore[arg-type]

    def to_query(self) -> dict[str, str]:
        """The query parameters that give this filter back (:meth:`from_query`)."""
        out: dict[str, str] = {}
        if self.topic is not None:
            out["topic"] = self.topic
        if self.key is not None:
            out["key"] = self.key.decode()
        if self.key_prefix is not None:
            out["key_prefix"] = self.key_prefix.decode()
        if self.id_prefix is not None:
            out["id_prefix"] = self.id_prefix
        if self.due_from is not None:
            out["due_from"] = str(self.due_from)
        if self.due_to is not None:
            out["due_to"] = str(self.due_to)
        if self.series:
            out["series"] = "true"
        return out

    def id_may_match(self, timer_id: str) -> bool:
        """What the store key alone tells (no timer unpacked)."""
        return self.id_prefix is None or timer_id.startswith(self.id_prefix)

    def matches(self, timer: Timer) -> bool:
        if self.id_prefix is not None and not timer.id.startswith(self.id_prefix):
            return False
        if self.topic is not None and timer.topic != self.topic:
            return False
        if self.key is not None and timer.key != self.key:
            return False
        if self.key_prefix is not None and (
            timer.key is None or not timer.key.startswith(self.key_prefix)
        ):
            return False
        if self.due_from is not None and timer.due < self.due_from:
            return False
        if self.due_to is not None and timer.due > self.due_to:
            return False
        return not (self.series and timer.recurrence is None)
