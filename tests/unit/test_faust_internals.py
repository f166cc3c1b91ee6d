"""The private Faust/aiokafka attributes the worker relies on are all still there."""

from __future__ import annotations

from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path

import pytest
from aiokafka.consumer.group_coordinator import GroupCoordinator
from faust.stores.rocksdb import RocksDBOptions

from app.worker import faust_app, faust_internals
from app.worker.faust_internals import checks, stores
from app.worker.faust_internals import group as group_patches
from tests.support.cli import run_python


def test_every_private_attribute_the_worker_relies_on_exists() -> None:
    missing = checks.missing_internals()
    assert not missing, (
        f"faust-streaming {version('faust-streaming')} / aiokafka {version('aiokafka')} "
        f"lack what app/worker/faust_internals/ relies on: {', '.join(missing)}. "
        "Pin the tested versions (pyproject.toml) or port that package."
    )


def test_importing_the_worker_patches_nothing() -> None:
    # A fresh interpreter: other tests in this process may have started workers in it.
    code = (
        "import app.worker.faust_app\n"
        "from app.worker import faust_internals\n"
        "assert not faust_internals.patches_applied()\n"
        "faust_internals.apply_patches()\n"
        "assert faust_internals.patches_applied()\n"
    )
    run_python(code, timeout=60)


def test_patches_are_idempotent_and_can_be_removed() -> None:
    faust_internals.remove_patches()
    original_send = GroupCoordinator._send_req
    original_open = RocksDBOptions.open
    try:
        faust_internals.apply_patches()
        faust_internals.apply_patches()  # idempotent: the wrapper never wraps itself
        assert faust_internals.patches_applied()
        assert GroupCoordinator._maybe_leave_group is group_patches._maybe_leave_group
        assert GroupCoordinator._send_req is group_patches._send_req
        assert group_patches._AIOKAFKA_SEND_REQ is original_send
        assert RocksDBOptions.open is stores._open_partition_db
    finally:
        faust_internals.remove_patches()
    assert not faust_internals.patches_applied()
    assert GroupCoordinator._send_req is original_send
    assert RocksDBOptions.open is original_open


@pytest.fixture
def patched_open() -> Iterator[None]:
    faust_internals.apply_patches()
    try:
        yield
    finally:
        faust_internals.remove_patches()


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
