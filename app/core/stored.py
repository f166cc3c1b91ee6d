"""The byte layout of a pending timer inside the RocksDB table (and its changelog).

A private, versioned, length-prefixed layout rather than the request's own bytes: it is
exact for binary keys and headers, and cheap to pack and unpack on the hot path.

Version 1 is a one-shot timer; version 2 adds, after the headers, the occurrence's
sequence number and the count delivered before it, the recurrence and the timer's own
late-fire policy. A timer that has none of those is still written as version 1, so
stores of one-shot timers stay readable by releases before version 2; both versions
are read.

Version 3 is version 2 with a series' **calendar** (:mod:`kafka_timers_client.calendars`) after
its recurrence: its skip policy, its zone, its holidays code and its excluded dates.
Only a series with a calendar is written in version 3, so a store without one stays
readable by the releases before it; a release before it meets a version-3 timer and
refuses to go on (the rule below), rather than fire the series on the dates it skips.
A version-2 series reads as a series without a calendar.

A timer with a **spread** (:mod:`kafka_timers_client.spread`) is written in the same layout (1, or
2 if it needs it) followed by the *spread extension*: its spread and its offset, the
seconds from its due second to the second it fires at. Its head holds that fire second,
not its due second: ``due = head - offset``. So the release before spread (0.2.0, which
reads the layout's fields and ignores what follows them) reads a spread timer as a
timer due at its fire second, under the key it is stored under: it fires it once, at
that second, never early, and forgets it; only its ``timer-due`` says the fire second
rather than the requested one (docs/deploy.md: Upgrades and rollbacks). Bytes after a
layout's fields are the extension, in every layout to come.

A timer whose request came in Schema Registry's wire format (:mod:`app.core.sr_framing`)
also keeps its **schema id**: the spread extension (``0, 0`` for no spread) followed by
the *schema extension*, the id as a signed 64-bit number. A release before it reads the
spread extension and ignores what follows: it fires the timer as it would, and its fired
record has no ``schema_id``.

A **debounced** timer (:mod:`app.core.debounce`) keeps its window and what it merged in
the *debounce extension*, after the schema extension (written for it with -1, "none",
when the request came unframed): the debounce and the max-wait (-1 for none), seconds,
the first request's time (epoch ms), the number of requests merged and the offset of
the last one. Only a debounced timer has it: every other timer is stored byte for byte
as before. A release before it reads the extensions it knows and ignores what follows:
it fires the timer, as a plain one, at the second it was stored for (without its
``timer-debounced`` header), and a debounced request sent to it is refused for its
missing due time.

The rule for stores that outlive releases (docs/deploy.md, Upgrades and rollbacks):
the first byte of every stored timer is its layout version, in every layout to come. A
release that meets a version newer than it knows refuses to go on
(:class:`StoredLayoutTooNew`: one line, exit 78), never guesses and never drops the
timer: a layout change is readable by the release before it, or that release refuses.
"""

from __future__ import annotations

import struct
from datetime import date
from functools import lru_cache

from app.core.debounce import Debounce
from app.core.timer import Timer
from kafka_timers_client.calendars import Calendar, SkipPolicy
from kafka_timers_client.errors import SystemicFailure
from kafka_timers_client.late import CatchUp, LatePolicy
from kafka_timers_client.recurrence import Recurrence

__all__ = [
    "NEWEST_LAYOUT",
    "StoredLayoutTooNew",
    "check_layout",
    "pack_next_occurrence",
    "pack_timer",
    "stored_topic",
    "stored_topic_is",
    "topic_field",
    "unpack_timer",
]

