"""The timer logic itself, as pure functions and classes over plain data.

No Kafka client, no Faust, no RocksDB (import-linter enforces it): what a request means
(request_format, protowire, proto/), what a timer is (timer, recurrence, late), what
fires on tick S (wheel, firing, tick_gate), the store's key layout (keys) and value
layout (stored), the fired-topic record (fired), the rules a request must meet
(policy), clock checks, errors. Everything here is unit-tested without a broker.

Errors, bounds, due, late, partitioner, protowire, recurrence and spread live in the
slim client (:mod:`kafka_timers_client`, ``clients/python``), which computes what it
sends with them; the modules of those names here re-export them, so worker and client
share one implementation (and import-linter keeps the client's copies pure too).
"""
