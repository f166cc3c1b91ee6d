"""The due-load forecast of one partition, kept up to date as timers come and go.

What it answers: how many pending timers come due per future minute (the next
:data:`DEFAULT_MINUTE_SECONDS`, 3 hours) and per future hour (the next
:data:`DEFAULT_HOUR_SECONDS`, 7 days), by callback topic, so that capacity and rate
limits can be planned. It is counted, never scanned for on a request: the status views
and the metric read counters whose size does not grow with what is pending.

How. Pending timers are keyed by due second (:mod:`app.core.keys`), so the key range is
cut by two moving **edges**: timers whose key is before the *minute edge* are counted in
``(topic, minute)`` cells, those between it and the *hour edge* in ``(topic, hour)``
cells, and those beyond the hour edge are not counted. The wheel tells the forecast of
every timer it stores and of every one it removes (fired, cancelled, replaced): one
comparison with the edges and one counter step, plus, for a cancel or a replacement of
a timer inside the edges, one point read of the stored timer to learn its topic (the
index entry does not hold it). As ticks advance, each edge moves forward by scanning the
keys it passes (a timer entering the hour window is counted; one entering the minute
window moves from its hour cell to its minute cell), at most :data:`EDGE_SCAN_PER_CALL`
keys a tick, the rest on the next. The edges move once a minute (the minute edge) and
once an hour (the hour edge), so an idle tick costs two integer comparisons; each timer
is read by an edge at most twice in its life. When a partition is loaded its counters
start empty and the edges move from the first pending key the same way, a bounded
slice a tick, so a partition is never slower to load.

Bounded: cells exist for at most ``max_topics`` topics (the first that many a partition
counts; the rest together as ``other``, as ``KAFKA_TIMERS_MAX_TOPIC_LABELS`` bounds the
metric's labels) times the minutes and hours of the windows, whatever is pending.

Nothing here knows about Kafka or Faust; :class:`app.core.wheel.PartitionWheel` calls it.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from itertools import islice

from app.core.keys import PENDING, bucket_floor, timer_key

__all__ = [
    "DEFAULT_HOUR_SECONDS",
    "DEFAULT_MAX_TOPICS",
    "DEFAULT_MINUTE_SECONDS",
    "EDGE_SCAN_PER_CALL",
    "OTHER_TOPICS",
    "ForecastRows",
    "PartitionForecast",
    "forecast_rows",
    "stored_topic",
]

MINUTE = 60
HOUR = 3600
#: Per-minute counts cover this far ahead (3 hours).
DEFAULT_MINUTE_SECONDS = 3 * HOUR
#: Per-hour counts cover this far ahead (7 days).
DEFAULT_HOUR_SECONDS = 7 * 86400
#: Topics with cells of their own per partition (``KAFKA_TIMERS_MAX_TOPIC_LABELS``'s
#: default); the rest are counted together.
DEFAULT_MAX_TOPICS = 100
#: Most keys an edge reads in one :meth:`PartitionForecast.advance` (one tick), as many
#: as the expiry sweep: about 2 ms on a loaded 2-core machine; an edge further behind
#: goes on at the next tick (10 million timers inside the window after a restart: 1.25
#: million per partition of 8, about 21 minutes of ticks).
EDGE_SCAN_PER_CALL = 1000
#: The topic under which topics past ``max_topics`` are counted (the metric's label).
OTHER_TOPICS = "other"

_LENGTH = struct.Struct(">i")
_Scan = Callable[[bytes, bytes], Iterator[tuple[bytes, bytes]]]
_Cells = dict[int, int]


def stored_topic(value: bytes) -> str:
    """The callback topic of a stored timer (:func:`app.core.stored.pack_timer`), read
    from its first fields without unpacking the rest: version and due (9 bytes), then
    id, token and topic, each a 4-byte length (never -1: they are never None) and its
    bytes."""
    pos = 13 + _LENGTH.unpack_from(value, 9)[0]  # past the id
    pos += 4 + _LENGTH.unpack_from(value, pos)[0]  # past the token
    return value[pos + 4 : pos + 4 + _LENGTH.unpack_from(value, pos)[0]].decode()


def _inc(cells: _Cells, bucket: int) -> None:
    cells[bucket] = cells.get(bucket, 0) + 1


def _dec(cells: _Cells, bucket: int) -> None:
    left = cells[bucket] - 1
    if left:
        cells[bucket] = left
    else:
        del cells[bucket]


class PartitionForecast:
    """Pending timers of one partition per (callback topic, minute) and (topic, hour)."""

    def __init__(
        self,
        *,
        minute_seconds: int = DEFAULT_MINUTE_SECONDS,
        hour_seconds: int = DEFAULT_HOUR_SECONDS,
        max_topics: int = DEFAULT_MAX_TOPICS,
        scan_limit: int = EDGE_SCAN_PER_CALL,
    ) -> None:
        self.minute_seconds = minute_seconds
        self.hour_seconds = hour_seconds
        self._max_topics = max_topics
        self._scan_limit = scan_limit
        #: topic -> minute (due // 60) -> timers, for keys before the minute edge.
        self.minutes: dict[str, _Cells] = {}
        #: topic -> hour (due // 3600) -> timers, for keys between the two edges.
        self.hours: dict[str, _Cells] = {}
        #: Topics with cells of their own (never shrinks while the partition is loaded,
        #: so a timer is removed from the cell it was added to).
        self._own: set[str] = set()
        # Each edge is a key of the pending range: a timer is inside it if its key sorts
        # before the edge's. ``_*_second`` is that key's second, for a cheap comparison.
        self._m_key = PENDING
        self._m_second = 0
        self._h_key = PENDING
        self._h_second = 0
        #: Targets the edges last reached (an idle tick compares these and returns).
        self._reached = (-1, -1)

    # -- the hot path: the wheel stores and removes timers ------------------------------

    def _cells(self, level: dict[str, _Cells], topic: str) -> _Cells:
        cells = level.get(topic)
        if cells is not None:
            return cells
        if len(self._own) < self._max_topics and topic not in self._own:
            self._own.add(topic)
            self.minutes[topic] = {}
            self.hours[topic] = {}
            return level[topic]
        if OTHER_TOPICS not in self.minutes:
            self.minutes[OTHER_TOPICS] = {}
            self.hours[OTHER_TOPICS] = {}
        return level[OTHER_TOPICS]

    def _where(self, slot: int, timer_id: str) -> int:
        """0: beyond the hour edge (not counted), 1: in an hour cell, 2: in a minute cell."""
        h = self._h_second
        if slot > h or (slot == h and timer_key(slot, timer_id) >= self._h_key):
            return 0
        m = self._m_second
        if slot < m or (slot == m and timer_key(slot, timer_id) < self._m_key):
            return 2
        return 1

    def add(self, slot: int, timer_id: str, topic: str) -> None:
        """A timer was stored under second ``slot``."""
        # Inlined for the hot path (a store, a fire): two comparisons and a dict step.
        m = self._m_second
        if slot < m:
            level, bucket = self.minutes, slot // MINUTE
        elif m < slot < self._h_second:
            level, bucket = self.hours, slot // HOUR
        elif slot > self._h_second:
            return
        else:  # on an edge's second: compare keys
            where = self._where(slot, timer_id)
            if not where:
                return
            level, bucket = (
                (self.minutes, slot // MINUTE) if where == 2 else (self.hours, slot // HOUR)
            )
        cells = level.get(topic)
        if cells is None:
            cells = self._cells(level, topic)
        cells[bucket] = cells.get(bucket, 0) + 1

    def remove(self, slot: int, timer_id: str, topic: str) -> None:
        """The timer stored under ``slot`` was removed (fired, cancelled, replaced)."""
        m = self._m_second
        if slot < m:
            level, bucket = self.minutes, slot // MINUTE
        elif m < slot < self._h_second:
            level, bucket = self.hours, slot // HOUR
        elif slot > self._h_second:
            return
        else:
            where = self._where(slot, timer_id)
            if not where:
                return
            level, bucket = (
                (self.minutes, slot // MINUTE) if where == 2 else (self.hours, slot // HOUR)
            )
        cells = level.get(topic)
        if cells is None:
            cells = self._cells(level, topic)
        left = cells[bucket] - 1
        if left:
            cells[bucket] = left
        else:
            del cells[bucket]

    def discard(self, slot: int, timer_id: str, read: Callable[[bytes], bytes | None]) -> None:
        """The timer stored under ``slot`` is about to be removed, its topic unknown:
        read it (one point read, only when it is counted) and :meth:`remove` it."""
        if self._where(slot, timer_id) == 0:
            return
        value = read(timer_key(slot, timer_id))
        if value is not None:
            self.remove(slot, timer_id, stored_topic(value))

    # -- moving the edges -------------------------------------------------------------

    def targets(self, now: int) -> tuple[int, int]:
        """The seconds the minute and hour edges should reach at ``now``: a minute (an
        hour) of slack past the windows, so rows read a little later are still whole."""
        minute = (now // MINUTE + 1) * MINUTE + self.minute_seconds
        hour = (now // HOUR + 1) * HOUR + self.hour_seconds
        return minute, hour

    def advance(self, now: int, scan: _Scan, limit: int | None = None) -> bool:
        """Move the edges towards their targets at ``now`` (never back), reading at most
        ``limit`` keys per edge (default the forecast's ``scan_limit``). Whether both
        reached their targets."""
        m_target, h_target = self.targets(now)
        if self._reached[0] >= m_target and self._reached[1] >= h_target:
            return True
        if limit is None:
            limit = self._scan_limit
        h_done = self._advance_hours(h_target, scan, limit)
        m_done = self._advance_minutes(m_target, scan, limit)
        if h_done and m_done:
            self._reached = (m_target, h_target)
        return h_done and m_done

    def _read(
        self, scan: _Scan, low: bytes, high: bytes, limit: int
    ) -> tuple[list[tuple[bytes, bytes]], bool]:
        items = list(islice(scan(low, high), limit))
        return items, len(items) < limit

    def _advance_hours(self, target: int, scan: _Scan, limit: int) -> bool:
        goal = bucket_floor(target)
        if self._h_key >= goal:
            return True
        items, done = self._read(scan, self._h_key, goal, limit)
        for key, value in items:
            _inc(self._cells(self.hours, stored_topic(value)), int(key[1:13]) // HOUR)
        if done:
            self._h_key, self._h_second = goal, target
        else:
            last = items[-1][0]
            self._h_key, self._h_second = last + b"\x00", int(last[1:13])
        return done

    def _advance_minutes(self, target: int, scan: _Scan, limit: int) -> bool:
        """Move timers from hour cells to minute cells, never past the hour edge."""
        goal = min(bucket_floor(target), self._h_key)
        if self._m_key >= goal:
            return self._m_key >= bucket_floor(target)
        items, done = self._read(scan, self._m_key, goal, limit)
        for key, value in items:
            slot = int(key[1:13])
            topic = stored_topic(value)
            _dec(self._cells(self.hours, topic), slot // HOUR)
            _inc(self._cells(self.minutes, topic), slot // MINUTE)
        if done:
            self._m_key = goal
            self._m_second = target if goal == bucket_floor(target) else self._h_second
        else:
            last = items[-1][0]
            self._m_key, self._m_second = last + b"\x00", int(last[1:13])
        return done and goal == bucket_floor(target)

    def rebuild(self, now: int, scan: _Scan) -> None:
        """Count from scratch (a partition being loaded): the edges start at the first
        pending key and the first :meth:`advance` moves them as far as it may; ticks take
        them the rest of the way (``complete`` is false until then). A partition is
        ready as soon as it was, whatever it holds: 10 million pending timers inside the
        window take minutes of ticks to count, not seconds of start-up."""
        self.minutes, self.hours, self._own = {}, {}, set()
        self._m_key, self._m_second = PENDING, 0
        self._h_key, self._h_second = PENDING, 0
        self._reached = (-1, -1)
        self.advance(now, scan)

    @property
    def minute_through(self) -> int:
        """Every timer due before this second is in a minute cell."""
        return self._m_second

    @property
    def hour_through(self) -> int:
        """Every timer due before this second is in a minute or an hour cell."""
        return self._h_second


@dataclass
class ForecastRows:
    """One topic's (or the total's) counts from ``now``: overdue, per minute, per hour."""

    #: Start of the first minute row (the current minute), epoch seconds.
    minute_start: int
    #: Start of the first hour row (the current hour), epoch seconds.
    hour_start: int
    #: Pending and due before the current minute (not fired yet: ticks are behind).
    overdue: int = 0
    minutes: list[int] = field(default_factory=list)
    #: Per hour from the current hour; the first counts from the current minute on.
    hours: list[int] = field(default_factory=list)

    def windows(self) -> dict[str, int]:
        """The metric's windows: from the current minute, 1, 5 and 60 minutes on; and to
        the start of the hour 24 hours after the current one."""
        m = self.minutes
        return {
            "next_1m": sum(m[:1]),
            "next_5m": sum(m[:5]),
            "next_1h": sum(m[:60]),
            "next_24h": sum(self.hours[:24]),
        }


def forecast_rows(
    forecasts: Iterable[PartitionForecast],
    now: float,
    *,
    minute_seconds: int = DEFAULT_MINUTE_SECONDS,
    hour_seconds: int = DEFAULT_HOUR_SECONDS,
) -> tuple[dict[str, ForecastRows], bool]:
    """Rows per topic summed over ``forecasts`` at ``now``, and whether every edge
    covers them (False while an edge is catching up: later rows are lower bounds).

    Cost: the cells, at most topics x (minutes + hours of the windows) per partition.
    """
    m0 = int(now) // MINUTE
    h0 = int(now) // HOUR
    n_min = minute_seconds // MINUTE
    n_hour = hour_seconds // HOUR
    rows: dict[str, ForecastRows] = {}
    complete = True

    def row(topic: str) -> ForecastRows:
        found = rows.get(topic)
        if found is None:
            found = rows[topic] = ForecastRows(m0 * MINUTE, h0 * HOUR, 0, [0] * n_min, [0] * n_hour)
        return found

    for fc in forecasts:
        complete = complete and (
            fc.minute_through >= (m0 + n_min) * MINUTE and fc.hour_through >= (h0 + n_hour) * HOUR
        )
        _add_cells(fc.minutes, MINUTE, m0, h0, n_min, n_hour, row)
        _add_cells(fc.hours, HOUR, m0, h0, n_min, n_hour, row)
    return rows, complete


def _add_cells(
    level: Mapping[str, Mapping[int, int]],
    width: int,
    m0: int,
    h0: int,
    n_min: int,
    n_hour: int,
    row: Callable[[str], ForecastRows],
) -> None:
    per_hour = HOUR // width  # 60 for minute cells, 1 for hour cells
    first = m0 if width == MINUTE else h0
    for topic, cells in level.items():
        if not cells:
            continue
        r = row(topic)
        for bucket, count in cells.items():
            if bucket < first:
                r.overdue += count
                continue
            if width == MINUTE and bucket - m0 < n_min:
                r.minutes[bucket - m0] += count
            h = bucket // per_hour - h0
            if h < n_hour:
                r.hours[h] += count
