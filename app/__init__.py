"""kafka-timers: durable one-second timers on Apache Kafka."""

from importlib.metadata import PackageNotFoundError, version

try:  # pyproject.toml's version, the one source of it (images are tagged with it too)
    __version__ = version("kafka-timers")
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "unknown"
