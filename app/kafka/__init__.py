"""Kafka itself: client settings, topics and their configuration, readers.

Used by every process (workers, oscillators, the CLI, the audit); knows nothing of
Faust or of the worker.
"""
