"""``future.proto`` is the schema of record: code generated from it and the hand codec
:mod:`kafka_timers_client.protowire` read each other's bytes, and the worker reads both the same.

At test time, ``grpc_tools.protoc`` generates Python code from the ``.proto`` the package
ships (into a temporary directory), and hypothesis draws many messages with every field
absent, empty or set, Unicode and int64 edges included:

* generated class -> bytes -> ``protowire.decode``: the same values, presence included;
* ``protowire.encode`` -> bytes -> generated class: the same values, presence included;
* :func:`parse_request` (which decodes with the protobuf runtime) gives the timer or
  cancel the message means, or dead-letters it for the same reason, whatever the key;
* arbitrary bytes never crash it: a request is a timer, a cancel or a dead letter.

And the compiled descriptor the worker builds its classes from is that ``.proto``'s.
"""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from google.protobuf import descriptor_pb2
from grpc_tools import protoc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.core.proto import DESCRIPTOR_SET, PROTO_FILE
from app.core.raw_record import RawRecord, derived_id
from app.core.request_format import parse_request
from app.core.timer import Cancel, Timer, TokenAction
from kafka_timers_client import protowire
from kafka_timers_client.bounds import MAX_SECONDS
from kafka_timers_client.due import due_second
from kafka_timers_client.errors import RejectedRequest, RejectReason
from tests.support.proto import SCHEMA_DIR, compiled_future_proto

MANY = settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
INT64 = st.integers(-(2**63), 2**63 - 1)
INT32 = st.integers(-(2**31), 2**31 - 1)
#: Absent, empty, realistic or any Unicode (astral planes and NUL included).
TEXT = st.one_of(
    st.none(), st.just(""), st.from_regex(r"[a-z0-9.\-]{1,40}", fullmatch=True), st.text()
)
BLOB = st.one_of(st.none(), st.just(b""), st.binary(max_size=300))

#: The fields of the callback and the timer's identity, each absent, empty, realistic or any.
CALLBACK_FIELDS = {
    "callback_topic": TEXT,
    "callback_key": TEXT,
    "callback": BLOB,
    "id": TEXT,
    "token": TEXT,
}

futures = st.builds(
    protowire.Future,
    **CALLBACK_FIELDS,
    due=st.one_of(st.none(), st.just(0), st.integers(0, 2**40), INT64),
    headers=st.lists(st.tuples(st.text(max_size=20), st.binary(max_size=40)), max_size=4),
    action=st.one_of(st.sampled_from([0, 1, 4, 5]), INT32),
    backfill_from=st.one_of(st.none(), st.just(0), st.integers(0, 2**40), INT64),
    backfill_to=st.one_of(st.none(), st.integers(0, 2**40), INT64),
)
#: Every field, the recurring timer's (9-15), the spread (16) and the calendar's (17-19)
#: too: for the codec round trips.
all_fields = st.builds(
    protowire.Future,
    **CALLBACK_FIELDS,
    due=st.one_of(st.none(), INT64),
    headers=st.lists(st.tuples(st.text(max_size=20), st.binary(max_size=40)), max_size=2),
    action=st.one_of(st.sampled_from([0, 1]), INT32),
    cron=TEXT,
    tz=TEXT,
    every=st.one_of(st.none(), st.just(0), INT64),
    start=st.one_of(st.none(), INT64),
    end=st.one_of(st.none(), INT64),
    count=st.one_of(st.none(), st.just(0), INT64),
    late=TEXT,
    spread=st.one_of(st.none(), st.just(0), INT64),
    skip_holidays=TEXT,
    skip_dates=st.lists(st.text(max_size=12), max_size=3),
    skip_policy=TEXT,
    backfill_from=st.one_of(st.none(), INT64),
    backfill_to=st.one_of(st.none(), INT64),
    debounce=st.one_of(st.none(), st.just(0), INT64),
    max_wait=st.one_of(st.none(), st.just(0), INT64),
    debounce_first_ms=st.one_of(st.none(), st.just(0), INT64),
    debounce_merged=st.one_of(st.none(), st.just(0), INT64),
)
#: Record keys: none, empty, epoch seconds (with fractions), ids, garbage.
keys = st.one_of(
    st.none(),
    st.just(b""),
    st.integers(0, 2**34).map(lambda n: str(n).encode()),
    st.decimals(0, 2**34, places=3).map(lambda d: str(d).encode()),
    st.binary(max_size=20),
)


