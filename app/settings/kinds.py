"""Kinds of setting: how each reads and checks its variable's text, and writes it back.

A kind turns a variable's non-empty text into the field's value, or raises
:class:`~kafka_timers_client.errors.ConfigurationError` with one line that names the variable
(never more than :data:`~app.settings.text.SHOWN_CHARS` characters of the value). It
also writes a value back as text (:meth:`Kind.render`, for ``Settings.to_env``) and says
in a few words what it accepts (:meth:`Kind.accepts`, for the docs' table).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from app.core.policy import compile_topic_pattern, is_legal_topic
from app.core.quotas import parse_quotas
from app.settings.limits import MAX_APP_ID_CHARS, TABLE_NAME
from app.settings.text import is_host, is_ip, parse_topic_rate_limits, shown, split_allow_list
from kafka_timers_client.errors import ConfigurationError

__all__ = [
    "AllowList",
    "AppId",
    "Boolean",
    "Bootstrap",
    "Directory",
    "File",
    "Integer",
    "Kind",
    "Name",
    "Quotas",
    "RateLimits",
    "Real",
    "Secret",
    "Text",
    "Topic",
    "Url",
    "Values",
]

_T = TypeVar("_T")
#: The values read so far, by field path (``"producer_message_max_bytes"``,
#: ``"topics.ticks"``): a bound may depend on a setting declared before it.
Values = Mapping[str, Any]
#: A figure given as is, or computed from the values read so far.
_Figure = int | Callable[[Values], int]

_LEGAL_NAME = re.compile(r"[A-Za-z0-9._-]+")
_BOOTSTRAP_ENTRY = re.compile(r"(?P<host>\[[^\]]*\]|[^:\[\]]*)(?::(?P<port>[0-9]{1,5}))?")
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def _number(name: str, raw: str, kind: Callable[[str], _T], what: str) -> _T:
    try:
        return kind(raw)
    except (ValueError, ArithmeticError) as exc:
        raise ConfigurationError(f"{name}={shown(raw)} is not {what}") from exc


def _written(value: float, spec: str) -> str:
    """A bound as a complaint (``spec`` ``"g"``) or the docs (``""``: with thousands
    separators) write it."""
    if spec or value != int(value):
        return format(value, spec or "g")
    return f"{int(value):,}"


def _figure(value: _Figure, values: Values) -> int:
    return value(values) if callable(value) else value


class Kind:
    """Plain text, taken as it is: the base of every kind."""

    def parse(self, name: str, raw: str, values: Values) -> Any:
        """The value of variable ``name`` from its text ``raw`` (never empty)."""
        return raw

    def render(self, value: Any) -> str | None:
        """``value`` as the variable's text; ``None``: the variable is left unset."""
        return None if value is None else str(value)

    def accepts(self) -> str:
        """What the variable accepts, in a few words (the docs' table)."""
        return "text"


@dataclass(frozen=True)
class Text(Kind):
    """Text, upper-cased when ``upper`` (names of protocols and mechanisms)."""

    upper: bool = False
    #: What the docs say it accepts.
    shown: str = "text"

    def parse(self, name: str, raw: str, values: Values) -> str:
        return raw.upper() if self.upper else raw

    def accepts(self) -> str:
        return self.shown


@dataclass(frozen=True)
class Integer(Kind):
    """A whole number from ``low`` to ``high``; ``meaning`` ends the range complaint."""

    low: _Figure
    high: _Figure
    meaning: str | Callable[[Values], str]
    what: str = "a number"
    #: What the docs say it accepts, when the bounds are computed.
    shown_range: str = ""

    def parse(self, name: str, raw: str, values: Values) -> int:
        value = _number(name, raw, int, self.what)
        low, high = _figure(self.low, values), _figure(self.high, values)
        if not low <= value <= high:
            meaning = self.meaning(values) if callable(self.meaning) else self.meaning
            raise ConfigurationError(
                f"{name}={shown(raw)}: must be from {low} to {high} ({meaning})"
            )
        return value

    def accepts(self) -> str:
        if self.shown_range:
            return self.shown_range
        assert not callable(self.low) and not callable(self.high)
        return f"{self.low:,} to {self.high:,}"


