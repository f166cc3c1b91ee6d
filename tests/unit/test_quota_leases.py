"""Shares of a quota claimed in one log (app.core.quota_leases), with workers simulated
around one list standing for the demand topic: whatever the order in which they report,
read, store and hand partitions over, the timers stored never pass the quota; demand
gets the room; a claim with a partition unaccounted for never fits."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.quota_leases import KEEP_EMPTY_REPORTS, QuotaLeases, QuotaLedger, _Sent

KEY = "topic:cb"
PARTITIONS = 8
#: One report on the simulated demand topic: worker, run, seq, counts, claims, want.
Record = tuple[str, str, int, dict[int, dict[str, int]], dict[int, dict[str, int]], list[str]]


@dataclass
class Worker:
    """One worker's side: its partitions' counts, its shares, its reading of the log."""

    name: str
    quota: int
    partitions: set[int]
    counts: dict[int, int] = field(default_factory=dict)
    read: int = 0

    def __post_init__(self) -> None:
        self.leases = QuotaLeases(lambda key: self.quota)
        self.ledger = QuotaLedger(lambda key: self.quota, PARTITIONS, self.name, "run-" + self.name)
        self.others_want: set[str] = set()
        for p in self.partitions:
            self.counts.setdefault(p, 0)

    def report(self, log: list[Record], now: float) -> None:
        counts = {p: ({KEY: n} if n else {}) for p, n in self.counts.items()}
        elsewhere = {
            key: sum(n for p, n in by_p.items() if p not in self.partitions)
            for key, by_p in self.ledger.occupied().items()
        }
        lease = self.leases.report(counts, elsewhere, self.others_want)
        log.append((self.name, "run-" + self.name, lease.seq, counts, lease.claims, lease.want))

    def read_next(self, log: list[Record]) -> bool:
        if self.read >= len(log):
            return False
        worker, run, seq, counts, claims, want = log[self.read]
        self.read += 1
        self.ledger.apply(worker, run, seq, counts, claims)
        if worker != self.name:
            self.others_want = set(want)
        self.leases.verdicts(self.ledger.take_verdicts(), self.partitions)
        return True

    def store(self, p: int, now: float) -> bool:
        if p not in self.partitions:
            return False
        if self.leases.room(p, KEY, self.counts[p]):
            self.counts[p] += 1
            self.leases.used(p, KEY)
            return True
        self.leases.wait(p, KEY, now)
        return False


def exchange(log: list[Record], now: float, *workers: Worker) -> None:
    """One turn of the exchange: every worker reports, then reads the log to its end."""
    for w in workers:
        w.report(log, now)
    for w in workers:
        while w.read_next(log):
            pass


def split(quota: int) -> tuple[Worker, Worker]:
    return (
        Worker("w1", quota, set(range(0, PARTITIONS, 2))),
        Worker("w2", quota, set(range(1, PARTITIONS, 2))),
    )


def stored(*workers: Worker) -> int:
    return sum(sum(w.counts.values()) for w in workers)


action = st.tuples(
    st.sampled_from(["report", "read", "read all", "store", "store", "fire", "move"]),
    st.integers(0, 1),
    st.integers(0, PARTITIONS - 1),
)


@settings(max_examples=500, deadline=None)
@given(st.integers(1, 12), st.lists(action, max_size=200))
def test_the_timers_stored_never_pass_the_quota(
    quota: int, actions: list[tuple[str, int, int]]
) -> None:
    """Any interleaving of reports, reads, stores, fires and partition moves between two
    workers: the timers pending never pass the quota (a moved partition keeps its count:
    its next owner rebuilt it from the store)."""
    workers = split(quota)
    log: list[Record] = []
    now = 0.0
    for kind, w, p in actions:
        now += 0.1
        worker, other = workers[w], workers[1 - w]
        if kind in ("store", "fire", "move") and worker.partitions:
            p = sorted(worker.partitions)[p % len(worker.partitions)]  # one of its own
        if kind == "report":
            worker.report(log, now)
        elif kind == "read":
            worker.read_next(log)
        elif kind == "read all":
            while worker.read_next(log):
                pass
        elif kind == "store":
            worker.store(p, now)
        elif kind == "fire" and worker.counts.get(p):
            worker.counts[p] -= 1
        elif kind == "move" and p in worker.partitions:
            worker.partitions.discard(p)
            worker.leases.drop(p)
            other.partitions.add(p)
            other.counts[p] = worker.counts.pop(p)
        assert stored(*workers) <= quota


def test_of_two_claims_on_the_same_room_only_the_first_in_the_log_fits() -> None:
    """Both workers want, and each claims the room it sees before reading the other's
    claim: the second in the log does not fit, and its worker stores nothing more."""
    w1, w2 = split(10)
    log: list[Record] = []
    w2.report(log, 0.0)  # every partition accounted for from here on
    assert not w1.store(0, 0.1) and not w2.store(1, 0.1)
    w1.report(log, 0.2)
    w2.report(log, 0.2)
    # Each deals the whole room it sees over its four partitions, most to the wanting one.
    for (*_, claims, _want), wanting in zip(log[-2:], (0, 1), strict=True):
        assert sum(keys[KEY] for keys in claims.values()) == 10
        assert max(claims, key=lambda p: claims[p][KEY]) == wanting
    for w in (w1, w2):
        while w.read_next(log):
            pass
    for p in range(PARTITIONS):
        while w1.store(p, 0.3) or w2.store(p, 0.3):
            pass
    assert sum(w1.counts.values()) == 10 and sum(w2.counts.values()) == 0


def test_spread_demand_fills_the_quota_exactly() -> None:
    """1,001 requests over eight partitions on two workers, a quota of 1,000: within a
    few rounds of the exchange exactly 1,000 are stored and the last one waits."""
    w1, w2 = split(1000)
    log: list[Record] = []
    waiting = {p: 1001 // PARTITIONS + (1 if p < 1001 % PARTITIONS else 0) for p in range(8)}
    now = 0.0
    for _ in range(40):
        now += 0.25
        for w in (w1, w2):
            for p in sorted(w.partitions):
                while waiting[p] and w.store(p, now):
                    waiting[p] -= 1
        exchange(log, now, w1, w2)
        if stored(w1, w2) == 1000:
            break
    assert stored(w1, w2) == 1000
    assert sum(waiting.values()) == 1


def test_a_share_left_unused_goes_to_where_it_is_wanted() -> None:
    """One worker took the whole quota and stopped storing; the other's partition, wanting,
    gets the room once its report says so and the unused share goes back."""
    w1, w2 = split(10)
    log: list[Record] = []
    now = 0.0
    for _ in range(3):  # w1 claims while wanting, and stores 4
        now += 0.25
        w1.store(0, now)
        exchange(log, now, w1, w2)
    while sum(w1.counts.values()) < 4:
        assert any(w1.store(p, now) for p in (0, 2, 4, 6))
    for _ in range(6):
        now += 0.25
        w2.store(1, now)
        exchange(log, now, w1, w2)
    for p in range(1, PARTITIONS, 2):
        while w2.store(p, now):
            pass
    assert (sum(w1.counts.values()), sum(w2.counts.values())) == (4, 6)


def test_a_claim_with_a_partition_unaccounted_for_never_fits() -> None:
    """A worker that has not read a report naming every partition cannot know the room:
    its claim does not fit, and it stores nothing more."""
    ledger = QuotaLedger(lambda key: 100, 4, "w1", "r")
    ledger.apply("w1", "r", 1, {0: {}, 1: {}}, {0: {KEY: 10}})
    assert ledger.take_verdicts() == [(1, frozenset())]
    ledger.apply("w2", "x", 1, {2: {}, 3: {KEY: 5}}, {})
    ledger.apply("w1", "r", 2, {0: {}, 1: {}}, {0: {KEY: 95}})
    assert ledger.take_verdicts() == [(2, frozenset({KEY}))]
    ledger.apply("w1", "r", 3, {0: {}, 1: {}}, {0: {KEY: 96}})
    assert ledger.take_verdicts() == [(3, frozenset())]


def test_a_previous_runs_reports_are_not_taken_for_this_ones() -> None:
    """A restarted worker (same id, a new run) ignores its previous run's verdicts."""
    ledger = QuotaLedger(lambda key: 100, 1, "w1", "new")
    ledger.apply("w1", "old", 1, {0: {}}, {0: {KEY: 10}})
    assert ledger.take_verdicts() == []
    assert ledger.occupied() == {KEY: {0: 10}}  # what it claimed still stands


