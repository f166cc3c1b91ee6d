"""The worker's file descriptors: the limit raised at start, checked against what it
needs, and running out of them a systemic exit (70).

A worker holds descriptors for three things: each partition's RocksDB (table files,
bounded by :data:`ROCKSDB_MAX_OPEN_FILES`, plus its log, manifest, WAL and lock), the
connections to its web port (bounded by ``KAFKA_TIMERS_WEB_MAX_CONNECTIONS``, see
:mod:`app.worker.web_limits`) and everything else (its Kafka clients' sockets, the
event loop, threads, logs: :data:`BASE_DESCRIPTORS`). At start it raises its soft
``RLIMIT_NOFILE`` to the hard one and refuses to start (one line, exit 2) when even
that cannot hold all three, since any partition may come to it in a failover: a worker
that would run out at the worst moment is better stopped at the start, with the fix.

Running out anyway (another process leaking on the host, a bug) is never a crash with
status 1 and a traceback mid-recovery: wherever ``EMFILE``/``ENFILE`` (or RocksDB's
"Too many open files") surfaces, in a Faust service or agent, a task, an event-loop
callback or a per-record handler (:func:`app.worker.isolation.is_systemic`), the worker
logs one line and exits 70 at once, acknowledging nothing: a restart reads it all again.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import resource
from collections.abc import Callable
from typing import Any, NamedTuple, NoReturn

from kafka_timers_client.errors import ConfigurationError, SystemicFailure

__all__ = [
    "BASE_DESCRIPTORS",
    "ROCKSDB_MAX_OPEN_FILES",
    "DescriptorNeed",
    "descriptors_needed",
    "exit_if_out_of_descriptors",
    "install_descriptor_guard",
    "is_out_of_descriptors",
    "prepare_descriptors",
    "raise_soft_limit",
]

log = logging.getLogger(__name__)

#: Table files each partition's RocksDB keeps open (its ``max_open_files``). Faust's
#: default is 90% of the process's limit *per partition*, so eight partitions could ask
#: for seven times what the process has. RocksDB raises anything below 20 to 20.
ROCKSDB_MAX_OPEN_FILES = 32
#: A RocksDB's other files: WAL, MANIFEST, CURRENT, LOG, LOCK, its directory, and one
#: of each more while a flush or compaction swaps them.
ROCKSDB_OTHER_FILES = 8
#: Everything that is neither RocksDB nor a web connection: the Kafka clients' sockets
#: (Faust's consumer and producer, the request reader, the output producer, the
#: changelog catch-up, the lag reader; one per broker each), the event loop, the
#: threads' pipes, the log, the metrics port, Python's own. A worker measured 82 here
#: (8 partitions, one broker, firing, no web connection); several brokers take more.
BASE_DESCRIPTORS = 160
#: Exit status when descriptors run out: :class:`SystemicFailure`'s (EX_SOFTWARE).
EXIT_OUT_OF_DESCRIPTORS = SystemicFailure.exit_status
_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE})


class DescriptorNeed(NamedTuple):
    """How many descriptors a worker may need at most, by what holds them."""

    #: Partitions of the service: a failover can bring every one to this worker.
    partitions: int
    #: Per partition: RocksDB table files plus its other files.
    per_partition: int
    #: Open web connections allowed (``KAFKA_TIMERS_WEB_MAX_CONNECTIONS``).
    connections: int
    #: Everything else (:data:`BASE_DESCRIPTORS`).
    base: int

    @property
    def total(self) -> int:
        return self.partitions * self.per_partition + self.connections + self.base

    def describe(self) -> str:
        return (
            f"{self.partitions} partitions x {self.per_partition} RocksDB files + "
            f"{self.connections} web connections + {self.base} for Kafka clients and the rest"
        )


def descriptors_needed(partitions: int, max_connections: int) -> DescriptorNeed:
    """The most descriptors a worker of ``partitions`` partitions may hold."""
    return DescriptorNeed(
        partitions=partitions,
        per_partition=ROCKSDB_MAX_OPEN_FILES + ROCKSDB_OTHER_FILES,
        connections=max_connections,
        base=BASE_DESCRIPTORS,
    )


def _nr_open() -> int | None:
    """The kernel's ceiling on any process's limit (``fs.nr_open``), where readable."""
    try:
        with open("/proc/sys/fs/nr_open") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def raise_soft_limit(
    getrlimit: Callable[[int], tuple[int, int]] = resource.getrlimit,
    setrlimit: Callable[[int, tuple[int, int]], None] = resource.setrlimit,
) -> tuple[int, int]:
    """Raise the soft ``RLIMIT_NOFILE`` to the hard one; return ``(soft, hard)`` after.

    An unlimited hard limit is taken as the kernel's ``fs.nr_open`` (a soft limit
    cannot be set above it). If the raise is refused, the soft limit stays as it was.
    """
    soft, hard = getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return soft, hard
    target = hard if hard != resource.RLIM_INFINITY else (_nr_open() or soft)
    if target <= soft:
        return soft, hard
    try:
        setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError) as exc:
        log.warning("could not raise the open-file limit from %d to %d: %s", soft, target, exc)
        return soft, hard
    return target, hard


def prepare_descriptors(partitions: int, max_connections: int) -> int:
    """At start: raise the soft limit and refuse (:class:`ConfigurationError`, exit 2)
    when it cannot hold what the worker may need. Returns the limit in force."""
    soft, hard = raise_soft_limit()
    need = descriptors_needed(partitions, max_connections)
    if soft != resource.RLIM_INFINITY and soft < need.total:
        raise ConfigurationError(
            f"the open-file limit (nofile) is {soft} (hard limit {_shown(hard)}) but this "
            f"worker may need {need.total}: {need.describe()}; raise the hard limit "
            "(systemd LimitNOFILE=, ulimit -Hn, docker run --ulimit nofile=) or lower "
            "KAFKA_TIMERS_WEB_MAX_CONNECTIONS"
        )
    # Debug, not info: it is printed before the checks of topics and settings, whose
    # refusals must stay one line.
    log.debug(
        "open-file limit %s (hard %s); this worker may need %d: %s",
        _shown(soft),
        _shown(hard),
        need.total,
        need.describe(),
    )
    return soft


def _shown(limit: int) -> str:
    return "unlimited" if limit == resource.RLIM_INFINITY else str(limit)


def is_out_of_descriptors(exc: BaseException | None) -> bool:
    """Whether ``exc``, or an exception it was raised from or during, says the process
    (``EMFILE``) or the host (``ENFILE``) is out of file descriptors.

    RocksDB (rocksdict) reports it as text in a bare :class:`Exception` ("IO error:
    While open a file for appending: ...: Too many open files"), so that message counts
    too, but only on that exact class and form: a record's bytes quoted into some other
    error's message must never be able to stop a worker.
    """
    seen: set[int] = set()
    stack = [exc]
    while stack:
        current = stack.pop()
        if current is None or id(current) in seen or len(seen) > 32:
            continue
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in _ERRNOS:
            return True
        if type(current) is Exception and _is_rocksdb_emfile(current):
            return True
        stack += [current.__cause__, current.__context__]
    return False


def _is_rocksdb_emfile(exc: Exception) -> bool:
    text = str(exc) if len(exc.args) == 1 and isinstance(exc.args[0], str) else ""
    return text.startswith("IO error: ") and text.endswith(
        ("Too many open files", "Too many open files in system")
    )


def exit_if_out_of_descriptors(exc: BaseException | None, where: str) -> None:
    """Exit 70 at once, with one line, if ``exc`` is running out of descriptors."""
    if is_out_of_descriptors(exc):
        _exit(exc, where)


def _exit(exc: BaseException | None, where: str) -> NoReturn:
    # One line: the condition, where it surfaced, and the fix. No traceback: the cause
    # is the process's limit, not the code that happened to open the next file.
    text = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
    log.critical(
        "out of file descriptors in %s (%s): exiting %d so nothing is acknowledged; "
        "raise the open-file limit or lower KAFKA_TIMERS_WEB_MAX_CONNECTIONS",
        where,
        text,
        EXIT_OUT_OF_DESCRIPTORS,
    )
    logging.shutdown()
    os._exit(EXIT_OUT_OF_DESCRIPTORS)


def install_descriptor_guard(loop: asyncio.AbstractEventLoop) -> None:
    """Make running out of descriptors exit 70 wherever it surfaces in the worker.

    Two nets: every Faust service, agent and task that crashes goes through
    ``mode.Service.crash`` (which would otherwise stop the worker with status 1), and
    every exception an event-loop callback leaves unhandled (asyncio's accept loops
    among them) reaches the loop's exception handler.
    """
    from mode import Service

    if not getattr(Service.crash, "_kafka_timers_guarded", False):
        original = Service.crash

        async def crash(self: Any, reason: BaseException) -> None:
            exit_if_out_of_descriptors(reason, f"{type(self).__name__}")
            await original(self, reason)

        crash._kafka_timers_guarded = True  # type: ignore[attr-defined]
        Service.crash = crash  # type: ignore[method-assign]

    previous = loop.get_exception_handler()

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exit_if_out_of_descriptors(context.get("exception"), str(context.get("message")))
        if previous is not None:
            previous(loop, context)
        else:
            loop.default_exception_handler(context)

    loop.set_exception_handler(handler)
