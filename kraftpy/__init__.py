"""kraftpy: a Kafka-compatible, self-managed distributed commit log in Python."""

from kraftpy import _codecache

__version__ = "0.1.0"

# Before any of kraftpy's classes is made: attrs' generated methods come from a bytecode cache.
_codecache.install()
