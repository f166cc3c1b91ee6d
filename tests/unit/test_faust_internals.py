"""The private Faust/aiokafka attributes the worker relies on are all still there."""

from __future__ import annotations

from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path

import pytest
from aiokafka.consumer.group_coordinator import GroupCoordinator
from faust.stores.rocksdb import RocksDBOptions

from app.worker import faust_app, faust_internals


def test_every_private_attribute_the_worker_relies_on_exists() -> None:
    missing = faust_internals.missing_internals()
    assert not missing, (
        f"faust-streaming {version('faust-streaming')} / aiokafka {version('aiokafka')} "
        f"lack what app/worker/faust_internals.py relies on: {', '.join(missing)}. "
        "Pin the tested versions (pyproject.toml) or port that module."
    )


def test_patches_are_applied_at_worker_start_not_at_import() -> None:
    assert faust_app.build_worker  # importing the worker module patches nothing
    original = GroupCoordinator._maybe_leave_group
    original_send = GroupCoordinator._send_req
    original_open = RocksDBOptions.open
    assert original_open is not faust_internals._open_partition_db
    assert original is not faust_internals._maybe_leave_group
    assert original_send is not faust_internals._send_req
    try:
        faust_internals.apply_patches()
        faust_internals.apply_patches()  # idempotent: the wrapper never wraps itself
        assert GroupCoordinator._maybe_leave_group is faust_internals._maybe_leave_group
        assert GroupCoordinator._send_req is faust_internals._send_req
        assert faust_internals._AIOKAFKA_SEND_REQ is original_send
        assert RocksDBOptions.open is faust_internals._open_partition_db
    finally:
        GroupCoordinator._maybe_leave_group = original  # type: ignore[method-assign]
        GroupCoordinator._send_req = original_send  # type: ignore[method-assign]
        RocksDBOptions.open = original_open  # type: ignore[method-assign]


@pytest.fixture
def patched_open() -> Iterator[None]:
    original_open = RocksDBOptions.open
    faust_internals.apply_patches()
    try:
        yield
    finally:
        RocksDBOptions.open = original_open  # type: ignore[method-assign]


def test_a_reopened_partition_store_gets_the_workers_options_not_the_saved_ones(
    tmp_path: Path, patched_open: None
) -> None:
    # rocksdict alone reopens an existing store with the options saved in it and its own
    # 8 MiB block cache; every open must have the worker's 2 MiB one, data intact.
    path = tmp_path / "partition-0"
    for _ in range(3):
        db = RocksDBOptions(**faust_app.ROCKSDB_OPTIONS).open(path)
        db[b"k"] = b"v"
        assert (
            db.property_int_value("rocksdb.block-cache-capacity")
            == (faust_app.ROCKSDB_OPTIONS["block_cache_size"])
        )
        assert db[b"k"] == b"v"
        db.close()
    saved = max(path.glob("OPTIONS-*")).read_text()
    assert "index_type=kTwoLevelIndexSearch" in saved
    assert "partition_filters=true" in saved
