"""The etf1 reader: a schedule keyed by its id with its due second and target in headers.

Key = schedule id, value = payload, due second in the ``scheduler-epoch`` header, target
in ``scheduler-target-topic`` / ``scheduler-target-key``. A tombstone (null value)
cancels the schedule with that key.
"""

from __future__ import annotations

from app.core.raw_record import RawRecord
from app.core.request_rules import (
    refuse_reserved,
)
from app.core.timer import Cancel, Timer
from kafka_timers_client.due import due_second, parse_epoch
from kafka_timers_client.errors import InvalidTimeSpec, RejectedRequest, RejectReason

__all__ = ["ETF1_EPOCH", "ETF1_TARGET_KEY", "ETF1_TARGET_TOPIC", "etf1_schedule", "etf1_tombstone"]


#: The header that marks an etf1 record and holds its due epoch second.
ETF1_EPOCH = "scheduler-epoch"
#: The header naming the callback topic.
ETF1_TARGET_TOPIC = "scheduler-target-topic"
#: The header holding the callback key.
ETF1_TARGET_KEY = "scheduler-target-key"


def etf1_tombstone(record: RawRecord) -> Cancel:
    """The cancel a tombstone means: of the schedule its key names, whatever its token."""
    return Cancel(id=_key_text(record), token="", check_token=False)


def etf1_schedule(record: RawRecord, headers: dict[str, bytes]) -> Timer:
    """The timer an etf1 record schedules (``headers``: the record's, as a dict), its
    callback carrying the etf1 provenance headers in place of the ``scheduler-*`` ones."""
    schedule_id = _key_text(record)
    try:
        due = due_second(parse_epoch(headers[ETF1_EPOCH].decode()))
    except (InvalidTimeSpec, UnicodeDecodeError) as exc:
        raise RejectedRequest(RejectReason.MISSING_DUE, f"scheduler-epoch: {exc}") from exc
    topic = _utf8(headers.get(ETF1_TARGET_TOPIC, b""), "scheduler-target-topic")
    # etf1's own control headers stay behind; the service's provenance replaces them.
    passthrough = tuple((k, v) for k, v in record.headers if not k.startswith("scheduler-"))
    refuse_reserved(passthrough)
    provenance = (
        ("scheduler-timestamp", str(record.timestamp_ms // 1000).encode()),
        ("scheduler-key", record.key or b""),
        ("scheduler-topic", record.topic.encode()),
    )
    return Timer(
        id=schedule_id,
        due=due,
        topic=topic,
        key=headers.get(ETF1_TARGET_KEY),
        value=record.value,
        token="",
        headers=provenance + passthrough,
    )


def _key_text(record: RawRecord) -> str:
    if not record.key:
        raise RejectedRequest(RejectReason.MALFORMED, "record has no key")
    try:
        return record.key.decode()
    except UnicodeDecodeError as exc:
        raise RejectedRequest(RejectReason.MALFORMED, "record key is not UTF-8") from exc


def _utf8(raw: bytes, name: str) -> str:
    try:
        return raw.decode()
    except UnicodeDecodeError as exc:
        raise RejectedRequest(RejectReason.INVALID_TOPIC, f"{name} is not UTF-8") from exc
