"""How Faust opens a table partition's RocksDB, and reaching the open database."""

from __future__ import annotations

from typing import Any

import rocksdict
from faust.stores.rocksdb import RocksDBOptions

__all__ = ["partition_db"]


#: Faust's own ``RocksDBOptions.open``, which :func:`_open_partition_db` replaces.
_FAUST_ROCKSDB_OPEN = RocksDBOptions.open


def _open_partition_db(self: Any, path: Any, *, read_only: bool = False) -> Any:
    """Faust's ``RocksDBOptions.open`` (rocksdict), with the options applied on every open.

    Two fixes to how Faust opens a partition's store:

    * **Options on reopen.** rocksdict opens an *existing* database with the column-family
      options saved in its OPTIONS file unless ``column_families`` is given, and a block
      cache cannot be saved in a file: a restarted worker's partitions would get
      rocksdict's default 8 MiB cache instead of the one asked for, and no change to the
      options would ever reach an existing store. Passing the default
      column family's options makes them apply.
    * **Index and filters in the bounded cache.** With Faust's binary-search index, the
      index and filter blocks of every table file stay in memory outside the cache, so RSS
      grows with the number of pending timers. A two-level (partitioned) index and
      partitioned filters, held in the block cache with only their top level pinned,
      keep RSS flat as pending grows, with index lookups as fast. Files written before
      keep their format until compaction rewrites them.
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


def partition_db(table: Any, partition: int) -> Any:
    """The rocksdict ``Rdict`` of one partition of a Faust RocksDB table (opened on demand)."""
    return table.data._db_for_partition(partition)
