"""kafka-timers: durable one-second timers on Apache Kafka."""

__version__ = "0.1.0"
