"""The control topic's records: what operators tell every worker while it runs.

The control topic (``<app id>-timer-control``, compacted, one partition: every worker
reads all of it) holds one record per thing controlled, keyed by it; the newest record
of a key is the setting, a tombstone clears it:

``pause/<topic>``
    ``{"paused": true, ...}``: callbacks to ``<topic>`` wait, pending, until a
    tombstone (``kafka-timers resume``) or ``{"paused": false}``.
``cancel-bulk/<request id>``
    ``{"filter": {"key_prefix": "customer-42/", ...}, "dry_run": false, ...}``: every
    worker cancels (or, dry run, counts) the pending timers of the partitions it holds
    that match the filter (:class:`app.core.timer_filter.TimerFilter`), answering each
    partition's count on the fired topic; applied only by workers running when it
    arrives (never again at a start), and tombstoned by ``kafka-timers cancel-bulk`` once
    answered. One whose filter cannot be read (none at all, an empty prefix, an unknown
    name) is refused: each worker answers it ``refused``, with the reason, and cancels
    nothing.
``rate/<topic>``
    ``{"per_second": 500.0, ...}``: ``<topic>``'s limit across the service, overriding
    ``KAFKA_TIMERS_TOPIC_RATE_LIMITS``; ``{"per_second": null}`` lifts any limit; a
    tombstone (``kafka-timers rate --clear``) gives the topic back the limit of the
    environment, if any.

Values are JSON objects; fields other than these (``by``, ``at_ms``: who wrote it and
when, for people reading the topic) are ignored. A record that cannot be read is
ignored, with a reason (:class:`ControlRecord` ``ignored``): no record on this topic can
stop a worker.

Who is an operator for these commands: first who Kafka's ACLs let write the topic, then
who holds the deployment's control secret (``KAFKA_TIMERS_CONTROL_SECRET``). Every record,
tombstones included, carries an HMAC-SHA256 of the control topic's name, its key and its
value in the header :data:`SIGNATURE_HEADER` (:func:`sign_control`); a worker applies
only records whose signature it can check with its own secret
(:func:`read_signed_control`), and ignores and counts every other, as it does a record
it cannot read. A worker with no secret ignores every record. The topic's name is signed
too, so a record copied from one deployment's control topic to another's (sharing a
secret) is refused there. What the signature does not stop is a writer of the topic
replaying a record an operator signed earlier, on the same topic: the ACLs are what
stops that.

Pure: the worker (:mod:`app.worker.control`) and the CLI build and read records here.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.core.timer_filter import TimerFilter

__all__ = [
    "CANCEL_BULK",
    "MAX_CONTROL_RATE",
    "PAUSE",
    "RATE",
    "SIGNATURE_HEADER",
    "ControlRecord",
    "ControlState",
    "cancel_bulk_record",
    "pause_record",
    "rate_record",
    "read_control",
    "read_signed_control",
    "sign_control",
]

#: Key prefixes of the kinds of control record.
PAUSE = "pause/"
RATE = "rate/"
CANCEL_BULK = "cancel-bulk/"
#: Highest limit a record may set (as ``KAFKA_TIMERS_TOPIC_RATE_LIMITS`` accepts).
MAX_CONTROL_RATE = 10_000_000.0
#: Longest key read (a topic name is at most 249 characters).
MAX_KEY_BYTES = 512
#: Longest value read.
MAX_VALUE_BYTES = 64 * 1024

#: ``per_second`` of a record that lifts any limit of its topic.
_UNLIMITED = None


@dataclass(frozen=True)
class ControlRecord:
    """One control record as read: what it sets, or why it is ignored."""

    #: ``pause``, ``rate`` or ``ignored``.
    kind: str
    #: The callback topic it is about ("" when ignored).
    topic: str = ""
    #: Whether it clears its key (a tombstone, or a pause record saying ``false``).
    clear: bool = False
    #: For ``rate`` (not clearing): the limit, or ``None`` for no limit at all.
    per_second: float | None = None
    #: Why it is ignored; for a ``cancel_bulk`` without a filter (and not clearing):
    #: why it is refused.
    reason: str = ""
    #: For ``cancel_bulk``: which timers (None: a tombstone, or refused), and whether
    #: only to count them.
    filter: TimerFilter | None = None
    dry_run: bool = False


def _ignored(reason: str) -> ControlRecord:
    return ControlRecord("ignored", reason=reason)


#: How the reason of a record ignored by a bug here starts (see :func:`read_control`).
INTERNAL_ERROR = "internal error reading it"


def read_control(key: bytes | None, value: bytes | None) -> ControlRecord:
    """What the record ``key``/``value`` sets; total (a bad record is ``ignored``).

    The one place that decides what a control record is: every worker reads the topic
    from its start as it starts, so a record that raised would stop each of them, each
    time (a rate past any float once did). Generated records show the reading total
    (``tests/unit/test_control.py``); should a bug still raise, the record is ignored
    with a reason naming the exception's class (never its message, which may quote the
    record), and the worker goes on. Only :class:`MemoryError`, the process's and not
    the record's, goes through.
    """
    try:
        return _read_control(key, value)
    except MemoryError:
        raise
    except Exception as exc:
        return _ignored(f"{INTERNAL_ERROR}: {type(exc).__name__} (please report)")


def _read_control(key: bytes | None, value: bytes | None) -> ControlRecord:
    if key is None:
        return _ignored("no key")
    if len(key) > MAX_KEY_BYTES:
        return _ignored(f"key longer than {MAX_KEY_BYTES} bytes")
    try:
        text = key.decode()
    except UnicodeDecodeError:
        return _ignored("key is not UTF-8")
    if text.startswith(PAUSE):
        kind, topic = "pause", text[len(PAUSE) :]
    elif text.startswith(RATE):
        kind, topic = "rate", text[len(RATE) :]
    elif text.startswith(CANCEL_BULK):
        kind, topic = "cancel_bulk", text[len(CANCEL_BULK) :]
    else:
        return _ignored(f"unknown key {text[:100]!r}")
    if not topic:
        return _ignored(f"no topic in key {text[:100]!r}")
    if value is None:
        return ControlRecord(kind, topic, clear=True)
    if len(value) > MAX_VALUE_BYTES:
        return _ignored(f"value longer than {MAX_VALUE_BYTES} bytes")
    try:
        doc = json.loads(value)
    except (ValueError, RecursionError):
        return _ignored("value is not JSON")
    if not isinstance(doc, dict):
        return _ignored("value is not a JSON object")
    if kind == "cancel_bulk":
        # A bulk cancel that cannot be read is refused, answered with its reason (never
        # ignored in silence, never read as "every timer").
        query = doc.get("filter")
        dry_run = doc.get("dry_run", False)
        if not isinstance(query, dict) or not all(isinstance(v, str) for v in query.values()):
            return ControlRecord(kind, topic, reason="'filter' is not an object of strings")
        if not isinstance(dry_run, bool):
            return ControlRecord(kind, topic, reason="'dry_run' is not true or false")
        try:
            flt = TimerFilter.from_query(query)
        except ValueError as exc:
            return ControlRecord(kind, topic, reason=f"bad filter: {exc}")
        if flt == TimerFilter():
            return ControlRecord(kind, topic, reason="a bulk cancel needs at least one filter")
        return ControlRecord(kind, topic, filter=flt, dry_run=dry_run)
    if kind == "pause":
        paused = doc.get("paused", True)
        if not isinstance(paused, bool):
            return _ignored("'paused' is not true or false")
        return ControlRecord(kind, topic, clear=not paused)
    if "per_second" not in doc:
        return _ignored("a rate record needs 'per_second'")
    rate = doc["per_second"]
    if rate is _UNLIMITED:
        return ControlRecord(kind, topic, per_second=None)
    # Compared as it came, never converted first: a JSON integer may be past any float
    # (math.isfinite raised OverflowError on 400 digits, and every worker, reading the
    # topic from its start, then failed to start). NaN and the infinities fail the
    # comparison as well.
    if (
        isinstance(rate, bool)
        or not isinstance(rate, int | float)
        or not 0 < rate <= MAX_CONTROL_RATE
    ):
        return _ignored(f"'per_second' must be above 0 and at most {MAX_CONTROL_RATE:g}")
    return ControlRecord(kind, topic, per_second=float(rate))


#: The header that carries a control record's signature (:func:`sign_control`).
SIGNATURE_HEADER = "kafka-timers-signature"
#: How a signature starts: the scheme, so that another can follow without ambiguity.
_SCHEME = b"hmac-sha256-v1="
#: What every signed message starts with (no other use of the secret signs the same).
_DOMAIN = b"kafka-timers control record v1"


def _signed_message(topic: str, key: bytes, value: bytes | None) -> bytes:
    """The bytes signed: each part length-prefixed, a tombstone told from an empty value."""
    out = bytearray()
    for part in (_DOMAIN, topic.encode(), key, b"" if value is None else value):
        out += len(part).to_bytes(8, "big")
        out += part
    out += b"\x00" if value is None else b"\x01"
    return bytes(out)


def sign_control(secret: str, topic: str, key: bytes, value: bytes | None) -> bytes:
    """The :data:`SIGNATURE_HEADER` value of record ``key``/``value`` (``None``: a
    tombstone) on control topic ``topic``, signed with ``secret``."""
    digest = hmac.new(secret.encode(), _signed_message(topic, key, value), hashlib.sha256)
    return _SCHEME + digest.hexdigest().encode()


#: A record's headers as confluent-kafka gives them.
Headers = Sequence[tuple[str, bytes | str | None]] | Mapping[str, bytes | str | None] | None


def _signature_of(headers: Headers) -> bytes | None:
    """The one signature among ``headers``, or None (none, or more than one)."""
    pairs = headers.items() if isinstance(headers, Mapping) else headers or ()
    found = [v for k, v in pairs if k == SIGNATURE_HEADER]
    if len(found) != 1 or found[0] is None:
        return None
    value = found[0]
    return value.encode() if isinstance(value, str) else value


def read_signed_control(
    key: bytes | None,
    value: bytes | None,
    headers: Headers,
    *,
    secret: str | None,
    topic: str,
) -> ControlRecord:
    """:func:`read_control`, for a record whose signature checks with ``secret`` on
    control topic ``topic``; every other record is ``ignored`` (and so is every record
    when ``secret`` is None). Total, like :func:`read_control`."""
    if secret is None:
        return _ignored("this worker has no control secret (KAFKA_TIMERS_CONTROL_SECRET)")
    if key is None:
        return _ignored("no key")
    if len(key) > MAX_KEY_BYTES:
        return _ignored(f"key longer than {MAX_KEY_BYTES} bytes")
    if value is not None and len(value) > MAX_VALUE_BYTES:
        return _ignored(f"value longer than {MAX_VALUE_BYTES} bytes")
    try:
        given = _signature_of(headers)
    except (TypeError, ValueError, UnicodeError):
        given = None
    if given is None:
        return _ignored(f"not signed (one {SIGNATURE_HEADER} header)")
    if not hmac.compare_digest(given, sign_control(secret, topic, key, value)):
        return _ignored("bad signature (not this deployment's control secret)")
    return read_control(key, value)


def pause_record(topic: str, *, by: str, at_ms: int) -> tuple[bytes, bytes]:
    """The record that pauses ``topic``; its tombstone (``(key, None)``) resumes it."""
    return f"{PAUSE}{topic}".encode(), json.dumps(
        {"paused": True, "by": by, "at_ms": at_ms}
    ).encode()


def rate_record(
    topic: str, per_second: float | None, *, by: str, at_ms: int
) -> tuple[bytes, bytes]:
    """The record that limits ``topic`` (``None``: no limit at all, whatever the
    environment says); its tombstone gives the topic back the environment's limit."""
    return f"{RATE}{topic}".encode(), json.dumps(
        {"per_second": per_second, "by": by, "at_ms": at_ms}
    ).encode()


