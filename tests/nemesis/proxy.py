"""A TCP proxy in front of the broker that can cut one process off it: a network partition
between a worker and the broker, on one machine, without iptables or namespaces.

Every client reaches the broker through it (the broker advertises the proxy's address).
Each connection is traced to the process that opened it: the client's local port names a
socket inode in ``/proc/net/tcp``, and that inode is among the open files of exactly one
process (``/proc/<pid>/fd``). :meth:`PartitionProxy.cut` then either resets that
process's connections and refuses its new ones (``reset``: the broker went away, as a
crashed switch port looks), or keeps them open and forwards nothing either way until
:meth:`heal` (``silent``: packets dropped, as a partition looks to TCP until its
timeouts run out). Every other process's traffic goes on.
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct
import threading
from dataclasses import dataclass, field

from app.dev.broker import free_port

__all__ = ["PartitionProxy"]


def _socket_inode(local_port: int, remote_port: int) -> int | None:
    """The inode of the IPv4 socket 127.0.0.1:``local_port`` -> :``remote_port``."""
    try:
        with open("/proc/net/tcp") as table:
            next(table)
            for line in table:
                parts = line.split()
                local, remote, inode = parts[1], parts[2], parts[9]
                if (
                    int(local.split(":")[1], 16) == local_port
                    and int(remote.split(":")[1], 16) == remote_port
                ):
                    return int(inode)
    except OSError:
        return None
    return None


def _owns(pid: int, inode: int) -> bool:
    """Whether process ``pid`` holds socket ``inode`` open."""
    target = f"socket:[{inode}]"
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{pid}/fd/{fd}") == target:
                    return True
    except OSError:
        return False
    return False


@dataclass
class _Link:
    client: socket.socket
    upstream: socket.socket
    #: The client's local port (our peer's port).
    peer_port: int
    #: The process it belongs to, once asked (0: not found).
    pid: int | None = None
    #: While set, nothing is forwarded either way.
    open_: threading.Event = field(default_factory=threading.Event)


class PartitionProxy:
    """Forwards 127.0.0.1:``port`` to 127.0.0.1:``upstream_port``; cuts processes off."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = free_port()
        self._listener = socket.create_server(("127.0.0.1", self.port))
        self._lock = threading.Lock()
        self._links: list[_Link] = []
        #: pid -> mode (``reset`` or ``silent``) of every process cut off now.
        self._cut: dict[int, str] = {}
        self._closed = False
        threading.Thread(target=self._accept, name="nemesis-proxy", daemon=True).start()

    # -- the fault ----------------------------------------------------------------

    def cut(self, pids: set[int], mode: str) -> int:
        """Cut the processes ``pids`` off the broker; returns the connections affected."""
        assert mode in ("reset", "silent")
        with self._lock:
            for pid in pids:
                self._cut[pid] = mode
            links = list(self._links)
        hit = 0
        for link in links:
            if self._pid_of(link) in pids:
                hit += 1
                if mode == "reset":
                    self._drop(link)
                else:
                    link.open_.clear()
        return hit

    def heal(self, pids: set[int] | None = None) -> None:
        """``pids`` (every process, if None) reach the broker again; their silent links
        resume where they were."""
        with self._lock:
            for pid in list(self._cut) if pids is None else pids:
                self._cut.pop(pid, None)
            links = list(self._links)
        for link in links:
            if pids is None or link.pid in pids:
                link.open_.set()

    def close(self) -> None:
        self._closed = True
        self.heal()
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            links = list(self._links)
        for link in links:
            self._drop(link)

    # -- forwarding ---------------------------------------------------------------

    def _pid_of(self, link: _Link) -> int:
        if link.pid is None:
            inode = _socket_inode(link.peer_port, self.port)
            link.pid = 0
            if inode is not None:
                with self._lock:
                    candidates = list(self._cut) if self._cut else []
                for pid in candidates:
                    if _owns(pid, inode):
                        link.pid = pid
                        break
                else:
                    # Only processes cut off matter; an unowned answer is not cached so a
                    # later cut of its owner finds it.
                    link.pid = None
                    return 0
        return link.pid

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, (_, peer_port) = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=5)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            link = _Link(client, upstream, peer_port)
            link.open_.set()
            with self._lock:
                self._links.append(link)
                cut = dict(self._cut)
            if cut:
                pid = self._pid_of(link)
                if cut.get(pid) == "reset":
                    self._drop(link)
                    continue
                if pid in cut:
                    link.open_.clear()
            threading.Thread(target=self._pump, args=(link, client, upstream), daemon=True).start()
            threading.Thread(target=self._pump, args=(link, upstream, client), daemon=True).start()

    def _pump(self, link: _Link, source: socket.socket, sink: socket.socket) -> None:
        try:
            while chunk := source.recv(65536):
                link.open_.wait()
                sink.sendall(chunk)
        except OSError:
            pass
        finally:
            self._drop(link)

    def _drop(self, link: _Link) -> None:
        for sock in (link.client, link.upstream):
            with contextlib.suppress(OSError):
                # SO_LINGER 0: a reset, not an orderly close
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            with contextlib.suppress(OSError):
                sock.close()
        link.open_.set()
        with self._lock:
            if link in self._links:
                self._links.remove(link)
