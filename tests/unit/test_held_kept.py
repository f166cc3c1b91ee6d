"""Held timers a tick's scan keeps decoded (a limited topic's): released without a read
back, bounded in memory, never for a paused topic; the model test of held timers
(``test_held_timers``) checks that what goes out is still the pending version."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pytest

from app.core import wheel as wheel_module
from app.core.timer import Cancel, Timer
from app.core.wheel import PartitionWheel
from app.worker.topic_gates import TopicGates
from tests.support.memkv import MemoryKV

START = 1_767_225_600
LIMITED = "limited"


class CountingKV(MemoryKV):
    """A MemoryKV that counts the reads of timer keys (scans and point reads)."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        self.reads += len(keys)
        return super().get_many(keys)

    def scan(self, low: bytes, high: bytes) -> Iterator[tuple[bytes, bytes]]:
        for item in super().scan(low, high):
            self.reads += 1
            yield item


def _held_wheel(n: int, kv: MemoryKV, *, keep: bool) -> PartitionWheel:
    wheel = PartitionWheel(kv, clock=lambda: float(START))
    for i in range(n):
        wheel.schedule(
            Timer(
                id=f"t{i:04d}",
                due=START + 1,
                topic=LIMITED,
                key=b"k",
                value=b"v%d" % i,
                token="tok",
            )
        )
    held = frozenset({LIMITED})
    assert wheel.begin_tick(START + 1, hold=held, keep=held if keep else frozenset()) == []
    return wheel


def _take_all(wheel: PartitionWheel) -> list[Timer]:
    return [timer for timer, _ in wheel.take_held(LIMITED, None)]


def test_timers_kept_decoded_are_released_without_reading_the_store() -> None:
    kv = CountingKV()
    wheel = _held_wheel(50, kv, keep=True)
    before = kv.reads
    taken = _take_all(wheel)
    assert [t.value for t in taken] == [b"v%d" % i for i in range(50)]
    assert kv.reads == before  # none read back
    assert wheel._kept == {} and wheel._kept_bytes == 0


def test_timers_not_kept_are_read_back_as_before() -> None:
    kv = CountingKV()
    wheel = _held_wheel(50, kv, keep=False)
    before = kv.reads
    assert [t.value for t in _take_all(wheel)] == [b"v%d" % i for i in range(50)]
    assert kv.reads > before
    assert wheel._kept == {}


def test_the_memory_kept_is_bounded_and_the_rest_is_read_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    size = wheel_module._KEPT_OVERHEAD + 100
    monkeypatch.setattr(wheel_module, "KEEP_HELD_BYTES", 10 * size)
    kv = CountingKV()
    wheel = _held_wheel(40, kv, keep=True)
    assert 1 <= len(wheel._kept) <= 11  # the budget is checked before each, so one over
    assert wheel._kept_bytes <= 11 * size
    taken = _take_all(wheel)
    assert [t.value for t in taken] == [b"v%d" % i for i in range(40)]  # in key order
    assert wheel._kept == {} and wheel._kept_bytes == 0


def test_a_cancel_or_a_new_version_while_held_is_what_counts() -> None:
    kv = MemoryKV()
    wheel = _held_wheel(3, kv, keep=True)
    assert wheel.cancel(Cancel(id="t0000", token="tok")).value == "cancelled"
    newer = Timer(id="t0001", due=START, topic=LIMITED, key=b"k", value=b"newer", token="tok2")
    assert wheel.schedule(newer).outcome.value == "fire_now"
    wheel.hold_due(newer, float(START))
    taken = _take_all(wheel)
    assert sorted((t.id, t.value) for t in taken) == [("t0001", b"newer"), ("t0002", b"v2")]
    assert wheel._kept == {} and wheel._kept_bytes == 0


def test_an_aborted_round_drops_what_was_kept() -> None:
    wheel = _held_wheel(5, MemoryKV(), keep=True)
    assert wheel._kept
    wheel.abort_tick()
    assert wheel._kept == {} and wheel._kept_bytes == 0


def test_only_limited_topics_that_are_not_paused_flow() -> None:
    gates = TopicGates({"a": 100.0, "b": 10.0}, partitions=2)
    assert gates.flowing == {"a", "b"}
    gates.pause("a")
    gates.pause("c")
    assert gates.gated == {"a", "b", "c"}
    assert gates.flowing == {"b"}  # a paused topic's timers may wait for weeks
    gates.resume("a")
    gates.set_rate("b", None)
    assert gates.flowing == {"a"}
