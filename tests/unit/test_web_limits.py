"""The web port's connection cap and idle timeout, on a real aiohttp server in-process."""

from __future__ import annotations

import asyncio
import socket
import time
from dataclasses import replace
from typing import Any

from aiohttp import web

from app.settings import Settings
from app.worker.web_limits import CappedTCPSite, ConnectionCap, install_web_limits
from tests.support.waiting import wait_until_async


def test_the_cap_counts_slots_and_refusals() -> None:
    cap = ConnectionCap(2, clock=lambda: 0.0)
    assert cap.try_open() and cap.try_open()
    assert not cap.try_open() and cap.refused == 1
    cap.closed()
    assert cap.try_open() and cap.open == 2


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def ok(_request: web.Request) -> web.Response:
    return web.Response(text="ok")


async def get(port: int) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    data = await reader.read()
    writer.close()
    return data


class FakeWeb:
    """What :func:`install_web_limits` touches of Faust's web driver."""

    def __init__(self) -> None:
        self.web_app = web.Application()
        self.web_app.router.add_get("/", ok)
        self._runner: Any = None
        self._transport_handlers: dict[str, Any] = {}


class FakeApp:
    def __init__(self) -> None:
        self.inits: list[Any] = []

    def on_webserver_init(self, web: Any) -> None:
        self.inits.append(web)


async def serve(settings: Settings) -> tuple[FakeWeb, ConnectionCap, Any]:
    app, fake = FakeApp(), FakeWeb()
    cap = install_web_limits(app, settings)
    app.on_webserver_init(fake)
    assert app.inits == [fake]  # Faust's own hook still runs
    await fake._runner.setup()
    site = fake._transport_handlers["tcp"]()
    assert isinstance(site, CappedTCPSite)
    await site.start()
    return fake, cap, site


def test_connections_over_the_cap_are_refused_at_once_and_idle_ones_time_out() -> None:
    settings = replace(
        Settings(), web_port=free_port(), web_bind="127.0.0.1", web_max_connections=3
    )
    settings = replace(settings, web_idle_timeout=2.0)

    async def scenario() -> None:
        fake, cap, _site = await serve(settings)
        port = settings.web_port
        assert b"200 OK" in await get(port)
        idle = [await asyncio.open_connection("127.0.0.1", port) for _ in range(3)]
        await wait_until_async(lambda: cap.open == 3, 5, "three connections held")
        started = time.monotonic()
        refused = await get(port)
        # At once: well inside the idle timeout, with the three still held (a server that
        # queued it would answer only when an idle one timed out and gave its slot back).
        assert b"503" in refused and time.monotonic() - started < 1.5
        assert cap.open == 3
        assert cap.refused >= 1
        # The idle ones (one sends half a request's headers) are closed by the server.
        idle[0][1].write(b"GET / HTTP/1.1\r\nHost:")
        for reader, _ in idle:
            assert await asyncio.wait_for(reader.read(), 5) == b""
        await wait_until_async(lambda: cap.open == 0, 5, "every slot given back")
        assert b"200 OK" in await get(port)
        await fake._runner.cleanup()

    asyncio.run(scenario())
