"""The timer request's schema of record, and its message classes on the protobuf runtime.

``kafka_timers/v1/future.proto`` (beside this module, shipped with the package) is the
schema of the protobuf request format: generate your producers' code from it.
``future.binpb`` is that file compiled by protoc (``make proto``), a
``FileDescriptorSet``; a unit test checks it still matches the ``.proto``.

The message classes are built from it at import, by whatever protobuf runtime is
installed (upb, in C), rather than shipped as a generated ``future_pb2.py``:

* generated Python code refuses any runtime older than the protoc that generated it,
  which would pin every application that installs this package (and its client) to a
  recent protobuf; a descriptor is plain protobuf data that any runtime reads.
* the classes live in a descriptor pool of their own, so an application that also
  loads its own ``future.proto`` (the article's producers, say) never clashes with it
  in protobuf's default pool.

The worker decodes requests with these classes: on upb, ``parse_request`` runs about
twice as fast as on the hand codec :mod:`kafka_timers_client.protowire` (docs/performance.md). The
client still encodes with :mod:`kafka_timers_client.protowire`, which tests hold to this schema in
both directions.
"""

from __future__ import annotations

from importlib import resources

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.internal import api_implementation
from google.protobuf.message import Message

__all__ = [
    "BACKFILL",
    "CANCEL",
    "IMPLEMENTATION",
    "LAST_FIELD_NUMBER",
    "PAUSE",
    "PROTO_FILE",
    "RESUME",
    "SCHEDULE",
    "TRIGGER",
    "Future",
    "Header",
]

#: The schema, relative to this package (``importlib.resources.files(app.core.proto)``).
PROTO_FILE = "kafka_timers/v1/future.proto"
#: The compiled schema the classes are built from.
DESCRIPTOR_SET = "future.binpb"


def _message_classes() -> tuple[type[Message], type[Message]]:
    compiled = (resources.files(__name__) / DESCRIPTOR_SET).read_bytes()
    pool = descriptor_pool.DescriptorPool()
    for file in descriptor_pb2.FileDescriptorSet.FromString(compiled).file:
        pool.Add(file)
    return (
        message_factory.GetMessageClass(pool.FindMessageTypeByName("kafka_timers.v1.Future")),
        message_factory.GetMessageClass(pool.FindMessageTypeByName("kafka_timers.v1.Header")),
    )


Future, Header = _message_classes()
#: ``Future.Action`` values.
SCHEDULE: int = Future.DESCRIPTOR.enum_values_by_name["SCHEDULE"].number
CANCEL: int = Future.DESCRIPTOR.enum_values_by_name["CANCEL"].number
PAUSE: int = Future.DESCRIPTOR.enum_values_by_name["PAUSE"].number
RESUME: int = Future.DESCRIPTOR.enum_values_by_name["RESUME"].number
TRIGGER: int = Future.DESCRIPTOR.enum_values_by_name["TRIGGER"].number
BACKFILL: int = Future.DESCRIPTOR.enum_values_by_name["BACKFILL"].number
#: The protobuf runtime in use: ``upb`` (C) wherever protobuf ships a wheel; ``python``
#: (pure Python) decodes requests about four times slower than upb.
IMPLEMENTATION: str = api_implementation.Type()
#: The highest field number ``Future`` defines: anything above it is a newer producer's.
LAST_FIELD_NUMBER: int = max(f.number for f in Future.DESCRIPTOR.fields)
