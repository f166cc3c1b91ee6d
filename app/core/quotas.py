"""Pending-timer quotas: how many timers may be pending per callback topic, per tenant.

An operator caps the timers *pending* (stored, not yet fired or cancelled) for a
callback topic (``KAFKA_TIMERS_TOPIC_QUOTAS="reminders=1000"``) or for each value of a
request header naming a tenant (``KAFKA_TIMERS_TENANT_HEADER=tenant``,
``KAFKA_TIMERS_TENANT_QUOTAS="acme=1000,*=500"``: ``*`` is the quota of every other
tenant, each counted on its own). A request that would store a timer over a cap is
refused ``over_quota``: answered on the fired topic and dead-lettered, as a request
refused for another token is. A timer may count under both its topic and its tenant;
a request with no tenant header counts under no tenant.

What counts, and when. Each quota **key** (``topic:<name>``, ``tenant:<value>``) is
counted per partition, in memory, by :class:`PartitionQuotas`, which the partition's
wheel tells of every timer it stores and every one it removes (fired, cancelled,
replaced), keyed by timer id: a replacement of a pending timer (same id) does not count
twice, a series counts once for as long as it lives (its occurrences share its id),
and a removal needs no read of the stored timer. When a partition is loaded its counts
are rebuilt by one scan of its pending timers, so a load grows with what is pending.
The memory: one dictionary entry per pending timer under a quota (its id and the keys
it counts under, about 150 bytes), nothing for the others.

Across partitions. Requests are routed by id, so a topic's timers sit in every
partition. :class:`QuotaBook` (one per worker) sums the live counts of the partitions
this worker holds and the newest counts the others reported on the demand topic
(:mod:`app.worker.demand`, four times a second): a request is refused when that sum fills
the quota. Below it, a partition stores a timer only within its **share** of the quota,
claimed on the demand topic and valid in its order (:mod:`app.core.quota_leases`): the
shares in use never add up to more than the quota, so a quota of 1,000 refuses the
1,001st request across any number of workers. A request whose partition has no share to
spare waits for one (a quarter second or so), and is refused after
:data:`~app.core.quota_leases.WAIT_MOST_SECONDS` without one.

Where the check is: on the id's owner partition, just before the request is stored
(:mod:`app.worker.service_requests`), never before forwarding. Cancels, triggers,
backfills and fires are never refused by a quota (what a trigger or backfill stores
counts, though).

Pure: no Kafka, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from hashlib import blake2b

from app.core.quota_leases import WAIT_MOST_SECONDS, QuotaLeases
from app.core.timer import Timer

__all__ = [
    "ANY_TENANT",
    "LONGEST_TENANT_NAME",
    "MAX_QUOTA",
    "MAX_REPORTED",
    "REFUSE",
    "WAIT",
    "PartitionQuotas",
    "QuotaBook",
    "QuotaPolicy",
    "parse_quotas",
    "tenant_key",
    "topic_key",
]

#: The tenant name that gives every tenant not named its own quota.
ANY_TENANT = "*"
#: Largest quota accepted.
MAX_QUOTA = 1_000_000_000
#: Longest tenant name a quota key holds as it is (longer ones: their digest).
LONGEST_TENANT_NAME = 64
#: Most counts one worker's report carries (each about 80 bytes of JSON at most): the
#: topic quotas' first, then tenants' in the order they were first counted. Past it (a
#: ``*`` tenant quota with more tenants pending than that) the counts left out are not
#: seen by the other workers: those tenants' quotas then hold per worker only.
MAX_REPORTED = 2000
#: What :meth:`QuotaBook.admit` answers for a request it does not let through: refused
#: (the quota is full, or no share came in time), or wait for a share.
REFUSE, WAIT = "refuse", "wait"
_TOPIC = "topic:"
_TENANT = "tenant:"


def topic_key(topic: str) -> str:
    """The quota key of callback topic ``topic``."""
    return _TOPIC + topic


def tenant_key(tenant: str) -> str:
    """The quota key of tenant ``tenant`` (the tenant header's value); a name longer than
    :data:`LONGEST_TENANT_NAME` is keyed by its digest (128 bits), so that a report of
    counts stays small whatever names the requests carry."""
    if len(tenant) > LONGEST_TENANT_NAME:
        return (
            _TENANT
            + "#"
            + blake2b(tenant.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()
        )
    return _TENANT + tenant


def parse_quotas(text: str, *, tenants: bool) -> dict[str, int]:
    """Read ``name=1000,other=50`` into quotas by name.

    ``tenants``: names are tenant header values, and ``*`` is the quota of every tenant
    not named; else names are callback topics (checked by the caller). Raises
    ``ValueError`` with a one-line reason for anything else: no ``=``, an empty name, a
    quota that is not a whole number from 0 to :data:`MAX_QUOTA` (0: no timer at all),
    a name given twice.
    """
    quotas: dict[str, int] = {}
    for raw in text.split(","):
        item = raw.strip()
        if not item:
            continue
        name, eq, figure = item.rpartition("=")
        name, figure = name.strip(), figure.strip().replace("_", "")
        if not eq or not name:
            example = "acme=1000,*=500" if tenants else "reminders=1000"
            raise ValueError(f"{item[:100]!r} is not <name>=<timers>, e.g. {example}")
        if name == ANY_TENANT and not tenants:
            raise ValueError("'*' names every tenant: a topic quota names its topic")
        if not figure.isdigit() or not 0 <= int(figure) <= MAX_QUOTA:
            raise ValueError(
                f"{item[:100]!r}: the quota must be a whole number of timers from 0 to "
                f"{MAX_QUOTA:,}"
            )
        if name in quotas:
            raise ValueError(f"{name[:100]!r} is named twice")
        quotas[name] = int(figure)
    return quotas


@dataclass(frozen=True)
class QuotaPolicy:
    """The quotas an operator set: which keys a timer counts under, and their caps."""

    #: Callback topic -> most timers pending for it.
    topics: Mapping[str, int] = field(default_factory=dict)
    #: The request header naming a timer's tenant (None: no tenant quotas).
    tenant_header: str | None = None
    #: Tenant -> most timers pending for it (``*``: every tenant not named, each).
    tenants: Mapping[str, int] = field(default_factory=dict)
    #: Quota by key, of every topic and tenant named.
    _named: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        named = {topic_key(t): q for t, q in self.topics.items()}
        named.update({tenant_key(t): q for t, q in self.tenants.items() if t != ANY_TENANT})
        object.__setattr__(self, "_named", named)

    @classmethod
    def build(
        cls,
        topics: Iterable[tuple[str, int]],
        tenant_header: str | None,
        tenants: Iterable[tuple[str, int]],
    ) -> QuotaPolicy | None:
        """The policy, or None when no quota is set (then nothing is counted at all)."""
        by_topic, by_tenant = dict(topics), dict(tenants)
        if not by_tenant:
            tenant_header = None
        if not by_topic and tenant_header is None:
            return None
        return cls(by_topic, tenant_header, by_tenant)

    def keys_of(self, timer: Timer) -> tuple[str, ...]:
        """The quota keys ``timer`` counts under (empty: none)."""
        keys: tuple[str, ...] = ()
        if timer.topic in self.topics:
            keys = (topic_key(timer.topic),)
        name = self.tenant_header
        if name is not None:
            for header, value in timer.headers:
                if header == name:
                    tenant = value.decode("utf-8", "replace")
                    if tenant in self.tenants or ANY_TENANT in self.tenants:
                        keys += (tenant_key(tenant),)
                    break
        return keys

    def limit(self, key: str) -> int:
        """The quota of ``key`` (one :meth:`keys_of` gave)."""
        quota = self._named.get(key)
        return self.tenants[ANY_TENANT] if quota is None else quota

    @property
    def topic_keys(self) -> tuple[str, ...]:
        """The keys of the topic quotas."""
        return tuple(topic_key(topic) for topic in self.topics)


class PartitionQuotas:
    """The pending timers of one partition per quota key, kept as its wheel changes."""

    __slots__ = ("_keys", "counts", "policy")

    def __init__(self, policy: QuotaPolicy) -> None:
        self.policy = policy
        #: Quota key -> pending timers of this partition under it (absent: none).
        self.counts: dict[str, int] = {}
        #: Timer id -> the keys its pending version counts under (only ids with keys).
        self._keys: dict[str, tuple[str, ...]] = {}

    def keys_of_id(self, timer_id: str) -> tuple[str, ...]:
        """The keys the pending version of ``timer_id`` counts under (empty: none)."""
        return self._keys.get(timer_id, ())

    def stored(self, timer: Timer) -> None:
        """``timer`` was stored: new, a new version of a pending id, a series' next
        occurrence (one id counts once, under its newest version's keys)."""
        keys = self.policy.keys_of(timer)
        old = self._keys.get(timer.id)
        if old == keys:
            return
        counts = self.counts
        if old is not None:
            self._uncount(old)
        if keys:
            self._keys[timer.id] = keys
            for key in keys:
                counts[key] = counts.get(key, 0) + 1
        elif old is not None:
            del self._keys[timer.id]

    def removed(self, timer_id: str) -> None:
        """The pending version of ``timer_id`` was removed (fired, cancelled, replaced)."""
        keys = self._keys.pop(timer_id, None)
        if keys is not None:
            self._uncount(keys)

    def _uncount(self, keys: tuple[str, ...]) -> None:
        counts = self.counts
        for key in keys:
            left = counts[key] - 1
            if left:
                counts[key] = left
            else:
                del counts[key]

    def clear(self) -> None:
        """Forget every count (before a rebuild from the store)."""
        self.counts.clear()
        self._keys.clear()


class QuotaBook:
    """One worker's view of every quota: its partitions' live counts, the others' last
    known counts, and the decision for each request."""

    def __init__(self, policy: QuotaPolicy) -> None:
        self.policy = policy
        self._topic_keys = policy.topic_keys
        #: The partitions this worker holds, by number.
        self._partitions: dict[int, PartitionQuotas] = {}
        #: Quota key -> timers pending under it in partitions held elsewhere, as last
        #: reported (:meth:`set_elsewhere`).
        self._elsewhere: dict[str, int] = {}
        #: This worker's shares of each quota (app.core.quota_leases).
        self.leases = QuotaLeases(policy.limit)

    def attach(self, partition: int, quotas: PartitionQuotas) -> None:
        """``partition`` is held here (loaded, its counts rebuilt)."""
        self._partitions[partition] = quotas

    def detach(self, partition: int) -> None:
        """``partition`` is no longer held here."""
        self._partitions.pop(partition, None)
        self.leases.drop(partition)

    @property
    def held(self) -> set[int]:
        """The partitions held here."""
        return set(self._partitions)

    def by_partition(self, most: int = MAX_REPORTED) -> dict[int, dict[str, int]]:
        """The counts of each partition held here (what this worker reports), at most
        ``most`` of them: the topic quotas' first (:data:`MAX_REPORTED`). O(``most``)."""
        out: dict[int, dict[str, int]] = {p: {} for p in self._partitions}
        left = most
        topic_keys = self._topic_keys
        for p, quotas in self._partitions.items():
            counts = quotas.counts
            for key in topic_keys:
                n = counts.get(key)
                if n and left > 0:
                    out[p][key] = n
                    left -= 1
        for p, quotas in self._partitions.items():
            if left <= 0:
                break
            mine = out[p]
            for key, n in quotas.counts.items():
                if left <= 0:
                    break
                if key not in mine:
                    mine[key] = n
                    left -= 1
        return out

    def set_elsewhere(self, counts: Mapping[str, Mapping[int, int]]) -> None:
        """Take the last known ``counts`` (key -> partition -> timers) of every partition;
        those held here are left out (their live counts stand)."""
        mine = self._partitions
        self._elsewhere = {
            key: total
            for key, by_partition in counts.items()
            if (total := sum(n for p, n in by_partition.items() if p not in mine))
        }

    def pending(self, key: str) -> int:
        """Timers pending under ``key`` across the deployment, as known here."""
        here = sum(q.counts.get(key, 0) for q in self._partitions.values())
        return here + self._elsewhere.get(key, 0)

    def admit(self, partition: int, timer: Timer, now: float) -> tuple[str, str] | None:
        """None if storing ``timer`` on ``partition`` keeps every quota it counts under;
        else (:data:`REFUSE` or :data:`WAIT`, the key): refused when the pending timers
        as known here fill the key's quota (or a share was waited for
        :data:`~app.core.quota_leases.WAIT_MOST_SECONDS`), wait when the partition's
        share is used up and the quota has room. ``now``: monotonic seconds.

        A new version of a timer pending under a key already counts there: it is never
        refused or held for that key (a reschedule of a timer at its quota goes through)."""
        keys = self.policy.keys_of(timer)
        if not keys:
            return None
        quotas = self._partitions.get(partition)
        counted = () if quotas is None else quotas.keys_of_id(timer.id)
        counts = {} if quotas is None else quotas.counts
        leases = self.leases
        limit = self.policy.limit
        for key in keys:
            if key in counted:
                continue
            if self.pending(key) >= limit(key):
                leases.gave_up(partition, key)
                return REFUSE, key
            if not leases.room(partition, key, counts.get(key, 0)):
                if (partition, key) in leases.starved:
                    return REFUSE, key
                if now - leases.wait(partition, key, now) >= WAIT_MOST_SECONDS:
                    leases.starve(partition, key)
                    return REFUSE, key
                return WAIT, key
        for key in keys:
            if key not in counted:
                leases.used(partition, key)
        return None
