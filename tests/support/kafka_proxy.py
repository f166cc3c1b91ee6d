"""A dev broker behind a TCP proxy that can hold back one client's requests.

"A test broker that never signals the end" of a partition to one client, honestly: the
proxy forwards every byte both ways, except that while :meth:`KafkaProxy.stall` is in
force it holds each request of a client whose ``client.id`` contains the given text,
unanswered, until :meth:`KafkaProxy.resume`. That client's fetches never come back, so
it never reaches the end of anything (no records, no end-of-partition), while every
other client of the same process (the Faust consumer, the producer, the request
reader) goes on as before. The broker advertises the proxy's address, so clients reach
it through the proxy after bootstrap too.

A Kafka request on the wire is a 4-byte big-endian size, then the request header:
api key (int16), api version (int16), correlation id (int32) and the client id as an
int16-length string, in every request header version (v1 and v2 alike). librdkafka
sends every request of a connection with the same client id.
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from app.dev.broker import accepts_connections, broker_binary, free_port
from app.kafka.topics import ensure_topics
from tests.support.apache_kafka_broker import ApacheKafkaBroker
from tests.support.stack import Stack, running_stack
from tests.support.waiting import wait_until

__all__ = ["KafkaProxy", "proxied_broker", "proxied_stack"]


def _read_exact(sock: socket.socket, n: int) -> bytes | None:
    chunks = []
    while n:
        try:
            chunk = sock.recv(n)
        except OSError:
            return None
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def client_id_of(request: bytes) -> str:
    """The client id in a request (without its 4-byte size prefix); "" if it has none."""
    if len(request) < 10:
        return ""
    (length,) = struct.unpack(">h", request[8:10])
    if length < 0:
        return ""
    return request[10 : 10 + length].decode("utf-8", "replace")


class KafkaProxy:
    """Forwards 127.0.0.1:``port`` to ``upstream``; can hold one kind of client's requests."""

    def __init__(self, upstream_port: int, port: int = 0) -> None:
        self.upstream = ("127.0.0.1", upstream_port)
        self.port = port or free_port()
        self._listener = socket.create_server(("127.0.0.1", self.port))
        self._cond = threading.Condition()
        self._stalls: set[str] = set()
        self._closed = False
        self._sockets: list[socket.socket] = []
        #: Requests held back so far, and client ids seen, for the test's assertions.
        self.held = 0
        self.clients: set[str] = set()
        threading.Thread(target=self._accept, name="kafka-proxy", daemon=True).start()

    # -- control ------------------------------------------------------------------

    def stall(self, client_id_part: str) -> None:
        """Hold every request of clients whose id contains ``client_id_part``."""
        with self._cond:
            self._stalls.add(client_id_part)

    def resume(self, client_id_part: str | None = None) -> None:
        """Forward the requests held for ``client_id_part`` (for every stall if None),
        and every later one."""
        with self._cond:
            if client_id_part is None:
                self._stalls.clear()
            else:
                self._stalls.discard(client_id_part)
            self._cond.notify_all()

    def _stalled(self, client_id: str) -> bool:
        return any(part in client_id for part in self._stalls)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._stalls.clear()
            self._cond.notify_all()
        with contextlib.suppress(OSError):
            self._listener.close()
        for sock in list(self._sockets):
            with contextlib.suppress(OSError):
                sock.close()

    # -- forwarding ---------------------------------------------------------------

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.upstream, timeout=5)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            self._sockets += [client, upstream]
            threading.Thread(target=self._requests, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._copy, args=(upstream, client), daemon=True).start()

    def _requests(self, client: socket.socket, upstream: socket.socket) -> None:
        """Client to broker, request by request, holding those of a stalled client."""
        try:
            while True:
                size = _read_exact(client, 4)
                if size is None:
                    return
                body = _read_exact(client, struct.unpack(">i", size)[0])
                if body is None:
                    return
                client_id = client_id_of(body)
                with self._cond:
                    self.clients.add(client_id)
                    if self._stalled(client_id):
                        self.held += 1
                        while self._stalled(client_id):
                            self._cond.wait()
                    if self._closed:
                        return
                upstream.sendall(size + body)
        except OSError:
            return
        finally:
            _close_both(client, upstream)

    @staticmethod
    def _copy(source: socket.socket, sink: socket.socket) -> None:
        try:
            while chunk := source.recv(65536):
                sink.sendall(chunk)
        except OSError:
            pass
        finally:
            _close_both(source, sink)


def _close_both(a: socket.socket, b: socket.socket) -> None:
    for sock in (a, b):
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            sock.close()


@contextmanager
def proxied_broker() -> Iterator[KafkaProxy]:
    """A dev broker (in memory) reached only through a :class:`KafkaProxy`; yields the
    proxy (bootstrap ``127.0.0.1:<proxy.port>``). With ``PROXY_KAFKA_HOME`` naming an
    Apache Kafka distribution, one Kafka node instead (in a temporary directory)."""
    kafka_home = os.environ.get("PROXY_KAFKA_HOME")
    if kafka_home:
        with _proxied_kafka(Path(kafka_home)) as proxy:
            yield proxy
        return
    broker_port = free_port()
    proxy = KafkaProxy(broker_port)
    process = subprocess.Popen(
        [
            broker_binary(),
            "broker",
            "--listener-url",
            f"tcp://127.0.0.1:{broker_port}",
            "--advertised-listener-url",
            f"tcp://127.0.0.1:{proxy.port}",
            "--storage-engine",
            "memory://tansu/",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:

        def listening() -> bool:
            assert process.poll() is None, "the dev broker exited at start"
            return accepts_connections(broker_port)

        # startup takes milliseconds: poll the port until it listens
        wait_until(listening, 10, "the dev broker to listen", interval=0.02)
        yield proxy
    finally:
        proxy.close()
        if process.poll() is None:
            process.send_signal(2)  # SIGINT stops Tansu at once
            try:
                process.wait(5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@contextmanager
def _proxied_kafka(kafka_home: Path) -> Iterator[KafkaProxy]:
    """One Apache Kafka node that advertises a :class:`KafkaProxy` in front of it."""
    with tempfile.TemporaryDirectory(prefix="proxied-kafka-") as tmp:
        broker = ApacheKafkaBroker(Path(tmp), kafka_home)
        proxy = KafkaProxy(broker.port)
        broker.advertised_port = proxy.port
        try:
            broker.start()
            yield proxy
        finally:
            proxy.close()
            broker.close()


@contextmanager
def proxied_stack(base_dir: Path, partitions: int) -> Iterator[tuple[KafkaProxy, Stack]]:
    """A :func:`proxied_broker` with fresh topics of ``partitions`` partitions created on
    it and a :class:`~tests.support.stack.Stack` of services reaching it through the proxy."""
    from tests.conftest import fresh_settings  # the suite's settings, not a support module's

    with proxied_broker() as proxy:
        settings = fresh_settings(f"127.0.0.1:{proxy.port}", partitions=partitions)
        ensure_topics(settings)
        with running_stack(settings, base_dir) as stack:
            yield proxy, stack
