"""The cost of the due-load forecast's bookkeeping (app.core.forecast), A/B in one process.

The same timers are stored and then fired through a :class:`~app.core.wheel.PartitionWheel`
over a real RocksDB database (rocksdict, as the worker's store), once without a
forecast and once with one, alternating, best of several passes each: the difference
per timer is what the forecast adds to storing one and to firing one. It is set beside
the worker's CPU per request stored and per timer fired and forgotten (``make bench``'s
ingest and fire figures, passed in or README's last full run), since the wheel is only
part of what a worker spends per timer. In-process CPU time (``time.process_time``).

Timers: 20,000 per pass over 5 callback topics, due over 200 seconds inside the
forecast's minute window (every store and fire counts), fired one tick a second; a
second run puts them 1-7 days out (the hour cells).

``python -m bench.forecast`` prints the figures.
"""

from __future__ import annotations

import argparse
import gc
import shutil
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from rocksdict import Options, Rdict, WriteBatch

from app.core.forecast import PartitionForecast
from app.core.timer import Timer
from app.core.wheel import PartitionWheel

__all__ = ["measure"]

START = 1_767_225_600
TOPICS = [f"callbacks-{i}" for i in range(5)]
#: The worker's CPU per request stored / per timer fired and forgotten, µs (README,
#: Performance: the last full ``make bench``), when no figures are given.
STORE_US, FIRE_US = 20.0, 33.0


class RocksKV:
    """:class:`app.core.wheel.OrderedKV` over one RocksDB database (a write batch a
    tick, as the worker writes one per partition)."""

    def __init__(self, path: Path) -> None:
        self.db = Rdict(str(path), Options(raw_mode=True))
        self.batch: WriteBatch | None = None

    def get(self, key: bytes) -> bytes | None:
        value = self.db.get(key)
        return value if value is None else bytes(value)

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        return [self.get(key) for key in keys]

    def put(self, key: bytes, value: bytes) -> None:
        self.db.put(key, value)

    def delete(self, key: bytes) -> None:
        self.db.delete(key)

    def scan(self, low: bytes, high: bytes) -> Iterator[tuple[bytes, bytes]]:
        it = self.db.iter()
        it.seek(low)
        while it.valid():
            key = it.key()
            if key >= high:
                break
            yield key, it.value()
            it.next()

    def close(self) -> None:
        self.db.close()


def _timers(count: int, offset: int, span: int) -> list[Timer]:
    return [
        Timer(
            id=f"forecast-{i:08d}",
            due=START + offset + i * span // count,
            topic=TOPICS[i % len(TOPICS)],
            key=b"order-%d" % i,
            value=b'{"order": 42, "pad": "' + b"x" * 60 + b'"}',
            token=f"{i:016x}",
        )
        for i in range(count)
    ]


def _pass(timers: list[Timer], forecast: bool, fire: bool) -> tuple[float, float]:
    """CPU seconds to store ``timers``, and to fire them (0 if not ``fire``)."""
    path = Path(tempfile.mkdtemp(prefix="bench-forecast-"))
    kv = RocksKV(path / "db")
    try:
        wheel = PartitionWheel(
            kv, clock=lambda: START, forecast=PartitionForecast() if forecast else None
        )
        wheel.recount()
        t0 = time.process_time()
        for timer in timers:
            wheel.schedule(timer)
        stored = time.process_time() - t0
        fired = 0.0
        if fire:
            last = max(t.due for t in timers)
            t0 = time.process_time()
            for second in range(START + 1, last + 1):
                due = wheel.begin_tick(second)
                assert due is not None
                wheel.finish_tick(second, due)
            fired = time.process_time() - t0
            assert wheel.count_pending() == 0
        return stored, fired
    finally:
        kv.close()
        shutil.rmtree(path, ignore_errors=True)


def measure(count: int = 20_000, passes: int = 7) -> dict[str, dict[str, float]]:
    """µs per timer stored and fired, without and with the forecast (best of ``passes``)."""
    out: dict[str, dict[str, float]] = {}
    for name, offset, span, fire in (("minutes", 10, 200, True), ("days", 86400, 6 * 86400, False)):
        timers = _timers(count, offset, span)
        best = {False: [float("inf"), float("inf")], True: [float("inf"), float("inf")]}
        for i in range(passes):
            for variant in (False, True) if i % 2 == 0 else (True, False):  # either first
                gc.collect()
                stored, fired = _pass(timers, variant, fire)
                best[variant][0] = min(best[variant][0], stored)
                best[variant][1] = min(best[variant][1], fired)
        out[name] = {
            "store_without_us": best[False][0] / count * 1e6,
            "store_with_us": best[True][0] / count * 1e6,
            "fire_without_us": best[False][1] / count * 1e6,
            "fire_with_us": best[True][1] / count * 1e6,
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store-us", type=float, default=STORE_US)
    parser.add_argument("--fire-us", type=float, default=FIRE_US)
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--passes", type=int, default=7)
    args = parser.parse_args()
    for name, f in measure(args.count, args.passes).items():
        store = f["store_with_us"] - f["store_without_us"]
        print(
            f"{name}: wheel store {f['store_without_us']:.2f} -> {f['store_with_us']:.2f} µs "
            f"(+{store:.2f} µs, {100 * store / args.store_us:.1f}% of the worker's "
            f"{args.store_us:g} µs per request stored)"
        )
        if f["fire_without_us"]:
            fire = f["fire_with_us"] - f["fire_without_us"]
            print(
                f"{name}: wheel fire {f['fire_without_us']:.2f} -> {f['fire_with_us']:.2f} µs "
                f"(+{fire:.2f} µs, {100 * fire / args.fire_us:.1f}% of the worker's "
                f"{args.fire_us:g} µs per timer fired and forgotten)"
            )


if __name__ == "__main__":
    main()
