"""Exact pending-timer quotas across workers: shares of each quota claimed in one log.

A topic's timers sit in every partition (requests are routed by id), so no one partition
sees a quota whole. Each partition therefore stores a timer under a quota key only
within its **share**: the most timers it may hold pending under that key. Shares are
**claimed** on the demand topic (``<app id>-timer-demand``, one partition), in the report
each worker sends four times a second (:mod:`app.kafka.demand`), and a claim holds only
if it **fits** where it lands in that log: the shares of every partition, each as the
newest report naming the partition states it, add up to no more than the quota.
Every worker reads the same log in the same order, and a worker learns whether its own
claim fit when it reads its report back, so the shares in use never add up to more than
the quota: a quota of 1,000 refuses the 1,001st request whichever workers the requests
reach at once.

The rules that make that hold (:class:`QuotaLedger` reads the log, :class:`QuotaLeases`
keeps one worker's side):

- A report states, for each partition it names and each key, the partition's
  **occupancy**: its pending count, or its claim when that is more. The newest report
  naming a partition is what every claim after it is checked against; a partition no
  report in view has named makes every claim fail (it might hold anything).
- A worker uses a share only once its report is read back and fitted, and from the
  moment it sends a report it uses no more than that report states (a claim that does
  not fit never raises a share; one lower than the share in use lowers it at once). So a
  partition never holds more than the newest report naming it states, and the claims
  that fit add up to no more than the quota.
- A claimer reads the demand topic from :data:`~app.kafka.demand.LOOKBACK` records
  before its end when it starts, so it sees each partition's newest report as long as
  every partition is reported by its holder within that tail (four times a second
  while it holds it); a partition it has seen no report of makes its claims fail.
- Nothing expires: a worker that dies leaves its partitions' last occupancy standing
  until their next owner reports them (it reports their counts, rebuilt from the store,
  and nothing more until its own claim fits). A frozen worker keeps its shares and may
  use them when it thaws: the others never counted on them being free.

Demand. A partition whose request would pass its share **waits** (its unit of work ends
at that request, which is read again next) and is **wanted**: the next report claims the
room left (the quota less the others' occupancy and this worker's counts), all of it, or
half when another worker also wants the key (its report says so), dealt out over this
worker's partitions: half to the wanting ones, half by what each stored lately. A share
is kept while no other worker wants its key, so requests under a quota far from full
wait only now and then; once
another worker wants the key, every share of it above its count goes back in the next
report. A request is refused
``over_quota`` only when the pending timers as known here (live counts of this worker's
partitions, the newest reported counts of the others) fill the quota, or when it has
waited :data:`WAIT_MOST_SECONDS` for a share (the demand topic unreadable): a quota never
lets more through, and in the worst case it refuses a request while room is left.

The price: a request under a quota waits for a round trip through the demand topic
(a report every quarter second) whenever its partition has no share to spare: the first
after a start or a rebalance, and those near the quota. Requests under no quota, and
deployments with no quota set, never wait and pay nothing.

Pure: no Kafka, no clock (times are passed in).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

__all__ = [
    "KEEP_EMPTY_REPORTS",
    "MAX_CLAIMS",
    "SENT_KEPT",
    "WAIT_MOST_SECONDS",
    "LeaseReport",
    "QuotaLeases",
    "QuotaLedger",
    "occupancy",
]

#: Longest a request waits for a share before it is refused ``over_quota``, seconds.
WAIT_MOST_SECONDS = 30.0
#: Most claims one report carries (topic quotas' first): a report stays small.
MAX_CLAIMS = 500
#: Reports sent and not yet read back that a worker remembers (older: never raise a share).
SENT_KEPT = 64
#: Reports a share of a key its partition holds none of is kept after it was granted
#: (about 5 s): long enough for the requests it was dealt for to arrive.
KEEP_EMPTY_REPORTS = 20

Counts = Mapping[int, Mapping[str, int]]


def occupancy(counts: Counts, claims: Counts) -> dict[int, dict[str, int]]:
    """Per partition of a report, per key: its count, or its claim where that is more."""
    out: dict[int, dict[str, int]] = {}
    for p, keys in counts.items():
        out[p] = dict(keys)
    for p, keys in claims.items():
        mine = out.setdefault(p, {})
        for key, n in keys.items():
            if n > mine.get(key, 0):
                mine[key] = n
    return out


class QuotaLedger:
    """The demand topic's quota state as read in its order: each partition's occupancy and
    counts from the newest report naming it, and whether each of this worker's own
    reports fitted (:meth:`take_verdicts`). Fed by one reader, in log order."""

    def __init__(self, limit: Callable[[str], int], partitions: int, me: str, run: str) -> None:
        self._limit = limit
        self._partitions = partitions
        self._me, self._run = me, run
        #: Partition -> key -> occupancy, from the newest report naming it.
        self._occupied: dict[int, dict[str, int]] = {}
        #: Partition -> key -> pending count, from the newest report naming it.
        self._counts: dict[int, dict[str, int]] = {}
        #: (sequence number, keys whose claims fitted) of this worker's reports, in order.
        self._verdicts: list[tuple[int, frozenset[str]]] = []

    def apply(
        self,
        worker: str,
        run: str | None,
        seq: int | None,
        counts: Counts,
        claims: Counts,
    ) -> None:
        """Take one report, the next in the log."""
        named = {p for p in counts.keys() | claims.keys() if 0 <= p < self._partitions}
        occupied = {p: keys for p, keys in occupancy(counts, claims).items() if p in named}
        if worker == self._me and run == self._run and seq is not None:
            claimed = {key for keys in claims.values() for key in keys}
            fitted = frozenset(key for key in claimed if self._fits(key, occupied))
            self._verdicts.append((seq, fitted))
            del self._verdicts[:-SENT_KEPT]
        self._occupied.update(occupied)
        for p in named:
            self._counts[p] = dict(counts.get(p, {}))

    def _fits(self, key: str, occupied: Mapping[int, Mapping[str, int]]) -> bool:
        """Whether ``key``'s occupancy, ``occupied`` in place of the partitions it names,
        is within the quota, every partition accounted for."""
        known = self._occupied
        if len(known.keys() | occupied.keys()) < self._partitions:
            return False
        total = sum(keys.get(key, 0) for keys in occupied.values())
        total += sum(keys.get(key, 0) for p, keys in known.items() if p not in occupied)
        return total <= self._limit(key)

    def take_verdicts(self) -> list[tuple[int, frozenset[str]]]:
        """This worker's reports read back since the last call: (seq, keys that fitted)."""
        out, self._verdicts = self._verdicts, []
        return out

    def counts(self) -> dict[str, dict[int, int]]:
        """Per key, each partition's pending count as its newest report gave it."""
        return self._by_key(self._counts)

    def occupied(self) -> dict[str, dict[int, int]]:
        """Per key, each partition's occupancy as its newest report gave it."""
        return self._by_key(self._occupied)

    @staticmethod
    def _by_key(table: Mapping[int, Mapping[str, int]]) -> dict[str, dict[int, int]]:
        out: dict[str, dict[int, int]] = {}
        for p, keys in table.items():
            for key, n in keys.items():
                if n:
                    out.setdefault(key, {})[p] = n
        return out


