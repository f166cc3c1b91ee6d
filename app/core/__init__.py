"""The timer logic itself, as pure functions and classes over plain data.

No Kafka client, no Faust, no RocksDB (import-linter enforces it): what a request means
(request_format, protowire, proto/), what a timer is (timer, recurrence, late), what
fires on tick S (wheel, firing, tick_gate), the store's key layout (keys) and value
layout (stored), the fired-topic record (fired), the rules a request must meet
(policy), clock checks, errors. Everything here is unit-tested without a broker.
"""