@dataclass(frozen=True)
class Real(Kind):
    """A finite number from ``low`` to ``high`` (under it when ``below_high``)."""

    low: float
    high: float | None
    meaning: str
    below_high: bool = False

    def parse(self, name: str, raw: str, values: Values) -> float:
        value = _number(name, raw, float, "a number")
        high = self.high
        too_high = high is not None and (value >= high if self.below_high else value > high)
        if not math.isfinite(value) or value < self.low or too_high:
            raise ConfigurationError(
                f"{name}={shown(raw)}: must be {self._span('g')} ({self.meaning})"
            )
        return value

    def _span(self, spec: str) -> str:
        low = _written(self.low, spec)
        if self.high is None:
            return f"at least {low}"
        high = _written(self.high, spec)
        return f"from {low} {'to under' if self.below_high else 'to'} {high}"

    def accepts(self) -> str:
        return self._span("").removeprefix("from ")


class Boolean(Kind):
    """``true``/``false`` (also ``1``/``0``, ``yes``/``no``, ``on``/``off``)."""

    def parse(self, name: str, raw: str, values: Values) -> bool:
        word = raw.strip().lower()
        if word in _TRUE:
            return True
        if word in _FALSE:
            return False
        raise ConfigurationError(f"{name}={shown(raw)}: use true or false")

    def render(self, value: Any) -> str:
        return "true" if value else "false"

    def accepts(self) -> str:
        return "true or false"


class Topic(Kind):
    """A legal Kafka topic name."""

    def parse(self, name: str, raw: str, values: Values) -> str:
        if not is_legal_topic(raw):
            raise ConfigurationError(
                f"{name}={shown(raw)} is not a Kafka topic name (1 to 249 of A-Z a-z 0-9 . _ -)"
            )
        return raw

    def accepts(self) -> str:
        return "a topic name"


class AppId(Kind):
    """The app id: it names the consumer group and the changelog topic."""

    def parse(self, name: str, raw: str, values: Values) -> str:
        if len(raw) > MAX_APP_ID_CHARS or raw in (".", "..") or not _LEGAL_NAME.fullmatch(raw):
            raise ConfigurationError(
                f"{name}={shown(raw)}: use 1 to {MAX_APP_ID_CHARS} of A-Z a-z 0-9 . _ - "
                f"(it names the consumer group and the topic <app id>-{TABLE_NAME}-changelog)"
            )
        return raw

    def accepts(self) -> str:
        return f"1 to {MAX_APP_ID_CHARS} of A-Z a-z 0-9 . _ -"


@dataclass(frozen=True)
class Name(Kind):
    """Up to ``longest`` printable characters, not padded with spaces."""

    longest: int

    def parse(self, name: str, raw: str, values: Values) -> str:
        if len(raw) > self.longest or not raw.isprintable() or raw != raw.strip():
            raise ConfigurationError(
                f"{name}={shown(raw)}: use up to {self.longest} printable characters, "
                "without leading or trailing spaces"
            )
        return raw

    def accepts(self) -> str:
        return f"up to {self.longest} printable characters"


class Directory(Kind):
    """A path that is a directory or does not exist yet."""

    def parse(self, name: str, raw: str, values: Values) -> str:
        if not raw.isprintable():
            raise ConfigurationError(f"{name}={shown(raw)} is not a usable path")
        if os.path.exists(raw) and not os.path.isdir(raw):
            raise ConfigurationError(f"{name}={shown(raw)} exists and is not a directory")
        return raw

    def accepts(self) -> str:
        return "a directory"


class File(Kind):
    """A readable file."""

    def parse(self, name: str, raw: str, values: Values) -> str:
        if not os.path.isfile(raw) or not os.access(raw, os.R_OK):
            raise ConfigurationError(f"{name}={shown(raw)} is not a readable file")
        return raw

    def accepts(self) -> str:
        return "a readable file"


class Address(Kind):
    """An IP address or host name to listen on."""

    def parse(self, name: str, raw: str, values: Values) -> str:
        if not is_host(raw):
            raise ConfigurationError(
                f"{name}={shown(raw)} is not an IP address or host name to listen on"
            )
        return raw

    def accepts(self) -> str:
        return "an IP address or host name"


