"""The segmented log of one partition (or of the Raft metadata log): a directory of segments.

Directory layout::

    00000000000000000000.log / .index / .timeindex   the oldest segment (kraftpy.storage.segment)
    00000000000000004096.log / .index / .timeindex   ... one trio per segment, named by base offset
    00000000000000004096.txnindex                    aborted transactions, beside a segment that has any
    leader-epoch-checkpoint  epoch → start offset (kraftpy.storage.leader_epoch)

Offsets, with their invariants::

    log_start_offset <= high_watermark <= log_end_offset
    recovery_point <= log_end_offset     every batch below it has been fsynced

A log does not persist these offsets and does not know whether it was closed cleanly: its owner
does, and hands them to :meth:`Log.open` (`LogOffsets`, ``clean_shutdown``). For the partitions
of a broker that is the log directory's checkpoint files and clean-shutdown marker
(:mod:`kraftpy.storage.log_manager`, Kafka's layout); the Raft metadata log keeps its own marker
and derives its start from its snapshots (:mod:`kraftpy.raft.file_log`). :attr:`Log.offsets`
says what to persist.

Theory of operation.

* Append. A leader append validates the batches (whole, magic 2, CRC-32C, size), stamps each
  with its base offset and the leader epoch (outside the CRC), and writes them all with one
  ``os.writev`` to the active segment (the stamped header prefixes from small copies, the rest
  from the caller's buffer, so the data is not copied in user space); a follower append keeps the
  offsets in the batches, which must start at or after the log end offset. The first batch of a
  new epoch updates the leader-epoch cache. An append is a write into the page cache; it never
  fsyncs (:attr:`flush_due` tells the owner when the flush policy asks for one).
* Roll. The active segment is rolled when an append would take it past ``segment_bytes``, when
  its first batch is ``segment_ms`` older than the append, or when the offsets would not fit its
  int32 relative offsets (:meth:`needs_roll`). Rolling creates three files and fsyncs the
  finished segment: an owner that must not block (the broker) calls :meth:`roll` off its event
  loop before the append; an append that still finds a roll due rolls inline.
* Durability. :meth:`Log.flush` fsyncs the data (and the directory, when segments were created
  or deleted), writes the leader-epoch checkpoint if it changed, and moves the recovery point.
  The epoch checkpoint is written at flush time, not on every change: an epoch entry matters
  after a crash only for batches below the recovery point, and those were flushed with it.
  :meth:`Log.close` flushes everything and saves the indexes.
* Recovery. Unless the owner says the last shutdown was clean, every segment from the one
  holding the recovery point on is re-read with CRCs; the log is cut at the first bad batch (the
  file truncated there, later segments deleted) and the leader-epoch cache is cut to the new
  end. Indexes of the checked segments are rebuilt; the others' are loaded only if they pass
  their checks. The ``.txnindex`` of a checked segment is rebuilt by replaying the transactional
  batches and markers (:class:`~kraftpy.storage.txn_index.TransactionReplay`), primed with the
  transactions open at its start by a header walk of the segments before it (Kafka rebuilds its
  producer state from the log start the same way when it has no snapshot); a ``.txnindex`` that
  fails its checks has its segment checked too.
* Retention. Whole segments below the high watermark are deleted when their newest batch is
  older than ``retention_ms``, when the log is over ``retention_bytes``, or when they lie wholly
  below the log start offset (after :meth:`Log.delete_records_before`). Deleting is two steps,
  as in Kafka: the segments leave the log and their files are renamed ``.deleted`` at once (a
  crash leaves nothing ambiguous; open removes leftovers), and their descriptors are closed and
  files removed by :meth:`delete_detached_segments`, which the owner calls later (the broker
  after ``log.segment.delete.delay.ms``), so that a reader still holding a region of one never
  sees its descriptor closed under it.

* Compaction. The log cleaner (:mod:`kraftpy.storage.cleaner`) writes a cleaned copy of some
  consecutive non-active segments as ``<base>.log.cleaned`` (and its indexes), fsynced, then
  :meth:`replace_segments` swaps it in with Kafka's crash-safe protocol::

      0. <base>.txnindex.cleaned → .txnindex.swap   (it cannot be rebuilt: it must not be left behind)
      1. <base>.log.cleaned  → <base>.log.swap      the commit point (then its indexes, then fsync dir)
      2. each old segment    → <old>.*.deleted      (then fsync dir)
      3. <base>.*.swap       → <base>.*              indexes first, the log last (then fsync dir)

  and takes the old segments out of the list as retention does (detached, removed later). On open,
  ``.cleaned`` files are removed (the swap had not begun: the old segments stand), and each
  ``<base>.log.swap`` is finished: the segments whose base offsets lie in ``[base, the swap's next
  offset)`` are removed (``base`` alone for an empty swap) and the swap takes its final name. The
  cleaner keeps that range exact: the last segment a cleaned segment replaces always contributes a
  batch to it, unless it replaces one segment only. A crash therefore leaves each swap wholly done
  or not begun, never a mix; a pass's swaps go in log order, so a crash between two leaves the
  first ones done, which is itself a valid cleaned log.

Threads. A Log is not thread-safe for writers: its owner serialises every call that changes it
(appends, rolls, flushes, truncation, retention, close) and may run those in a worker thread.
Reads (:meth:`read`, offsets, the epoch cache) may run on another thread *while* one such call
runs: the segment list is replaced, never edited in place, and no descriptor a reader can still
reach is closed before :meth:`delete_detached_segments`.
"""

