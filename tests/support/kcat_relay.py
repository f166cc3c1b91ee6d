"""A relay that lets Debian's kcat 1.7.1 talk to the dev broker (Tansu).

kcat 1.7.1 is built on librdkafka 2.0.2, which misreads the optional tagged fields at the
end of Tansu's ApiVersions v3 answer (the broker's supported and finalized features:
"Read underflow"), drops the connection and never gets further. A real Apache Kafka
answers so that it reads it, and kcat talks to it directly.

Against the dev broker, the kcat test starts a Tansu of its own that advertises this
relay's address, so that every connection (kcat's, the worker's, the oscillator's) goes
through it. The relay passes every byte through unchanged except one thing: in an
ApiVersions answer of version 3 or more, it drops those trailing tagged fields (no
client here uses them). Nothing else is rewritten; requests are not touched.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
from collections.abc import Callable, Iterator

__all__ = ["ApiVersionsRelay", "relay"]

API_VERSIONS = 18


def _uvarint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def strip_feature_tags(body: bytes) -> bytes:
    """An ApiVersions v3+ answer (after the correlation id) without its top-level tagged
    fields: error code, the API keys and the throttle time, then zero tags."""
    pos = 2  # error_code
    count, pos = _uvarint(body, pos)  # compact array: length + 1
    for _ in range(max(count - 1, 0)):
        pos += 6  # api_key, min_version, max_version
        tags, pos = _uvarint(body, pos)
        for _ in range(tags):
            _tag, pos = _uvarint(body, pos)
            size, pos = _uvarint(body, pos)
            pos += size
    pos += 4  # throttle_time_ms
    return body[:pos] + b"\x00"


class ApiVersionsRelay:
    """Listens on ``127.0.0.1:port`` and relays to ``upstream`` (host, port)."""

    def __init__(self, port: int, upstream: tuple[str, int]) -> None:
        self.port = port
        self.upstream = upstream
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._server: asyncio.AbstractServer | None = None

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._serve, "127.0.0.1", self.port, family=socket.AF_INET)
        )
        self._ready.set()
        self._loop.run_forever()
        self._loop.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.close()
            return
        asked: dict[int, int] = {}  # correlation id -> ApiVersions version asked

        def request(frame: bytes) -> bytes:
            api_key, version, correlation = struct.unpack(">hhi", frame[:8])
            if api_key == API_VERSIONS:
                asked[correlation] = version
            return frame

        def answer(frame: bytes) -> bytes:
            correlation = struct.unpack(">i", frame[:4])[0]
            if asked.pop(correlation, 0) >= 3:
                return frame[:4] + strip_feature_tags(frame[4:])
            return frame

        await asyncio.gather(
            self._pump(reader, up_writer, request),
            self._pump(up_reader, writer, answer),
            return_exceptions=True,
        )

    @staticmethod
    async def _frame(reader: asyncio.StreamReader) -> bytes:
        size = struct.unpack(">i", await reader.readexactly(4))[0]
        return await reader.readexactly(size)

    async def _pump(
        self,
        reader: asyncio.StreamReader,
        out: asyncio.StreamWriter,
        edit: Callable[[bytes], bytes],
    ) -> None:
        """Relay every frame from ``reader`` to ``out`` as ``edit`` returns it."""
        try:
            while True:
                frame = edit(await self._frame(reader))
                out.write(struct.pack(">i", len(frame)) + frame)
                await out.drain()
        finally:
            out.close()

    def start(self) -> ApiVersionsRelay:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the relay did not start")
        return self

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


@contextlib.contextmanager
def relay(port: int, upstream: tuple[str, int]) -> Iterator[ApiVersionsRelay]:
    running = ApiVersionsRelay(port, upstream).start()
    try:
        yield running
    finally:
        running.stop()