class Bootstrap(Kind):
    """``host[:port][,host[:port]...]``: spaces around the commas are dropped."""

    def parse(self, name: str, raw: str, values: Values) -> str:
        entries = [entry.strip() for entry in raw.split(",")]
        for entry in entries:
            match = _BOOTSTRAP_ENTRY.fullmatch(entry)
            host = match["host"] if match else ""
            if host.startswith("[") and host.endswith("]"):
                host = host[1:-1]
                good = is_ip(host, version=6)
            else:
                good = is_host(host)
            port = match["port"] if match else None
            if not good or (port is not None and not 1 <= int(port) <= 65535):
                raise ConfigurationError(
                    f"{name}={shown(raw)}: {shown(entry)} is not host:port "
                    "(use host:port[,host:port], no scheme)"
                )
        return ",".join(entries)

    def accepts(self) -> str:
        return "`host:port[,host:port]`"


class Url(Kind):
    """An ``http://`` or ``https://`` URL, kept without a trailing ``/``."""

    def parse(self, name: str, raw: str, values: Values) -> str:
        if not re.fullmatch(r"https?://[^\s/?#]+(/[^\s?#]*)?", raw):
            raise ConfigurationError(
                f"{name}={raw[:100]!r} is not an http:// or https:// URL (an OTLP/HTTP "
                "collector's base address, e.g. http://otel-collector:4318)"
            )
        return raw.rstrip("/")

    def accepts(self) -> str:
        return "an `http://` or `https://` URL"


class Secret(Kind):
    """A credential: at least 16 printable ASCII characters, no spaces; never quoted
    back in the complaint."""

    def parse(self, name: str, raw: str, values: Values) -> str:
        if not (len(raw) >= 16 and raw.isascii() and raw.isprintable() and " " not in raw):
            raise ConfigurationError(
                f"{name}: must be at least 16 printable ASCII characters without "
                "spaces (e.g. the output of `openssl rand -hex 24`)"
            )
        return raw

    def render(self, value: Any) -> str | None:
        return str(value) if value else None

    def accepts(self) -> str:
        return "16 or more printable ASCII characters, no spaces"


@dataclass(frozen=True)
class AllowList(Kind):
    """RE2 topic patterns (:func:`~app.settings.text.split_allow_list`); at least one
    when ``needs_one``."""

    needs_one: bool = False

    def parse(self, name: str, raw: str, values: Values) -> tuple[str, ...]:
        patterns = split_allow_list(raw)
        if not patterns and self.needs_one:
            raise ConfigurationError(f"{name}={shown(raw)} names no pattern")
        for pattern in patterns:
            try:
                compile_topic_pattern(pattern)
            except ConfigurationError as exc:
                raise ConfigurationError(f"{name}: {exc}") from None
        return patterns

    def render(self, value: Any) -> str:
        return ",".join(value)

    def accepts(self) -> str:
        return "RE2 patterns, separated by commas or whitespace"


class RateLimits(Kind):
    """``topic=500/s,other=50/s`` (also ``/m``, ``/h``), kept per second."""

    def parse(self, name: str, raw: str, values: Values) -> tuple[tuple[str, float], ...]:
        try:
            return tuple(parse_topic_rate_limits(raw).items())
        except ValueError as exc:
            raise ConfigurationError(f"{name}: {exc}") from exc

    def render(self, value: Any) -> str:
        return ",".join(
            f"{topic}={f'{rate:.12f}'.rstrip('0').rstrip('.')}/s" for topic, rate in value
        )

    def accepts(self) -> str:
        return "`<topic>=<rate>/s` (or `/m`, `/h`), comma-separated"


@dataclass(frozen=True)
class Quotas(Kind):
    """``name=1000,other=50``: most timers pending per callback topic, or (``tenants``)
    per tenant header value, ``*`` for every tenant not named (app.core.quotas)."""

    tenants: bool = False

    def parse(self, name: str, raw: str, values: Values) -> tuple[tuple[str, int], ...]:
        try:
            quotas = parse_quotas(raw, tenants=self.tenants)
        except ValueError as exc:
            raise ConfigurationError(f"{name}: {exc}") from exc
        if not self.tenants:
            for topic in quotas:
                if not is_legal_topic(topic):
                    raise ConfigurationError(f"{name}: {topic[:100]!r} is not a legal topic name")
        return tuple(quotas.items())

    def render(self, value: Any) -> str:
        return ",".join(f"{name}={quota}" for name, quota in value)

    def accepts(self) -> str:
        if self.tenants:
            return "`<tenant>=<timers>` (`*`: every other tenant), comma-separated"
        return "`<topic>=<timers>`, comma-separated"
