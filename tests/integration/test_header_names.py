"""A record whose header name is not UTF-8 is read with a defect, however often it is read.

confluent-kafka raises on such a name but keeps, cached in the message, the half-built
header list (a pair whose name is a null pointer); a second ``headers()`` call returns
it, and a call from a hot loop returns it even the first time; the next touch kills
the process. The reading runs in a child process, so that such a death is this test's
failure and not the test runner's.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap

from app.kafka.topics import ensure_topics
from app.settings import Settings
from tests.integration.test_hostile_input import produce_with_raw_header_name

READ_TWICE = textwrap.dedent(
    """
    import sys
    from confluent_kafka import Consumer, TopicPartition
    from app.kafka.records import to_record
    from kafka_timers_client.message_headers import read_headers

    bootstrap, topic, offset = sys.argv[1], sys.argv[2], int(sys.argv[3])
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "header-names",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, offset)])
    for _ in range(60):
        found = [m for m in consumer.consume(10, 1.0) if m.error() is None]
        if found:
            break
    else:
        sys.exit("the record never came")
    message = found[0]
    # Often enough for CPython to specialise the calls inside (a hot loop's path).
    records = [to_record(message) for _ in range(200)]
    assert len({(r.defect, r.headers) for r in records}) == 1, records
    first, second = records[0], records[-1]
    headers, why = read_headers(message)
    print(repr((first.defect, second.defect, first.headers, second.headers, headers, why)))
    """
)


def test_a_header_name_that_is_not_utf8_is_a_defect_every_time_it_is_read(
    settings: Settings,
) -> None:
    topic = f"header-names-{settings.app_id}"
    ensure_topics(settings, [topic])
    offset = produce_with_raw_header_name(
        settings.bootstrap_servers, topic, 0, b"raw-name", b"value", b"\xff\xfename"
    )
    done = subprocess.run(
        [sys.executable, "-c", READ_TWICE, settings.bootstrap_servers, topic, str(offset)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"the reader died ({done.returncode}): {done.stderr[-2000:]}"
    first, second, first_headers, second_headers, headers, why = ast.literal_eval(
        done.stdout.strip()
    )
    assert first and "cannot be read" in first, first
    assert first == second == why
    assert first_headers == second_headers == headers == ()