def cancel_bulk_record(
    request_id: str, flt: TimerFilter, *, dry_run: bool, by: str, at_ms: int
) -> tuple[bytes, bytes]:
    """The record asking every worker to cancel (or count) the timers ``flt`` matches."""
    return f"{CANCEL_BULK}{request_id}".encode(), json.dumps(
        {"filter": flt.to_query(), "dry_run": dry_run, "by": by, "at_ms": at_ms}
    ).encode()


#: Sentinel of :meth:`ControlState.limit_of`: the control topic says nothing.
_UNSET: Any = object()


@dataclass
class ControlState:
    """What the control topic says now: paused topics, and limits set at run time."""

    paused: set[str] = field(default_factory=set)
    #: A limit per topic set by a record; ``None`` for "no limit" (lifts the environment's).
    rates: dict[str, float | None] = field(default_factory=dict)

    def apply(self, record: ControlRecord) -> bool:
        """Take ``record`` in; return whether anything changed."""
        if record.kind == "pause":
            was = record.topic in self.paused
            if record.clear:
                self.paused.discard(record.topic)
            else:
                self.paused.add(record.topic)
            return was != (record.topic in self.paused)
        if record.kind == "rate":
            before = self.rates.get(record.topic, _UNSET)
            if record.clear:
                self.rates.pop(record.topic, None)
            else:
                self.rates[record.topic] = record.per_second
            return bool(before != self.rates.get(record.topic, _UNSET))
        return False

    def limit_of(self, topic: str, configured: Mapping[str, float]) -> float | None:
        """``topic``'s limit: the control topic's if it sets one, else the environment's."""
        if topic in self.rates:
            return self.rates[topic]
        return configured.get(topic)