@pytest.fixture(scope="module")
def schema_dir() -> Path:
    return SCHEMA_DIR


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    """The Python module protoc generates from the shipped ``future.proto``."""
    return compiled_future_proto(tmp_path_factory.mktemp("generated"), "generated_future_pb2")


def to_generated(module: ModuleType, future: protowire.Future) -> Any:
    message = module.Future()
    for name, field in FIELDS:
        value = getattr(future, name)
        if value is not None:
            setattr(message, field, value)
    for name, value in future.headers:
        message.headers.add(name=name, value=value)
    message.skip_dates.extend(future.skip_dates)
    message.action = future.action
    return message


def from_generated(message: Any) -> protowire.Future:
    return protowire.Future(
        **{name: getattr(message, f) if message.HasField(f) else None for name, f in FIELDS},
        headers=[(h.name, h.value) for h in message.headers],
        skip_dates=list(message.skip_dates),
        action=message.action,
    )


FIELDS = [
    ("callback_topic", "callBackTopic"),
    ("callback_key", "callBackKey"),
    ("callback", "callBack"),
    ("id", "id"),
    ("token", "token"),
    ("due", "due"),
    ("cron", "cron"),
    ("tz", "tz"),
    ("every", "every"),
    ("start", "start"),
    ("end", "end"),
    ("count", "count"),
    ("late", "late"),
    ("spread", "spread"),
    ("skip_holidays", "skip_holidays"),
    ("skip_policy", "skip_policy"),
    ("backfill_from", "backfill_from"),
    ("backfill_to", "backfill_to"),
    ("debounce", "debounce"),
    ("max_wait", "max_wait"),
    ("debounce_first_ms", "debounce_first_ms"),
    ("debounce_merged", "debounce_merged"),
]


def meant(future: protowire.Future, record: RawRecord) -> Timer | Cancel | RejectReason:
    """What a request means, straight from the schema's comments."""
    actions = {
        protowire.ACTION_CANCEL: TokenAction.CANCEL,
        protowire.ACTION_PAUSE: TokenAction.PAUSE,
        protowire.ACTION_RESUME: TokenAction.RESUME,
        protowire.ACTION_TRIGGER: TokenAction.TRIGGER,
    }
    if future.action in actions:
        if not future.id:
            return RejectReason.MALFORMED
        return Cancel(future.id, future.token or "", action=actions[future.action])
    if future.action == protowire.ACTION_BACKFILL:
        low, high = future.backfill_from, future.backfill_to
        if not future.id or low is None or high is None:
            return RejectReason.MALFORMED
        if not 0 <= low < high <= MAX_SECONDS:
            return RejectReason.OUT_OF_BOUNDS
        return Cancel(
            future.id, future.token or "", action=TokenAction.BACKFILL, window=(low, high)
        )
    if future.action != protowire.ACTION_SCHEDULE:
        return RejectReason.UNKNOWN_FORMAT
    if any(name.lower().startswith(("timer-", "scheduler-")) for name, _ in future.headers):
        return RejectReason.RESERVED_HEADER  # the service's own headers (issue 22)
    due = future.due
    if due is None:
        try:
            due = due_second(Decimal((record.key or b"").decode(errors="replace")))
        except ArithmeticError:
            return RejectReason.MISSING_DUE
    return Timer(
        id=future.id or derived_id(record),
        due=due,
        topic=future.callback_topic or "",
        key=None if future.callback_key is None else future.callback_key.encode(),
        value=future.callback or b"",
        token=future.token or "",
        headers=tuple(future.headers),
    )


def parsed(record: RawRecord) -> Timer | Cancel | RejectReason:
    try:
        return parse_request(record)
    except RejectedRequest as rejected:
        return rejected.reason