_V1, _V2, _V3 = 1, 2, 3
#: The newest stored layout this release reads (and writes).
NEWEST_LAYOUT = _V3
_HEAD = struct.Struct(">Bq")
_LEN = struct.Struct(">i")
#: The length of an absent key or value.
_NONE = _LEN.pack(-1)
#: Lengths below this are packed from :data:`_SHORT_LENGTHS` (ids, tokens, topics, keys
#: and most values), longer ones with :data:`_LEN`.
_SHORT = 1024
_SHORT_LENGTHS = tuple(_LEN.pack(n) for n in range(_SHORT))
#: A one-shot timer's head (:func:`pack_timer`): version 1's byte, then its due second.
_V1_BYTE = _HEAD.pack(_V1, 0)[:1]
_DUE = struct.Struct(">q")
#: The header count of a timer without headers.
_NO_HEADERS = _SHORT_LENGTHS[0]
#: seq and fired_before: the part of the series fields that changes from occurrence to
#: occurrence (:func:`pack_next_occurrence`).
_OCCURRENCE = struct.Struct(">qq")
#: seq, fired_before, recurrence kind (0 none, 1 cron, 2 interval), late-policy flags
#: (bit 0: skip_after_ms present, bits 1-2: catch_up 0 none / 1 coalesce / 2 all).
_SERIES = struct.Struct(">qqBB")
#: every (interval; 0 for cron), start, end, count, skip_after_ms: -1 for "none".
_NUMBERS = struct.Struct(">qqqqq")
#: The spread extension: spread and offset, seconds (after the layout's fields).
_SPREAD = struct.Struct(">qq")
#: The schema extension, after the spread extension: the request's schema id (-1: none,
#: written only for a timer with an extension after it).
_SCHEMA = struct.Struct(">q")
#: The debounce extension, after the schema extension: the debounce and the max-wait
#: (-1: none), seconds; the first request's time, epoch ms; the requests merged; the
#: offset of the last one.
_DEBOUNCE = struct.Struct(">qqqqq")
#: The calendar (layout 3, after the recurrence): its policy (0 skip, 1 next) and the
#: number of its dates; then its zone and holidays code (length-prefixed, -1 for none)
#: and its dates, each a proleptic Gregorian ordinal (``date.toordinal()``), int32.
_CALENDAR = struct.Struct(">Bi")
_POLICY_CODES = {SkipPolicy.SKIP: 0, SkipPolicy.NEXT: 1}
_POLICIES = {code: policy for policy, code in _POLICY_CODES.items()}
_RECURRENCE_NONE, _RECURRENCE_CRON, _RECURRENCE_INTERVAL = 0, 1, 2
#: Makes a Timer without calling its __init__ (unpack_timer fills its fields).
_new_timer = object.__new__

_CATCH_UP_CODES = {None: 0, CatchUp.COALESCE: 1, CatchUp.ALL: 2}
_CATCH_UPS = {code: value for value, code in _CATCH_UP_CODES.items()}


class StoredLayoutTooNew(SystemicFailure):
    """A stored timer (from the local store or the changelog) is in a layout newer than
    this release reads: a later release wrote it, and this one is a rollback too far.

    Systemic, never the record's fault: the worker stops before firing or forgetting
    anything of that partition, with one line, exit status 78 (EX_CONFIG: the release
    deployed is wrong for the data). Restarting the same release refuses again; running
    the release that wrote it, or a newer one, fires the timer.
    """

    exit_status = 78

    def __init__(self, version: int) -> None:
        super().__init__(
            f"a stored timer is in layout version {version}, newer than this release "
            f"reads (1 to {NEWEST_LAYOUT}): a later release of kafka-timers wrote it. "
            "Run that release or a newer one; nothing was fired or forgotten "
            "(docs/deploy.md: Upgrades and rollbacks)"
        )
        self.version = version


def check_layout(data: bytes) -> None:
    """Raise :class:`StoredLayoutTooNew` if ``data`` is a stored timer in a layout newer
    than this release reads (a look at its first byte: cheap enough for every timer of a
    partition as it is loaded)."""
    if data and data[0] > NEWEST_LAYOUT:
        raise StoredLayoutTooNew(data[0])


def _opt(value: int | None) -> int:
    return -1 if value is None else value


def _put(parts: list[bytes], data: bytes | None) -> None:
    if data is None:
        parts.append(_LEN.pack(-1))
    else:
        parts.append(_LEN.pack(len(data)))
        parts.append(data)


