"""Every use of a private Faust or aiokafka attribute, behind one door.

Faust exposes no public way to do a few things the worker needs: shorten the fetch
wait, read committed records only, open a table partition's RocksDB with the worker's
options (on every open, not only the first) and reach it, move recovery's
starting offsets after the worker caught a changelog up itself, send LeaveGroup in
generation 0 (the leader first), recover from the dev broker's departed group leader,
take a stream's events in batches without waking while none arrive, list the
routes its web server serves, run the worker's changelog catch-up before the table
recovery, and start that recovery over when a broker request of it gets no answer.
Each is done here and nowhere else, so an upgrade has one file to read.

Nothing is patched at import: :func:`apply_patches` is called by the worker at start.
:func:`missing_internals` lists what this module relies on and is gone; a unit test
calls it, so a Faust or aiokafka release that renames something fails one test with a
clear message instead of a worker at run time. ``pyproject.toml`` pins both packages
to the ranges tested with this module.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any

import aiokafka.errors
import faust
import rocksdict
from aiokafka.consumer.fetcher import READ_COMMITTED, Fetcher
from aiokafka.consumer.group_coordinator import BaseCoordinator, GroupCoordinator
from aiokafka.protocol.admin import DescribeGroupsRequest
from aiokafka.protocol.group import (
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    SyncGroupRequest,
)
from faust.stores.rocksdb import RocksDBOptions
from faust.stores.rocksdb import Store as RocksDBStore
from faust.streams import Stream
from faust.tables import recovery as recovery_module
from faust.tables.manager import TableManager
from faust.tables.recovery import RebalanceAgain, Recovery, ServiceStopped
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.web.drivers import aiohttp as faust_aiohttp_web

__all__ = [
    "FaustInternalsMissing",
    "apply_patches",
    "before_table_recovery",
    "missing_internals",
    "partition_db",
    "patches_applied",
    "recovery_start_offsets",
    "remove_patches",
    "take_events_when_ready",
    "tune_fetcher",
    "watch_group_session",
    "watch_recovery",
    "web_routes",
]

log = logging.getLogger(__name__)


class FaustInternalsMissing(RuntimeError):
    """A private attribute the worker relies on is gone: pin the tested Faust/aiokafka."""


#: How long a follower waits before its LeaveGroup, so that when every worker stops at
#: once the leader's LeaveGroup reaches the broker first (see :func:`_send_req`).
FOLLOWER_LEAVE_DELAY = 0.5


async def _maybe_leave_group(self: Any) -> None:
    """aiokafka's ``GroupCoordinator._maybe_leave_group``, for generation 0 too, leader first.

    aiokafka leaves only ``if self.generation > 0``: Kafka numbers generations from 1,
    the dev broker (Tansu) from 0, so a worker stopped in a group's first generation
    left without a word and its partitions waited out a whole session timeout.

    A follower (a member that did not compute the last assignment: aiokafka keeps
    ``_group_subscription`` only on the leader) leaves :data:`FOLLOWER_LEAVE_DELAY`
    later. The dev broker keeps as leader a leader whose LeaveGroup reaches a group that
    is already rebalancing, which is what a follower's LeaveGroup just before makes it:
    when every worker stops at once, the leader must leave first (see :func:`_send_req`).
    """
    if (
        self.generation >= 0
        and self.member_id != JoinGroupRequest.UNKNOWN_MEMBER_ID
        and self._group_instance_id is None
    ):
        if self._group_subscription is None:
            await asyncio.sleep(FOLLOWER_LEAVE_DELAY)
        try:
            await self._send_req(LeaveGroupRequest(self.group_id, self.member_id))
        except aiokafka.errors.KafkaError as err:
            log.error("LeaveGroup request failed: %s", err)
        else:
            log.info("LeaveGroup request succeeded")
    self.reset_generation()


#: aiokafka's own ``GroupCoordinator._send_req``, which :func:`_send_req` wraps.
_AIOKAFKA_SEND_REQ = GroupCoordinator._send_req


#: The leases renewed by :func:`_send_req`, by group id (see :func:`watch_group_session`).
_LEASES: dict[str, Any] = {}

#: Answers that prove the broker still counts the sender a member: none, and (to a
#: heartbeat) REBALANCE_IN_PROGRESS, which aiokafka answers by rejoining while it keeps
#: heartbeating.
_MEMBER_ERROR_CODES = {
    HeartbeatRequest: frozenset({0, aiokafka.errors.RebalanceInProgressError.errno}),
    SyncGroupRequest: frozenset({0}),
}


def watch_group_session(group_id: str, lease: Any) -> None:
    """Renew ``lease`` (a :class:`~app.worker.group_lease.GroupLease`) with the send time
    of every heartbeat and SyncGroup of ``group_id`` that the broker answers as from a
    member; ``None`` stops it."""
    if lease is None:
        _LEASES.pop(group_id, None)
    else:
        _LEASES[group_id] = lease


async def _send_req(self: Any, request: Any) -> Any:
    """aiokafka's ``GroupCoordinator._send_req``, renewing the group lease and clearing a
    departed leader the dev broker still names.

    Every request of the group goes through here, so it is where a heartbeat or a
    SyncGroup the broker answered renews the worker's :class:`GroupLease
    <app.worker.group_lease.GroupLease>` (from the time it was sent).

    Tansu 0.6.0 keeps a leader that leaves with LeaveGroup while its group is
    rebalancing (another member left just before: every worker stopped at once). Every
    later JoinGroup names that departed member as leader, no member ever sends the
    assignment, and the followers' SyncGroup fail with REBALANCE_IN_PROGRESS until a
    chance race inside the broker reloads the group (seen: 10 s, 104 s, over 350 s).
    Tansu drops a leader otherwise only when it evicts it as a member that stopped
    heartbeating. So a follower told of a leader that DescribeGroups does not list as a
    member joins once under that member id (making it a member again) and goes silent:
    a session timeout later the broker evicts it, drops it as leader, and the next
    JoinGroup elects a live member (measured: every partition firing again 6-18 s after
    the restart). Several followers doing it at once are one broker-side member, which
    nobody heartbeats. On Apache Kafka the leader named at the end of a join is a member,
    and a JoinGroup under an unknown member id is refused: this does nothing there.
    """
    lease = _LEASES.get(self.group_id)
    sent_at = lease.now() if lease is not None else time.monotonic()
    response = await _AIOKAFKA_SEND_REQ(self, request)
    if lease is not None:
        accepted = _MEMBER_ERROR_CODES.get(type(request))
        if accepted is not None and response.error_code in accepted:
            lease.renew(sent_at)
    if (
        isinstance(request, JoinGroupRequest)
        and response.error_code == 0
        and response.leader_id not in ("", response.member_id)
    ):
        try:
            await _rejoin_as_departed_leader(self, request, response.leader_id)
        except Exception as err:  # never let the workaround break a join
            log.debug("could not check the group leader: %r", err)
    return response


async def _rejoin_as_departed_leader(self: Any, request: Any, leader: str) -> None:
    client, node = self._client, self.coordinator_id
    described = await client.send(node, DescribeGroupsRequest([self.group_id]))
    error, _, state, _, _, members = described.groups[0][:6]
    if error or leader in {member[0] for member in members}:
        return
    log.warning(
        "group %s (%s): the broker names %s as leader, but it is not a member (it left); "
        "joining once under its id so that the broker evicts it and elects a member",
        self.group_id,
        state,
        leader,
    )
    joined = await client.send(
        node,
        JoinGroupRequest(
            self.group_id,
            self._session_timeout_ms,
            self._rebalance_timeout_ms,
            leader,
            None,
            request._protocol_type,
            request._group_protocols,
        ),
    )
    if joined.error_code == 0 and joined.leader_id != leader:
        # The broker had elected someone else meanwhile: do not leave a silent member
        # behind for the new leader to assign partitions to.
        await client.send(node, LeaveGroupRequest(self.group_id, leader))


#: Faust's own ``RocksDBOptions.open``, which :func:`_open_partition_db` replaces.
_FAUST_ROCKSDB_OPEN = RocksDBOptions.open


def _open_partition_db(self: Any, path: Any, *, read_only: bool = False) -> Any:
    """Faust's ``RocksDBOptions.open`` (rocksdict), with the options applied on every open.

    Two fixes to how Faust opens a partition's store:

    * **Options on reopen.** rocksdict opens an *existing* database with the column-family
      options saved in its OPTIONS file unless ``column_families`` is given, and a block
      cache cannot be saved in a file: every restarted worker's partitions had rocksdict's
      default 8 MiB cache instead of the 2 MiB asked for (+48 MB RSS per worker, measured),
      and no change to the options ever reached an existing store. Passing the default
      column family's options makes them apply.
    * **Index and filters in the bounded cache.** With Faust's binary-search index, the
      index and filter blocks of every table file stay in memory outside the cache, so RSS
      grew with pending (+29 MB from 1M to 10M). A two-level (partitioned) index and
      partitioned filters, held in the block cache with only their top level pinned,
      keep RSS flat in pending (measured: 101-103 MB at 1M, 102-104 MB at 10M) with index
      lookups as fast as before (8.7 µs). Files written before keep their format until
      compaction rewrites them.
    """
    if not self.use_rocksdict:
        return _FAUST_ROCKSDB_OPEN(self, path, read_only=read_only)
    options = self.as_options()
    table = rocksdict.BlockBasedOptions()
    table.set_bloom_filter(self.bloom_filter_size, True)
    table.set_block_cache(rocksdict.Cache(self.block_cache_size))
    table.set_index_type(rocksdict.BlockBasedIndexType.two_level_index_search())
    table.set_partition_filters(True)
    table.set_cache_index_and_filter_blocks(True)
    table.set_pin_top_level_index_and_filter(True)
    options.set_block_based_table_factory(table)
    access = (
        rocksdict.AccessType.read_write()
        if self.ttl is None
        else rocksdict.AccessType.with_ttl(self.ttl)
    )
    db = rocksdict.Rdict(
        str(path), options=options, column_families={"default": options}, access_type=access
    )
    db.set_read_options(rocksdict.ReadOptions())
    return db


#: aiokafka's own ``Fetcher._get_actions_per_node``, which :func:`_paced_fetch_actions` wraps.
_AIOKAFKA_FETCH_ACTIONS = Fetcher._get_actions_per_node
#: Where :func:`tune_fetcher` leaves the pacing function on a fetcher.
_PACE_ATTRIBUTE = "_kafka_timers_fetch_wait_ms"


def _paced_fetch_actions(self: Any, assignment: Any) -> Any:
    """aiokafka's ``Fetcher._get_actions_per_node``, with each fetch's wait asked anew.

    aiokafka builds every fetch request there from ``_fetch_max_wait_ms``; a fetcher that
    :func:`tune_fetcher` gave a pacing function has that attribute set from it first.
    """
    pace: Callable[[], int] | None = getattr(self, _PACE_ATTRIBUTE, None)
    if pace is not None:
        self._fetch_max_wait_ms = pace()
    return _AIOKAFKA_FETCH_ACTIONS(self, assignment)


#: Told when Faust's recovery gives up a wait and is started over (see
#: :func:`_recovery_wait`): ``stalled((), reason, attempt, retry_in)``, ``resumed(())``
#: (an :class:`app.worker.health.RecoveryStalls`).
_RECOVERY_REPORT: list[Any] = []
#: Between two starts of a Faust recovery that gave up a wait: 1 s doubling to 30 s.
_RECOVERY_BACKOFF = (1.0, 30.0)


def watch_recovery(report: Any) -> None:
    """Tell ``report`` (an :class:`app.worker.health.RecoveryStalls`) whenever Faust's
    recovery gives up a wait and is started over, and when it then completes a wait;
    ``None`` stops it."""
    _RECOVERY_REPORT.clear()
    if report is not None:
        _RECOVERY_REPORT.append(report)


async def _recovery_wait(self: Any, coro: Any, timeout: Any = None) -> None:
    """Faust's ``Recovery._wait``, starting the recovery over instead of ending it.

    Faust bounds each broker request of its recovery (the changelog's end and start
    offsets, the seeks) with ``broker_request_timeout`` (90 s). A wait that runs out
    looks to it like the service stopping: the recovery task ends for good, and the
    worker stays alive, never ready, for ever, also after the broker is back (measured
    with a proxy holding Faust's requests). An aiokafka error (a refused connection)
    crashed the task instead, and the worker with it. Here either one, while the
    service is not stopping, starts the recovery over from the top after a backoff
    (1 s doubling to 30 s), the way Faust does for a new rebalance; the worker stays
    not ready meanwhile and the report says why.
    """
    signal = self.signal_recovery_start
    try:
        wait_result = await self.wait_first(coro, signal, timeout=timeout)
    except aiokafka.errors.KafkaError as exc:
        if self.should_stop:
            raise
        await _recover_again(self, f"{type(exc).__name__}: {exc}")
        raise AssertionError("unreachable") from None  # pragma: no cover
    if wait_result.stopped:
        if self.should_stop:
            raise ServiceStopped()
        await _recover_again(self, f"a broker request got no answer within {timeout} s")
    elif signal in wait_result.done:
        raise RebalanceAgain()
    # A broker request answered (the waits with a timeout): the stall is over. The
    # recovery's own pause before it starts (no timeout) proves nothing.
    attempt = getattr(self, "_kafka_timers_attempt", 0)
    if attempt and timeout is not None:
        self._kafka_timers_attempt = 0
        for report in _RECOVERY_REPORT:
            report.resumed(())


async def _recover_again(self: Any, reason: str) -> None:
    attempt = getattr(self, "_kafka_timers_attempt", 0) + 1
    self._kafka_timers_attempt = attempt
    initial, maximum = _RECOVERY_BACKOFF
    delay = min(maximum, initial * 2 ** min(attempt - 1, 16))
    log.warning(
        "Faust's table recovery did not complete (%s): starting it over in %.0f s "
        "(attempt %d); the worker stays up and not ready",
        reason,
        delay,
        attempt,
    )
    for report in _RECOVERY_REPORT:
        report.stalled((), reason, attempt, delay)
    await asyncio.sleep(delay)
    self.signal_recovery_start.set()
    raise RebalanceAgain()


#: The original ``Recovery._build_highwaters`` (taken at import, before any patch).
_FAUST_BUILD_HIGHWATERS = Recovery._build_highwaters


async def _recovery_targets(
    self: Any, consumer: Any, tps: Any, destination: Any, title: str
) -> None:
    """Faust's ``Recovery._build_highwaters``, with the worker's own catch-up as the target
    of every changelog partition it recovers itself.

    Faust takes "high watermark - 1" as the offset its recovery must see an event at
    before a table partition is ready. On a log written by transactions the last
    offsets are commit or abort markers, control records no consumer ever receives: the
    event never comes and the worker waits, never ready, for ever (every takeover and
    restart in exactly-once mode on Apache Kafka). An aborted transaction, or one still
    open (whose end is the last stable offset under read_committed), does the same.
    The worker's catch-up (:func:`before_table_recovery`) has read those partitions to
    the position a consumer reaches at the end, markers included, and left that
    position less one as the store's persisted offset: that offset is the target here,
    so Faust has nothing left to replay. What a zombie producer appends after the
    catch-up is read by the next catch-up when the worker opens the partition's store.
    """
    await _FAUST_BUILD_HIGHWATERS(self, consumer, tps, destination, title)
    own = getattr(self, "_kafka_timers_own_recovery", None)
    if not own:
        return
    for tp in tps:
        if tp.topic not in own:
            continue
        table = self.tp_to_table.get(tp)
        persisted = None if table is None else table.persisted_offset(tp)
        target = -1 if persisted is None else persisted
        if destination.get(tp) != target:
            log.info(
                "recovery of %s[%d]: the worker's catch-up reached offset %d; Faust's "
                "end (high watermark - 1) is %s, past control records or records "
                "written since: recovery ends at the catch-up",
                tp.topic,
                tp.partition,
                target,
                destination.get(tp),
            )
        destination[tp] = target


def _patches() -> tuple[tuple[type, str, Any], ...]:
    """What :func:`apply_patches` installs: (class, attribute, replacement)."""
    return (
        (Recovery, "_wait", _recovery_wait),
        (Recovery, "_build_highwaters", _recovery_targets),
        (GroupCoordinator, "_maybe_leave_group", _maybe_leave_group),
        (GroupCoordinator, "_send_req", _send_req),
        (RocksDBOptions, "open", _open_partition_db),
        (Fetcher, "_get_actions_per_node", _paced_fetch_actions),
    )


#: The attributes the patches replace, as the libraries define them (taken at import,
#: before anything is patched).
#: ``None``: the class only inherits the attribute, so removing the patch deletes it.
_ORIGINALS = {(cls, name): vars(cls).get(name) for cls, name, _ in _patches()}


def apply_patches() -> None:
    """Install the worker's patches of aiokafka and Faust (idempotent; called at worker start)."""
    for cls, name, replacement in _patches():
        setattr(cls, name, replacement)


def remove_patches() -> None:
    """Put back what :func:`apply_patches` replaced (for tests that patch in-process)."""
    for (cls, name), original in _ORIGINALS.items():
        if original is None:
            if name in vars(cls):
                delattr(cls, name)
        else:
            setattr(cls, name, original)


def patches_applied() -> bool:
    """Whether every patch is installed in this process."""
    return all(vars(cls).get(name) is replacement for cls, name, replacement in _patches())


def tune_fetcher(app: faust.App, *, fetch_wait_ms: Callable[[], int], read_committed: bool) -> bool:
    """Pace the fetch wait (and set read_committed) of Faust's aiokafka consumer.

    Faust fixes aiokafka's fetch wait at 1,500 ms and has no setting for either.
    ``fetch_wait_ms`` is asked before every fetch request, in Faust's consumer thread
    (see :mod:`app.core.fetch_pacing`). Returns False if the fetcher could not be reached
    (not started yet).
    """
    fetcher = getattr(
        getattr(getattr(app.consumer, "_thread", None), "_consumer", None), "_fetcher", None
    )
    if fetcher is None or not hasattr(fetcher, "_fetch_max_wait_ms"):
        return False
    fetcher._fetch_max_wait_ms = fetch_wait_ms()
    setattr(fetcher, _PACE_ATTRIBUTE, fetch_wait_ms)
    if read_committed:
        fetcher._isolation_level = READ_COMMITTED
    return True


async def take_events_when_ready(
    stream: Any,
    max_: int,
    within: float,
    complete: Callable[[list[Any]], bool] | None = None,
) -> AsyncIterator[list[Any]]:
    """Faust's ``Stream.take_events(max_, within)``, asleep while no event arrives.

    Faust's version waits for a full buffer with a timeout of ``within`` in a loop, so
    it wakes every ``within`` seconds whether or not an event came: at the tick agent's
    2 ms that is 500 wake-ups a second, each building futures and tasks in mode's
    ``wait_first``, and it was most of an idle worker's CPU (measured: the event loop
    thread 59-68 ms/s of 87-100 ms/s for the whole process). This one waits without a
    timeout for the *first* event, then at most ``within`` for the rest of the batch:
    one wake-up per batch; ``complete`` (given the batch's events so far) ends the wait
    for the rest as soon as it says the batch is whole. Everything else is Faust's: the
    buffering processor, acks disabled while it runs and every event of a batch
    acknowledged once the caller is done with it (so at-least-once is unchanged), and
    the stream restored afterwards.
    """
    buffer: list[Any] = []
    events: list[Any] = []
    buffer_full = asyncio.Event()
    buffer_nonempty = asyncio.Event()
    buffer_consumed = asyncio.Event()
    consuming: asyncio.Future[None] | None = None
    enable_acks = stream.enable_acks
    channel_it = stream.channel.__aiter__()

    async def add_to_buffer(value: Any) -> Any:
        nonlocal consuming
        try:
            if consuming is not None:  # the caller is processing a batch: wait for it
                try:
                    await consuming
                finally:
                    consuming = None
            buffer.append(value)
            event = stream.current_event
            if event is None:
                raise RuntimeError("take buffer found no current event")
            events.append(event)
            buffer_nonempty.set()
            if complete is not None and len(buffer) < max_ and complete(events):
                buffer_full.set()  # whole: taken now; later events join it until yielded
            if len(buffer) >= max_:
                # Never more than max_ in a batch: wait until this one is consumed.
                buffer_full.set()
                buffer_consumed.clear()
                await stream.wait(buffer_consumed)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("error adding to the take buffer: %r", exc)
            await stream.crash(exc)
        return value

    stream.enable_acks = False  # acked here, once the caller has processed each batch
    stream.add_processor(add_to_buffer)
    stream._enable_passive(channel_it)
    try:
        while not stream.should_stop:
            await stream.wait_for_stopped(buffer_nonempty)
            if not buffer_full.is_set():
                await stream.wait_for_stopped(buffer_full, timeout=within)
            if not buffer:
                buffer_nonempty.clear()
                continue
            # Events arriving while the caller processes this batch wait for the next.
            consumed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            consuming = consumed
            try:
                yield list(events)
            finally:
                buffer.clear()
                for event in events:
                    await stream.ack(event)
                events.clear()
                buffer_nonempty.clear()
                if not consumed.done():
                    consumed.set_result(None)
                buffer_full.clear()
                buffer_consumed.set()
    finally:
        stream.enable_acks = enable_acks
        stream._processors.remove(add_to_buffer)


def partition_db(table: Any, partition: int) -> Any:
    """The rocksdict ``Rdict`` of one partition of a Faust RocksDB table (opened on demand)."""
    return table.data._db_for_partition(partition)


def recovery_start_offsets(app: faust.App) -> dict[Any, int] | None:
    """Where Faust's table recovery will start reading each changelog partition.

    The mapping is live: changing an entry moves recovery's start. ``None`` if this
    Faust keeps it elsewhere (recovery then replays what the worker already applied:
    slower, not wrong).
    """
    tables: Any = app.tables
    starts: dict[Any, int] | None = getattr(tables.recovery, "active_offsets", None)
    return starts


def web_routes(web: Any) -> list[tuple[str, str]]:
    """Every ``(method, path pattern)`` the worker's web server serves, sorted.

    Read from the aiohttp application behind Faust's web driver (``web.web_app``), so it
    lists Faust's own views beside ours, whoever registered them.
    """
    return sorted(
        {(route.method, route.resource.canonical) for route in web.web_app.router.routes()}
    )


def _source_mentions(obj: Any, names: Iterable[str]) -> list[str]:
    try:
        text = inspect.getsource(obj)
    except (OSError, TypeError):
        return list(names)
    return [n for n in names if n not in text]


def missing_internals() -> list[str]:
    """What this module relies on and the installed Faust/aiokafka no longer has."""
    missing = []
    class_attrs: tuple[tuple[type, tuple[str, ...]], ...] = (
        (GroupCoordinator, ("_maybe_leave_group", "_send_req", "reset_generation")),
        (RocksDBStore, ("_db_for_partition",)),
        (RocksDBOptions, ("open", "as_options")),
        (
            Stream,
            (
                "_enable_passive",
                "add_processor",
                "wait_for_stopped",
                "wait",
                "ack",
                "crash",
                "current_event",
                "should_stop",
                "enable_acks",
            ),
        ),
        (JoinGroupRequest, ("UNKNOWN_MEMBER_ID",)),
        (Fetcher, ("_get_actions_per_node",)),
        (
            Recovery,
            (
                "_wait",
                "_restart_recovery",
                "_build_highwaters",
                "wait_first",
                "signal_recovery_start",
            ),
        ),
    )
    init_attrs: tuple[tuple[type, tuple[str, ...]], ...] = (
        (
            GroupCoordinator,
            (
                "_group_instance_id",
                "generation",
                "member_id",
                "_group_subscription",
                "coordinator_id",
                "_session_timeout_ms",
                "_rebalance_timeout_ms",
            ),
        ),
        (BaseCoordinator, ("_client",)),
        (JoinGroupRequest, ("_protocol_type", "_group_protocols", "_member_id")),
        (Fetcher, ("_fetch_max_wait_ms", "_isolation_level")),
        (Recovery, ("active_offsets", "tp_to_table")),
        (RocksDBOptions, ("use_rocksdict", "bloom_filter_size", "block_cache_size", "ttl")),
        (Stream, ("_processors", "channel")),
    )
    if "except RebalanceAgain" not in inspect.getsource(recovery_module):
        missing.append("faust.tables.recovery.Recovery._restart_recovery: except RebalanceAgain")
    if "self.recovery.on_rebalance" not in inspect.getsource(TableManager.on_rebalance):
        missing.append("faust.tables.manager.TableManager.on_rebalance: self.recovery.on_rebalance")
    for cls, attrs in class_attrs:
        missing += [f"{cls.__module__}.{cls.__name__}.{a}" for a in attrs if not hasattr(cls, a)]
    for cls, attrs in init_attrs:
        missing += [
            f"{cls.__module__}.{cls.__name__}.{a} (set in __init__)"
            for a in _source_mentions(vars(cls)["__init__"], attrs)
        ]
    if "self._fetch_max_wait_ms" not in inspect.getsource(_AIOKAFKA_FETCH_ACTIONS):
        missing.append("aiokafka Fetcher._get_actions_per_node: self._fetch_max_wait_ms")
    if "self.web_app" not in inspect.getsource(faust_aiohttp_web):
        missing.append("faust.web.drivers.aiohttp.Web.web_app")
    transport = inspect.getsource(faust_aiokafka)
    missing += [
        f"faust.transport.drivers.aiokafka: {a}"
        for a in ("_thread", "_consumer")
        if f".{a}" not in transport and f"{a} =" not in transport
    ]
    return missing


def before_table_recovery(
    app: faust.App,
    hook: Callable[[set[Any]], Awaitable[None]],
    caught_up_topics: frozenset[str],
) -> None:
    """Run ``hook(assigned)`` on every assignment before Faust's table recovery is told of it.

    ``hook`` brings the changelog partitions of ``caught_up_topics`` to their end itself:
    Faust's recovery of them then ends where the hook ended (:func:`_recovery_targets`),
    never waiting for an offset that only a control record holds.

    Faust's ``TableManager.on_rebalance`` hands the assignment to its recovery, which
    reads each store's persisted offset there and signals its recovery task to start;
    the task runs as soon as the event loop gets a turn. The worker's own changelog
    catch-up must come first (the recovery would otherwise replay the changelog into
    the stores at the same time, from older offsets, and could leave a key at an older
    value), and must not hold the event loop while it runs (``/livez``, ``/readyz`` and
    the metrics answer on it). Awaited here, before the original, it is both: the
    recovery task stays asleep until the hook returns, and then starts from the offsets
    the catch-up reached.
    """
    tables: Any = app.tables
    original = tables.on_rebalance

    async def on_rebalance(
        assigned: set[Any], revoked: set[Any], newly_assigned: set[Any], generation_id: int = 0
    ) -> None:
        await hook(assigned)
        # Faust's recovery of these topics ends where the hook's catch-up ended
        # (_recovery_targets): the hook, not Faust, decides what "caught up" means.
        tables.recovery._kafka_timers_own_recovery = caught_up_topics
        await original(assigned, revoked, newly_assigned, generation_id)

    tables.on_rebalance = on_rebalance
