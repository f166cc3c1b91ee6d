"""Which broker a run measures, and what that broker says of itself.

``make bench`` measures the broker ``KAFKA_BOOTSTRAP_SERVERS`` names, else a fresh dev
broker (Tansu) per scenario. The two differ a lot on the same machine, so a figure is
only read beside the broker it was measured on: the results keep its address and what
it reports of itself (cluster id and nodes from DescribeCluster, the API versions it
answers ApiVersions with, the broker configs that name a protocol version, and for the
dev broker the version its binary prints).
"""

from __future__ import annotations

import socket
import struct
import subprocess
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource  # type: ignore[attr-defined]

from app.dev.broker import DevBroker, broker_binary

__all__ = ["api_versions", "broker_line", "describe_broker", "describe_dev_broker"]

#: Names of the APIs the summary line shows (Kafka protocol API keys).
API_NAMES = {0: "Produce", 1: "Fetch", 3: "Metadata", 22: "InitProducerId", 60: "DescribeCluster"}

#: Broker configs that say which protocol (and so which Kafka release) a broker speaks.
VERSION_CONFIGS = ("inter.broker.protocol.version", "log.message.format.version")

_API_VERSIONS_KEY = 18


def api_versions(bootstrap: str, timeout: float = 10.0) -> dict[int, tuple[int, int]]:
    """The (min, max) version of each API the first bootstrap broker supports.

    One ApiVersions v0 request on a plain socket: every Kafka-protocol broker answers
    v0, and no client library exposes the answer.
    """
    host, _, port = bootstrap.split(",")[0].strip().rpartition(":")
    client_id = b"kafka-timers-bench"
    header = struct.pack(">hhih", _API_VERSIONS_KEY, 0, 1, len(client_id)) + client_id
    with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout) as sock:
        sock.sendall(struct.pack(">i", len(header)) + header)
        (size,) = struct.unpack(">i", _read(sock, 4))
        body = _read(sock, size)
    _correlation, error, count = struct.unpack_from(">ihi", body)
    if error:
        raise RuntimeError(f"ApiVersions from {bootstrap} answered error {error}")
    return {
        key: (low, high)
        for key, low, high in (struct.unpack_from(">hhh", body, 10 + 6 * i) for i in range(count))
    }


def _read(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("the broker closed the connection mid-answer")
        data += chunk
    return data


def describe_broker(bootstrap: str, kind: str, timeout: float = 10.0) -> dict[str, Any]:
    """What the broker at ``bootstrap`` reports of itself; ``kind`` says how it was chosen."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    cluster = admin.describe_cluster(request_timeout=timeout).result(timeout)
    nodes = sorted(cluster.nodes, key=lambda n: n.id)
    info: dict[str, Any] = {
        "bootstrap": bootstrap,
        "kind": kind,
        "cluster_id": cluster.cluster_id,
        "nodes": [f"{n.id}@{n.host}:{n.port}" for n in nodes],
        "controller": cluster.controller.id if cluster.controller is not None else None,
    }
    configs: dict[str, str] = {}
    if nodes:
        resource = ConfigResource(ConfigResource.Type.BROKER, str(nodes[0].id))
        try:
            entries = admin.describe_configs([resource])[resource].result(timeout)
        except KafkaException:
            entries = {}
        configs = {
            key: entries[key].value
            for key in VERSION_CONFIGS
            if key in entries and entries[key].value is not None
        }
        info["broker_configs_described"] = len(entries)
    info["version_configs"] = configs
    versions = api_versions(bootstrap, timeout)
    info["api_versions"] = {str(key): list(span) for key, span in sorted(versions.items())}
    return info


def describe_dev_broker() -> dict[str, Any]:
    """The dev broker each scenario starts, described from one started for the purpose."""
    software = subprocess.run(
        [broker_binary(), "--version"], capture_output=True, text=True, timeout=10, check=False
    ).stdout.strip()
    with DevBroker() as broker:
        info = describe_broker(broker.bootstrap, "dev broker, a fresh one per scenario")
    info["bootstrap"] = "127.0.0.1:<a free port per scenario>"
    info["software"] = software
    return info


def broker_line(info: dict[str, Any]) -> str:
    """One line naming the broker measured: address, software or protocol, cluster."""
    versions = {int(k): v for k, v in info.get("api_versions", {}).items()}
    apis = ", ".join(
        f"{name} v{versions[key][1]}" for key, name in API_NAMES.items() if key in versions
    )
    said = info.get("software") or ", ".join(
        f"{key}={value}" for key, value in info.get("version_configs", {}).items()
    )
    return (
        f"broker {info['bootstrap']} ({info['kind']}): {said or 'no version reported'}; "
        f"cluster id {info['cluster_id']}, {len(info['nodes'])} node(s); "
        f"{len(versions)} APIs ({apis})"
    )
