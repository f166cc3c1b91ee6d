"""The changelog's bound delivery callback: what it records on success and on refusal.

The hot path produces changelog records positionally with one bound callback; these
pin that it still keys acknowledgements by the record's own partition, keeps the
highest offset, and that a refused record fails the next flush (no broker needed: an
unreachable bootstrap and a 1 ms message timeout make librdkafka refuse it locally).
"""

from __future__ import annotations

from typing import Any

import pytest

from app.worker.output import DeliveryFailure, OutputProducer
from tests.support.hostile import Delivered


def _producer(**extra: Any) -> OutputProducer:
    conf = {"bootstrap.servers": "127.0.0.1:1", "message.timeout.ms": 1, **extra}
    return OutputProducer(conf, worker_id="w", fired_topic="fired", dlq_topic="dlq")


def test_acknowledgements_keep_the_highest_offset_per_partition() -> None:
    out = _producer()
    for partition, offset in [(3, 10), (3, 12), (3, 11), (5, 7)]:
        out._changelog_delivered(None, Delivered(partition, offset))  # type: ignore[arg-type]
    assert out.changelog_acked == {3: 12, 5: 7}


def test_acknowledgements_past_a_store_s_opening_are_counted() -> None:
    """A store caught up to offset 10 counts this output's records after it; a late
    report of a record at or before 10 (in the changelog it read) is not counted."""
    out = _producer()
    out._changelog_delivered(None, Delivered(3, 11))  # type: ignore[arg-type]
    out.count_changelog_after(3, 10)
    for partition, offset in [(3, 9), (3, 10), (3, 12), (3, 13), (5, 14)]:
        out._changelog_delivered(None, Delivered(partition, offset))  # type: ignore[arg-type]
    assert out.changelog_counted == {3: [10, 2]}
    assert out.changelog_acked == {3: 13, 5: 14}
    # Their offsets, for the store to tell another writer's apart (changelog_repair).
    assert out.take_own_changelog(3, 12) == [12]
    assert out.take_own_changelog(3, 20) == [13]
    assert out.take_own_changelog(3, 20) == []
    assert out.take_own_changelog(5, 20) == [], "not counted: its store checks nothing"


def test_a_refused_changelog_record_fails_the_flush() -> None:
    out = _producer()
    out.changelog("table-changelog", 2, b"k", b"v")
    with pytest.raises(DeliveryFailure):
        out.flush_blocking(5.0)
    assert out.changelog_acked == {}
