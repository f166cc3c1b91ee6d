"""The worker's web port cannot take what the timers need: a cap on open connections,
an idle timeout, and accepting done without work for a connection over the cap.

Faust serves its web views with aiohttp on the worker's own event loop, the loop that
fires timers. Left as Faust sets it up, every connection is accepted and kept (aiohttp
waits an hour for a request on an idle one), so idle sockets can take every descriptor
the process has (RocksDB then fails with "Too many open files"). Here:

- at most ``KAFKA_TIMERS_WEB_MAX_CONNECTIONS`` connections are open at once. The
  listening socket is served by :class:`CappedTCPSite`'s own accept loop: a connection
  over the cap is answered ``503`` in one non-blocking write and closed before the loop
  does anything else, so it holds its descriptor for microseconds, and the event loop
  creates no transport, task or parser for it;
- a connection must send a whole request's headers within
  ``KAFKA_TIMERS_WEB_IDLE_TIMEOUT`` seconds of opening or of its previous response, and
  an idle keep-alive connection is closed after as long (aiohttp's keep-alive timer,
  which also runs from the connection's start): a slow or silent client frees its slot.
  Header lines and fields are limited to 8 kB each (aiohttp's defaults).

Faust has no setting for either: :func:`install_web_limits` puts them in through
Faust's ``on_webserver_init`` hook, before its server starts.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import time
from collections.abc import Callable
from typing import Any

from aiohttp.web_runner import AppRunner, BaseRunner, BaseSite

from app.settings import Settings
from app.worker.descriptors import exit_if_out_of_descriptors

__all__ = ["CappedTCPSite", "ConnectionCap", "install_web_limits"]

log = logging.getLogger(__name__)

#: Connections waiting in the kernel to be accepted (the listen backlog).
BACKLOG = 128
#: Most connections accepted (or refused) per turn of the event loop: a burst of
#: connections is taken a few at a time between the timers' own steps, the rest waits
#: in the kernel's backlog.
ACCEPT_BATCH = 8
#: What a connection over the cap is told before it is closed.
REFUSAL = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\n"
    b"Content-Length: 40\r\nRetry-After: 1\r\nConnection: close\r\n\r\n"
    b"too many connections to this worker now\n"
)
#: Refusals are logged at most this often (with their count since the last line).
REFUSAL_LOG_INTERVAL = 10.0


class ConnectionCap:
    """Counts open connections against a limit; counts and logs the refused ones."""

    def __init__(self, limit: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self.open = 0
        #: Connections refused since start.
        self.refused = 0
        self._clock = clock
        self._unlogged = 0
        self._logged_at: float | None = None

    def try_open(self) -> bool:
        """Take a slot for a new connection, or count it refused."""
        if self.open < self.limit:
            self.open += 1
            return True
        self.refused += 1
        self._unlogged += 1
        now = self._clock()
        if self._logged_at is None or now - self._logged_at >= REFUSAL_LOG_INTERVAL:
            log.warning(
                "web port: %d connections open (KAFKA_TIMERS_WEB_MAX_CONNECTIONS); "
                "refused %d connections since the last line",
                self.open,
                self._unlogged,
            )
            self._unlogged = 0
            self._logged_at = now
        return False

    def closed(self) -> None:
        self.open -= 1


class _Counted(asyncio.Protocol):
    """aiohttp's protocol for one connection, giving its slot back when it closes."""

    __slots__ = ("_cap", "_done", "_inner")

    def __init__(self, inner: asyncio.Protocol, cap: ConnectionCap) -> None:
        self._inner = inner
        self._cap = cap
        self._done = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received()

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._done:
            self._done = True
            self._cap.closed()
        self._inner.connection_lost(exc)


class CappedTCPSite(BaseSite):
    """aiohttp's TCP site with its own accept loop and :class:`ConnectionCap`."""

    __slots__ = ("_cap", "_host", "_loop", "_port", "_sock", "_tasks")

    def __init__(self, runner: BaseRunner, host: str, port: int, cap: ConnectionCap) -> None:
        super().__init__(runner, backlog=BACKLOG)
        self._host = host
        self._port = port
        self._cap = cap
        self._sock: socket.socket | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    @property
    def name(self) -> str:
        return f"http://{self._host}:{self._port}"

    async def start(self) -> None:
        await super().start()
        family = socket.AF_INET6 if ":" in self._host else socket.AF_INET
        sock = socket.create_server((self._host, self._port), family=family, backlog=BACKLOG)
        sock.setblocking(False)
        self._sock = sock
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(sock.fileno(), self._accept)

    def _accept(self) -> None:
        assert self._sock is not None and self._loop is not None
        server = self._runner.server
        if server is None:
            return
        for _ in range(ACCEPT_BATCH):
            try:
                conn, _addr = self._sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:
                continue
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE):
                    exit_if_out_of_descriptors(exc, "the web port's accept")
                log.warning("web port: accept failed: %s", exc)
                return
            if not self._cap.try_open():
                _refuse(conn)
                continue
            conn.setblocking(False)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            protocol = _Counted(server(), self._cap)
            task = self._loop.create_task(self._connect(conn, protocol))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _connect(self, conn: socket.socket, protocol: _Counted) -> None:
        assert self._loop is not None
        try:
            await self._loop.connect_accepted_socket(lambda: protocol, sock=conn)
        except OSError as exc:
            exit_if_out_of_descriptors(exc, "the web port")
            protocol.connection_lost(exc)
            conn.close()

    async def stop(self) -> None:
        if self._sock is not None and self._loop is not None:
            self._loop.remove_reader(self._sock.fileno())
            self._sock.close()
            self._sock = None
        self._runner._unreg_site(self)


def _refuse(conn: socket.socket) -> None:
    """Tell a connection over the cap so, in one non-blocking write, and close it."""
    try:
        conn.setblocking(False)
        conn.send(REFUSAL)
    except OSError:
        pass
    conn.close()


def install_web_limits(app: Any, settings: Settings) -> ConnectionCap:
    """Cap and time out the connections of ``app``'s (Faust's) web server.

    Chained to Faust's ``on_webserver_init`` hook: the server is set up right after it.
    """
    cap = ConnectionCap(settings.web_max_connections)
    before = app.on_webserver_init

    def limit(web: Any) -> None:
        before(web)
        # Faust builds its runner with aiohttp's defaults (an idle connection waits an
        # hour) and has no setting for it: built again, same app, before it is set up.
        web._runner = AppRunner(
            web.web_app, access_log=None, keepalive_timeout=settings.web_idle_timeout
        )
        web._transport_handlers = {
            "tcp": lambda: CappedTCPSite(web._runner, settings.web_bind, settings.web_port, cap)
        }

    app.on_webserver_init = limit
    return cap