def test_one_hot_partition_gets_the_room_within_a_few_reports() -> None:
    """One worker, all its requests on one of its eight partitions, a quota of 1,000: the
    room goes where the requests are, so 1,000 are stored within a few reports (dealt
    evenly over eight partitions it would take about fifty)."""
    w = Worker("w", 1000, set(range(PARTITIONS)))
    log: list[Record] = []
    rounds = 0
    while w.counts[0] < 1000 and rounds < 30:
        rounds += 1
        while w.store(0, rounds):
            pass
        exchange(log, rounds, w)
    assert w.counts[0] == 1000
    assert rounds <= 4, rounds


def test_shares_are_kept_only_where_timers_are_pending() -> None:
    """A share of a key the partition holds none of goes back in the next report: the
    shares a worker keeps grow with what is pending, not with every tenant it has seen."""
    leases = QuotaLeases(lambda key: 100)
    for n in range(1000):
        leases.shares[(0, f"tenant:t{n}")] = 5
    leases.shares[(0, KEY)] = 5
    report = leases.report({0: {KEY: 2}}, {}, ())
    assert report.claims == {0: {KEY: 5}}
    assert leases.shares == {(0, KEY): 5}
    # One just granted, for requests on their way, is kept a few seconds' reports.
    leases._sent.append(_Sent(99, {1: {"tenant:new": 3}}, {1: {"tenant:new": 3}}))
    leases.verdicts([(99, frozenset({"tenant:new"}))], {0, 1})
    kept = 0
    while leases.report({0: {KEY: 2}, 1: {}}, {}, ()).claims.get(1):
        kept += 1
    assert kept == KEEP_EMPTY_REPORTS and (1, "tenant:new") not in leases.shares
