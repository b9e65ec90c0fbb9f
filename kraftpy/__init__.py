"""kraftpy: a Kafka-compatible, self-managed distributed commit log in Python."""

__version__ = "0.1.0"
