"""The segmented log of one partition (or of the Raft metadata log): a directory of segments.

Directory layout::

    00000000000000000000.log / .index / .timeindex   the oldest segment (kraftpy.storage.segment)
    00000000000000004096.log / .index / .timeindex   ... one trio per segment, named by base offset
    offsets-checkpoint       log start offset, recovery point, high watermark (kraftpy.storage.checkpoint)
    leader-epoch-checkpoint  epoch → start offset (kraftpy.storage.leader_epoch)
    .kraftpy_cleanshutdown   present only while the log is closed after a clean close (empty file)

Offsets, with their invariants::

    log_start_offset <= high_watermark <= log_end_offset
    recovery_point <= log_end_offset     every batch below it has been fsynced

Theory of operation.

* Append. A leader append validates the batches (whole, magic 2, CRC-32C, size), stamps each
  with its base offset and the leader epoch (outside the CRC), and writes them all with one
  ``os.writev`` to the active segment (the stamped header prefixes from small copies, the rest
  from the caller's buffer, so the data is not copied in user space); a follower append keeps the offsets in the batches, which
  must start at or after the log end offset. The first batch of a new epoch updates the
  leader-epoch cache. Before the write the active segment is rolled if the append would take
  it past ``segment_bytes``, if its first batch is ``segment_ms`` older than the append, or if
  the offsets would not fit its int32 relative offsets. Rolling fsyncs the finished segment.
* Durability. Nothing is fsynced per append unless ``flush_interval_messages`` or
  ``flush_interval_ms`` says so; :meth:`Log.flush` fsyncs the data (and the directory, when
  segments were created or deleted) and moves the recovery point. Small state files are
  replaced atomically. :meth:`Log.close` flushes everything, saves the indexes and leaves the
  clean-shutdown marker; :meth:`Log.open` removes the marker before anything else.
* Recovery. Without the marker, every segment from the one holding the recovery point on is
  re-read with CRCs; the log is cut at the first bad batch (the file truncated there, later
  segments deleted) and the leader-epoch cache is cut to the new end. Indexes of the checked
  segments are rebuilt; the others' are loaded only if they pass their checks.
* Retention. Whole segments below the high watermark are deleted when their newest batch is
  older than ``retention_ms``, when the log is over ``retention_bytes``, or when they lie wholly
  below the log start offset (after :meth:`Log.delete_records_before`). Files are renamed
  ``.deleted`` first, so a crash leaves nothing ambiguous; open removes leftovers.

A Log is not thread-safe: the caller serialises calls (the trio layers hold a lock and run the
blocking calls in ``trio.to_thread``).
"""

from __future__ import annotations

import bisect
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import attrs
import structlog

from kraftpy.protocol.batch_header import BatchHeader, CorruptRecordError, check_batch, read_header, stamp
from kraftpy.protocol.records import decode_batch
from kraftpy.storage.checkpoint import (
    OFFSETS_CHECKPOINT_FILE,
    TMP_SUFFIX,
    CheckpointError,
    OffsetsCheckpoint,
)
from kraftpy.storage.fsutil import fsync_dir
from kraftpy.storage.index import INDEX_SUFFIX, INT32_MAX, TIME_INDEX_SUFFIX
from kraftpy.storage.leader_epoch import LEADER_EPOCH_CHECKPOINT_FILE, LeaderEpochCache
from kraftpy.storage.log_config import LogConfig
from kraftpy.storage.segment import (
    DELETED_SUFFIX,
    LOG_SUFFIX,
    BatchInfo,
    FileRegion,
    LogSegment,
    parse_segment_file_name,
)

CLEAN_SHUTDOWN_FILE = ".kraftpy_cleanshutdown"
#: The header bytes a leader stamps: base_offset (0-7), batch_length, partition_leader_epoch (12-15).
_STAMPED_PREFIX = 16
LOG_APPEND_TIME = 1

_logger = structlog.get_logger(__name__)


class OffsetOutOfRangeError(ValueError):
    """An offset outside ``[log_start_offset, log_end_offset]`` (or, for DeleteRecords, above the HW)."""


