"""Which partition a keyed record lands on: Kafka's default partitioner (murmur2).

Java's ``DefaultPartitioner``/``BuiltInPartitioner``, librdkafka's ``murmur2_random`` (what
every producer of this project uses), aiokafka's and so Faust's all place a keyed record
on ``toPositive(murmur2(key)) % partitions``. Requests are keyed by timer id, so this is
the partition of the request topic — and of the table, and of the fired topic — that
holds a timer: a client can read one partition instead of all of them.

The arithmetic is librdkafka's own function where librdkafka is found (called without
importing a Kafka client or releasing the GIL), else the same in pure Python (~6 µs a
key): :mod:`app.core` stays importable everywhere.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import importlib.util
from collections.abc import Callable
from pathlib import Path

__all__ = ["murmur2", "partition_for", "placement", "placement_function"]

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF
#: Key lengths whose ``size_t`` the native placement takes from a table (ids are
#: bounded at 1,024 characters: most are far shorter).
_SIZED = 256


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


def _pure_placement(data: bytes, n: int) -> int:
    return (murmur2(data) & 0x7FFFFFFF) % n


def _librdkafka_placement() -> Callable[[bytes, int], int] | None:
    """``(toPositive(murmur2(data)) % n)`` from librdkafka's own murmur2 partitioner
    (``rd_kafka_msg_partitioner_murmur2``), or None where librdkafka cannot be found.

    librdkafka is there wherever confluent-kafka is (its wheels carry it), and its
    partitioner is the very function this module mirrors. It is called through
    ``ctypes.PyDLL``, which keeps the GIL: ~1 µs a call. The murmurhash2 extension used
    before released the GIL on every call, so each request the worker placed could wait
    for another thread's switch interval (208 µs a call beside one busy thread, against
    3.7 µs here): in a worker with a consumer thread and an HTTP thread that cost the
    request path more than the hash itself.

    The function is declared without ``argtypes``: each declared type is a Python-level
    ``from_param`` call per argument per call, half of a call's ~7,000 instructions
    (callgrind). Its arguments are those ctypes converts by itself to the C types of
    ``rd_kafka_msg_partitioner_murmur2(const rd_kafka_topic_t *, const void *key,
    size_t keylen, int32_t partition_cnt, void *, void *)``: None a null pointer, the
    ``bytes`` a pointer to its buffer, the count an ``int`` (a C ``int``, 32 bits
    wherever librdkafka runs), and the length a ``c_size_t``, from a table built once for
    lengths under :data:`_SIZED` (an ``int`` there would go as a C ``int`` where a
    ``size_t`` is read). ``data`` must be ``bytes``: ctypes would pass a ``str`` as a
    wide-character string, so :func:`placement` refuses anything else; the worker's own
    callers (:func:`placement_function`) hand it encoded ids.
    """
    try:
        path = _find_librdkafka()
        if path is None:
            return None
        fn = ctypes.PyDLL(path).rd_kafka_msg_partitioner_murmur2
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_int32
    size = ctypes.c_size_t
    sizes = tuple(size(n) for n in range(_SIZED))

    def placement(data: bytes, n: int) -> int:
        try:
            length = sizes[len(data)]
        except IndexError:
            length = size(len(data))
        result: int = fn(None, data, length, n, None, None)  # c_int32: an int already
        return result

    # Kafka's own vector (Java's Utils.murmur2("21") = -973932308): refuse a library
    # that disagrees rather than place a single record elsewhere than Kafka would. And a
    # key longer than the table, to check the length the other way it is passed.
    if placement(b"21", 2**31 - 1) != 1173551340 % (2**31 - 1):
        return None
    long_key = b"k" * (_SIZED + 3)
    if placement(long_key, 2**31 - 1) != _pure_placement(long_key, 2**31 - 1):
        return None
    return placement


def _find_librdkafka() -> str | None:
    """The librdkafka confluent-kafka's wheel carries (found without importing it), else
    the system's."""
    spec = importlib.util.find_spec("confluent_kafka")
    if spec is not None and spec.origin is not None:
        package = Path(spec.origin).parent
        for pattern in (
            "../confluent_kafka.libs/librdkafka*",  # manylinux and Windows wheels
            ".dylibs/librdkafka*",  # macOS wheels
        ):
            found = sorted(package.glob(pattern))
            if found:
                return str(found[0])
    return ctypes.util.find_library("rdkafka")


#: The native placement where librdkafka is found (every install of the service and of
#: the client has it through confluent-kafka), else None and pure Python.
_native_placement = _librdkafka_placement()


def placement(data: bytes, n: int) -> int:
    """``toPositive(murmur2(data)) % n``: the partition a record keyed ``data`` lands on
    among ``n``, and any other stable choice among ``n`` made the same way."""
    if not isinstance(data, bytes):
        raise TypeError(f"a key is bytes, not {type(data).__name__}")
    if _native_placement is not None:
        return _native_placement(data, n)
    return (murmur2(data) & 0x7FFFFFFF) % n


def placement_function() -> Callable[[bytes, int], int]:
    """:func:`placement` itself, native where librdkafka is found: for a caller that
    places a key per record (the worker, every request), without the two calls in
    between (about a microsecond of the 2.4 a placement cost)."""
    return _native_placement or _pure_placement


def partition_for(key: bytes, partitions: int) -> int:
    """The partition a record keyed ``key`` lands on among ``partitions``."""
    if partitions < 1:
        raise ValueError(f"a topic has at least one partition, not {partitions}")
    return placement(key, partitions)
