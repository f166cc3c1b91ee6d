"""What the patches rely on in Faust and aiokafka, checked: a release that drops it fails a test."""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from typing import Any

from aiokafka.consumer.fetcher import Fetcher
from aiokafka.consumer.group_coordinator import BaseCoordinator, GroupCoordinator
from aiokafka.protocol.group import (
    JoinGroupRequest,
)
from faust.stores.rocksdb import RocksDBOptions
from faust.stores.rocksdb import Store as RocksDBStore
from faust.streams import Stream
from faust.tables import recovery as recovery_module
from faust.tables.manager import TableManager
from faust.tables.recovery import Recovery
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.web.drivers import aiohttp as faust_aiohttp_web

from app.worker.faust_internals.streams import _AIOKAFKA_FETCH_ACTIONS

__all__ = ["FaustInternalsMissing", "missing_internals"]


class FaustInternalsMissing(RuntimeError):
    """A private attribute the worker relies on is gone: pin the tested Faust/aiokafka."""


def _source_mentions(obj: Any, names: Iterable[str]) -> list[str]:
    try:
        text = inspect.getsource(obj)
    except (OSError, TypeError):
        return list(names)
    return [n for n in names if n not in text]


def missing_internals() -> list[str]:
    """What this package relies on and the installed Faust/aiokafka no longer has."""
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