class RecordTooLargeError(ValueError):
    """A batch larger than ``max_message_bytes``."""


class UnexpectedAppendOffsetError(ValueError):
    """A follower append whose offsets start below the log end offset or go backwards."""


class LogClosedError(RuntimeError):
    """The log was closed."""


@attrs.frozen
class AppendInfo:
    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    record_count: int
    batch_count: int
    size: int


@attrs.frozen
class TimestampOffset:
    """The answer to ListOffsets by timestamp: the first record at or after the timestamp."""

    timestamp: int
    offset: int
    leader_epoch: int


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class Log:
    """A segmented, append-only log in one directory. Build it with :meth:`Log.open`."""

    def __init__(self, directory: Path, config: LogConfig, clock: Callable[[], int]) -> None:
        self.directory = directory
        self.config = config
        self.clock = clock
        self._log = _logger.bind(log_dir=directory.name)
        #: Sorted by base offset; never empty while open; the last one is the active segment.
        self._segments: list[LogSegment] = []
        self._log_start_offset = 0
        self._recovery_point = 0
        self._high_watermark = 0
        self._unflushed_messages = 0
        self._last_flush_ms = clock()
        #: Segment files were created, renamed or deleted since the directory was last fsynced.
        self._directory_unsynced = False
        self._closed = False
        self.leader_epoch_cache = LeaderEpochCache(None, lambda: self.log_end_offset)

    # -- opening ---------------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        directory: str | os.PathLike[str],
        config: LogConfig | None = None,
        *,
        clock: Callable[[], int] = wall_clock_ms,
    ) -> Log:
        """Open (creating if needed) the log in ``directory``, recovering it after an unclean stop.

        ``clock`` returns milliseconds; it drives roll, retention and flush timing.
        """
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        log = cls(directory, config or LogConfig(), clock)
        log._load()
        return log

    def _load(self) -> None:
        directory = self.directory
        self._remove_leftovers()
        marker = directory / CLEAN_SHUTDOWN_FILE
        clean = marker.exists()
        if clean:
            marker.unlink()
            fsync_dir(directory)
        try:
            checkpoint = OffsetsCheckpoint.read(directory) or OffsetsCheckpoint()
        except CheckpointError as exc:
            self._log.warning("offsets checkpoint unreadable; recovering the whole log", error=str(exc))
            checkpoint, clean = OffsetsCheckpoint(), False
        epoch_path = directory / LEADER_EPOCH_CHECKPOINT_FILE
        try:
            self.leader_epoch_cache = LeaderEpochCache.load(epoch_path, lambda: self.log_end_offset)
            rebuild_epochs = False
        except CheckpointError as exc:
            self._log.warning("leader epoch checkpoint unreadable; rebuilding it from the log", error=str(exc))
            self.leader_epoch_cache = LeaderEpochCache(epoch_path, lambda: self.log_end_offset)
            rebuild_epochs = True

        now = self.clock()
        interval = self.config.index_interval_bytes
        bases = sorted(
            base for name in os.listdir(directory) if (base := parse_segment_file_name(name)) is not None
        )
        self._segments = [LogSegment.open(directory, base, interval, now) for base in bases]

        recover_from: int | None = None
        for i, segment in enumerate(self._segments):
            below_recovery_point = i + 1 < len(self._segments) and bases[i + 1] <= checkpoint.recovery_point
            if not clean and not below_recovery_point:
                recover_from = i
                break
            try:
                segment.load(trust_indexes=True)
            except CorruptRecordError as exc:
                self._log.warning("unreadable batch in a segment thought sound", segment=segment.base_offset,
                                  error=str(exc))
                recover_from = i
                break
        if recover_from is not None:
            self._recover(recover_from, rebuild_epochs)
        elif rebuild_epochs:
            self._rebuild_leader_epoch_cache()

        if not self._segments:
            start = max(checkpoint.log_start_offset, 0)
            self._segments.append(LogSegment.create(directory, start, interval, now))
            self._directory_unsynced = True
        self._log_start_offset = max(checkpoint.log_start_offset, self._segments[0].base_offset)
        if self._log_start_offset > self.log_end_offset:
            self._log.warning("log start offset beyond the recovered end; starting empty there",
                              log_start_offset=self._log_start_offset, log_end_offset=self.log_end_offset)
            self._replace_all_segments(self._log_start_offset)
        if recover_from is not None or clean:
            for segment in self._segments:
                segment.flush()
            self._recovery_point = self.log_end_offset
        else:
            self._recovery_point = min(checkpoint.recovery_point, self.log_end_offset)
        self._high_watermark = min(max(checkpoint.high_watermark, self._log_start_offset), self.log_end_offset)
        self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
        self.leader_epoch_cache.truncate_from_start(self._log_start_offset)
        if self._directory_unsynced:
            fsync_dir(directory)
            self._directory_unsynced = False
        self.checkpoint()
        self._last_flush_ms = now

    def _remove_leftovers(self) -> None:
        """Delete ``.deleted`` files, half-written checkpoints and indexes without a log file."""
        names = set(os.listdir(self.directory))
        for name in names:
            orphan_index = False
            for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX):
                base = parse_segment_file_name(name, suffix)
                if base is not None and f"{base:020d}{LOG_SUFFIX}" not in names:
                    orphan_index = True
            if (
                name.endswith(DELETED_SUFFIX)
                or name in (OFFSETS_CHECKPOINT_FILE + TMP_SUFFIX, LEADER_EPOCH_CHECKPOINT_FILE + TMP_SUFFIX)
                or orphan_index
            ):
                (self.directory / name).unlink(missing_ok=True)

    def _recover(self, start: int, rebuild_epochs: bool) -> None:
        """CRC-check segments ``start``.. and cut the log at the first bad batch."""
        cache = self.leader_epoch_cache
        if rebuild_epochs:
            cache.clear()
            for segment in self._segments[:start]:
                self._assign_epochs(segment)
        else:
            cache.truncate_from_end(self._segments[start].base_offset)

        def on_batch(header: BatchHeader) -> None:
            self._maybe_assign_epoch(header.partition_leader_epoch, header.base_offset)

        for i in range(start, len(self._segments)):
            segment = self._segments[i]
            previous_end = self._segments[i - 1].next_offset if i else segment.base_offset
            if segment.base_offset < previous_end:
                # Overlaps the segment before it: nothing from here on can be trusted.
                self._log.warning("segment overlaps the previous one; dropping it and the rest",
                                  segment=segment.base_offset)
                self._delete_segments_now(self._segments[i:])
                break
            cut = segment.recover(on_batch)
            if cut:
                self._log.warning("cut a corrupt or torn tail", segment=segment.base_offset,
                                  position=segment.size, bytes_cut=cut)
                self._delete_segments_now(self._segments[i + 1 :])
                break
        if self._segments:
            cache.truncate_from_end(self.log_end_offset)

    def _assign_epochs(self, segment: LogSegment) -> None:
        for _, header in segment.batches_from(0):
            self._maybe_assign_epoch(header.partition_leader_epoch, header.base_offset)

    def _rebuild_leader_epoch_cache(self) -> None:
        self.leader_epoch_cache.clear()
        for segment in self._segments:
            self._assign_epochs(segment)

    def _maybe_assign_epoch(self, epoch: int, offset: int) -> None:
        latest = self.leader_epoch_cache.latest_epoch
        if epoch >= 0 and (latest is None or epoch > latest):
            self.leader_epoch_cache.assign(epoch, offset)

    # -- state -----------------------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._segments[-1].next_offset

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        return tuple(self._segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def size_in_bytes(self) -> int:
        return sum(segment.size for segment in self._segments)

    @property
    def latest_epoch(self) -> int | None:
        return self.leader_epoch_cache.latest_epoch

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """``(epoch, end_offset)`` as :meth:`LeaderEpochCache.end_offset_for` defines it."""
        return self.leader_epoch_cache.end_offset_for(epoch)

    def update_high_watermark(self, offset: int) -> int:
        """Set the high watermark, clamped to ``[log_start_offset, log_end_offset]``; returns it.

        Kept in memory; :meth:`checkpoint`, :meth:`flush` with a periodic caller, and :meth:`close`
        persist it.
        """
        self._high_watermark = min(max(offset, self._log_start_offset), self.log_end_offset)
        return self._high_watermark

    def checkpoint(self) -> None:
        """Write log start offset, recovery point and high watermark atomically."""
        OffsetsCheckpoint(self._log_start_offset, self._recovery_point, self._high_watermark).write(self.directory)

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"log {self.directory.name} is closed")

    # -- appending -------------------------------------------------------------------------------

    def _validate(self, records: bytes | bytearray | memoryview, crc_verified: bool = False
                  ) -> list[tuple[int, BatchHeader]]:
        if not len(records):
            raise ValueError("an append needs at least one batch")
        batches = []
        position = 0
        while position < len(records):
            if crc_verified:
                header = read_header(records, position)
                if len(records) - position < header.size:
                    raise CorruptRecordError(f"truncated batch: {header.size} bytes announced", position)
            else:
                header = check_batch(records, position)
            if header.size > self.config.max_message_bytes:
                raise RecordTooLargeError(
                    f"batch of {header.size} bytes is larger than max.message.bytes={self.config.max_message_bytes}"
                )
            if header.last_offset_delta < 0:
                raise CorruptRecordError(f"negative last offset delta {header.last_offset_delta}", position)
            batches.append((position, header))
            position += header.size
        return batches

    def append_as_leader(self, records: bytes | bytearray | memoryview, leader_epoch: int, *,
                         crc_verified: bool = False) -> AppendInfo:
        """Append whole batches, assigning offsets from the log end offset and stamping ``leader_epoch``.

        ``crc_verified`` says the caller has just checked every batch's CRC (the broker does, before
        its producer-state checks), so the CRC is not computed a second time on the produce path.

        ``records`` is not modified: the stamped first bytes of each header are written from a
        small copy, the rest straight from ``records``, all in one ``writev``.
        """
        self._check_open()
        view = memoryview(records)
        batches = self._validate(view, crc_verified)
        offset = self.log_end_offset
        infos, parts = [], []
        for position, header in batches:
            stamped = bytearray(view[position : position + _STAMPED_PREFIX])
            stamp(stamped, 0, offset, leader_epoch)
            parts.append(stamped)
            parts.append(view[position + _STAMPED_PREFIX : position + header.size])
            last = offset + header.last_offset_delta
            infos.append(
                BatchInfo(position, header.size, offset, last, header.max_timestamp, leader_epoch, header.record_count)
            )
            offset = last + 1
        return self._append(parts, len(view), infos)

    def append_as_follower(self, records: bytes | bytearray | memoryview) -> AppendInfo:
        """Append whole batches keeping their offsets, which must start at or after the log end offset."""
        self._check_open()
        batches = self._validate(records)
        expected = self.log_end_offset
        infos = []
        for position, header in batches:
            if header.base_offset < expected:
                raise UnexpectedAppendOffsetError(
                    f"batch at offset {header.base_offset} would be appended below offset {expected}"
                )
            infos.append(
                BatchInfo(position, header.size, header.base_offset, header.last_offset, header.max_timestamp,
                          header.partition_leader_epoch, header.record_count)
            )
            expected = header.next_offset
        return self._append([records], len(records), infos)

    def _append(self, parts: list, size: int, infos: list[BatchInfo]) -> AppendInfo:
        now = self.clock()
        max_timestamp, offset_of_max = -1, infos[0].last_offset
        for info in infos:
            if info.max_timestamp > max_timestamp:
                max_timestamp, offset_of_max = info.max_timestamp, info.last_offset
        segment = self._maybe_roll(size, infos[0].base_offset, infos[-1].last_offset, max_timestamp, now)
        segment.append(parts, infos, now)
        for info in infos:
            self._maybe_assign_epoch(info.leader_epoch, info.base_offset)
        records = sum(info.record_count for info in infos)
        self._unflushed_messages += records
        if (
            self._unflushed_messages >= self.config.flush_interval_messages
            or now - self._last_flush_ms >= self.config.flush_interval_ms
        ):
            self.flush()
        return AppendInfo(infos[0].base_offset, infos[-1].last_offset, max_timestamp, offset_of_max, records,
                          len(infos), size)

    def _maybe_roll(self, size: int, first_offset: int, last_offset: int, max_timestamp: int, now: int) -> LogSegment:
        segment = self._segments[-1]
        offsets_fit = last_offset - segment.base_offset <= INT32_MAX
        if segment.is_empty and offsets_fit:
            return segment
        if segment.first_batch_timestamp >= 0:
            waited = max_timestamp - segment.first_batch_timestamp
        else:
            waited = now - segment.created_ms
        if (
            not offsets_fit
            or segment.size + size > self.config.segment_bytes
            or waited >= self.config.segment_ms
        ):
            return self.roll(max(first_offset, self.log_end_offset))
        return segment

    def roll(self, base_offset: int | None = None) -> LogSegment:
        """Start a new active segment at ``base_offset`` (default: the log end offset).

        The finished segment's indexes are saved and its data fsynced. Rolling an empty active
        segment replaces it (or keeps it, when it already starts there).
        """
        self._check_open()
        new_base = self.log_end_offset if base_offset is None else base_offset
        if new_base < self.log_end_offset:
            raise ValueError(f"cannot roll to {new_base}, below the log end offset {self.log_end_offset}")
        active = self._segments[-1]
        if active.is_empty:
            if active.base_offset == new_base:
                return active
            self._segments.pop()
            self._delete_segments_later([active])()
        else:
            active.save_indexes()
            self.flush(self.log_end_offset)
        segment = LogSegment.create(self.directory, new_base, self.config.index_interval_bytes, self.clock())
        self._segments.append(segment)
        self._directory_unsynced = True
        return segment

    # -- reading ---------------------------------------------------------------------------------

    def read(
        self,
        start_offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        min_one_batch: bool = True,
        whole_batches: bool = False,
    ) -> FileRegion:
        """A file region starting with the batch that holds ``start_offset``, for ``os.sendfile``.

        At most ``max_bytes`` long, except that a first batch larger than that is returned whole
        when ``min_one_batch``. Only batches whose last offset is below ``max_offset`` (say, the
        high watermark) are included. The region stays within one segment and, as in Kafka, may
        end inside a batch unless ``whole_batches``. Empty at the log end offset.
        """
        self._check_open()
        end = self.log_end_offset
        if start_offset < self._log_start_offset or start_offset > end:
            raise OffsetOutOfRangeError(
                f"offset {start_offset} is outside [{self._log_start_offset}, {end}] of {self.directory.name}"
            )
        bases = [segment.base_offset for segment in self._segments]
        i = max(0, bisect.bisect_right(bases, start_offset) - 1)
        for segment in self._segments[i:]:
            region = segment.read(start_offset, max_bytes, max_offset=max_offset, min_one_batch=min_one_batch,
                                  whole_batches=whole_batches)
            if region is not None:
                return region
        active = self._segments[-1]
        return FileRegion(active.path, active.fd, active.size, 0, start_offset)

    def read_bytes(
        self,
        start_offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        min_one_batch: bool = True,
        whole_batches: bool = False,
    ) -> bytes:
        """As :meth:`read`, copied into memory."""
        return self.read(
            start_offset, max_bytes, max_offset=max_offset, min_one_batch=min_one_batch, whole_batches=whole_batches
        ).read_bytes()

    def offset_for_timestamp(self, timestamp: int) -> TimestampOffset | None:
        """The first record at or after the log start offset whose timestamp is >= ``timestamp``."""
        self._check_open()
        for segment in self._segments:
            if segment.max_timestamp < timestamp or segment.next_offset <= self._log_start_offset:
                continue
            found = segment.find_by_timestamp(timestamp)
            if found is None:
                continue
            for position, header in segment.batches_from(found[0]):
                if header.max_timestamp < timestamp or header.last_offset < self._log_start_offset:
                    continue
                result = self._first_record_at_or_after(segment, position, header, timestamp)
                if result is not None:
                    return result
        return None

    def _first_record_at_or_after(
        self, segment: LogSegment, position: int, header: BatchHeader, timestamp: int
    ) -> TimestampOffset | None:
        epoch = header.partition_leader_epoch
        if header.timestamp_type == LOG_APPEND_TIME:
            # Every record carries the batch's max timestamp.
            return TimestampOffset(header.max_timestamp, max(header.base_offset, self._log_start_offset), epoch)
        decoded = decode_batch(os.pread(segment.fd, header.size, position), 0, verify_crc=False)
        for record in decoded.records:
            if record.timestamp >= timestamp and record.offset >= self._log_start_offset:
                return TimestampOffset(record.timestamp, record.offset, epoch)
        return None

    # -- truncation and retention ----------------------------------------------------------------

    def truncate_to(self, offset: int) -> bool:
        """Remove the batch holding ``offset`` and everything after it; returns whether anything went.

        Used when a follower finds where its log diverged from the leader's. The leader-epoch
        cache, high watermark, recovery point and (if needed) log start offset follow the new end.
        """
        self._check_open()
        if offset < 0:
            raise ValueError(f"cannot truncate to negative offset {offset}")
        if offset >= self.log_end_offset:
            return False
        if offset < self._segments[0].base_offset:
            self.truncate_fully_and_start_at(offset)
            return True
        doomed = [segment for segment in self._segments if segment.base_offset > offset]
        if doomed:
            del self._segments[len(self._segments) - len(doomed) :]
            self._delete_segments_now(doomed)
        self._segments[-1].truncate_to(offset)
        end = self.log_end_offset
        self.leader_epoch_cache.truncate_from_end(end)
        self._log_start_offset = min(self._log_start_offset, end)
        self._high_watermark = min(self._high_watermark, end)
        self._recovery_point = min(self._recovery_point, end)
        self.checkpoint()
        return True

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop every segment and start empty at ``offset`` (a follower far behind the leader's start)."""
        self._check_open()
        if offset < 0:
            raise ValueError(f"cannot start at negative offset {offset}")
        self._replace_all_segments(offset)
        self.leader_epoch_cache.clear()
        self._log_start_offset = self._recovery_point = self._high_watermark = offset
        self.checkpoint()

    def _replace_all_segments(self, offset: int) -> None:
        doomed = list(self._segments)
        for segment in doomed:
            segment.rename_to_deleted()
        self._segments = [LogSegment.create(self.directory, offset, self.config.index_interval_bytes, self.clock())]
        fsync_dir(self.directory)
        for segment in doomed:
            segment.delete()

    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: move the log start offset up to ``offset`` (at most the HW); returns it."""
        self._check_open()
        if offset > self._high_watermark:
            raise OffsetOutOfRangeError(
                f"cannot delete records before {offset}: above the high watermark {self._high_watermark}"
            )
        if offset > self._log_start_offset:
            self._set_log_start_offset(offset)
            self._delete_matching(lambda segment, following: following is not None
                                  and following.base_offset <= self._log_start_offset)
        return self._log_start_offset

    def delete_old_segments(self) -> int:
        """Apply retention (time, then size, then log start offset); returns how many segments went."""
        self._check_open()
        deleted = 0
        if self.config.retention_ms >= 0:
            now = self.clock()
            deleted += self._delete_matching(
                lambda segment, following: now - segment.largest_timestamp > self.config.retention_ms
            )
        if self.config.retention_bytes >= 0:
            excess = self.size_in_bytes - self.config.retention_bytes

            def over_size(segment: LogSegment, following: LogSegment | None) -> bool:
                nonlocal excess
                if excess - segment.size >= 0:
                    excess -= segment.size
                    return True
                return False

            deleted += self._delete_matching(over_size)
        deleted += self._delete_matching(
            lambda segment, following: following is not None and following.base_offset <= self._log_start_offset
        )
        return deleted

    def _delete_matching(self, predicate: Callable[[LogSegment, LogSegment | None], bool]) -> int:
        """Delete the oldest segments while ``predicate`` holds and they lie wholly below the HW."""
        doomed = []
        for i, segment in enumerate(self._segments):
            following = self._segments[i + 1] if i + 1 < len(self._segments) else None
            upper = following.base_offset if following is not None else self.log_end_offset
            if following is None and segment.is_empty:
                break
            if self._high_watermark < upper or not predicate(segment, following):
                break
            doomed.append(segment)
        if not doomed:
            return 0
        if len(doomed) == len(self._segments):
            self.roll()
        del self._segments[: len(doomed)]
        finish = self._delete_segments_later(doomed)
        if self._segments[0].base_offset > self._log_start_offset:
            self._set_log_start_offset(self._segments[0].base_offset)
        finish()
        return len(doomed)

    def _set_log_start_offset(self, offset: int) -> None:
        self._log_start_offset = offset
        self._high_watermark = max(self._high_watermark, offset)
        self._recovery_point = max(self._recovery_point, min(self._segments[0].base_offset, self.log_end_offset))
        self.leader_epoch_cache.truncate_from_start(offset)
        self.checkpoint()

    def _delete_segments_later(self, segments: Iterable[LogSegment]) -> Callable[[], None]:
        """Rename the files ``.deleted`` now; the returned function removes them."""
        segments = list(segments)
        for segment in segments:
            segment.rename_to_deleted()
        self._directory_unsynced = True

        def finish() -> None:
            for segment in segments:
                segment.delete()

        return finish

    def _delete_segments_now(self, segments: list[LogSegment]) -> None:
        for segment in segments:
            if segment in self._segments:
                self._segments.remove(segment)
        self._delete_segments_later(segments)()

    # -- durability ------------------------------------------------------------------------------

    def flush(self, up_to_offset: int | None = None) -> None:
        """fsync the log up to ``up_to_offset`` (default: all of it) and move the recovery point there.

        Also fsyncs the directory when segment files were created or removed since the last time.
        """
        self._check_open()
        target = self.log_end_offset if up_to_offset is None else min(up_to_offset, self.log_end_offset)
        for segment in self._segments:
            # A no-op for segments fsynced since their last change. Segments starting at the
            # target count too: a truncation to empty must be durable like an append.
            if segment.base_offset <= target:
                segment.flush()
        self._recovery_point = max(self._recovery_point, target)
        if self._directory_unsynced:
            fsync_dir(self.directory)
            self._directory_unsynced = False
        self._last_flush_ms = self.clock()
        if target == self.log_end_offset:
            self._unflushed_messages = 0

    def flush_if_due(self) -> bool:
        """Flush when ``flush_interval_ms`` has passed since the last flush; for a periodic task."""
        self._check_open()
        if self._recovery_point < self.log_end_offset and (
            self.clock() - self._last_flush_ms >= self.config.flush_interval_ms
        ):
            self.flush()
            return True
        return False

    def close(self) -> None:
        """Flush everything, save indexes and checkpoints, and leave the clean-shutdown marker."""
        if self._closed:
            return
        for segment in self._segments:
            segment.save_indexes(fsync=True)
        self.flush()
        self.checkpoint()
        marker = os.open(self.directory / CLEAN_SHUTDOWN_FILE, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.fsync(marker)
        finally:
            os.close(marker)
        fsync_dir(self.directory)
        self._release()

    def abandon(self) -> None:
        """Close the files with no flush and no marker, as a crash would leave them (tests, tools)."""
        if not self._closed:
            self._release()

    def _release(self) -> None:
        for segment in self._segments:
            segment.close()
        self._closed = True

    def __enter__(self) -> Log:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"Log({self.directory.name}, start={self._log_start_offset}, end={self.log_end_offset}, "
            f"hw={self._high_watermark}, segments={len(self._segments)})"
        )