def test_the_shipped_descriptor_is_the_proto_compiled(schema_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "future.binpb"
    assert (
        protoc.main(["protoc", f"-I{schema_dir}", f"--descriptor_set_out={out}", PROTO_FILE]) == 0
    )
    shipped = (schema_dir / DESCRIPTOR_SET).read_bytes()
    fresh = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    assert descriptor_pb2.FileDescriptorSet.FromString(shipped) == fresh, (
        "future.binpb is stale: run `make proto` after editing future.proto"
    )


@MANY
@given(future=st.one_of(futures, all_fields))
def test_bytes_from_generated_code_decode_by_hand_to_the_same_values(
    generated: ModuleType, future: protowire.Future
) -> None:
    data = to_generated(generated, future).SerializeToString()
    assert protowire.decode(data) == future


@MANY
@given(future=st.one_of(futures, all_fields))
def test_hand_encoded_bytes_parse_with_generated_code_to_the_same_values(
    generated: ModuleType, future: protowire.Future
) -> None:
    message = generated.Future.FromString(protowire.encode(future))
    assert from_generated(message) == future
    assert message.SerializeToString() == to_generated(generated, future).SerializeToString()


@MANY
@given(future=futures, key=keys)
def test_the_worker_reads_a_request_as_it_is_meant(
    future: protowire.Future, key: bytes | None
) -> None:
    value = protowire.encode(future)
    if value.lstrip()[:1] == b"{":  # read as JSON: another format's business
        return
    record = RawRecord("timer-request", 5, 77, 1_767_225_600_000, key, value)
    assert parsed(record) == meant(future, record)


@MANY
@given(value=st.binary(max_size=200), key=keys)
def test_any_bytes_are_a_timer_a_cancel_or_a_dead_letter(value: bytes, key: bytes | None) -> None:
    result = parsed(RawRecord("timer-request", 0, 0, 0, key, value))
    assert isinstance(result, (Timer, Cancel, RejectReason))


def test_a_field_of_the_schema_with_the_wrong_wire_type_is_dead_lettered() -> None:
    due_as_fixed64 = bytes([6 << 3 | 1]) + (1_767_225_600).to_bytes(8, "little")
    topic_as_varint = bytes([1 << 3 | 0, 5])
    header_name_as_varint = bytes([7 << 3 | 2, 2, 1 << 3 | 0, 1])
    article = protowire.encode(protowire.Future(callback_topic="t", callback=b"x"))
    for extra in (due_as_fixed64, topic_as_varint, header_name_as_varint):
        record = RawRecord("timer-request", 0, 0, 0, b"1767225600", article + extra)
        assert parsed(record) is RejectReason.MALFORMED
    cron_as_varint = bytes([9 << 3 | 0, 1])
    record = RawRecord("timer-request", 0, 0, 0, b"1767225600", article + cron_as_varint)
    assert parsed(record) is RejectReason.MALFORMED
    # fields 26 (varint) and 27 (fixed32): numbers no version of the schema uses yet
    newer = article + bytes([0xD0, 0x01, 1]) + bytes([0xDD, 0x01]) + b"abcd"
    record = RawRecord("timer-request", 0, 0, 0, b"1767225600", newer)
    assert isinstance(parsed(record), Timer), "a newer producer's fields are skipped"


def test_a_forged_service_header_is_refused_for_what_it_is_before_a_missing_due() -> None:
    """Found by the generated model above: a request with no due second (no key to read
    one from) and a ``timer-*`` header was told ``missing_due``, where the schema says
    a service header is refused whatever else is wrong."""
    future = protowire.Future(
        callback_topic=None,
        callback_key=None,
        callback=None,
        id=None,
        token=None,
        due=None,
        headers=[("TIMER-", b"")],
        action=0,
    )
    record = RawRecord("timer-request", 5, 77, 1_767_225_600_000, None, protowire.encode(future))
    assert meant(future, record) is RejectReason.RESERVED_HEADER
    assert parsed(record) is RejectReason.RESERVED_HEADER
    # The same request in JSON is refused the same way.
    as_json = replace(record, value=b'{"topic": "t", "headers": {"Timer-Id": "x"}}')
    assert parsed(as_json) is RejectReason.RESERVED_HEADER
