"""Which partition a keyed record lands on: Kafka's default partitioner (murmur2).

Java's ``DefaultPartitioner``/``BuiltInPartitioner``, librdkafka's ``murmur2_random`` (what
every producer of this project uses), aiokafka's and so Faust's all place a keyed record
on ``toPositive(murmur2(key)) % partitions``. Requests are keyed by timer id, so this is
the partition of the request topic — and of the table, and of the fired topic — that
holds a timer: a client can read one partition instead of all of them.

Pure arithmetic, no Kafka client: :mod:`app.core` stays importable everywhere.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["murmur2", "partition_for"]

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """MurmurHash2 of ``data`` exactly as Kafka's ``Utils.murmur2``: a signed 32-bit int."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    tail = length & ~3
    for i in range(0, tail, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    rest = length - tail
    if rest == 3:
        h ^= data[tail + 2] << 16
    if rest >= 2:
        h ^= data[tail + 1] << 8
    if rest >= 1:
        h ^= data[tail]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


_c_murmur2: Callable[[bytes, int], int] | None
try:  # the same function in C: every request the worker reads is placed by it
    from murmurhash2 import murmurhash2 as _c_murmur2
except ImportError:  # pragma: no cover - the dependency is declared; Python is the fallback
    _c_murmur2 = None


def _fast_murmur2(data: bytes) -> int:
    """:func:`murmur2`, from the C extension where it is installed (equal on every input:
    tests/unit/test_partitioner.py), as an unsigned 32-bit int or a signed one."""
    return _c_murmur2(data, _SEED) if _c_murmur2 is not None else murmur2(data)


def partition_for(key: bytes, partitions: int) -> int:
    """The partition a record keyed ``key`` lands on among ``partitions``."""
    if partitions < 1:
        raise ValueError(f"a topic has at least one partition, not {partitions}")
    return (_fast_murmur2(key) & 0x7FFFFFFF) % partitions