def pack_timer(timer: Timer) -> bytes:
    """Serialize ``timer`` for storage (version 1 unless it needs version 2; a spread
    timer with the spread extension after it)."""
    if (
        timer.recurrence is None
        and not timer.headers
        and not timer.spread
        and timer.seq == 0
        and timer.late is None
        and timer.schema_id is None
        and timer.debounce is None
    ):
        # A one-shot timer with nothing but its six fields (most requests): version 1 and
        # no extension, its due second packed alone after the version's constant byte
        # (``_HEAD`` packing the version too, and the checks of the layouts' other parts
        # below, were an eighth of this call). The same bytes as the general case.
        timer_id, token, topic = timer.id.encode(), timer.token.encode(), timer.topic.encode()
        key, value = timer.key, timer.value
        lengths = _SHORT_LENGTHS
        try:
            return b"".join(
                (
                    _V1_BYTE,
                    _DUE.pack(timer.due),
                    lengths[len(timer_id)],
                    timer_id,
                    lengths[len(token)],
                    token,
                    lengths[len(topic)],
                    topic,
                    _NONE if key is None else lengths[len(key)],
                    key or b"",
                    _NONE if value is None else lengths[len(value)],
                    value or b"",
                    _NO_HEADERS,
                )
            )
        except IndexError:  # a field of _SHORT bytes or more: the general case
            pass
    return _pack_any(timer)


def _pack_any(timer: Timer) -> bytes:
    """:func:`pack_timer` of any timer, whatever it holds."""
    recurrence = timer.recurrence
    plain = recurrence is None and timer.seq == 0 and timer.late is None
    version = _V1 if plain else _V2
    if recurrence is not None and recurrence.calendar is not None:
        version = _V3
    spread = timer.spread
    fire_at = timer.fire_at if spread else timer.due
    # The five leading fields inline, not through _put (every request stored packs one),
    # their lengths from a table while they are short (a struct call each was a fifth
    # of a plain timer's packing).
    timer_id, token, topic = timer.id.encode(), timer.token.encode(), timer.topic.encode()
    key, value = timer.key, timer.value
    try:
        lengths = _SHORT_LENGTHS
        parts = [
            _HEAD.pack(version, fire_at),
            lengths[len(timer_id)],
            timer_id,
            lengths[len(token)],
            token,
            lengths[len(topic)],
            topic,
            _NONE if key is None else lengths[len(key)],
            key or b"",
            _NONE if value is None else lengths[len(value)],
            value or b"",
            lengths[len(timer.headers)],
        ]
    except IndexError:  # a field of _SHORT bytes or more
        pack_len = _LEN.pack
        parts = [
            _HEAD.pack(version, fire_at),
            pack_len(len(timer_id)),
            timer_id,
            pack_len(len(token)),
            token,
            pack_len(len(topic)),
            topic,
            _NONE if key is None else pack_len(len(key)),
            key or b"",
            _NONE if value is None else pack_len(len(value)),
            value or b"",
            pack_len(len(timer.headers)),
        ]
    for name, header in timer.headers:
        _put(parts, name.encode())
        _put(parts, header)
    if not plain:
        _pack_series(parts, timer)
    schema_id, debounce = timer.schema_id, timer.debounce
    if spread or schema_id is not None or debounce is not None:
        parts.append(_SPREAD.pack(spread, fire_at - timer.due))
        if schema_id is not None or debounce is not None:
            parts.append(_SCHEMA.pack(-1 if schema_id is None else schema_id))
            if debounce is not None:
                parts.append(
                    _DEBOUNCE.pack(
                        debounce.seconds,
                        _opt(debounce.max_wait),
                        debounce.first_ms,
                        debounce.merged,
                        debounce.last_offset,
                    )
                )
    return b"".join(parts)


def _pack_series(parts: list[bytes], timer: Timer) -> None:
    rec, late = timer.recurrence, timer.late or LatePolicy()
    kind = (
        _RECURRENCE_NONE
        if rec is None
        else _RECURRENCE_INTERVAL
        if rec.every is not None
        else _RECURRENCE_CRON
    )
    flags = (late.skip_after_ms is not None) | _CATCH_UP_CODES[late.catch_up] << 1
    parts.append(_SERIES.pack(timer.seq, timer.fired_before, kind, flags))
    parts.append(
        _NUMBERS.pack(
            (rec.every or 0) if rec else 0,
            _opt(rec.start) if rec else -1,
            _opt(rec.end) if rec else -1,
            _opt(rec.count) if rec else -1,
            _opt(late.skip_after_ms),
        )
    )
    if kind == _RECURRENCE_CRON:
        assert rec is not None and rec.cron is not None
        _put(parts, rec.cron.encode())
        _put(parts, rec.tz.encode())
    if rec is not None and rec.calendar is not None:
        _pack_calendar(parts, rec.tz, rec.calendar)


