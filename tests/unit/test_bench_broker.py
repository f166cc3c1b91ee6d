"""The bench names the broker it measured: the ApiVersions answer, read off a socket."""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Iterator

import pytest

from bench.broker import api_versions, broker_line

#: Produce v0-11, Fetch v4-17, ApiVersions v0-4, as a broker answers ApiVersions v0.
APIS = [(0, 0, 11), (1, 4, 17), (18, 0, 4)]


@pytest.fixture
def fake_broker() -> Iterator[tuple[str, list[bytes]]]:
    """A listener that answers one ApiVersions v0 request; yields its address and the
    requests it read."""
    server = socket.create_server(("127.0.0.1", 0))
    seen: list[bytes] = []

    def serve() -> None:
        connection, _ = server.accept()
        with connection:
            (size,) = struct.unpack(">i", connection.recv(4))
            request = connection.recv(size)
            seen.append(request)
            (correlation,) = struct.unpack_from(">i", request, 4)
            body = struct.pack(">ihi", correlation, 0, len(APIS))
            body += b"".join(struct.pack(">hhh", *api) for api in APIS)
            connection.sendall(struct.pack(">i", len(body)) + body)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.getsockname()[1]}", seen
    thread.join(5)
    server.close()


def test_the_api_versions_a_broker_answers_are_read_whole(
    fake_broker: tuple[str, list[bytes]],
) -> None:
    address, seen = fake_broker
    assert api_versions(address) == {0: (0, 11), 1: (4, 17), 18: (0, 4)}
    (request,) = seen
    assert struct.unpack_from(">hh", request) == (18, 0)  # ApiVersions, version 0


def test_the_line_names_the_broker_its_version_and_its_protocol() -> None:
    info = {
        "bootstrap": "127.0.0.1:19092",
        "kind": "named by KAFKA_BOOTSTRAP_SERVERS",
        "cluster_id": "gEdq",
        "nodes": ["1@127.0.0.1:19092"],
        "version_configs": {"inter.broker.protocol.version": "3.9-IV0"},
        "api_versions": {"0": [0, 11], "1": [4, 17], "18": [0, 4]},
    }
    assert broker_line(info) == (
        "broker 127.0.0.1:19092 (named by KAFKA_BOOTSTRAP_SERVERS): "
        "inter.broker.protocol.version=3.9-IV0; cluster id gEdq, 1 node(s); "
        "3 APIs (Produce v11, Fetch v17)"
    )
    assert "tansu 0.6.0;" in broker_line({**info, "software": "tansu 0.6.0"})