@dataclass(frozen=True)
class LeaseReport:
    """What one report says of this worker's shares: its sequence number, the claims
    (partition -> key -> share, only where more than the count) and the keys wanted."""

    seq: int
    claims: dict[int, dict[str, int]]
    want: list[str]


@dataclass
class _Sent:
    seq: int
    claims: dict[int, dict[str, int]]
    occupied: dict[int, dict[str, int]]


@dataclass
class QuotaLeases:
    """One worker's shares: what each of its partitions may hold pending per key, the
    partitions waiting for more, and the reports not yet read back."""

    limit: Callable[[str], int]
    #: (partition, key) -> the share in use (absent: none, nothing more may be stored).
    shares: dict[tuple[int, str], int] = field(default_factory=dict)
    #: (partition, key) -> when a request first waited for more (monotonic seconds).
    wanted: dict[tuple[int, str], float] = field(default_factory=dict)
    #: (partition, key) -> timers stored under the share since the last report.
    recent: dict[tuple[int, str], int] = field(default_factory=dict)
    #: (partition, key) -> the report count when its share was last granted.
    granted: dict[tuple[int, str], int] = field(default_factory=dict)
    #: (partition, key) whose last request waited its longest for a share and was
    #: refused: the next ones are refused at once until any of this worker's reports is
    #: read back (the demand topic unreadable stalls a worker's requests once, not each).
    starved: set[tuple[int, str]] = field(default_factory=set)
    _sent: list[_Sent] = field(default_factory=list)
    _seq: int = 0

    def room(self, partition: int, key: str, count: int) -> bool:
        """Whether ``partition``, holding ``count`` under ``key``, may store one more."""
        return count < self.shares.get((partition, key), 0)

    def used(self, partition: int, key: str) -> None:
        """A timer was stored under the share: the partition no longer waits."""
        pk = (partition, key)
        self.recent[pk] = self.recent.get(pk, 0) + 1
        self.wanted.pop(pk, None)

    def wait(self, partition: int, key: str, now: float) -> float:
        """A request on ``partition`` waits for a share of ``key``: since when."""
        return self.wanted.setdefault((partition, key), now)

    def gave_up(self, partition: int, key: str) -> None:
        """The request waiting was answered (refused): no longer wanted."""
        self.wanted.pop((partition, key), None)

    def starve(self, partition: int, key: str) -> None:
        """The request waited its longest for a share: refused, and so are the next ones
        until a report of this worker's is read back."""
        self.gave_up(partition, key)
        self.starved.add((partition, key))

    def drop(self, partition: int) -> None:
        """``partition`` left this worker: its shares and wants with it."""
        for table in (self.shares, self.wanted, self.recent, self.granted):
            for pk in [pk for pk in table if pk[0] == partition]:
                del table[pk]
        self.starved = {pk for pk in self.starved if pk[0] != partition}

    def report(
        self,
        counts: Counts,
        elsewhere: Mapping[str, int],
        others_want: Iterable[str],
    ) -> LeaseReport:
        """The claims of the next report, ``counts`` being what it says of each of this
        worker's partitions and ``elsewhere`` each key's occupancy in the partitions held
        by others (as read); the shares in use are lowered to what it states."""
        self._seq += 1
        others = set(others_want)
        claims: dict[int, dict[str, int]] = {}
        room_claimed = 0

        def claim(p: int, key: str, share: int) -> None:
            nonlocal room_claimed
            if share > counts.get(p, {}).get(key, 0) and room_claimed < MAX_CLAIMS:
                claims.setdefault(p, {})[key] = share
                room_claimed += 1

        wanting: dict[str, set[int]] = {}
        for p, key in self.wanted:
            if p in counts:
                wanting.setdefault(key, set()).add(p)
        mine = sorted(counts)
        recent, self.recent = self.recent, {}
        for key in sorted(wanting, key=lambda k: not k.startswith("topic:")):
            # The room left, this worker's unused shares of the key included, dealt out
            # again: half to the wanting partitions, half over all of them by what each
            # stored since the last report (one more each), so that a hot partition gets
            # nearly all of it and requests spread over partitions find shares where they
            # land.
            base = {p: counts[p].get(key, 0) for p in mine}
            room = self.limit(key) - elsewhere.get(key, 0) - sum(base.values())
            if room <= 0:
                continue
            if key in others:
                room = max(1, room // 2)
            grants = dict.fromkeys(mine, 0)
            wants = sorted(wanting[key])
            to_wanting = room - room // 2
            for i, p in enumerate(wants):
                grants[p] += to_wanting // len(wants) + (1 if i < to_wanting % len(wants) else 0)
            weights = {p: recent.get((p, key), 0) + 1 for p in mine}
            total = sum(weights.values())
            left = room - to_wanting
            dealt = {p: left * w // total for p, w in weights.items()}
            dealt[wants[0]] += left - sum(dealt.values())
            for p in mine:
                if grants[p] + dealt[p]:
                    claim(p, key, base[p] + grants[p] + dealt[p])
        for (p, key), share in self.shares.items():
            # Kept while no other worker wants the key, and while the partition holds
            # some of its timers or was granted it lately: a key with none pending here
            # keeps nothing for long (the shares grow with what is pending, not with every
            # tenant ever seen).
            if p not in counts or key in wanting or key in others:
                continue
            if (
                counts[p].get(key)
                or self._seq - self.granted.get((p, key), -KEEP_EMPTY_REPORTS - 1)
                <= KEEP_EMPTY_REPORTS
            ):
                claim(p, key, share)
        occupied = occupancy(counts, claims)
        for p, key in list(self.shares):
            if p in occupied:
                share = min(self.shares[(p, key)], occupied[p].get(key, 0))
                if share > counts[p].get(key, 0):
                    self.shares[(p, key)] = share
                else:  # no room left in it: as good as none, and kept small
                    del self.shares[(p, key)]
                    self.granted.pop((p, key), None)
        self._sent.append(_Sent(self._seq, claims, occupied))
        del self._sent[:-SENT_KEPT]
        return LeaseReport(self._seq, claims, sorted({key for _, key in self.wanted}))

    def verdicts(self, verdicts: Iterable[tuple[int, frozenset[str]]], held: set[int]) -> bool:
        """Take what the log said of this worker's reports (seq, keys that fitted): a
        claim that fitted becomes the share, lowered by any report sent after it.
        ``held``: the partitions held now. Whether any share grew."""
        grew = False
        for seq, fitted in verdicts:
            self.starved.clear()  # the demand topic is read again
            at = next((i for i, s in enumerate(self._sent) if s.seq == seq), None)
            if at is None:
                continue
            sent, later = self._sent[at], self._sent[at + 1 :]
            del self._sent[: at + 1]
            for p, keys in sent.claims.items():
                if p not in held:
                    continue
                for key, share in keys.items():
                    if key not in fitted:
                        continue
                    for after in later:
                        if p in after.occupied:
                            share = min(share, after.occupied[p].get(key, 0))
                    if share > self.shares.get((p, key), 0):
                        grew = True
                    self.shares[(p, key)] = share
                    self.granted[(p, key)] = self._seq
        return grew