def _pack_calendar(parts: list[bytes], tz: str, calendar: Calendar) -> None:
    parts.append(_CALENDAR.pack(_POLICY_CODES[calendar.policy], len(calendar.dates)))
    _put(parts, tz.encode())
    _put(parts, None if calendar.holidays is None else calendar.holidays.encode())
    parts.append(struct.pack(f">{len(calendar.dates)}i", *(d.toordinal() for d in calendar.dates)))


@lru_cache(maxsize=1024)
def _calendar_of(block: bytes) -> tuple[str, Calendar]:
    """The zone and calendar a packed calendar block holds: cached by its bytes, since
    every occurrence of a series read from the store carries the same block (a thousand
    dates would otherwise be sorted anew for each)."""
    code, count = _CALENDAR.unpack_from(block, 0)
    if code not in _POLICIES:  # bytes no pack_timer wrote: refused, never misread
        raise ValueError(f"stored timer has unknown skip policy code {code}")
    tz, pos = _take(block, _CALENDAR.size)
    holidays, pos = _take(block, pos)
    ordinals = struct.unpack_from(f">{count}i", block, pos)
    calendar = Calendar(
        None if holidays is None else holidays.decode(),
        (date.fromordinal(n) for n in ordinals),
        _POLICIES[code],
    )
    return (tz or b"UTC").decode(), calendar


def _calendar_end(data: bytes, pos: int) -> int:
    """Where the calendar block that starts at ``pos`` ends."""
    _, count = _CALENDAR.unpack_from(data, pos)
    pos += _CALENDAR.size
    for _ in range(2):  # tz and holidays
        (length,) = _LEN.unpack_from(data, pos)
        pos += 4 + max(length, 0)
    return pos + 4 * int(count)


def pack_next_occurrence(stored: bytes, successor: Timer) -> bytes:
    """:func:`pack_timer` of ``successor``, the next occurrence of the series whose
    occurrence is stored as ``stored``, rewriting only what changes from one occurrence
    to the next: the head (its fire second), ``seq`` and ``fired_before``, and the spread
    extension's offset. Everything else (id, token, topic, key, value, headers, the
    recurrence, the late policy, any extension after the spread one) is copied as is.

    Why: every series occurrence fired stores its successor in the same unit, and packing
    it anew was two fifths of what a series' fire costs more than a one-shot timer's
    (bytecode counted). ``stored`` must be the layout-2 bytes (layout 3 with a calendar)
    of an occurrence of the same series (the fired one:
    :func:`app.core.firing.next_occurrence` keeps every field but those three), as the
    tick's scan read them; other bytes are packed anew.
    """
    rec = successor.recurrence
    if rec is None or not stored:
        return pack_timer(successor)
    version = stored[0]
    if version != (_V2 if rec.calendar is None else _V3):
        return pack_timer(successor)
    # Where the series fields start: after the head, the five length-prefixed leading
    # fields and the headers. Their lengths are the successor's own (the same fields);
    # an ASCII str's length is its UTF-8 length, and isascii() is a flag, not a scan.
    timer_id, token, topic = successor.id, successor.token, successor.topic
    series = (
        _HEAD.size
        + 24
        + (len(timer_id) if timer_id.isascii() else len(timer_id.encode()))
        + (len(token) if token.isascii() else len(token.encode()))
        + (len(topic) if topic.isascii() else len(topic.encode()))
        + len(successor.key or b"")
        + len(successor.value or b"")
    )
    for name, header in successor.headers:
        series += 8 + len(name.encode()) + len(header)
    kind = _RECURRENCE_INTERVAL if rec.every is not None else _RECURRENCE_CRON
    end = series + _SERIES.size + _NUMBERS.size
    if len(stored) < end or stored[series + 16] != kind:
        return pack_timer(successor)  # not the layout this series packs to: anew
    if kind == _RECURRENCE_CRON:
        for _ in range(2):  # cron and tz
            (length,) = _LEN.unpack_from(stored, end)
            end += 4 + max(length, 0)
    if version == _V3:
        end = _calendar_end(stored, end)
    due = successor.due
    fire_at = successor.fire_at if successor.spread else due
    if end == len(stored):
        return b"".join(
            (
                _HEAD.pack(version, fire_at),
                stored[_HEAD.size : series],
                _OCCURRENCE.pack(successor.seq, successor.fired_before),
                stored[series + _OCCURRENCE.size :],
            )
        )
    return b"".join(  # the spread extension, then what follows it
        (
            _HEAD.pack(version, fire_at),
            stored[_HEAD.size : series],
            _OCCURRENCE.pack(successor.seq, successor.fired_before),
            stored[series + _OCCURRENCE.size : end],
            _SPREAD.pack(successor.spread, fire_at - due),
            stored[end + _SPREAD.size :],
        )
    )


