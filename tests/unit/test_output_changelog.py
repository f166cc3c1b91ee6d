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


def test_a_refused_changelog_record_fails_the_flush() -> None:
    out = _producer()
    out.changelog("table-changelog", 2, b"k", b"v")
    with pytest.raises(DeliveryFailure):
        out.flush_blocking(5.0)
    assert out.changelog_acked == {}


def test_a_loaded_partition_counts_only_its_own_records_that_follow_one_another() -> None:
    """Another writer's records (a worker cut off from the group, still producing) land
    among this worker's: the store must never be told it holds them."""
    out = _producer()
    out.changelog_from(3, 10)  # the store was caught up through offset 10
    for offset in (11, 12):
        out._changelog_delivered(None, Delivered(3, offset))  # type: ignore[arg-type]
    assert out.changelog_acked[3] == 12
    for offset in (15, 16):  # 13 and 14 are someone else's
        out._changelog_delivered(None, Delivered(3, offset))  # type: ignore[arg-type]
    assert out.changelog_acked[3] == 12  # the next catch-up starts at 13
    out.changelog_from(3, 40)  # loaded again, caught up through 40
    out._changelog_delivered(None, Delivered(3, 41))  # type: ignore[arg-type]
    assert out.changelog_acked[3] == 41
    out.changelog_from(5, None)  # an empty store: its first record must be offset 0
    out._changelog_delivered(None, Delivered(5, 4))  # type: ignore[arg-type]
    assert out.changelog_acked[5] == -1


def test_in_exactly_once_mode_the_highest_acknowledgement_counts() -> None:
    """Transaction markers take offsets between a worker's records; other writers are
    fenced there."""
    out = _producer()
    out.transactional = True
    out.changelog_from(3, 10)
    for offset in (11, 13, 15):
        out._changelog_delivered(None, Delivered(3, offset))  # type: ignore[arg-type]
    assert out.changelog_acked[3] == 15
