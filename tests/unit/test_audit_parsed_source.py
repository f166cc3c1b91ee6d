"""The source that parses where it reads gives the rows the parsing UDFs give."""

from __future__ import annotations

import json

import pyarrow as pa

from app.settings import Settings
from kafka_timers_client import protowire
from spark_audit.kafka_source import ARROW_SCHEMA
from spark_audit.parsed_source import (
    PARSED_FIRED_SCHEMA,
    PARSED_REQUESTS_SCHEMA,
    ParsedTopicReader,
    _policy,
    policy_option,
)
from spark_audit.parsing import policy_for

TS_MS = 1_767_225_600_000


def raw_batch(values: list[bytes | None], defect: str | None = None) -> pa.RecordBatch:
    n = len(values)
    return pa.RecordBatch.from_arrays(
        [
            pa.array(["t"] * n, pa.string()),
            pa.array([2] * n, pa.int32()),
            pa.array(range(10, 10 + n), pa.int64()),
            pa.array([TS_MS * 1000] * n, ARROW_SCHEMA.field("timestamp").type),
            pa.array([b"k"] * n, pa.binary()),
            pa.array(values, pa.binary()),
            pa.array([None] * n, ARROW_SCHEMA.field("headers").type),
            pa.array([defect] * n, pa.string()),
        ],
        schema=ARROW_SCHEMA,
    )


def reader(parse: str) -> ParsedTopicReader:
    options = {"subscribe": "t", "parse": parse}
    if parse == "requests":
        options["policy"] = policy_option(policy_for(Settings()))
    return ParsedTopicReader(options)


def test_request_batches_are_parsed_with_their_coordinates() -> None:
    good = protowire.encode(
        protowire.Future(callback_topic="cb", callback=b"x", id="p1", token="t1", due=1767225630)
    )
    r = reader("requests")
    rows = r._parsed(raw_batch([good, b'{"at":1e400}']), _policy(r.policy_text)).to_pylist()
    assert [(x["topic"], x["partition"], x["offset"], x["ts_ms"]) for x in rows] == [
        ("t", 2, 10, TS_MS),
        ("t", 2, 11, TS_MS),
    ]
    assert (rows[0]["kind"], rows[0]["id"], rows[0]["reject"]) == ("schedule", "p1", None)
    assert rows[1]["reject"] is not None and rows[1]["kind"] is None
    assert list(rows[0]) == [c.split()[0] for c in PARSED_REQUESTS_SCHEMA.split(", ")]


def test_fired_batches_are_parsed_and_hostile_ones_set_aside() -> None:
    good = json.dumps(
        {"event": "fired", "id": "a", "token": "", "partition": 1, "worker": "w", "due": 5,
         "fired_at_ms": 5000}
    ).encode()  # fmt: skip
    rows = reader("fired")._parsed(raw_batch([good, b"[" * 10_000, None]), None).to_pylist()
    assert [x["rec_offset"] for x in rows] == [10, 11, 12]
    assert (rows[0]["event"], rows[0]["partition"], rows[0]["set_aside"]) == ("fired", 1, None)
    assert [x["set_aside"] for x in rows[1:]] == ["malformed", "no_value"]
    assert list(rows[0]) == [c.split()[0] for c in PARSED_FIRED_SCHEMA.split(", ")]