from __future__ import annotations

import bisect
import os
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import attrs
import structlog

from kraftpy.protocol.batch_header import (
    HEADER_SIZE,
    MAGIC_OFFSET,
    BatchHeader,
    CorruptRecordError,
    check_batch,
    read_header,
    stamp,
)
from kraftpy.protocol.records import decode_batch
from kraftpy.protocol.types import FileRegion
from kraftpy.storage.checkpoint import TMP_SUFFIX, CheckpointError, LogOffsets
from kraftpy.storage.descriptors import DESCRIPTORS
from kraftpy.storage.fsutil import fsync_dir
from kraftpy.storage.index import INDEX_SUFFIX, INT32_MAX, TIME_INDEX_SUFFIX, CorruptIndexError
from kraftpy.storage.leader_epoch import LEADER_EPOCH_CHECKPOINT_FILE, LeaderEpochCache
from kraftpy.storage.log_config import LogConfig
from kraftpy.storage.segment import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    LOG_SUFFIX,
    SEGMENT_SUFFIXES,
    SWAP_SUFFIX,
    BatchInfo,
    LogSegment,
    parse_segment_file_name,
    segment_file_name,
)
from kraftpy.storage.txn_index import TXN_INDEX_SUFFIX, AbortedTxn, TransactionReplay

if TYPE_CHECKING:
    from kraftpy.storage.writeback import Writeback

#: The header bytes a leader stamps: base_offset (0-7), batch_length, partition_leader_epoch (12-15).
_STAMPED_PREFIX = MAGIC_OFFSET
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
class SegmentSwap:
    """A cleaned segment, written beside the log as ``<base>.*.cleaned`` and fsynced, and the
    consecutive non-active segments of the log it takes the place of (the first of which has its
    base offset). See :meth:`Log.replace_segments`."""

    cleaned: LogSegment
    replaces: tuple[LogSegment, ...]


@attrs.frozen
class TimestampOffset:
    """The answer to ListOffsets by timestamp: the first record at or after the timestamp."""

    timestamp: int
    offset: int
    leader_epoch: int


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def _no_crash(step: str) -> None:
    pass


