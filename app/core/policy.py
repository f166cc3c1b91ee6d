"""What the service agrees to do: callback allow-list, payload size and due-time horizon.

The worker writes callbacks with its own credentials. Without these checks any producer
on the request topic could make the worker write into any topic it can reach, including
the service's own topics and Kafka's internal ones.

The allow-list is matched with RE2 (``google-re2``), not :mod:`re`: its time is linear
in the topic's length whatever the pattern, so no pattern an operator writes can
backtrack for seconds on the worker's event loop. RE2 has no backreferences and no
lookaround; a pattern that uses them is refused at start (:func:`compile_topic_pattern`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

import re2  # google-re2: no type stubs (see [tool.mypy] in pyproject.toml)

from app.core.timer import Timer
from kafka_timers_client.errors import ConfigurationError, RejectedRequest, RejectReason

__all__ = [
    "CONTROL_SUFFIX",
    "DEMAND_SUFFIX",
    "LAST_KEY_SECOND",
    "RequestPolicy",
    "TopicPattern",
    "compile_topic_pattern",
    "is_legal_topic",
]

_LEGAL_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")
#: Topics no callback may go to, by their name's end: every Faust or Kafka Streams
#: app's changelogs and repartition topics (another deployment's table among them: a
#: forged record there would be replayed as that deployment's state).
INTERNAL_SUFFIXES = ("-changelog", "-repartition")
#: How every kafka-timers control topic's name ends (``<app id>-timer-control``,
#: :mod:`app.core.control`). Refused as a callback topic by every deployment, whatever
#: its allow-list: a callback's key and value are the requester's bytes, so a callback
#: there would be a pause, a rate limit or a bulk cancel of another deployment, written
#: with this worker's credentials.
CONTROL_SUFFIX = "-timer-control"
#: How every kafka-timers demand topic's name ends (``<app id>-timer-demand``,
#: :mod:`app.kafka.demand`): refused likewise. A record there is read as a worker's
#: report: a forged one would skew another deployment's rate-limit shares, or claim
#: its quotas' room (:mod:`app.core.quota_leases`).
DEMAND_SUFFIX = "-timer-demand"
#: Most allowed topics a policy remembers: a flood of distinct names cannot grow it.
ALLOWED_CACHE_SIZE = 10_000
#: The last second a store key can hold: keys write seconds as 12 digits
#: (``%012d``, :mod:`app.core.keys`), and a 13th would break their order.
LAST_KEY_SECOND = 10**12 - 1


def is_legal_topic(name: str) -> bool:
    """Whether ``name`` is a legal Kafka topic name: 1 to 249 of ``A-Z a-z 0-9 . _ -``,
    and not ``.`` or ``..``."""
    return bool(_LEGAL_TOPIC.fullmatch(name)) and name not in (".", "..")


def _re2_options() -> Any:
    options = re2.Options()
    options.log_errors = False  # RE2 would print its own complaint on stderr as well
    return options


@dataclass(frozen=True)
class TopicPattern:
    """One allow-list pattern, compiled by RE2; compared, hashed and pickled by its text."""

    #: The pattern as the operator wrote it.
    source: str
    _regex: Any = field(repr=False, compare=False, hash=False)

    def fullmatch(self, topic: str) -> bool:
        """Whether the whole of ``topic`` matches (linear time in ``len(topic)``)."""
        return self._regex.fullmatch(topic) is not None

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        # The Spark audit ships its policy to executors: recompile there.
        return compile_topic_pattern, (self.source,)


def compile_topic_pattern(pattern: str) -> TopicPattern:
    """``pattern`` compiled by RE2; :class:`ConfigurationError` (one line) if RE2 refuses it."""
    try:
        regex = re2.compile(pattern, _re2_options())
    except (re2.error, ValueError) as exc:  # ValueError: text that is not UTF-8
        reason = exc.args[0] if exc.args else "not a pattern"
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        elif not isinstance(reason, str) or isinstance(exc, ValueError):
            reason = "not valid UTF-8 text"
        # RE2 quotes the pattern's text: escape what would break the line.
        reason = "".join(c if c.isprintable() else repr(c)[1:-1] for c in reason)
        raise ConfigurationError(
            f"callback allow pattern {pattern!r} is refused by RE2: {reason} (RE2 syntax: no "
            "backreferences or lookaround)"
        ) from None
    return TopicPattern(pattern, regex)


@dataclass(frozen=True)
class RequestPolicy:
    """Checks a parsed timer against the service's rules before it is stored or fired."""

    #: Patterns a callback topic must fully match (at least one), compiled by RE2.
    allowed_topics: tuple[TopicPattern, ...]
    #: The service's own topics (ticks, requests, fired, DLQ): always refused.
    own_topics: frozenset[str]
    #: Prefixes always refused: ``_`` (Kafka's ``__consumer_offsets`` and
    #: ``__transaction_state``, Schema Registry's ``_schemas``, Confluent's ``_confluent-*``)
    #: and the Faust app id (its changelogs).
    refused_prefixes: tuple[str, ...]
    #: Largest callback value accepted, in bytes.
    max_payload_bytes: int
    #: How far in the future a timer may be due, in seconds. Whatever it says, a due
    #: time past :data:`LAST_KEY_SECOND` is refused.
    horizon_seconds: int
    #: Patterns of topics always refused, whatever the allow-list says (the operator's).
    denied_topics: tuple[TopicPattern, ...] = ()
    #: Callback topics that passed :meth:`check_topic` (at most
    #: :data:`ALLOWED_CACHE_SIZE`). The rules above are frozen, so a topic that passed
    #: once passes again: it skips the regexes next time (a microsecond per request).
    _allowed: set[str] = field(
        default_factory=set, init=False, repr=False, compare=False, hash=False
    )

    @classmethod
    def build(
        cls,
        *,
        allow_patterns: Iterable[str],
        own_topics: Iterable[str],
        app_id: str,
        max_payload_bytes: int,
        horizon_seconds: int,
        deny_patterns: Iterable[str] = (),
    ) -> RequestPolicy:
        """Compile the allow- and deny-lists and derive the refused names from the app id.

        A pattern RE2 refuses raises :class:`ConfigurationError` naming it.
        """
        return cls(
            allowed_topics=tuple(compile_topic_pattern(p) for p in allow_patterns),
            own_topics=frozenset(own_topics),
            refused_prefixes=("_", f"{app_id}-"),
            max_payload_bytes=max_payload_bytes,
            horizon_seconds=horizon_seconds,
            denied_topics=tuple(compile_topic_pattern(p) for p in deny_patterns),
        )

    @property
    def passed_topics(self) -> AbstractSet[str]:
        """The callback topics that passed :meth:`check_topic` so far (a live view: the
        fire path skips the check for them)."""
        return self._allowed

    def check_topic(self, topic: str) -> None:
        """Raise :class:`RejectedRequest` unless callbacks may be written to ``topic``."""
        if topic in self._allowed:
            return
        self._check_topic(topic)
        if len(self._allowed) < ALLOWED_CACHE_SIZE:
            self._allowed.add(topic)

    def _check_topic(self, topic: str) -> None:
        if not topic:
            raise RejectedRequest(RejectReason.MISSING_TOPIC, "no callback topic")
        if not is_legal_topic(topic):
            raise RejectedRequest(RejectReason.INVALID_TOPIC, f"illegal topic name {topic[:80]!r}")
        if (
            topic in self.own_topics
            or topic.startswith(self.refused_prefixes)
            or topic.endswith(INTERNAL_SUFFIXES)
            or any(p.fullmatch(topic) for p in self.denied_topics)
        ):
            raise RejectedRequest(
                RejectReason.TOPIC_NOT_ALLOWED, f"{topic!r} is internal or the service's own"
            )
        # Any deployment's (this one's or another's on the cluster) control and demand
        # topics, by how their names end.
        for suffix, what in (
            (CONTROL_SUFFIX, "control topic (operators only)"),
            (DEMAND_SUFFIX, "demand topic (workers only)"),
        ):
            if topic.endswith(suffix):
                raise RejectedRequest(
                    RejectReason.TOPIC_NOT_ALLOWED, f"{topic[:80]!r} is a kafka-timers {what}"
                )
        if not any(p.fullmatch(topic) for p in self.allowed_topics):
            raise RejectedRequest(
                RejectReason.TOPIC_NOT_ALLOWED, f"{topic!r} is not in the callback allow-list"
            )

    def check(self, timer: Timer, now: float) -> None:
        """Raise :class:`RejectedRequest` unless ``timer`` may be scheduled at time ``now``."""
        # Every request passes here: check_topic's cached pass and check_payload's length
        # inline, each called only where it may refuse (a third of what this cost).
        topic = timer.topic
        if topic not in self._allowed:
            self.check_topic(topic)
        due = timer.due
        if due < 0 or due > now + self.horizon_seconds or due > LAST_KEY_SECOND:
            raise RejectedRequest(
                RejectReason.DUE_OUT_OF_RANGE,
                f"due {timer.due} is before 1970 or more than {self.horizon_seconds}s ahead",
            )
        if len(timer.value or b"") > self.max_payload_bytes:
            self.check_payload(timer)

    def check_payload(self, timer: Timer) -> None:
        """Raise :class:`RejectedRequest` if ``timer``'s callback value is over the limit."""
        size = len(timer.value or b"")
        if size > self.max_payload_bytes:
            raise RejectedRequest(
                RejectReason.PAYLOAD_TOO_LARGE,
                f"callback value is {size} bytes, limit {self.max_payload_bytes}",
            )
