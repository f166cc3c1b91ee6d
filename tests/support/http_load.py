"""Concurrent HTTP requests against a worker's web port, run as its own process.

``python -m tests.support.http_load PORT SECONDS CONCURRENCY TOKEN PATH...`` sends waves
of ``CONCURRENCY`` requests at once (each on its own connection, the paths taken in
turn) until ``SECONDS`` have passed, and prints one JSON line: how many answers of each
status (or error) came back, how many waves, and the slowest answer. In a process of its
own so that its CPU is not the test's: on a 2-core machine it competes with the worker,
as a real client would.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections import Counter


async def _one(
    port: int, path: str, token: str, counts: Counter[str], slowest: list[float]
) -> None:
    started = time.monotonic()
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 30)
        writer.write(
            f"GET {path} HTTP/1.1\r\nHost: worker\r\nAuthorization: Bearer {token}\r\n"
            "Connection: close\r\n\r\n".encode()
        )
        data = await asyncio.wait_for(reader.read(), 30)
        writer.close()
        status = data[9:12].decode() if data.startswith(b"HTTP/1.1 ") else "no answer"
    except (OSError, asyncio.TimeoutError) as exc:
        status = type(exc).__name__
    counts[status] += 1
    slowest[0] = max(slowest[0], time.monotonic() - started)


async def _run(port: int, seconds: float, concurrency: int, token: str, paths: list[str]) -> None:
    counts: Counter[str] = Counter()
    slowest = [0.0]
    waves = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        await asyncio.gather(
            *(_one(port, paths[i % len(paths)], token, counts, slowest) for i in range(concurrency))
        )
        waves += 1
    print(json.dumps({"counts": dict(counts), "waves": waves, "slowest": slowest[0]}))


def main(argv: list[str]) -> None:
    port, seconds, concurrency, token, *paths = argv
    asyncio.run(_run(int(port), float(seconds), int(concurrency), token, paths))


if __name__ == "__main__":
    main(sys.argv[1:])