def _take(data: bytes, pos: int) -> tuple[bytes | None, int]:
    """The length-prefixed field at ``pos`` (None for a length below 0), and where the
    next field starts."""
    (length,) = _LEN.unpack_from(data, pos)
    pos += 4
    if length < 0:
        return None, pos
    return data[pos : pos + length], pos + length


def _unpack_headers(data: bytes, pos: int, count: int) -> tuple[tuple[tuple[str, bytes], ...], int]:
    """``count`` headers from ``pos`` (a name and a value each), and where they end."""
    headers = []
    for _ in range(count):
        name, pos = _take(data, pos)
        header, pos = _take(data, pos)
        headers.append(((name or b"").decode(), header or b""))
    return tuple(headers), pos


def stored_topic(data: bytes) -> str:
    """The callback topic of a stored timer, read without unpacking the rest: a tick
    holds the timers of a rate-limited or paused topic back by their topic alone, and
    unpacks each once, when it is released (:meth:`PartitionWheel.take_held`)."""
    if data[0] not in (_V1, _V2, _V3):
        unpack_timer(data)  # raises what a full read raises
    # Past the id and the token (a length below 0 is "none"), unrolled: this runs for
    # every timer a tick holds back.
    unpack_len = _LEN.unpack_from
    (length,) = unpack_len(data, _HEAD.size)
    pos = _HEAD.size + 4 + (length if length > 0 else 0)
    (length,) = unpack_len(data, pos)
    pos += 4 + (length if length > 0 else 0)
    (length,) = unpack_len(data, pos)
    pos += 4
    return data[pos : pos + length].decode() if length > 0 else ""


def topic_field(topic: str) -> bytes:
    """``topic`` as a stored timer holds it (its length, then its bytes), for
    :func:`stored_topic_is`."""
    encoded = topic.encode()
    return _LEN.pack(len(encoded)) + encoded


def stored_topic_is(data: bytes, field: bytes) -> bool:
    """Whether the stored timer ``data`` (of a layout :func:`stored_topic` reads) has the
    callback topic whose :func:`topic_field` is ``field``: a burst's scan tells each
    timer's topic from its neighbour's so, at half of :func:`stored_topic`'s cost (the
    topic compared where it lies, not sliced out and decoded)."""
    unpack_len = _LEN.unpack_from
    (length,) = unpack_len(data, _HEAD.size)
    pos = _HEAD.size + 4 + (length if length > 0 else 0)
    (length,) = unpack_len(data, pos)
    return data.startswith(field, pos + 4 + (length if length > 0 else 0))


