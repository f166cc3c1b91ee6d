"""A stand-in for confluent-kafka's Producer that records what the code under test
produces, for unit tests of the output path."""

from __future__ import annotations

from typing import Any

__all__ = ["HeaderRecorder", "RecordingProducer"]


class RecordingProducer:
    """Stands in for confluent-kafka's Producer: records what is produced, and when
    each unit is waited for (as ``("flush",)`` or ``("commit",)``)."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def produce(
        self, topic: str, value: Any = None, key: Any = None, *args: Any, **kw: Any
    ) -> None:
        self.calls.append((topic, value, key))

    def flush(self, timeout: float) -> int:
        self.calls.append(("flush",))
        return 0

    def begin_transaction(self) -> None:
        pass

    def commit_transaction(self, timeout: float) -> None:
        self.calls.append(("commit",))


class HeaderRecorder(RecordingProducer):
    """Keeps each produced record's headers too."""

    def __init__(self) -> None:
        super().__init__()
        self.headers: list[list[tuple[str, Any]]] = []

    def produce(
        self, topic: str, value: Any = None, key: Any = None, *args: Any, **kw: Any
    ) -> None:
        super().produce(topic, value, key)
        # headers: the eighth of produce's parameters, passed by position or by name
        positional = args[4] if len(args) > 4 else None
        self.headers.append(list(positional or kw.get("headers") or []))
