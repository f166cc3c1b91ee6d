"""An in-memory :class:`app.core.wheel.OrderedKV` for unit tests of the pure logic."""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence


class MemoryKV:
    """Sorted keys in a list: good enough for tests, with the same semantics as RocksDB."""

    def __init__(self) -> None:
        self.data: dict[bytes, bytes] = {}
        self._keys: list[bytes] = []
        #: Every change in order, as a changelog would carry it (value None = delete).
        self.changes: list[tuple[bytes, bytes | None]] = []

    def get(self, key: bytes) -> bytes | None:
        return self.data.get(key)

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        return [self.get(key) for key in keys]

    def put(self, key: bytes, value: bytes) -> None:
        if key not in self.data:
            bisect.insort(self._keys, key)
        self.data[key] = value
        self.changes.append((key, value))

    def delete(self, key: bytes) -> None:
        if key in self.data:
            del self.data[key]
            self._keys.remove(key)
        self.changes.append((key, None))

    def scan(self, low: bytes, high: bytes) -> Iterator[tuple[bytes, bytes]]:
        start = bisect.bisect_left(self._keys, low)
        for key in list(self._keys[start:]):
            if key >= high:
                return
            yield key, self.data[key]
