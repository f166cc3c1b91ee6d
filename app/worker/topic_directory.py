"""Which callback topics exist, so that a request can never create one.

The worker's producer does not create topics (``allow.auto.create.topics=false``): with
Apache Kafka's default ``auto.create.topics.enable=true``, and on the dev broker, every
request naming a new topic would otherwise create it, with the broker's defaults, for
ever. Without auto-creation a callback to a missing topic is not refused at once either:
librdkafka holds it, and the flush of every other callback of the tick with it, until
``topic.metadata.propagation.max.ms`` passes. So the worker asks first: before a tick's
callbacks are produced, any topic among them that the directory has not seen is looked
up, with one metadata request for all topics, at most once per :data:`MIN_REFRESH_SECONDS`
whatever the timers name. A topic still missing then is dead-lettered (``unknown_topic``)
by the caller, and its timer forgotten; the tick's other callbacks go out at once.

A topic seen at the last lookup is trusted until the next: a topic deleted in between
costs what it did before (its callbacks fail after the propagation wait, and are dead-lettered as
``delivery_failed``). A lookup that fails (the broker slow or away) says nothing is
missing, so that nothing is dead-lettered for want of an answer; producing then waits
for the broker as it always did.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Collection, Iterable

__all__ = ["MIN_REFRESH_SECONDS", "TopicDirectory"]

log = logging.getLogger(__name__)

#: Fewest seconds between two metadata lookups. A producer naming a new missing topic in
#: every request costs the broker one metadata request a second per worker, not one per
#: request; a topic created just before its timer is due waits at most this long to be seen.
MIN_REFRESH_SECONDS = 1.0

#: How long one lookup may take before the tick goes on without it.
LOOKUP_TIMEOUT_SECONDS = 5.0


class TopicDirectory:
    """The set of topics the broker said exist, refreshed when a tick names another."""

    def __init__(
        self,
        list_topics: Callable[[float], Collection[str]],
        *,
        clock: Callable[[], float] = time.monotonic,
        min_refresh_seconds: float = MIN_REFRESH_SECONDS,
        timeout: float = LOOKUP_TIMEOUT_SECONDS,
    ) -> None:
        self._list_topics = list_topics
        self._clock = clock
        self._min_refresh = min_refresh_seconds
        self._timeout = timeout
        self._known: set[str] = set()
        self._last_lookup: float | None = None
        self._lock = asyncio.Lock()

    def unseen(self, topics: Iterable[str]) -> set[str]:
        """The topics among ``topics`` not known to exist."""
        known = self._known
        return {t for t in topics if t not in known}

    async def missing(self, topics: Iterable[str]) -> set[str]:
        """The topics among ``topics`` the broker says do not exist.

        Looks the unseen ones up, in a thread and at most once per minimum interval; until
        the next lookup is due, a topic unseen at the last one is missing. Empty when the
        lookup fails: only a definite answer dead-letters anything.
        """
        unseen = self.unseen(topics)
        if not unseen:
            return unseen
        async with self._lock:
            now = self._clock()
            if self._last_lookup is None or now - self._last_lookup >= self._min_refresh:
                self._last_lookup = now
                try:
                    listed = await asyncio.to_thread(self._list_topics, self._timeout)
                except Exception as exc:
                    log.warning("could not list the broker's topics: %s", exc)
                    self._last_lookup = None
                    return set()
                # Replaced, not added to: memory follows the cluster's topics, and a
                # topic deleted since is noticed.
                self._known = set(listed)
            return self.unseen(unseen)

    def __contains__(self, topic: object) -> bool:
        return topic in self._known