def unpack_timer(data: bytes) -> Timer:
    """Inverse of :func:`pack_timer`."""
    version, due = _HEAD.unpack_from(data, 0)
    if version not in (_V1, _V2, _V3):
        if version > NEWEST_LAYOUT:
            raise StoredLayoutTooNew(version)
        raise ValueError(f"stored timer has unknown layout version {version}")
    # The five leading fields (id, token, topic, key, value) and the header count read
    # inline, field by field (a length below 0 is "none"): this runs for every timer
    # fired, and a helper call per field was a third of it, a loop and a list of the
    # fields another fifth of what was left.
    unpack_len = _LEN.unpack_from
    pos = _HEAD.size
    (length,) = unpack_len(data, pos)
    pos += 4
    if length > 0:
        timer_id = data[pos : pos + length].decode()
        pos += length
    else:
        timer_id = ""
    (length,) = unpack_len(data, pos)
    pos += 4
    if length > 0:
        token = data[pos : pos + length].decode()
        pos += length
    else:
        token = ""
    (length,) = unpack_len(data, pos)
    pos += 4
    if length > 0:
        topic = data[pos : pos + length].decode()
        pos += length
    else:
        topic = ""
    (length,) = unpack_len(data, pos)
    pos += 4
    key: bytes | None = None
    if length >= 0:
        key = data[pos : pos + length]
        pos += length
    (length,) = unpack_len(data, pos)
    pos += 4
    value: bytes | None = None
    if length >= 0:
        value = data[pos : pos + length]
        pos += length
    (count,) = unpack_len(data, pos)
    pos += 4
    headers: tuple[tuple[str, bytes], ...] = ()
    if count > 0:
        headers, pos = _unpack_headers(data, pos, count)
    # A v1 timer is one-shot: no recurrence, first occurrence, the service's late policy.
    recurrence: Recurrence | None = None
    seq = fired_before = 0
    late: LatePolicy | None = None
    spread = 0
    schema_id: int | None = None
    if version != _V1:
        seq, fired_before, kind, flags = _SERIES.unpack_from(data, pos)
        pos += _SERIES.size
        every, start, end, count, skip_ms = _NUMBERS.unpack_from(data, pos)
        pos += _NUMBERS.size
        # -1 is "none" (see _opt), read inline: this runs for every series occurrence read.
        start_at = None if start == -1 else start
        end_at = None if end == -1 else end
        most = None if count == -1 else count
        if kind == _RECURRENCE_INTERVAL:
            recurrence = Recurrence(None, "UTC", every, start_at, end_at, most)
        elif kind == _RECURRENCE_CRON:
            cron, pos = _take(data, pos)
            tz, pos = _take(data, pos)
            recurrence = Recurrence(
                (cron or b"").decode(), (tz or b"").decode(), None, start_at, end_at, most
            )
        if version == _V3 and recurrence is not None:
            block_end = _calendar_end(data, pos)
            zone, calendar = _calendar_of(data[pos:block_end])
            pos = block_end
            recurrence = Recurrence(
                recurrence.cron,
                zone,
                recurrence.every,
                start_at,
                end_at,
                most,
                calendar,
            )
        if flags:
            code = flags >> 1 & 3
            if code not in _CATCH_UPS:  # bytes no pack_timer wrote: refused, never misread
                raise ValueError(f"stored timer has unknown catch-up code {code}")
            late = LatePolicy(skip_ms if flags & 1 else None, _CATCH_UPS[code])
    debounce: Debounce | None = None
    if pos < len(data):  # the spread extension: the head is the fire second
        spread, offset = _SPREAD.unpack_from(data, pos)
        due -= offset
        pos += _SPREAD.size
        if pos < len(data):  # the schema extension
            (schema_id,) = _SCHEMA.unpack_from(data, pos)
            if schema_id == -1:
                schema_id = None
            pos += _SCHEMA.size
            if pos < len(data):  # the debounce extension
                seconds, max_wait, first_ms, merged, last_offset = _DEBOUNCE.unpack_from(data, pos)
                debounce = Debounce(
                    seconds, None if max_wait == -1 else max_wait, first_ms, merged, last_offset
                )
    # Built without calling Timer.__init__ (its fields straight into the instance's
    # dict, as __init__ puts them): the call with thirteen keywords was half of building
    # one (0.8 against 1.5 µs, measured), and every timer fired is read here.
    timer = _new_timer(Timer)
    timer.__dict__.update(
        id=timer_id,
        due=due,
        topic=topic,
        key=key,
        value=value,
        token=token,
        headers=headers,
        recurrence=recurrence,
        seq=seq,
        fired_before=fired_before,
        late=late,
        spread=spread,
        schema_id=schema_id,
    )
    if debounce is not None:  # left to the class attribute otherwise (Timer.debounce)
        timer.__dict__["debounce"] = debounce
    return timer
