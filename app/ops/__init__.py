"""Operator tools over a whole deployment: export, import and migrate pending timers.

``jsonl`` is the line format (one pending timer a line); ``snapshot`` reads a
deployment's changelog into the pending timers and request offsets it holds;
``requests`` turns a pending timer back into the request that recreates it;
``export``, ``import_`` and ``migrate`` are the three commands. They read and write
Kafka only, never a worker's RocksDB: they work with workers running or stopped.
"""
