"""Reading settings' text: the allow-list and rate-limit syntaxes, host names, and how a
complaint quotes a value back."""

from __future__ import annotations

import ipaddress
import re

from app.core.policy import is_legal_topic
from app.settings.limits import MAX_TOPIC_RATE

__all__ = [
    "cut",
    "is_host",
    "is_ip",
    "parse_topic_rate_limits",
    "shown",
    "split_allow_list",
]

_RATE_ITEM = re.compile(
    r"^(?P<topic>[^=\s]+)\s*=\s*(?P<rate>[0-9]+(?:\.[0-9]+)?)\s*/\s*(?P<unit>[smh])$"
)
_RATE_UNIT_SECONDS = {"s": 1.0, "m": 60.0, "h": 3600.0}


def parse_topic_rate_limits(text: str) -> dict[str, float]:
    """Read ``topic=500/s,other=50/s`` (also ``/m``, ``/h``) into callbacks per second.

    Raises ``ValueError`` with a one-line reason for anything else: no ``=`` or unit, a
    name that is no legal topic, a rate of 0 (pause the topic instead) or above
    :data:`MAX_TOPIC_RATE`, a topic named twice.
    """
    limits: dict[str, float] = {}
    for raw in text.split(","):
        item = raw.strip()
        if not item:
            continue
        match = _RATE_ITEM.match(item)
        if match is None:
            raise ValueError(
                f"{item[:100]!r} is not <topic>=<rate>/s (or /m, /h), e.g. reminders=500/s"
            )
        topic = match["topic"]
        if not is_legal_topic(topic):
            raise ValueError(f"{topic[:100]!r} is not a legal topic name")
        per_second = float(match["rate"]) / _RATE_UNIT_SECONDS[match["unit"]]
        if not 0 < per_second <= MAX_TOPIC_RATE:
            raise ValueError(
                f"{item[:100]!r}: the rate must be above 0 and at most {MAX_TOPIC_RATE:,.0f}/s"
                " (a topic that must get nothing is paused, not limited to 0)"
            )
        if topic in limits:
            raise ValueError(f"topic {topic!r} is named twice")
        limits[topic] = per_second
    return limits


def split_allow_list(text: str) -> tuple[str, ...]:
    """The patterns of ``KAFKA_TIMERS_CALLBACK_ALLOW``, in order.

    Commas and whitespace (newlines included) separate patterns, except inside a
    character class ``[...]`` or a group ``(...)`` or a repetition ``{...}``, and except
    escaped with a backslash (``\\,``, which RE2 reads as a literal comma). A pattern
    keeps its text exactly, escapes included, so ``a,b`` is ``a`` and ``b``, while
    ``orders-\\d{1,3}`` and ``[a-z,]+`` are one pattern each. Topic names never contain
    a comma or whitespace, so no pattern needs one at its top level.
    """
    patterns: list[str] = []
    current: list[str] = []
    depth = 0  # open ( and { outside a class
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "\\" and i + 1 < n:
            current.append(text[i : i + 2])
            i += 2
            continue
        if c == "[":
            end = _class_end(text, i)
            current.append(text[i:end])
            i = end
            continue
        if c in "({":
            depth += 1
        elif c in ")}":
            depth = max(depth - 1, 0)
        elif depth == 0 and (c == "," or c.isspace()):
            if current:
                patterns.append("".join(current))
                current = []
            i += 1
            continue
        current.append(c)
        i += 1
    if current:
        patterns.append("".join(current))
    return tuple(patterns)


def _class_end(text: str, start: int) -> int:
    """Index just past the character class opening at ``text[start]`` (``[``).

    A ``]`` right after ``[`` or ``[^`` is a literal, ``[:alpha:]`` is a POSIX class
    inside it, and a backslash escapes the next character. An unclosed class runs to
    the end (RE2 then refuses the pattern, naming it).
    """
    i, n = start + 1, len(text)
    if text.startswith("^", i):
        i += 1
    if text.startswith("]", i):
        i += 1
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2
        elif c == "]":
            return i + 1
        elif text.startswith("[:", i) and (close := text.find(":]", i + 2)) != -1:
            i = close + 2
        else:
            i += 1
    return n


_HOST_LABEL = r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
_HOSTNAME = re.compile(rf"(?=.{{1,253}}\.?$){_HOST_LABEL}(?:\.{_HOST_LABEL})*\.?")


#: Most characters of a variable's value a complaint quotes back.
SHOWN_CHARS = 100


def shown(raw: str) -> str:
    """``raw`` quoted for a complaint, cut to :data:`SHOWN_CHARS` characters: a value of
    a megabyte made a complaint of a megabyte (and one line is the promise)."""
    if len(raw) <= SHOWN_CHARS:
        return repr(raw)
    return f"{raw[:SHOWN_CHARS]!r}... ({len(raw):,} characters)"


def cut(text: str) -> str:
    """``text`` (a complaint's detail, which may quote the value) cut like :func:`shown`."""
    if len(text) <= 2 * SHOWN_CHARS:
        return text
    return f"{text[: 2 * SHOWN_CHARS]}..."


def is_ip(text: str, version: int | None = None) -> bool:
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return False
    return version is None or address.version == version


def is_host(text: str) -> bool:
    """An IP address (v4 or v6, without brackets) or a DNS host name."""
    return is_ip(text) or bool(text.isascii() and _HOSTNAME.fullmatch(text))
