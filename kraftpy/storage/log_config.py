"""Per-log settings, with Kafka's key names in the field docs and Kafka's defaults."""

from __future__ import annotations

import attrs

#: Java's Long.MAX_VALUE, which Kafka uses for "never" in its flush settings.
LONG_MAX = 2**63 - 1


def _positive(instance: object, attribute: attrs.Attribute, value: int) -> None:
    if value <= 0:
        raise ValueError(f"{attribute.name} must be positive, got {value}")


def _not_negative(instance: object, attribute: attrs.Attribute, value: int) -> None:
    if value < 0:
        raise ValueError(f"{attribute.name} must not be negative, got {value}")


def _ratio(instance: object, attribute: attrs.Attribute, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{attribute.name} must lie in [0, 1], got {value}")


def _unlimited_or_not_negative(instance: object, attribute: attrs.Attribute, value: int) -> None:
    if value < -1:
        raise ValueError(f"{attribute.name} must be -1 (unlimited) or at least 0, got {value}")


@attrs.frozen
class LogConfig:
    #: ``log.segment.bytes`` / ``segment.bytes``: roll when an append would take the segment past this.
    segment_bytes: int = attrs.field(default=1024 * 1024 * 1024, validator=_positive)
    #: ``log.roll.ms`` / ``segment.ms``: roll when the segment's first batch is this much older.
    segment_ms: int = attrs.field(default=7 * 24 * 3600 * 1000, validator=_positive)
    #: ``log.retention.ms`` / ``retention.ms``: delete segments whose newest batch is older; -1 keeps.
    retention_ms: int = attrs.field(default=7 * 24 * 3600 * 1000, validator=_unlimited_or_not_negative)
    #: ``log.retention.bytes`` / ``retention.bytes``: delete old segments above this size; -1 keeps.
    retention_bytes: int = attrs.field(default=-1, validator=_unlimited_or_not_negative)
    #: ``log.index.interval.bytes`` / ``index.interval.bytes``: bytes between sparse index entries.
    index_interval_bytes: int = attrs.field(default=4096, validator=_not_negative)
    #: ``log.flush.interval.messages`` / ``flush.messages``: fsync after this many records.
    flush_interval_messages: int = attrs.field(default=LONG_MAX, validator=_positive)
    #: ``log.flush.interval.ms`` / ``flush.ms``: fsync when the last fsync is this old.
    flush_interval_ms: int = attrs.field(default=LONG_MAX, validator=_not_negative)
    #: ``log.segment.delete.delay.ms`` / ``file.delete.delay.ms``: how long the files of a segment that
    #: left the log are kept before its owner removes them (readers may still hold regions of it).
    file_delete_delay_ms: int = attrs.field(default=60000, validator=_not_negative)
    #: ``message.max.bytes`` / ``max.message.bytes``: the largest batch accepted.
    max_message_bytes: int = attrs.field(default=1024 * 1024 + 12, validator=_positive)
    #: ``cleanup.policy`` holds ``delete``: retention by time and size applies (without it, only the
    #: log start offset removes segments).
    delete: bool = True
    #: ``cleanup.policy`` holds ``compact``: the log cleaner keeps the last record of each key
    #: (kraftpy.storage.cleaner).
    compact: bool = False
    #: ``log.cleaner.delete.retention.ms`` / ``delete.retention.ms``: how long a tombstone stays after
    #: the cleaning that first kept it (so a consumer reading from the start sees the delete).
    delete_retention_ms: int = attrs.field(default=86_400_000, validator=_not_negative)
    #: ``log.cleaner.min.compaction.lag.ms`` / ``min.compaction.lag.ms``: a record younger than this is
    #: never compacted away.
    min_compaction_lag_ms: int = attrs.field(default=0, validator=_not_negative)
    #: ``log.cleaner.max.compaction.lag.ms`` / ``max.compaction.lag.ms``: a record older than this is
    #: compacted whatever the dirty ratio.
    max_compaction_lag_ms: int = attrs.field(default=LONG_MAX, validator=_positive)
    #: ``log.cleaner.min.cleanable.ratio`` / ``min.cleanable.dirty.ratio``: the share of a log's bytes
    #: that must be dirty (written since its last cleaning) before it is cleaned.
    min_cleanable_ratio: float = attrs.field(default=0.5, validator=_ratio)
    #: ``log.preallocate`` / ``preallocate``: a new segment has the disk blocks of ``segment_bytes``
    #: allocated when it is created, given back past its data when it is rolled.
    preallocate: bool = False
