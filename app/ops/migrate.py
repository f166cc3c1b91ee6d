"""``kafka-timers migrate``: move every pending timer to another deployment, while
producers keep sending.

The procedure (docs/operations.md, Moving timers: export, import, migrate):

1. Start the new deployment (its topics with the new partition count, its workers and
   oscillators): it fires nothing yet, it has no timers.
2. Stop the old workers (SIGTERM). Producers go on sending to the old request topic;
   nothing reads it meanwhile, nothing is lost: it is the queue.
3. ``kafka-timers migrate``: it refuses while the old workers' group has members; then
   it reads the old changelog to its end — exactly the state the workers left, with,
   per partition, the offset of the last request they applied (``R``) — and sends every
   pending timer as a request to the new request topic, on its id's owner partition
   for the new partition count (:mod:`app.ops.requests`). Then it **bridges**: it reads
   every old request partition from just after ``R`` and sends each record, bytes,
   headers and timestamp unchanged (less a worker's ``timer-hop``), to the new request
   topic on the owner partition of its id, through the same producer, one record in
   flight: the requests of one id keep their order, after the timer's own copy.
4. Switch the producers to the new request topic, each once its last request to the
   old one has been bridged (the bridge's lag is a fraction of a second; it logs it).
5. Stop ``migrate`` (SIGTERM), or let ``--idle-exit`` stop it once the old topic has
   been quiet that long; then retire the old deployment.

Why nothing is lost, doubled or early: the old workers applied exactly the requests up
to ``R`` and their changelog holds the result; every later request is bridged, in
order, after that state. The new workers store each timer at its own due second (a
series at its pending occurrence) and fire by their own ticks and clocks, never early.
A timer is copied once, a request bridged once; should ``migrate`` stop or crash, it
resumes from the offsets it committed to the group
``<old app id>-migrate-to-<new request topic>`` (on the old cluster) after each
acknowledged batch, and does not copy the state again (that would undo requests bridged
since). A crash between a batch's acknowledgement and its commit sends that batch again:
repeated requests are idempotent (the same version again, the same cancel again).
Cancels sent during the move are applied on the new deployment, in order after their
timer; a cancel that waits for its answer reads the old fired topic and gets none
(exit 3, "sent and will be applied"): ask again on the new deployment.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from confluent_kafka import (
    Consumer,
    ConsumerGroupState,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from app.core.printable import printable
from app.core.raw_record import RawRecord
from app.core.request_format import parse_request
from app.core.routing import without_hop
from app.kafka.config import confluent_common
from app.kafka.records import to_record
from app.kafka.topics import partition_count, wait_for_broker
from app.ops.requests import as_request
from app.ops.sending import RequestSender
from app.ops.snapshot import partition_end, read_snapshot
from app.settings import Settings
from kafka_timers_client.errors import KafkaTimersError
from kafka_timers_client.partitioner import partition_for

__all__ = ["MigrateReport", "bridge_group", "migrate", "placement"]

log = logging.getLogger(__name__)

#: How often the bridge reports its progress.
PROGRESS_INTERVAL = 5.0


def bridge_group(source: Settings, target: Settings) -> str:
    """The consumer group the bridge commits its progress to, on the old cluster: one
    per old deployment and new request topic."""
    return f"{source.app_id}-migrate-to-{target.topics.requests}"


@dataclass
class MigrateReport:
    """What a migration did."""

    copied: int = 0
    series: int = 0
    bridged: int = 0
    #: The state had been copied by an earlier run: this one only bridged.
    resumed: bool = False
    source_partitions: int = 0
    target_partitions: int = 0
    #: Records not bridged: their header names are not UTF-8, so no client here can read
    #: them (the old workers dead-letter such a record as ``malformed``); logged.
    unreadable: int = 0
    #: Where the bridge stopped, per old request partition (the next offset to read).
    positions: dict[int, int] = field(default_factory=dict)


def placement(record: RawRecord, partitions: int) -> int:
    """The new partition of an old request record: its timer id's owner.

    A record the worker cannot read goes where its key places it (the new worker will
    dead-letter it with its reason); one without a key to its partition number modulo
    the new count. A JSON request without an id gets its id from where it lands, on
    the new deployment as on the old.
    """
    try:
        return partition_for(parse_request(record, time.time()).id.encode(), partitions)
    except Exception:  # any record is bridged: its problem is the new worker's to report
        if record.key:
            return partition_for(record.key, partitions)
        return record.partition % partitions


def _active(source: Settings, timeout: float) -> str | None:
    """Why the old workers' consumer group looks alive (members, or a live state such
    as ``STABLE``: some brokers list no members), or None when it is empty or gone."""
    admin = AdminClient(confluent_common(source))
    try:
        futures = admin.describe_consumer_groups([source.app_id], request_timeout=timeout)
        description = futures[source.app_id].result(timeout)
    except (KafkaException, ValueError, RuntimeError) as exc:
        log.warning("cannot describe consumer group %r: %s", source.app_id, exc)
        return None
    state = description.state
    if description.members:
        return f"{len(description.members)} members"
    if state in (
        ConsumerGroupState.STABLE,
        ConsumerGroupState.PREPARING_REBALANCING,
        ConsumerGroupState.COMPLETING_REBALANCING,
    ):
        return f"state {state.name}"
    return None


def _committed(consumer: Consumer, topic: str, partitions: int, timeout: float) -> dict[int, int]:
    found = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout)
    return {tp.partition: tp.offset for tp in found if tp.offset >= 0}


def migrate(
    source: Settings,
    target: Settings,
    *,
    stop: threading.Event,
    idle_exit: float | None = None,
    force: bool = False,
    timeout: float = 60.0,
    progress: Callable[[dict[str, object]], None] | None = None,
) -> MigrateReport:
    """Copy ``source``'s pending timers to ``target`` and bridge ``source``'s request
    topic to ``target``'s until ``stop`` is set, or until the old topic has been quiet
    for ``idle_exit`` seconds (see the module's doc)."""
    if (
        source.bootstrap_servers == target.bootstrap_servers
        and source.topics.requests == target.topics.requests
    ):
        raise KafkaTimersError(
            "the target request topic is the source's: name the new deployment's "
            "(--to-request-topic, --to-bootstrap)"
        )
    wait_for_broker(source, min(timeout, 15.0))
    old_topic = source.topics.requests
    old_count = partition_count(source, old_topic, min(timeout, 15.0))
    if old_count is None:
        raise KafkaTimersError(
            f"request topic {old_topic!r} not found at {source.bootstrap_servers}"
        )
    report = MigrateReport(source_partitions=old_count)
    sender = RequestSender(target, min(timeout, 15.0))
    report.target_partitions = sender.partitions
    active = _active(source, min(timeout, 15.0))
    if active and not force:
        raise KafkaTimersError(
            f"the old deployment's workers are still running (group {source.app_id!r}: "
            f"{active}): stop them first (SIGTERM; after a kill -9, wait one "
            "session timeout), or pass --force if the group is someone else's"
        )
    conf = confluent_common(source)
    conf.update(
        {
            "group.id": bridge_group(source, target),
            "client.id": f"kafka-timers-migrate-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "fetch.wait.max.ms": 50,
        }
    )
    consumer = Consumer(conf)
    try:
        _run(consumer, source, sender, report, old_count, stop, idle_exit, timeout, progress)
    except KafkaException as exc:
        raise KafkaTimersError(
            f"migration stopped: {exc.args[0] if exc.args else exc}; run it again to resume "
            f"where it left off (group {bridge_group(source, target)!r})"
        ) from None
    finally:
        consumer.close()
    return report


def _run(
    consumer: Consumer,
    source: Settings,
    sender: RequestSender,
    report: MigrateReport,
    old_count: int,
    stop: threading.Event,
    idle_exit: float | None,
    timeout: float,
    progress: Callable[[dict[str, object]], None] | None,
) -> None:
    """Copy the state (unless an earlier run did), then bridge until told to stop."""
    old_topic = source.topics.requests
    positions = _committed(consumer, old_topic, old_count, min(timeout, 15.0))
    if len(positions) == old_count:
        report.resumed = True
        log.info("resuming the bridge of %s from %s", old_topic, positions)
    else:
        positions = _copy_state(source, sender, report, old_count, timeout)
        consumer.commit(
            offsets=[TopicPartition(old_topic, p, o) for p, o in positions.items()],
            asynchronous=False,
        )
    if progress is not None:
        progress(
            {
                "stage": "copied",
                "timers": report.copied,
                "series": report.series,
                "resumed": report.resumed,
            }
        )
    report.positions = positions
    _bridge(consumer, sender, old_topic, positions, report, stop, idle_exit, progress)


def _copy_state(
    source: Settings,
    sender: RequestSender,
    report: MigrateReport,
    old_count: int,
    timeout: float,
) -> dict[int, int]:
    """Send every pending timer of the old changelog; the bridge's starting offsets."""
    snapshot = read_snapshot(source, timeout)
    if snapshot.partitions != old_count:
        raise KafkaTimersError(
            f"changelog {snapshot.topic!r} has {snapshot.partitions} partitions and request "
            f"topic {source.topics.requests!r} {old_count}: is --from-app-id right?"
        )
    now_ms = int(time.time() * 1000)
    for pending in snapshot.timers:
        timer = pending.timer
        request = as_request(timer, now_ms)
        sender.send_request(timer.id, request)
    sender.flush(timeout)
    report.copied = len(snapshot.timers)
    report.series = snapshot.series
    return {p: snapshot.request_offsets.get(p, -1) + 1 for p in range(old_count)}


def _bridge(
    consumer: Consumer,
    sender: RequestSender,
    topic: str,
    positions: dict[int, int],
    report: MigrateReport,
    stop: threading.Event,
    idle_exit: float | None,
    progress: Callable[[dict[str, object]], None] | None,
) -> None:
    """Copy every record after ``positions`` (updated in place) until told to stop."""
    consumer.assign([TopicPartition(topic, p, o) for p, o in positions.items()])
    at_end: set[int] = set()
    last_record = time.monotonic()
    last_progress = 0.0
    while not stop.is_set():
        batch = consumer.consume(5000, 0.2)
        moved: dict[int, int] = {}
        for msg in batch:
            if partition_end(msg, at_end, topic):
                continue
            p = msg.partition() or 0
            record = without_hop(to_record(msg))
            moved[p] = record.offset + 1
            if record.defect is not None:
                report.unreadable += 1
                log.warning(
                    "not bridged: %s[%d] offset %d: %s",
                    topic,
                    p,
                    record.offset,
                    printable(record.defect),
                )
                continue
            sender.send(
                placement(record, sender.partitions),
                record.key,
                record.value,
                record.headers,
                record.timestamp_ms,
            )
            report.bridged += 1
        now = time.monotonic()
        if moved:
            sender.flush()
            positions.update(moved)
            consumer.commit(
                offsets=[TopicPartition(topic, p, o) for p, o in moved.items()],
                asynchronous=False,
            )
            last_record = now
        if progress is not None and now - last_progress >= PROGRESS_INTERVAL:
            last_progress = now
            progress(
                {
                    "stage": "bridging",
                    "bridged": report.bridged,
                    "caught_up": at_end == set(positions),
                }
            )
        if idle_exit is not None and at_end == set(positions) and now - last_record >= idle_exit:
            break
    sender.flush()
