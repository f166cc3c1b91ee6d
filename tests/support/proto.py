"""The shipped ``future.proto`` compiled by protoc, and a client that never reaches a broker,
for the unit tests that hold the codecs to the schema."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from types import ModuleType

from grpc_tools import protoc

import app.core.proto
from app.core.proto import PROTO_FILE
from kafka_timers_client import TimerClient

__all__ = ["SCHEMA_DIR", "compiled_future_proto", "offline_client"]

#: Where the shipped ``.proto`` (and its descriptor set) are.
SCHEMA_DIR = Path(str(resources.files(app.core.proto)))


def compiled_future_proto(out: Path, module_name: str) -> ModuleType:
    """The Python module protoc generates from the shipped ``future.proto`` into ``out``,
    imported as ``module_name``."""
    status = protoc.main(["protoc", f"-I{SCHEMA_DIR}", f"--python_out={out}", PROTO_FILE])
    assert status == 0, "protoc could not compile future.proto"
    path = out / PROTO_FILE.replace(".proto", "_pb2.py")
    spec = importlib.util.spec_from_file_location(module_name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def offline_client(now: float) -> Iterator[TimerClient]:
    """A client on the clock ``now`` whose bootstrap answers nothing (pure logic: what it
    would send is all a test reads); closed when the generator is."""
    made = TimerClient("127.0.0.1:1", clock=lambda: now, producer_conf={"log_level": 0})
    yield made
    made._producer.close()