def _next_offset_of(path: Path, base_offset: int) -> int:
    """The offset after the last whole batch of a segment file (``base_offset`` when it has none)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        position, next_offset = 0, base_offset
        while size - position >= HEADER_SIZE:
            header = read_header(os.pread(fd, HEADER_SIZE, position))
            if position + header.size > size:
                break
            next_offset = header.next_offset
            position += header.size
    except CorruptRecordError:
        pass
    finally:
        os.close(fd)
    return next_offset


class Log:
    """A segmented, append-only log in one directory. Build it with :meth:`Log.open`."""

    def __init__(self, directory: Path, config: LogConfig, clock: Callable[[], int]) -> None:
        self.directory = directory
        self.config = config
        self.clock = clock
        self._log = _logger.bind(log_dir=directory.name)
        #: Asks the kernel to write appended data steadily (set by the broker's LogManager; None: the
        #: kernel's own write-back alone).
        self.writeback: Writeback | None = None
        #: Sorted by base offset; never empty while open; the last one is the active segment.
        #: Replaced, never edited in place (readers on another thread may hold the old list).
        self._segments: list[LogSegment] = []
        #: Segments no longer in the log whose files await `delete_detached_segments`.
        self._detached: list[LogSegment] = []
        self._log_start_offset = 0
        self._recovery_point = 0
        self._high_watermark = 0
        self._unflushed_messages = 0
        self._last_flush_ms = clock()
        #: Segment files were created, renamed or deleted since the directory was last fsynced.
        self._directory_unsynced = False
        self._closed = False
        self.leader_epoch_cache = LeaderEpochCache(None, lambda: self.log_end_offset)
        #: The directory's file names as `open` found them (after removing leftovers), for the opener to
        #: find its own files in (the producer snapshots) without listing again; the opener drops it
        #: (it is stale once anything writes to the directory).
        self.listing_at_open: list[str] | None = None

    # -- opening ---------------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        directory: str | os.PathLike[str],
        config: LogConfig | None = None,
        *,
        clock: Callable[[], int] = wall_clock_ms,
        offsets: LogOffsets | None = None,
        clean_shutdown: bool = False,
    ) -> Log:
        """Open (creating if needed) the log in ``directory``, recovering it after an unclean stop.

        ``offsets`` are what the owner recorded for this log (None: nothing, so every segment is
        checked and the log starts where its first segment does); ``clean_shutdown`` says the
        log was closed cleanly after those offsets were recorded, so no segment needs checking.
        ``clock`` returns milliseconds; it drives roll, retention and flush timing.
        """
        directory = Path(directory)
        try:
            names = os.listdir(directory)
        except FileNotFoundError:
            directory.mkdir(parents=True, exist_ok=True)
            names = []
        log = cls(directory, config or LogConfig(), clock)
        log._load(offsets or LogOffsets(), clean_shutdown and offsets is not None, names)
        return log

    def _load(self, checkpoint: LogOffsets, clean: bool, names: list[str]) -> None:
        """``names``: the directory's listing, read once by `open` (a broker opens 100,000 logs at a
        start: each listing and each file opened counts) and read again only after a step changed it."""
        directory = self.directory
        if self._complete_interrupted_swaps(names):
            names = os.listdir(directory)
        if self._remove_leftovers(names):
            names = os.listdir(directory)
        present = set(names)
        self.listing_at_open = names
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
        bases = sorted(base for name in names if (base := parse_segment_file_name(name)) is not None)
        self._segments = []
        for base in bases:
            segment = LogSegment.open(directory, base, interval, now, present)
            self._segments.append(segment)
            DESCRIPTORS.release(segment)  # within log.open.segments.max even for thousands of segments

        recover_from: int | None = None
        for i, segment in enumerate(self._segments):
            below_recovery_point = i + 1 < len(self._segments) and bases[i + 1] <= checkpoint.recovery_point
            if not clean and not below_recovery_point:
                recover_from = i
                break
            try:
                if i + 1 < len(self._segments) and (clean or below_recovery_point):
                    segment.defer_load()  # an old segment: its indexes are read when first needed
                    continue
                if segment.size == 0:
                    segment.load_empty()  # nothing to index: no file opened
                else:
                    segment.load(trust_indexes=True)
                    DESCRIPTORS.release(segment)
            except (CorruptRecordError, CorruptIndexError) as exc:
                self._log.warning("unreadable batch or index in a segment thought sound", segment=segment.base_offset,
                                  error=str(exc))
                recover_from = i
                break
        if recover_from is not None:
            self._recover(recover_from, rebuild_epochs)
        elif rebuild_epochs:
            self._rebuild_leader_epoch_cache()

        created = not self._segments
        if created:
            start = max(checkpoint.log_start_offset, 0)
            self._segments.append(LogSegment.create(directory, start, interval, now,
                                                    reserve_bytes=self._reserve_bytes()))
            self._directory_unsynced = True
        self._log_start_offset = max(checkpoint.log_start_offset, self._segments[0].base_offset)
        if self._log_start_offset > self.log_end_offset:
            self._log.warning("log start offset beyond the recovered end; starting empty there",
                              log_start_offset=self._log_start_offset, log_end_offset=self.log_end_offset)
            self._replace_all_segments(self._log_start_offset)
        if recover_from is not None or clean:
            for segment in self._segments:
                if segment.flush():
                    self._directory_unsynced = True
            self._recovery_point = self.log_end_offset
        else:
            self._recovery_point = min(checkpoint.recovery_point, self.log_end_offset)
        self._high_watermark = min(max(checkpoint.high_watermark, self._log_start_offset), self.log_end_offset)
        self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
        self.leader_epoch_cache.truncate_from_start(self._log_start_offset)
        if rebuild_epochs or recover_from is not None:
            self.leader_epoch_cache.flush()
        # Otherwise only entries past the log's ends went, which the next open drops again from a file
        # that still holds them: the file is rewritten by the next flush, not by every start (an empty
        # log's entry at offset 0 goes at every open, and 100,000 such logs made 100,000 fsynced writes).
        self.delete_detached_segments()
        if self._directory_unsynced and not created:
            fsync_dir(directory)
            self._directory_unsynced = False
        # A new, empty log's directory is fsynced by its first flush (nothing in it needs to survive a
        # crash before then: it is made again): creating 10,000 partitions is not 10,000 fsyncs.
        self._last_flush_ms = now
        for segment in self._segments:  # what loading opened again, back within log.open.segments.max
            DESCRIPTORS.release(segment)

    def _complete_interrupted_swaps(self, names: list[str]) -> bool:
        """Finish the cleaner swaps a crash interrupted, or forget those not begun (see the module doc).
        ``names``: the directory's listing; true when a file was removed or renamed."""
        directory = self.directory
        cleaned = [name for name in names if name.endswith(CLEANED_SUFFIX)]
        if not cleaned and not any(name.endswith(SWAP_SUFFIX) for name in names):
            return False
        for name in cleaned:
            (directory / name).unlink(missing_ok=True)
        swaps = sorted(base for name in names
                       if (base := parse_segment_file_name(name, LOG_SUFFIX + SWAP_SUFFIX)) is not None)
        for base in swaps:
            swap_path = directory / (segment_file_name(base) + SWAP_SUFFIX)
            end = max(_next_offset_of(swap_path, base), base + 1)
            for name in os.listdir(directory):
                for suffix in SEGMENT_SUFFIXES:
                    other = parse_segment_file_name(name, suffix)
                    if other is not None and base <= other < end:
                        (directory / name).unlink()
            for suffix in (TXN_INDEX_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, LOG_SUFFIX):  # the log last
                swapped = directory / (segment_file_name(base, suffix) + SWAP_SUFFIX)
                if swapped.exists():
                    os.replace(swapped, directory / segment_file_name(base, suffix))
            self._log.warning("finished a cleaner swap a crash interrupted", segment=base, replaced_below=end)
        strays = [name for name in os.listdir(directory) if name.endswith(SWAP_SUFFIX)]
        for name in strays:  # an index's swap without its log's: the swap never makes one; indexes are rebuilt
            (directory / name).unlink(missing_ok=True)
        fsync_dir(directory)
        return True

    def _remove_leftovers(self, listing: list[str]) -> bool:
        """Delete ``.deleted`` files, half-written checkpoints and indexes without a log file; true when
        ``listing`` (the directory's) named any."""
        names = set(listing)
        removed = False
        for name in names:
            orphan_index = False
            for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
                base = parse_segment_file_name(name, suffix)
                if base is not None and f"{base:020d}{LOG_SUFFIX}" not in names:
                    orphan_index = True
            if (
                name.endswith(DELETED_SUFFIX)
                or name == LEADER_EPOCH_CHECKPOINT_FILE + TMP_SUFFIX
                or orphan_index
            ):
                (self.directory / name).unlink(missing_ok=True)
                removed = True
        return removed

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

        replay = TransactionReplay()
        for segment in self._segments[:start]:
            segment.replay_transactions(replay)
        for i in range(start, len(self._segments)):
            segment = self._segments[i]
            previous_end = self._segments[i - 1].next_offset if i else segment.base_offset
            if segment.base_offset < previous_end:
                # Overlaps the segment before it: nothing from here on can be trusted.
                self._log.warning("segment overlaps the previous one; dropping it and the rest",
                                  segment=segment.base_offset)
                self._delete_now(self._segments[i:])
                break
            cut = segment.recover(on_batch, replay)
            if cut:
                self._log.warning("cut a corrupt or torn tail", segment=segment.base_offset,
                                  position=segment.size, bytes_cut=cut)
                self._delete_now(self._segments[i + 1 :])
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
    def offsets(self) -> LogOffsets:
        """What the owner persists for this log and hands back to :meth:`open`."""
        return LogOffsets(self._log_start_offset, self._recovery_point, self._high_watermark)

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

    def collect_aborted_transactions(self, start_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping ``[start_offset, upper_bound_offset)``, in marker order:
        what a read_committed fetch from ``start_offset`` returning records below the upper bound
        must name. Searches the ``.txnindex`` of the segment holding ``start_offset`` and of the
        later ones, until one says the search is complete (memory only)."""
        segments = self._segments  # one list throughout: a writer on another thread replaces it
        bases = [segment.base_offset for segment in segments]
        i = max(0, bisect.bisect_right(bases, start_offset) - 1)
        found: list[AbortedTxn] = []
        for segment in segments[i:]:
            result = segment.collect_aborted(start_offset, upper_bound_offset)
            found.extend(result.aborted)
            if result.is_complete:
                break
        return found

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """``(epoch, end_offset)`` as :meth:`LeaderEpochCache.end_offset_for` defines it."""
        return self.leader_epoch_cache.end_offset_for(epoch)

    def update_high_watermark(self, offset: int) -> int:
        """Set the high watermark, clamped to ``[log_start_offset, log_end_offset]``; returns it.

        Kept in memory; the owner persists it (:attr:`offsets`).
        """
        self._high_watermark = min(max(offset, self._log_start_offset), self.log_end_offset)
        return self._high_watermark

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
        if self.needs_roll(size, infos[0].base_offset, infos[-1].last_offset, max_timestamp):
            self.roll(max(infos[0].base_offset, self.log_end_offset))
        segment = self._segments[-1]
        segment.append(parts, infos, now)
        if self.writeback is not None:
            self.writeback.appended(segment)
        for info in infos:
            self._maybe_assign_epoch(info.leader_epoch, info.base_offset)
        records = sum(info.record_count for info in infos)
        self._unflushed_messages += records
        return AppendInfo(infos[0].base_offset, infos[-1].last_offset, max_timestamp, offset_of_max, records,
                          len(infos), size)

    def needs_roll(self, size: int, first_offset: int, last_offset: int, max_timestamp: int) -> bool:
        """Whether appending ``size`` bytes of batches holding ``first_offset..last_offset`` (newest
        timestamp ``max_timestamp``) must start a new segment first (see the module docstring)."""
        segment = self._segments[-1]
        offsets_fit = last_offset - segment.base_offset <= INT32_MAX
        if segment.is_empty and offsets_fit:
            return False
        if segment.first_batch_timestamp >= 0:
            waited = max_timestamp - segment.first_batch_timestamp
        else:
            waited = self.clock() - segment.created_ms
        return (
            not offsets_fit
            or segment.size + size > self.config.segment_bytes
            or waited >= self.config.segment_ms
        )

    def _reserve_bytes(self) -> int:
        """The disk space a new segment reserves for its appends (``preallocate``; see `LogSegment.create`)."""
        return self.config.segment_bytes if self.config.preallocate else 0

    def roll(self, base_offset: int | None = None) -> LogSegment:
        """Start a new active segment at ``base_offset`` (default: the log end offset).

        The finished segment's indexes are saved, its data fsynced and the disk blocks it reserved past
        its data (``preallocate``) given back. Rolling an empty active segment replaces it (or keeps it,
        when it already starts there).
        """
        self._check_open()
        new_base = self.log_end_offset if base_offset is None else base_offset
        if new_base < self.log_end_offset:
            raise ValueError(f"cannot roll to {new_base}, below the log end offset {self.log_end_offset}")
        active = self._segments[-1]
        kept = self._segments
        if active.is_empty:
            if active.base_offset == new_base:
                return active
            kept = self._segments[:-1]
            self._detach([active])
        else:
            active.save_indexes()
            self.flush(self.log_end_offset)
            active.release_reserved()
        segment = LogSegment.create(self.directory, new_base, self.config.index_interval_bytes, self.clock(),
                                    reserve_bytes=self._reserve_bytes())
        self._segments = [*kept, segment]
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
        candidates = self._segments_from(start_offset)
        for segment in candidates:
            region = segment.read(start_offset, max_bytes, max_offset=max_offset, min_one_batch=min_one_batch,
                                  whole_batches=whole_batches)
            if region is not None:
                return region
        active = candidates[-1]  # of the same list: a writer on another thread may have replaced it
        return FileRegion(active.fd, active.size, 0, start_offset)

    def _segments_from(self, start_offset: int) -> list[LogSegment]:
        """The segments a read from ``start_offset`` looks in, in order; raises OffsetOutOfRangeError."""
        self._check_open()
        end = self.log_end_offset
        if start_offset < self._log_start_offset or start_offset > end:
            raise OffsetOutOfRangeError(
                f"offset {start_offset} is outside [{self._log_start_offset}, {end}] of {self.directory.name}"
            )
        segments = self._segments  # one list throughout: a writer on another thread replaces it
        bases = [segment.base_offset for segment in segments]
        return segments[max(0, bisect.bisect_right(bases, start_offset) - 1):]

    def read_bytes(
        self,
        start_offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        min_one_batch: bool = True,
        whole_batches: bool = False,
    ) -> bytes:
        """As :meth:`read`, copied into memory; for worker threads too (the segment read stays pinned
        until its bytes are copied)."""
        for segment in self._segments_from(start_offset):
            with DESCRIPTORS.pinned(segment):
                region = segment.read(start_offset, max_bytes, max_offset=max_offset, min_one_batch=min_one_batch,
                                      whole_batches=whole_batches)
                if region is not None:
                    return region.read_bytes()
        return b""

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
        decoded = decode_batch(segment.pread(header.size, position), 0, verify_crc=False)
        for record in decoded.records:
            if record.timestamp >= timestamp and record.offset >= self._log_start_offset:
                return TimestampOffset(record.timestamp, record.offset, epoch)
        return None

    # -- truncation and retention ----------------------------------------------------------------

    def truncate_to(self, offset: int) -> bool:
        """Remove the batch holding ``offset`` and everything after it; returns whether anything went.

        Used when a follower finds where its log diverged from the leader's. The leader-epoch
        cache, high watermark, recovery point and (if needed) log start offset follow the new end;
        at or past the end, the epochs that start there are dropped all the same.
        Later segments are detached (see :meth:`delete_detached_segments`).
        """
        self._check_open()
        if offset < 0:
            raise ValueError(f"cannot truncate to negative offset {offset}")
        if offset >= self.log_end_offset:
            # Nothing to cut, but an epoch this log began as leader without appending to it (it lost
            # the leadership first) starts at its end and must go too, as in Kafka: a follower keeping
            # it is told of the same divergence by its leader on every fetch, and never catches up.
            self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
            return False
        if offset < self._segments[0].base_offset:
            self.truncate_fully_and_start_at(offset)
            return True
        kept = [segment for segment in self._segments if segment.base_offset <= offset]
        doomed = self._segments[len(kept):]
        if doomed:
            self._segments = kept
            self._detach(doomed)
        kept[-1].truncate_to(offset)
        end = self.log_end_offset
        self.leader_epoch_cache.truncate_from_end(end)
        self._log_start_offset = min(self._log_start_offset, end)
        self._high_watermark = min(self._high_watermark, end)
        self._recovery_point = min(self._recovery_point, end)
        return True

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop every segment and start empty at ``offset`` (a follower far behind the leader's start)."""
        self._check_open()
        if offset < 0:
            raise ValueError(f"cannot start at negative offset {offset}")
        self._replace_all_segments(offset)
        self.leader_epoch_cache.clear()
        self._log_start_offset = self._recovery_point = self._high_watermark = offset

    def _replace_all_segments(self, offset: int) -> None:
        doomed = self._segments
        self._detach(doomed)  # renamed first: the new segment may take one of their names
        self._segments = [LogSegment.create(self.directory, offset, self.config.index_interval_bytes, self.clock(),
                                            reserve_bytes=self._reserve_bytes())]
        fsync_dir(self.directory)
        self._directory_unsynced = False

    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: move the log start offset up to ``offset`` (at most the HW); returns it.

        Segments wholly below it are detached (see :meth:`delete_detached_segments`)."""
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

    def retention_due(self) -> bool:
        """Whether :meth:`delete_old_segments` would delete anything now (memory only, cheap)."""
        segments = self._segments
        if len(segments) > 1 and segments[1].base_offset <= self._log_start_offset:
            return True
        first = segments[0]
        upper = segments[1].base_offset if len(segments) > 1 else self.log_end_offset
        if first.is_empty or self._high_watermark < upper:
            return False
        if not self.config.delete:
            return False  # cleanup.policy=compact: only the log start offset removes segments
        if self.config.retention_ms >= 0 and self.clock() - first.largest_timestamp > self.config.retention_ms:
            return True
        return self.config.retention_bytes >= 0 and self.size_in_bytes - first.size >= self.config.retention_bytes

    def delete_old_segments(self) -> int:
        """Apply retention (time, then size, then log start offset); returns how many segments went.

        Time and size apply only when the cleanup policy holds ``delete``. The segments deleted are
        detached (see :meth:`delete_detached_segments`)."""
        self._check_open()
        deleted = 0
        if self.config.delete and self.config.retention_ms >= 0:
            now = self.clock()
            deleted += self._delete_matching(
                lambda segment, following: now - segment.largest_timestamp > self.config.retention_ms
            )
        if self.config.delete and self.config.retention_bytes >= 0:
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
        """Detach the oldest segments while ``predicate`` holds and they lie wholly below the HW."""
        doomed = []
        segments = self._segments
        for i, segment in enumerate(segments):
            following = segments[i + 1] if i + 1 < len(segments) else None
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
        self._segments = self._segments[len(doomed):]
        self._detach(doomed)
        if self._segments[0].base_offset > self._log_start_offset:
            self._set_log_start_offset(self._segments[0].base_offset)
        return len(doomed)

    def _set_log_start_offset(self, offset: int) -> None:
        self._log_start_offset = offset
        self._high_watermark = max(self._high_watermark, offset)
        self._recovery_point = max(self._recovery_point, min(self._segments[0].base_offset, self.log_end_offset))
        self.leader_epoch_cache.truncate_from_start(offset)

    def _detach(self, segments: Iterable[LogSegment]) -> None:
        """Segments that left the segment list: rename their files ``.deleted`` now (a crash leaves
        nothing ambiguous), close and remove them in :meth:`delete_detached_segments`. Blocks a segment
        reserved past its data (``preallocate``) are given back now, not when its files go."""
        for segment in segments:
            segment.release_reserved()
            segment.rename_to_deleted()
            self._detached.append(segment)
        self._directory_unsynced = True

    @property
    def has_detached_segments(self) -> bool:
        return bool(self._detached)

    def delete_detached_segments(self) -> int:
        """Close and remove the files of every segment detached so far; returns how many.

        Call it once no reader can still use them: the broker waits log.segment.delete.delay.ms."""
        doomed, self._detached = self._detached, []
        for segment in doomed:
            segment.delete()
        return len(doomed)

    def _delete_now(self, segments: list[LogSegment]) -> None:
        """Remove segments at once (while opening, before any reader exists)."""
        self._segments = [segment for segment in self._segments if segment not in segments]
        for segment in segments:
            segment.rename_to_deleted()
            segment.delete()
        self._directory_unsynced = True

    # -- compaction ------------------------------------------------------------------------------

    def replace_segments(self, swaps: Sequence[SegmentSwap], crash_point: Callable[[str], None] | None = None) -> int:
        """Swap each cleaned segment in for the segments it replaces, in order, with the crash-safe
        protocol of the module doc; returns how many were swapped in.

        A swap whose segments are no longer consecutive non-active segments of the log (retention or
        a truncation ran meanwhile) is not made, nor any after it: their cleaned files are removed.
        The old segments are detached (see :meth:`delete_detached_segments`): a reader holding a
        region of one goes on reading it. ``crash_point(step)`` is called after each step (tests
        stop there to check what a crash would leave)."""
        self._check_open()
        note = crash_point or _no_crash
        for i, swap in enumerate(swaps):
            position = self._position_of(swap.replaces)
            if position is None:
                self._log.info("cleaned segments dropped: the log changed under them", segment=swap.cleaned.base_offset)
                for dropped in swaps[i:]:
                    dropped.cleaned.delete()
                return i
            self._swap_in(swap, position, note)
        return len(swaps)

    def _position_of(self, replaced: tuple[LogSegment, ...]) -> int | None:
        """Where ``replaced`` lies in the segment list, if it is there whole and before the active segment."""
        segments = self._segments
        i = next((i for i, segment in enumerate(segments) if segment is replaced[0]), None)
        if i is None:
            return None
        if i + len(replaced) >= len(segments):
            return None
        if any(segments[i + j] is not old for j, old in enumerate(replaced)):
            return None
        return i

    def _swap_in(self, swap: SegmentSwap, position: int, note: Callable[[str], None]) -> None:
        cleaned = swap.cleaned
        note("cleaned segment written")
        cleaned.rename_txn_index(SWAP_SUFFIX)
        note("cleaned txnindex renamed .swap")
        cleaned.rename_files(SWAP_SUFFIX, indexes=False)
        note("cleaned log renamed .swap")
        cleaned.rename_files(SWAP_SUFFIX, log=False)
        note("cleaned indexes renamed .swap")
        fsync_dir(self.directory)
        note("swap durable")
        for old in swap.replaces:
            old.rename_to_deleted()
            note(f"segment {old.base_offset} renamed .deleted")
        fsync_dir(self.directory)
        note("old segments durable as .deleted")
        cleaned.rename_files("", log=False)
        note("cleaned indexes renamed to their final names")
        cleaned.rename_files("", indexes=False)
        note("cleaned log renamed to its final name")
        fsync_dir(self.directory)
        self._segments = [*self._segments[:position], cleaned, *self._segments[position + len(swap.replaces):]]
        self._detached.extend(swap.replaces)
        note("swapped")

    # -- durability ------------------------------------------------------------------------------

    def flush(self, up_to_offset: int | None = None) -> None:
        """fsync the log up to ``up_to_offset`` (default: all of it) and move the recovery point there.

        Also fsyncs the directory when segment files were created or removed since the last time,
        and writes the leader-epoch checkpoint when it changed.
        """
        self._check_open()
        target = self.log_end_offset if up_to_offset is None else min(up_to_offset, self.log_end_offset)
        for segment in self._segments:
            # A no-op for segments fsynced since their last change. Segments starting at the
            # target count too: a truncation to empty must be durable like an append.
            if segment.base_offset <= target:
                segment.flush()
        self.leader_epoch_cache.flush()
        self._recovery_point = max(self._recovery_point, target)
        if self._directory_unsynced:
            fsync_dir(self.directory)
            self._directory_unsynced = False
        self._last_flush_ms = self.clock()
        if target == self.log_end_offset:
            self._unflushed_messages = 0

    @property
    def flush_due(self) -> bool:
        """Whether the flush policy (``flush_interval_messages`` / ``flush_interval_ms``) asks for a
        :meth:`flush` now: the owner flushes (an append never fsyncs by itself)."""
        if self._recovery_point >= self.log_end_offset:
            return False
        return (self._unflushed_messages >= self.config.flush_interval_messages
                or self.clock() - self._last_flush_ms >= self.config.flush_interval_ms)

    def flush_if_due(self) -> bool:
        """Flush when the flush policy asks for it; returns whether it did."""
        self._check_open()
        if self.flush_due:
            self.flush()
            return True
        return False

    def close(self, *, sync: bool = True) -> None:
        """Flush everything, save the indexes, remove detached segments and close the files.

        ``sync=False`` writes everything but fsyncs nothing: the owner closing many logs makes them
        durable at once (`kraftpy.storage.fsutil.sync_filesystem`) before it records their offsets
        (which then say every batch is flushed). Whether this was a clean shutdown is for the owner
        to record (a log directory's marker).

        A write that fails (a full disk) is raised, and the files are closed all the same: the log
        is then as a crash would leave it, for the next start to recover."""
        if self._closed:
            return
        try:
            for segment in self._segments:
                segment.save_indexes(fsync=sync)
            if sync:
                self.flush()
            else:
                self.leader_epoch_cache.flush(sync=False)
                self._recovery_point = self.log_end_offset
            self.delete_detached_segments()
        finally:
            self._release()

    def abandon(self) -> None:
        """Close the files with no flush, as a crash would leave them (tests, tools)."""
        if not self._closed:
            self._release()

    def _release(self) -> None:
        for segment in [*self._segments, *self._detached]:
            segment.close()
        self._detached = []
        self._closed = True

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> Log:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"Log({self.directory.name}, start={self._log_start_offset}, end={self.log_end_offset}, "
            f"hw={self._high_watermark}, segments={len(self._segments)})"
        )
