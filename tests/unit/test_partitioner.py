"""The pure murmur2 partitioner agrees with Kafka's Java client and with aiokafka (Faust)."""

from __future__ import annotations

import random

import pytest
from aiokafka.partitioner import murmur2 as aiokafka_murmur2

from kafka_timers_client.partitioner import murmur2, partition_for

# org.apache.kafka.common.utils.UtilsTest.testMurmur2, and the values Akka's sharding
# tests took from the same Java implementation.
JAVA_MURMUR2 = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
    b"1": -1993445489,
    b"12": 126087238,
    b"123": -267702483,
    b"1234": -1614185708,
    b"12345": -1188365604,
}


@pytest.mark.parametrize(("key", "expected"), sorted(JAVA_MURMUR2.items()))
def test_murmur2_is_javas(key: bytes, expected: int) -> None:
    assert murmur2(key) == expected


def test_murmur2_agrees_with_aiokafka_on_every_tail_length() -> None:
    rng = random.Random(7)
    for length in range(0, 70):
        for _ in range(20):
            data = rng.randbytes(length)
            assert murmur2(data) & 0xFFFFFFFF == aiokafka_murmur2(data), data


def test_partition_is_the_positive_hash_modulo_the_count() -> None:
    # toPositive(-973932308) = 1173551340; Java's DefaultPartitioner: % partitions
    assert partition_for(b"21", 8) == 1173551340 % 8
    assert partition_for(b"21", 1) == 0
    assert {partition_for(str(i).encode(), 8) for i in range(200)} == set(range(8))
    with pytest.raises(ValueError, match="at least one partition"):
        partition_for(b"21", 0)


def test_librdkafkas_murmur2_the_worker_places_requests_with_is_the_same_function() -> None:
    from kafka_timers_client import partitioner

    native = partitioner._native_placement
    assert native is not None, "librdkafka (confluent-kafka's) not found: see _find_librdkafka"
    rng = random.Random(11)
    # Past the table of lengths the native call takes its size_t from, too.
    for length in (*range(0, 200), *range(250, 270), 1024, 4096):
        for _ in range(10):
            data = rng.randbytes(length)
            n = rng.choice((1, 2, 8, 12, 86_401, 2**31 - 1))
            assert native(data, n) == (murmur2(data) & 0x7FFFFFFF) % n
    for key, expected in JAVA_MURMUR2.items():
        assert native(key, 2**31 - 1) == (expected & 0x7FFFFFFF) % (2**31 - 1)


def test_placement_refuses_a_key_that_is_not_bytes() -> None:
    from kafka_timers_client.partitioner import placement

    # ctypes would pass a str to librdkafka as a wide-character string: another hash.
    with pytest.raises(TypeError, match="bytes, not str"):
        placement("21", 8)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="bytes, not str"):
        partition_for("21", 8)  # type: ignore[arg-type]


def test_placement_falls_back_to_python_where_librdkafka_is_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from kafka_timers_client import partitioner

    monkeypatch.setattr(partitioner, "_find_librdkafka", lambda: None)
    assert partitioner._librdkafka_placement() is None
    monkeypatch.setattr(partitioner, "_native_placement", None)
    assert partition_for(b"21", 8) == 1173551340 % 8
