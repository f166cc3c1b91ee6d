"""Per-callback-topic rate limits and pauses: how many callbacks a topic may take now.

``KAFKA_TIMERS_TOPIC_RATE_LIMITS="reminders=500/s,billing=50/s"`` limits callbacks to
those topics across the whole service; an operator can also change a limit or pause a
topic while the service runs (:meth:`TopicGates.set_rate`, :meth:`TopicGates.pause`,
:meth:`TopicGates.resume`: the admin path calls these). A pause is a rate of 0 until
resumed. Timers a gate holds back stay pending in their partition's wheel (durably:
the store keeps them and a restart or a new owner finds them again, see
:mod:`app.core.wheel`), in due order, and go out as the gate allows, each under its own
late-fire policy: never dropped, never early.

How a limit is shared by the workers: **one token bucket per partition and topic**,
whose rate is that partition's share of the limit. The shares follow demand
(:mod:`app.core.rate_shares`): every worker publishes the backlog of its partitions and
sets its buckets' rates from the backlogs of all (:meth:`TopicGates.share`, driven by
:mod:`app.worker.demand`), so a topic whose timers all sit in one partition drains at
the topic's limit. Until a worker has a current view of the backlogs (and for a topic
no partition has a backlog for), each bucket runs at limit / N (N the partition count
of the service topics): the buckets of all partitions add up to the limit either way.
Buckets per partition, not per worker, because

- it needs no coordination and no knowledge of who owns what: the N buckets together
  never exceed the limit, whichever workers hold them and however that changes;
- a rebalance cannot let a burst through: a bucket lives and dies with its partition in
  one worker. The old owner drops it when the partition is revoked (before the group
  hands it on: the service forgets a partition under its tick lock, so no round of
  that worker delivers for it afterwards), and the new owner starts it **empty**, so
  the partition's rate restarts from 0, never from a burst. A per-worker share would
  have to be recomputed at every assignment, and a worker that learns of its new
  partitions before its old owner learns it lost them would briefly double the share;
- it keeps the due order where timers meet: one id's timers live in one partition, and
  each partition delivers its held timers strictly in due order.

A limit below N per second (one callback per partition per N / limit seconds) can
start with up to N callbacks in one second after an idle spell, one per partition.

Two rules keep a limit, per bucket:

- **Tokens.** The bucket refills continuously at its rate; the service delivers held
  timers every :data:`RELEASE_INTERVAL` seconds between ticks, so a limited topic
  receives an even stream, not its whole second's share at each second boundary. Idle,
  a bucket holds at most :data:`BURST_SECONDS` of its rate (at least one callback): the
  burst after a quiet spell. **Backlogged** (timers were still held after its last
  round), it keeps what accrues for up to :data:`WINDOW_SECONDS`: a round that took
  longer than the burst (a big flush, a busy event loop) would otherwise waste tokens,
  and a limit of 50,000/s was delivered at 22,000/s when a round took a quarter second.
- **Window.** Whatever the tokens say, a bucket gives at most what its rate allowed
  over the last :data:`WINDOW_SECONDS` (the integral of its rate, which the demand
  exchange retunes several times a second) plus a twentieth of that (half its burst
  while the rate stays put) in any window of that length. The rates of a topic's
  buckets add up to its limit at every moment, so while the shares stay put a topic
  gets at most its limit plus a twentieth in any second of the callbacks' record
  timestamps. When shares move, a bucket can still spend, late, what its earlier share
  allowed while another already runs at the share it gave up: the other twentieth of
  the ``<= 550 a second at 500/s`` the acceptance asks is the margin for that and for a
  worker whose view of the shares lags a report (a property test draws moving shares:
  never above 1.1x). Bounding a window by the bucket's *current* rate instead let a
  bucket whose share had just risen give a whole window at the new rate beside one
  that had given at the old: 551 in one second at 500/s, in CI. This holds even when a
  stalled round catches up. A round's spend counts in the window from the moment its
  last callback was produced (:meth:`TopicGates.produced`), not from when it took the
  tokens: each record's timestamp is the moment it was produced, and a big round takes
  a while to produce.

And one rule for the rounds: a round takes at most :data:`RELEASE_INTERVAL` of its
bucket's rate (:meth:`TokenBucket.round_most`), the window's slack. A round counts
whole in the window until its last callback leaves it, so one that straddles the
window's start is counted whole where only its tail lies inside; rounds no bigger than
the slack never cost the rate, and what accrued while a round ran late is taken by the
rounds that follow it at once. Letting a late round take every token it finds feeds
on itself: a million due in one partition at 50,000/s grew rounds of 26,847 timers that
took most of a second each, the window held back the rounds after them, and the topic
got 0.82x its limit (0.97x with the rule, same machine, CHANGELOG.md).
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Mapping
from collections.abc import Set as AbstractSet

__all__ = [
    "BURST_SECONDS",
    "RELEASE_INTERVAL",
    "WINDOW_BURST_SHARE",
    "WINDOW_SECONDS",
    "TokenBucket",
    "TopicGates",
]

#: Most a bucket holds, in seconds of its rate (and at least one token): the burst a
#: topic can take after an idle spell, and the slack a late release round can use.
BURST_SECONDS = 0.1
#: How often held timers are delivered between ticks, seconds: half a bucket, so a
#: round that comes late (a busy event loop) still finds its tokens there.
RELEASE_INTERVAL = 0.05
#: The window a limit is kept over, seconds: at most the rate times this plus the burst
#: in any such window; also the most a backlogged bucket keeps.
WINDOW_SECONDS = 1.0
#: The burst's part a window may take beyond what the rate allowed over it: half, so
#: a topic's busiest second stays within its limit plus 5% (see the module's docstring).
WINDOW_BURST_SHARE = 0.5
#: Highest limit accepted, callbacks per second (far above what a worker delivers).
MAX_RATE = 10_000_000.0


class TokenBucket:
    """Tokens at ``rate`` a second, starting empty, under a sliding-window ceiling.

    Continuous refill (no ticks): :meth:`available` says how many whole callbacks may
    go now, :meth:`spend` takes them; spending more than was available (a series that
    catches up several occurrences in one fire) leaves a debt the refill pays first.
    Idle, the bucket holds at most ``capacity``; :attr:`backlogged` (set by
    :meth:`spend`), up to :data:`WINDOW_SECONDS` of its rate. Either way no window of
    :data:`WINDOW_SECONDS` gets more than the integral of the rate over that window times
    ``1 + BURST_SECONDS x WINDOW_BURST_SHARE`` (and at least half a callback more):
    ``rate x WINDOW_SECONDS + capacity / 2`` while the rate stays put.
    """

    __slots__ = (
        "_given",
        "_given_total",
        "_rates",
        "backlogged",
        "capacity",
        "last",
        "rate",
        "tokens",
    )

    def __init__(self, rate: float, now: float) -> None:
        self.rate = rate
        self.capacity = max(1.0, rate * BURST_SECONDS)
        self.tokens = 0.0
        self.last = now
        self.backlogged = False
        #: (when, how many) of each spend in the last window, oldest first.
        self._given: deque[tuple[float, int]] = deque()
        self._given_total = 0
        #: (since, rate) of each rate the bucket had in the last window, oldest first;
        #: the first counts as in force since before the window (a new bucket's history
        #: is its first rate: the one it would have had).
        self._rates: deque[tuple[float, float]] = deque([(now, rate)])

    def refill(self, now: float) -> None:
        elapsed = now - self.last
        if elapsed > 0:
            cap = (
                max(self.capacity, self.rate * WINDOW_SECONDS) if self.backlogged else self.capacity
            )
            if self.tokens < cap:
                self.tokens = min(cap, self.tokens + elapsed * self.rate)
        self.last = max(self.last, now)

    def _window_room(self, now: float) -> float:
        given = self._given
        horizon = now - WINDOW_SECONDS
        while given and given[0][0] <= horizon:
            self._given_total -= given.popleft()[1]
        allowed = self._allowed(horizon, now)
        # The slack is a share of what the rate allowed over the window, not of the
        # current rate: buckets whose rates moved apart at different moments would
        # otherwise each take the slack of their highest rate (529 at 500/s, found by
        # the moving-shares property test). At least half a callback: a limit below one
        # a second still delivers.
        slack = max(0.5, allowed * BURST_SECONDS * WINDOW_BURST_SHARE / WINDOW_SECONDS)
        return allowed + slack - self._given_total

    def _allowed(self, horizon: float, now: float) -> float:
        """The integral of the rate over ``[horizon, now]``."""
        rates = self._rates
        while len(rates) > 1 and rates[1][0] <= horizon:
            rates.popleft()
        allowed = 0.0
        end = now
        for i in range(len(rates) - 1, -1, -1):
            since, rate = rates[i]
            start = horizon if i == 0 else max(since, horizon)
            if end > start:
                allowed += rate * (end - start)
            end = start
        return allowed

    def _rate_from(self, rate: float, now: float) -> None:
        """The bucket runs at ``rate`` from ``now``."""
        self.rate = rate
        self.capacity = max(1.0, rate * BURST_SECONDS)
        rates = self._rates
        if rates and rates[-1][0] >= now:
            rates.pop()
        rates.append((now, rate))
        # Trimmed here too, not only when the window is read: a bucket retuned four
        # times a second that nobody asks for tokens would otherwise keep every rate.
        horizon = now - WINDOW_SECONDS
        while len(rates) > 1 and rates[1][0] <= horizon:
            rates.popleft()

    def round_most(self) -> int:
        """Most callbacks one round may take: :data:`RELEASE_INTERVAL` of the rate (at
        least one), the window's slack. A round's spend counts in the window from when
        its last callback was produced, so a round that straddles the window's start is
        counted whole where only its tail lies inside: a round no bigger than the slack
        never costs the rate. Tokens that accrued while a round ran late stay in the
        bucket for the rounds that follow at once."""
        return max(1, math.floor(self.rate * RELEASE_INTERVAL))

    def available(self, now: float) -> int:
        self.refill(now)
        return max(0, math.floor(min(self.tokens, self._window_room(now)) + 1e-9))

    def spend(self, n: int, *, backlogged: bool = False) -> None:
        """``n`` callbacks went out (at the time of the last :meth:`available`);
        ``backlogged``: timers are still waiting for this bucket."""
        self.tokens -= n
        self.backlogged = backlogged
        if n:
            self._given.append((self.last, n))
            self._given_total += n

    def produced(self, when: float) -> None:
        """The callbacks of the last :meth:`spend` were all produced by ``when``.

        A spend is first counted at the time its round took the tokens; a round of
        thousands of callbacks takes a while to produce (a tenth of a second and more on
        a busy worker), and their record timestamps are the moments each was produced. The
        window counts the spend from when its last callback was produced instead, so no
        second of record timestamps gets more than the ceiling: a round taken just
        before a second began and produced into it is still inside the window that the
        next rounds are checked against (measured before: 15,038 in one second at a
        limit of 12,000/s, after a stalled round).
        """
        given = self._given
        if given and given[-1][0] < when:
            given[-1] = (when, given[-1][1])

    def retune(self, rate: float, now: float) -> None:
        """A new share of its topic's limit from now on (:meth:`TopicGates.share`): what
        accrued so far is kept, up to what the bucket may hold at the new rate (a
        backlogged bucket keeps its window's worth). Called every few hundred
        milliseconds while a topic has a backlog, so it must not waste tokens."""
        self.refill(now)
        self._rate_from(rate, now)
        cap = max(self.capacity, rate * WINDOW_SECONDS) if self.backlogged else self.capacity
        self.tokens = min(self.tokens, cap)

    def set_rate(self, rate: float, now: float) -> None:
        """A new rate from now on: what accrued so far at the old one is kept (capped)."""
        self.refill(now)
        self._rate_from(rate, now)
        self.tokens = min(self.tokens, self.capacity)

    def seconds_to(self, tokens: float) -> float:
        """How long until the bucket may give ``tokens`` (at the current rate)."""
        missing = tokens - self.tokens
        wait = 0.0 if missing <= 0 else (missing / self.rate if self.rate > 0 else math.inf)
        over = tokens - self._window_room(self.last)
        if over > 0:  # the window must first let go of enough earlier spends
            for at, n in self._given:
                over -= n
                if over <= 0:
                    wait = max(wait, at + WINDOW_SECONDS - self.last)
                    break
        return wait


class TopicGates:
    """The callback topics a worker holds back, and each partition's budget for them.

    The run-time interface for the control path is :meth:`set_rate`, :meth:`pause`,
    :meth:`resume`, :meth:`paused` and :meth:`limits`; the service asks
    :attr:`gated` (the topics held back at all: a limit or a pause), :meth:`budget` and
    :meth:`spend` per partition and topic, and :meth:`forget` for a partition it no
    longer holds. Not thread-safe: call it on the worker's event loop.

    Every change costs the same however many topics are paused or limited already (a
    flood of control records must not cost the square of its length): :attr:`gated` is
    kept up to date one topic at a time, and the buckets are found by their topic.
    """

    def __init__(
        self,
        limits: Mapping[str, float] | None = None,
        *,
        partitions: int = 1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if partitions < 1:
            raise ValueError("partitions must be at least 1")
        self._partitions = partitions
        self._clock = clock
        self._limits: dict[str, float] = {}
        self._paused: set[str] = set()
        self._buckets: dict[tuple[int, str], TokenBucket] = {}
        #: Each partition's share of a limited topic's limit, callbacks a second, where
        #: the demand exchange set one (:meth:`share`); else limit / N.
        self._rates: dict[str, dict[int, float]] = {}
        #: The same buckets by topic, then partition.
        self._by_topic: dict[str, dict[int, TokenBucket]] = {}
        #: Per partition, the buckets spent from in the round being produced.
        self._producing: dict[int, list[TokenBucket]] = {}
        self._listeners: list[Callable[[], None]] = []
        #: The topics held back (limited or paused); empty when none is: then the fire
        #: path does nothing more than read this attribute once per round. A live view,
        #: changed in place: read it on the loop, never keep iterating it across an await.
        self._gated: set[str] = set()
        for topic, rate in (limits or {}).items():
            self.set_rate(topic, rate)

    # -- the control path -----------------------------------------------------------

    def set_rate(self, topic: str, per_second: float | None) -> None:
        """Limit ``topic`` to ``per_second`` callbacks across the service; ``None``
        lifts the limit (what it held goes out at once, unless paused)."""
        if per_second is not None and not (0 < per_second <= MAX_RATE):
            raise ValueError(f"rate must be above 0 and at most {MAX_RATE:g} (pause instead)")
        now = self._clock()
        # Shares of the old limit are void; the next exchange of backlogs sets new ones.
        self._rates.pop(topic, None)
        if per_second is None:
            self._limits.pop(topic, None)
            for partition in self._by_topic.pop(topic, {}):
                del self._buckets[(partition, topic)]
            if topic not in self._paused:
                self._gated.discard(topic)
        else:
            self._limits[topic] = float(per_second)
            self._gated.add(topic)
            share = per_second / self._partitions
            for bucket in self._by_topic.get(topic, {}).values():
                bucket.set_rate(share, now)
        self._changed()

    def share(self, topic: str, rates: Mapping[int, float] | None) -> None:
        """Set the rate of ``topic``'s bucket on each partition in ``rates`` (its share of
        the limit, from the backlogs of all partitions: :mod:`app.core.rate_shares`);
        ``None``: back to limit / N on every partition (no current view of the
        backlogs). A topic no longer limited is ignored."""
        limit = self._limits.get(topic)
        if limit is None:
            return
        now = self._clock()
        buckets = self._by_topic.get(topic, {})
        if rates is None:
            for partition in self._rates.pop(topic, {}):
                bucket = buckets.get(partition)
                if bucket is not None:
                    bucket.retune(limit / self._partitions, now)
            return
        shares = self._rates.setdefault(topic, {})
        for partition, rate in rates.items():
            shares[partition] = rate
            bucket = buckets.get(partition)
            if bucket is not None and bucket.rate != rate:
                bucket.retune(rate, now)

    def shared(self) -> frozenset[str]:
        """The topics whose buckets run at shares set by :meth:`share`."""
        return frozenset(self._rates)

    def pause(self, topic: str) -> None:
        """Hold every callback to ``topic`` until :meth:`resume` (a rate of 0)."""
        self._paused.add(topic)
        self._gated.add(topic)
        self._changed()

    def resume(self, topic: str) -> None:
        """Deliver ``topic`` again: at its limit if it has one, else at once."""
        if topic not in self._paused:
            return
        self._paused.discard(topic)
        if topic not in self._limits:
            self._gated.discard(topic)
        now = self._clock()
        for bucket in self._by_topic.get(topic, {}).values():  # nothing accrued while paused
            bucket.last = now
            bucket.tokens = min(bucket.tokens, 0.0)
        self._changed()

    @property
    def gated(self) -> AbstractSet[str]:
        """The topics held back (limited or paused), as a live read-only view."""
        return self._gated

    def paused(self) -> frozenset[str]:
        return frozenset(self._paused)

    def limits(self) -> dict[str, float]:
        """Limit of each limited topic, callbacks per second across the service."""
        return dict(self._limits)

    def on_change(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` after every change (the service wakes its release loop)."""
        self._listeners.append(listener)

    # -- the fire path ----------------------------------------------------------------

    def budget(self, partition: int, topic: str) -> int | None:
        """How many callbacks to ``topic`` partition ``partition`` may deliver now:
        ``None`` for no limit, 0 while paused."""
        if topic in self._paused:
            return 0
        limit = self._limits.get(topic)
        if limit is None:
            return None
        bucket = self._bucket(partition, topic, limit)
        return min(bucket.available(self._clock()), bucket.round_most())

    def spend(self, partition: int, topic: str, n: int, *, waiting: int = 0) -> None:
        """``n`` callbacks to ``topic`` go out from ``partition`` in this round,
        ``waiting`` still held there (a backlogged bucket keeps what accrues between
        rounds). Call :meth:`produced` once the round has produced them."""
        bucket = self._buckets.get((partition, topic))
        if bucket is not None:
            bucket.spend(n, backlogged=waiting > 0)
            if n:
                self._producing.setdefault(partition, []).append(bucket)

    def produced(self, partition: int) -> None:
        """``partition``'s round has produced what it spent: its window counts those
        callbacks from now (:meth:`TokenBucket.produced`). A dict lookup when nothing
        was spent."""
        buckets = self._producing.pop(partition, None)
        if buckets:
            now = self._clock()
            for bucket in buckets:
                bucket.produced(now)

    def seconds_to_next(self, partition: int, topic: str) -> float:
        """How long until ``partition`` may deliver one more callback to ``topic``."""
        if topic in self._paused:
            return math.inf
        limit = self._limits.get(topic)
        if limit is None:
            return 0.0
        bucket = self._bucket(partition, topic, limit)
        bucket.refill(self._clock())
        return bucket.seconds_to(1.0)

    def forget(self, partitions: list[int] | set[int] | frozenset[int]) -> None:
        """Drop the buckets of partitions this worker no longer holds: a later owner
        (this worker again included) starts them empty."""
        drop = set(partitions)
        for key in [k for k in self._buckets if k[0] in drop]:
            del self._buckets[key]
            by_partition = self._by_topic[key[1]]
            del by_partition[key[0]]
            if not by_partition:
                del self._by_topic[key[1]]
        for shares in self._rates.values():
            for partition in drop:
                shares.pop(partition, None)
        for partition in drop:
            self._producing.pop(partition, None)

    def _bucket(self, partition: int, topic: str, limit: float) -> TokenBucket:
        bucket = self._buckets.get((partition, topic))
        if bucket is None:
            rate = self._rates.get(topic, {}).get(partition, limit / self._partitions)
            bucket = TokenBucket(rate, self._clock())
            self._buckets[(partition, topic)] = bucket
            self._by_topic.setdefault(topic, {})[partition] = bucket
        return bucket

    def _changed(self) -> None:
        for listener in self._listeners:
            listener()
