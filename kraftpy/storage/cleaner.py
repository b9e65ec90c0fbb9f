"""Log compaction: keep the last record of every key in the logs whose cleanup.policy holds ``compact``.

Kafka's log cleaner (``LogCleaner``, ``LogCleanerManager``, ``Cleaner``), one log at a time.

Theory of operation
-------------------
A compacted log has a *clean* part, below its first dirty offset (every key there appears at most
once, as of the last cleaning), and a *dirty* part, written since. Where the clean part ends for
each partition is the ``cleaner-offset-checkpoint`` file of its log directory
(:func:`read_cleaner_checkpoint`; a partition never cleaned starts dirty at its log start)::

    log start      first dirty           first uncleanable      active segment     log end
    |---- clean ----|-------- cleanable ---------|---- not yet -----|------ active ------|

:func:`log_to_clean` measures a log (memory only): the cleanable part ends at the first segment
that may not be touched — the active segment, the one holding the high watermark (records above
it may still be truncated), the one holding the last stable offset (an open transaction's
records, and everything after them, stay dirty: how it ends is not known yet), or the first dirty
segment with a record younger than ``min.compaction.lag.ms`` — and its *dirty ratio* is cleanable
bytes over clean plus cleanable bytes. A log is due when that ratio exceeds
``min.cleanable.dirty.ratio``, when a dirty segment's first batch is older than
``max.compaction.lag.ms``, or when tombstones or markers it kept have outlived
``delete.retention.ms`` (:attr:`LogToClean.tombstones_due`).

Transactions follow Kafka's rules (:mod:`kraftpy.storage.cleaner_txn`): every transactional batch a
pass reads lies below the last stable offset, so its transaction has ended, and the ``.txnindex``
entries say which ended aborted. Map and copy each walk the log with a :class:`CleanedTransactions`.

A pass (:meth:`Cleaner.clean`, blocking, in a worker thread, beside appends) runs in two steps:

1. *Map*: every keyed record of the cleanable part goes into an :class:`OffsetMap` (key →
   its last offset) — but not those of control batches, nor those of aborted transactions, which
   must never shadow an older committed value of their key. A map that fills stops there; the
   pass then ends at the last offset it holds.
2. *Copy*: the segments from the log start up to that point are rewritten, grouped so that a
   group's output stays within ``segment.bytes`` and its offsets within an int32 of its first
   segment's base offset, each group into one new segment ``<first base>.log.cleaned``. Batch by
   batch (Kafka's ``MemoryRecords.filterTo``):

   * a batch of an aborted transaction is dropped (the records of a committed one are cleaned as
     any others, below);
   * a control batch is kept, unless it is a transaction marker of which the pass reads no batch
     of its transaction: the first pass that finds it so sets its delete horizon, as for
     tombstones below, and a pass after that time drops it (an emptied marker, like any emptied
     batch, stays only as the last batch of a live producer). The pass that removes a
     transaction's last batches makes the log due again at once (its earliest horizon is now);
   * a record is kept when it is past the map, or it is the last of its key (see
     :mod:`kraftpy.storage.offset_map`), a tombstone only until its batch's delete horizon;
     records without a key go (they predate the compact policy: produce refuses them since);
   * a batch keeping every record, with no horizon to set, is copied byte for byte; a batch
     keeping some is re-encoded: the same base offset and last offset delta (so the producer's
     last sequence survives), producer id, epoch, base sequence, leader epoch, attributes, codec
     (recompressed) and max timestamp (the time a producer's state is judged by), the kept records
     with their offset deltas and timestamps, a new CRC;
   * a batch keeping none is dropped — unless it is the last batch of a producer still in the
     producer state, which stays as an empty batch (header only, record count 0) so that a replay
     of the log rebuilds that producer's sequence and epoch;
   * tombstones follow KIP-534: the first cleaning that keeps a batch's tombstones sets the
     batch's *delete horizon* (attribute bit 6, base timestamp = now + ``delete.retention.ms``);
     a later cleaning after that time drops them. A consumer that reads from the start and keeps
     up within ``delete.retention.ms`` therefore sees every delete.

   With the C record loops the copy of a whole read is one call (:meth:`OffsetMap.clean_batches`),
   which makes these decisions for every uncompressed batch outside transactions, checks CRCs and
   writes the new batches (CRC-32C included); compressed, transactional and control batches, and
   any batch it finds damaged, come back to :meth:`_Pass.clean_batch`, which makes them for every
   batch when C is missing. Both write the same bytes (a test runs passes both ways and compares
   the files). The map's C loop likewise hands compressed, transactional and control batches back.

   Each cleaned segment's ``.txnindex`` holds the entries of the aborted transactions whose marker
   it holds and of which the pass read a batch (Kafka rewrites it so): an entry goes one pass after
   its transaction's last batch, so a read_committed fetch racing the swap still names it.

   The group's output is fsynced, then (in the owner's exclusive section) swapped in by
   :meth:`kraftpy.storage.log.Log.replace_segments` with the crash-safe protocol described there.
   Grouping keeps that protocol's range exact: a group ends with a segment that produced output,
   or is a single segment; segments that produced nothing go to the start of the next group (or,
   at the end, become empty segments of their own). A group whose output is its input unchanged
   is not swapped.

The next pass's first dirty offset is where this one's map ended. Reads take
:attr:`CleanerConfig.io_buffer_size` at a time, into one buffer of the pass. I/O (reads and writes) goes
through a :class:`Throttler` (``log.cleaner.io.max.bytes.per.second``), which sleeps the worker
thread. A pass checks its ``abort`` event between batches: whoever must change the log's old
segments (retention, truncation) sets it and waits for the pass to end; its cleaned files are removed.
"""

from __future__ import annotations

import math
import os
import threading
import time
from array import array
from collections.abc import Callable, Mapping
from itertools import chain
from pathlib import Path

import attrs
import structlog

from kraftpy.protocol.batch_header import (
    CODEC_MASK,
    CONTROL_BIT,
    HEADER_SIZE,
    NO_PRODUCER_ID,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    BatchHeader,
    CorruptRecordError,
    compute_crc,
    pack_batch,
    read_header,
)
from kraftpy.protocol.compression import Compression, compress, decompress
from kraftpy.protocol.records import decode_records, parse_control_key
from kraftpy.storage.checkpoint import encode_offsets, read_offsets
from kraftpy.storage.cleaner_txn import CleanedTransactions
from kraftpy.storage.fsutil import fsync_dir, write_atomic
from kraftpy.storage.index import INT32_MAX
from kraftpy.storage.log import Log, SegmentSwap
from kraftpy.storage.offset_map import (
    CLEAN_DONE,
    CLEAN_OUT_FULL,
    COUNT_BATCHES_EMPTIED,
    COUNT_BYTES_READ,
    COUNT_EARLIEST_HORIZON,
    COUNT_HORIZON_SEEN,
    COUNT_KEYLESS_DROPPED,
    COUNT_RECORDS_KEPT,
    COUNT_RECORDS_READ,
    COUNTERS,
    INFO_FIELDS,
    OffsetMap,
    copy_room,
)
from kraftpy.storage.segment import CLEANED_SUFFIX, BatchInfo, LogSegment
from kraftpy.storage.txn_index import AbortedTxn

CLEANER_OFFSET_CHECKPOINT_FILE = "cleaner-offset-checkpoint"
#: KIP-534: the batch's base timestamp is its delete horizon.
DELETE_HORIZON_BIT = 0x40
#: Attributes an empty batch keeps (Kafka's writeEmptyHeader: no codec).
_EMPTY_BATCH_ATTRIBUTES = TIMESTAMP_TYPE_BIT | TRANSACTIONAL_BIT | CONTROL_BIT
NO_TIMESTAMP = -1
#: Kafka's log.cleaner.io.buffer.size: how much of a segment one read takes.
DEFAULT_IO_BUFFER_SIZE = 512 * 1024

#: Output batches one C call of the copy may leave before they are written.
_OUT_BATCHES = 4096

_logger = structlog.get_logger(__name__)


class CleaningAborted(Exception):
    """The pass was asked to stop (its abort event was set); it left nothing behind."""


# -- the checkpoint ----------------------------------------------------------------------------------


def read_cleaner_checkpoint(log_dir: str | os.PathLike[str]) -> dict[tuple[str, int], int]:
    """The first dirty offset of each partition of ``log_dir`` (Kafka's ``cleaner-offset-checkpoint``,
    ``<topic> <partition> <offset>`` lines); empty when there is no file. Raises CheckpointError."""
    return read_offsets(Path(log_dir) / CLEANER_OFFSET_CHECKPOINT_FILE) or {}


def write_cleaner_checkpoint(log_dir: str | os.PathLike[str], offsets: Mapping[tuple[str, int], int]) -> None:
    """Replace ``log_dir``'s ``cleaner-offset-checkpoint`` (tmp, fsync, rename, fsync of the directory)."""
    write_atomic(Path(log_dir) / CLEANER_OFFSET_CHECKPOINT_FILE, encode_offsets(offsets))


# -- settings and throttling -------------------------------------------------------------------------


@attrs.frozen
class CleanerConfig:
    """The broker-wide settings of the cleaner (the per-topic ones are in the log's LogConfig)."""

    #: log.cleaner.dedupe.buffer.size divided by log.cleaner.threads: the offset map's memory.
    dedupe_buffer_size: int = 128 * 1024 * 1024
    #: log.cleaner.io.buffer.load.factor: how full the offset map's slots may get.
    load_factor: float = 0.9
    #: How much of a segment one read takes.
    io_buffer_size: int = DEFAULT_IO_BUFFER_SIZE


class Throttler:
    """Kafka's ``Throttler`` for log.cleaner.io.max.bytes.per.second: :meth:`maybe_throttle` counts bytes
    and, when the rate observed since the last check exceeds the goal, sleeps (the calling worker
    thread) long enough to bring it back. Shared by every cleaning, so the bound is the broker's."""

    CHECK_INTERVAL_S = 0.3

    def __init__(self, bytes_per_second: float, *, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        if bytes_per_second <= 0:
            raise ValueError(f"log.cleaner.io.max.bytes.per.second must be positive, got {bytes_per_second}")
        self.bytes_per_second = bytes_per_second
        self.clock = clock
        self.sleep = sleep
        self._lock = threading.Lock()
        self._period_start = clock()
        self._observed = 0.0
        #: Total seconds slept (a figure for logs and tests).
        self.slept = 0.0

    @property
    def unlimited(self) -> bool:
        return math.isinf(self.bytes_per_second)

    def maybe_throttle(self, observed: int) -> None:
        if self.unlimited:
            return
        with self._lock:
            self._observed += observed
            now = self.clock()
            elapsed = now - self._period_start
            if elapsed < self.CHECK_INTERVAL_S:
                return
            # Ahead of the rate by as long as these bytes should have taken beyond the time they did.
            pause = self._observed / self.bytes_per_second - elapsed
            self._observed = 0.0
            self._period_start = now + max(pause, 0.0)
        if pause > 0:
            self.slept += pause
            self.sleep(pause)


UNTHROTTLED = Throttler(math.inf)


# -- what to clean -----------------------------------------------------------------------------------


@attrs.frozen
class LogToClean:
    """A log measured for cleaning (Kafka's ``LogToClean``); offsets and sizes as of the measure."""

    first_dirty_offset: int
    #: The base offset of the first segment that may not be cleaned.
    first_uncleanable_offset: int
    #: Bytes of the segments below the first dirty offset, and of those from it to the first uncleanable one.
    clean_bytes: int
    cleanable_bytes: int
    #: A dirty record is older than max.compaction.lag.ms.
    needs_compaction_now: bool = False
    #: The checkpointed first dirty offset was outside the log (its log start or end moved past it).
    checkpoint_reset: bool = False
    #: Tombstones kept by an earlier pass have reached their delete horizon.
    tombstones_due: bool = False

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def cleanable_ratio(self) -> float:
        return self.cleanable_bytes / self.total_bytes if self.total_bytes else 0.0

    def due(self, min_cleanable_ratio: float) -> bool:
        """Whether a pass should run now (see the module doc)."""
        return ((self.needs_compaction_now and self.cleanable_bytes > 0) or self.cleanable_ratio > min_cleanable_ratio
                or (self.tombstones_due and self.total_bytes > 0))


def log_to_clean(log: Log, checkpointed: int | None, now: int, *, earliest_horizon: int | None = None,
                 last_stable_offset: int | None = None) -> LogToClean:
    """Measure ``log`` (memory only: cheap enough for every compacted log on every look).

    ``checkpointed`` is its first dirty offset from the checkpoint (None: never cleaned);
    ``earliest_horizon`` the earliest delete horizon of the tombstones and markers its last pass
    kept; ``last_stable_offset`` the partition's LSO (None: no transaction is or was open in it)."""
    config = log.config
    start, end = log.log_start_offset, log.log_end_offset
    first_dirty = start if checkpointed is None else checkpointed
    reset = False
    if first_dirty < start or first_dirty > end:
        first_dirty, reset = start, checkpointed is not None
    segments = log.segments
    active = segments[-1]
    uncleanable = min(log.high_watermark, active.base_offset)
    if last_stable_offset is not None:  # an open transaction's records, and all after them, stay dirty
        uncleanable = min(uncleanable, last_stable_offset)
    dirty = [s for i, s in enumerate(segments[:-1]) if segments[i + 1].base_offset > first_dirty]
    if config.min_compaction_lag_ms > 0:
        for segment in dirty:
            if segment.largest_timestamp > now - config.min_compaction_lag_ms:
                uncleanable = min(uncleanable, segment.base_offset)
                break
    uncleanable = max(first_dirty, uncleanable)
    # Segment-aligned: the segment holding the uncleanable offset is not cleaned at all.
    first_uncleanable = max((s.base_offset for s in segments if s.base_offset <= uncleanable),
                            default=segments[0].base_offset)
    following = {segments[i].base_offset: segments[i + 1].base_offset for i in range(len(segments) - 1)}
    clean_bytes = sum(s.size for s in segments if s.base_offset < first_dirty and s is not active)
    cleanable_bytes = sum(
        s.size for s in segments
        if s is not active and s.base_offset < first_uncleanable and following[s.base_offset] > first_dirty
    )
    lag = max(config.max_compaction_lag_ms, 0)
    firsts = [s.first_batch_timestamp for s in dirty if s.first_batch_timestamp > 0]
    needs_now = bool(firsts) and min(firsts) < now - lag
    return LogToClean(first_dirty, first_uncleanable, clean_bytes, cleanable_bytes, needs_now, reset,
                      earliest_horizon is not None and now >= earliest_horizon)


# -- a pass ------------------------------------------------------------------------------------------


@attrs.define
class CleanerStats:
    """What one pass did (for its log line and the benchmark)."""

    map_bytes_read: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_kept: int = 0
    keyless_dropped: int = 0
    batches_emptied: int = 0
    #: Records of aborted transactions dropped, and transaction markers removed.
    aborted_dropped: int = 0
    markers_dropped: int = 0
    map_utilization: float = 0.0
    elapsed_s: float = 0.0


@attrs.define
class CleaningPass:
    """The outcome of :meth:`Cleaner.clean`: cleaned segments written and fsynced, not yet swapped in."""

    swaps: list[SegmentSwap]
    #: The first dirty offset after this pass (the checkpoint's new entry).
    next_dirty_offset: int
    stats: CleanerStats
    #: The earliest delete horizon of the tombstones and markers the pass kept (None: it kept none).
    earliest_horizon: int | None = None
    #: The segments below this offset were read and rewritten (or found clean already).
    copied_up_to: int = 0

    #: Whether :meth:`swap_in` ran (the cleaned segments are then the log's, or removed).
    used: bool = False

    def swap_in(self, log: Log, crash_point: Callable[[str], None] | None = None) -> int:
        """Blocking, with no other change to ``log`` meanwhile: swap the cleaned segments in; how many went in."""
        if self.used:
            raise RuntimeError("a cleaning pass is swapped in once")
        self.used = True
        return log.replace_segments(self.swaps, crash_point)

    def discard(self) -> None:
        """Remove the cleaned files (the pass is not to be swapped in)."""
        if not self.used:
            self.used = True
            for swap in self.swaps:
                swap.cleaned.delete()


@attrs.define
class _Group:
    """Segments being cleaned into one new segment (see the module doc on grouping)."""

    members: list[LogSegment]
    writer: LogSegment | None = None
    output_size: int = 0
    #: Index in ``members`` of the last segment that produced a batch (None: none yet).
    last_output: int | None = None
    #: The output differs from the members' bytes.
    changed: bool = False

    @property
    def head(self) -> LogSegment:
        return self.members[0]

    def trailing_empty(self) -> list[LogSegment]:
        """The members after the last one that produced output (all of them when none did)."""
        return self.members[(self.last_output + 1) if self.last_output is not None else 0:]


class Cleaner:
    """Cleans one log at a time; owns an offset map of ``config.dedupe_buffer_size`` bytes."""

    def __init__(self, config: CleanerConfig | None = None, throttler: Throttler = UNTHROTTLED, *,
                 accelerated: bool | None = None) -> None:
        self.config = config or CleanerConfig()
        self.throttler = throttler
        self.offset_map = OffsetMap(self.config.dedupe_buffer_size, self.config.load_factor, accelerated=accelerated)

    def clean(self, log: Log, to_clean: LogToClean, now: int, producers: Mapping[int, int] | None = None,
              abort: threading.Event | None = None) -> CleaningPass:
        """Write the cleaned segments of one pass over ``log`` (see the module doc); blocking.

        ``producers`` maps each producer id in the log's producer state to the last offset of its last
        batch; ``now`` is the log's clock. Raises CleaningAborted when ``abort`` is set (leaving no file),
        CorruptRecordError when a batch is damaged, OSError when the files fail."""
        started = time.monotonic()
        job = _Pass(self, log, now, producers or {}, abort)
        try:
            end = job.build_map(to_clean.first_dirty_offset, to_clean.first_uncleanable_offset)
            job.copy(min(end, to_clean.first_uncleanable_offset))
        except BaseException:
            job.discard()
            raise
        job.stats.map_utilization = self.offset_map.utilization
        job.stats.elapsed_s = time.monotonic() - started
        return CleaningPass(job.swaps, max(end, to_clean.first_dirty_offset), job.stats, job.earliest_horizon,
                            job.copied_up_to)


class _Pass:
    """The state of one pass (one thread)."""

    def __init__(self, cleaner: Cleaner, log: Log, now: int, producers: Mapping[int, int],
                 abort: threading.Event | None) -> None:
        self.cleaner = cleaner
        self.map = cleaner.offset_map
        self.throttler = cleaner.throttler
        self.log = log
        self.config = log.config
        self.now = now
        self.producers = producers
        self.abort = abort
        self.segments = log.segments  # one list throughout: appends and rolls go on meanwhile
        self.stats = CleanerStats()
        self.swaps: list[SegmentSwap] = []
        self.writers: list[LogSegment] = []
        self.earliest_horizon: int | None = None
        self.copied_up_to = log.log_start_offset
        #: The record count of the batch `clean_batch` last re-encoded.
        self.last_kept = 0
        #: The transactions met by the map and by the copy (each walk has its own; see cleaner_txn).
        self.map_txns = CleanedTransactions(())
        self.txns = CleanedTransactions(())
        #: How many of ``txns.retained_index`` went into a cleaned segment's .txnindex already.
        self._indexed = 0
        #: Each segment's base offset → the last offset it may hold (set by the copy).
        self._upper: dict[int, int] = {}
        #: One buffer for every read of the pass (a read's batches are done with before the next read).
        self._read_buffer = bytearray(max(cleaner.config.io_buffer_size, HEADER_SIZE))
        #: Batches cleaned in Python, not yet written (they may be views of the read buffer).
        self._parts: list[bytes | memoryview] = []
        self._infos: list[BatchInfo] = []
        self._pending = 0
        #: With the C loops: the copy's output buffer, its batches' fields, its counters, the producers.
        self._c_copy = self.map.accelerated
        if self._c_copy:
            self._out = bytearray(2 * cleaner.config.io_buffer_size)
            self._out_infos = array("q", bytes(8 * INFO_FIELDS * _OUT_BATCHES))
            self._counters = array("q", bytes(8 * COUNTERS))
            self._producer_offsets = array("q", chain.from_iterable(sorted(producers.items())))

    def check_abort(self) -> None:
        if self.abort is not None and self.abort.is_set():
            raise CleaningAborted(f"cleaning of {self.log.directory.name} aborted")

    def discard(self) -> None:
        for writer in self.writers:
            writer.delete()
        self.writers = []
        self.swaps = []

    # -- reading ----------------------------------------------------------------------------------

    def read(self, segment: LogSegment, position: int, size: int) -> memoryview:
        """``size`` bytes of ``segment`` from ``position``, into the pass's read buffer (grown for a batch
        larger than a read), throttled. The view is valid until the next read."""
        if size > len(self._read_buffer):
            self._read_buffer = bytearray(size)
        view = memoryview(self._read_buffer)[:size]
        got = segment.preadv([view], position)
        self.throttler.maybe_throttle(got)
        return view[:got]

    def records_of(self, header: BatchHeader, batch: memoryview) -> tuple[bytes | memoryview, int]:
        """The batch's records section (decompressed) and where its records start in it."""
        codec = header.attributes & CODEC_MASK
        if codec == Compression.NONE:
            return batch, HEADER_SIZE
        return decompress(codec, bytes(batch[HEADER_SIZE:])), 0

    # -- step 1: the map --------------------------------------------------------------------------

    def build_map(self, first_dirty: int, first_uncleanable: int) -> int:
        """Map the keys of ``[first_dirty, first_uncleanable)``; returns where the map ends (exclusive)."""
        segments = self.segments
        self.map.reset(first_uncleanable - first_dirty, first_dirty)
        self.map_txns = CleanedTransactions(self.log.collect_aborted_transactions(first_dirty, first_uncleanable))
        latest = first_dirty - 1
        for i, segment in enumerate(segments[:-1]):
            following = segments[i + 1].base_offset
            if following <= first_dirty:
                continue
            if segment.base_offset >= first_uncleanable:
                break
            start = 0
            found = segment.translate_offset(first_dirty) if segment.base_offset < first_dirty else None
            if found is not None:
                start = found[0]
            latest, full = self.map_segment(segment, start, first_dirty, latest)
            if full:
                self.map.latest_offset = latest
                return latest + 1
            latest = max(latest, min(following, first_uncleanable) - 1)
        self.map.latest_offset = latest
        return latest + 1

    def map_segment(self, segment: LogSegment, position: int, first_dirty: int, latest: int) -> tuple[int, bool]:
        """Map ``segment`` from ``position``, a read at a time (the record loops in one call a read);
        returns the latest offset mapped and whether the map filled."""
        size = segment.size
        want = self.cleaner.config.io_buffer_size
        while position < size:
            self.check_abort()
            data = self.read(segment, position, min(want, size - position))
            want = self.cleaner.config.io_buffer_size
            cursor = 0
            while True:
                cursor, latest, last_put, state = self.map.put_batches(data, cursor, first_dirty, latest)
                if state == 2:
                    return max(latest, last_put), True
                if state == 0:
                    break
                # A compressed or a transaction's batch reaching the dirty part: mapped here.
                header = read_header(data, cursor)
                batch = data[cursor: cursor + header.size]
                if self.maps_records(header, batch):
                    section, start = self.records_of(header, batch)
                    taken, last_put = self.map.put_records(section, start, header.record_count, header.base_offset,
                                                           first_dirty)
                    if taken < header.record_count:
                        return max(latest, last_put), True
                latest = max(latest, header.last_offset)
                cursor += header.size
            if cursor == 0:  # one batch larger than a read: read it whole next
                if len(data) < HEADER_SIZE:
                    raise CorruptRecordError(f"torn batch in {segment.path.name}", position)
                header = read_header(data, 0)
                if position + header.size > size:
                    raise CorruptRecordError(f"batch of {header.size} bytes runs past the end of "
                                             f"{segment.path.name}", position)
                want = header.size
                continue
            position += cursor
            self.stats.map_bytes_read += cursor
        return latest, False

    def maps_records(self, header: BatchHeader, batch: memoryview) -> bool:
        """Whether the map takes the records of ``batch``: not those of a control batch (a transaction
        marker is noted), nor those of an aborted transaction."""
        if header.is_control:
            if header.is_transactional and header.record_count:
                self.map_txns.on_marker(header, self.control_type(header, batch))
            return False
        if header.is_transactional and self.map_txns.on_data_batch(header):
            return False
        return header.record_count > 0

    def control_type(self, header: BatchHeader, batch: memoryview) -> int | None:
        """The type in the key of a control batch's first record (None: unreadable)."""
        try:
            section, start = self.records_of(header, batch)
            (record,) = decode_records(bytes(memoryview(section)[start:]), 1)
            return parse_control_key(record.key)[1]
        except (CorruptRecordError, ValueError):
            return None

    # -- step 2: the copy -------------------------------------------------------------------------

    def copy(self, end: int) -> None:
        """Rewrite the segments below ``end`` into cleaned groups (see the module doc)."""
        segments = self.segments
        to_clean = [s for s in segments[:-1] if s.base_offset < end]
        if not to_clean:
            return
        upper = self._upper = {s.base_offset: segments[i + 1].base_offset - 1 for i, s in enumerate(segments[:-1])}
        self.copied_up_to = upper[to_clean[-1].base_offset] + 1
        self.txns = CleanedTransactions(self.log.collect_aborted_transactions(to_clean[0].base_offset,
                                                                             self.copied_up_to))
        segment_bytes = self.config.segment_bytes
        current: _Group | None = None
        for segment in to_clean:
            last_possible = upper[segment.base_offset]
            if current is None:
                current = _Group([segment])
            elif (current.output_size + segment.size <= segment_bytes
                  and (segment.size == 0 or last_possible - current.head.base_offset <= INT32_MAX)):
                current.members.append(segment)
            else:
                carried = current.trailing_empty()
                self.close(current, len(current.members) - len(carried))
                if carried and last_possible - carried[0].base_offset <= INT32_MAX:
                    current = _Group([*carried, segment], changed=True)
                else:
                    for alone in carried:
                        self.close(_Group([alone], changed=alone.size > 0), 1)
                    current = _Group([segment])
            if self.clean_segment(segment, current):
                current.last_output = len(current.members) - 1
        assert current is not None
        carried = current.trailing_empty()
        self.close(current, len(current.members) - len(carried))
        for alone in carried:
            self.close(_Group([alone], changed=alone.size > 0), 1)
        if self._c_copy:
            self.add_counters()
        if self.swaps:
            fsync_dir(self.log.directory)

    def clean_segment(self, segment: LogSegment, group: _Group) -> bool:
        """Filter ``segment``'s batches into ``group``'s output; whether it produced any batch.

        A read at a time, every batch CRC-checked (the copy reads every batch the map read, so a
        damaged batch stops the pass before anything is swapped in). With the C loops one call cleans
        the whole batches of a read (:meth:`clean_read`) and leaves to :meth:`clean_one` only those it
        does not clean itself (compressed or damaged ones); without them every batch goes there."""
        size = segment.size
        position = 0
        want = self.cleaner.config.io_buffer_size
        produced = False
        while position < size:
            self.check_abort()
            asked = min(max(want, HEADER_SIZE), size - position)
            view = self.read(segment, position, asked)
            want = self.cleaner.config.io_buffer_size
            cursor = 0
            while True:
                if self._c_copy:
                    cursor, done, produced_now = self.clean_read(view, cursor, group)
                    produced |= produced_now
                    if done:
                        break
                if len(view) - cursor < HEADER_SIZE:
                    break
                header = read_header(view, cursor)
                if position + cursor + header.size > size:
                    raise CorruptRecordError(f"batch of {header.size} bytes runs past the end of {segment.path.name}",
                                             position + cursor)
                if header.size > len(view) - cursor:
                    break
                batch = view[cursor: cursor + header.size]
                if compute_crc(batch, 0, header.size) != header.crc:
                    raise CorruptRecordError(f"CRC mismatch in {segment.path.name}", position + cursor)
                produced |= self.clean_one(header, batch, group)
                cursor += header.size
            self.flush(group)  # before the next read: the batches kept as they are are views of this one
            if cursor == 0:  # one batch larger than a read: read it whole next
                if len(view) < HEADER_SIZE or len(view) < asked:  # (a read cut short: the file is shorter)
                    raise CorruptRecordError(f"torn batch in {segment.path.name}", position)
                header = read_header(view, 0)
                if position + header.size > size:
                    raise CorruptRecordError(f"batch of {header.size} bytes runs past the end of "
                                             f"{segment.path.name}", position)
                want = header.size
                continue
            position += cursor
        return produced

    def clean_one(self, header: BatchHeader, batch: memoryview, group: _Group) -> bool:
        """Clean one CRC-checked batch in Python into the pending output; whether it left a batch."""
        self.stats.bytes_read += header.size
        out = self.clean_batch(header, batch)
        if out is not batch:
            group.changed = True
        if out is None:
            return False
        # A batch keeps its offsets, max timestamp and leader epoch whatever records it loses.
        count = header.record_count if out is batch else self.last_kept
        self._infos.append(BatchInfo(self._pending, len(out), header.base_offset, header.last_offset,
                                     header.max_timestamp, header.partition_leader_epoch, count))
        self._parts.append(out)
        self._pending += len(out)
        return True

    def clean_read(self, view: memoryview, cursor: int, group: _Group) -> tuple[int, bool, bool]:
        """Clean the whole batches of a read from ``cursor`` in C (:meth:`OffsetMap.clean_batches`) and
        write their output; returns where it stopped, whether that is the end of the read's whole
        batches (else :meth:`clean_one` takes the batch there) and whether it left any batch."""
        produced = False
        while True:
            state, cursor, length, batches, changed = self.map.clean_batches(
                view, cursor, self.now, self.config.delete_retention_ms, self._producer_offsets, self._out,
                self._out_infos, self._counters)
            if changed:
                group.changed = True
            if batches:
                self.flush(group)  # the batches cleaned in Python before these
                fields = self._out_infos
                infos = [BatchInfo(*fields[i: i + INFO_FIELDS]) for i in range(0, batches * INFO_FIELDS, INFO_FIELDS)]
                self.write(group, [memoryview(self._out)[:length]], infos, length)
                produced = True
            if state != CLEAN_OUT_FULL:
                return cursor, state == CLEAN_DONE, produced
            if not batches:  # one batch larger than the output buffer
                header = read_header(view, cursor)
                self._out = bytearray(copy_room(header.size, header.record_count))

    def add_counters(self) -> None:
        """Add what the C copy counted to the pass's stats."""
        counters, stats = self._counters, self.stats
        stats.bytes_read += counters[COUNT_BYTES_READ]
        stats.records_read += counters[COUNT_RECORDS_READ]
        stats.records_kept += counters[COUNT_RECORDS_KEPT]
        stats.keyless_dropped += counters[COUNT_KEYLESS_DROPPED]
        stats.batches_emptied += counters[COUNT_BATCHES_EMPTIED]
        if counters[COUNT_HORIZON_SEEN]:
            self.note_horizon(counters[COUNT_EARLIEST_HORIZON])
        for i in range(COUNTERS):
            counters[i] = 0

    def flush(self, group: _Group) -> None:
        """Write the batches cleaned in Python."""
        if self._parts:
            self.write(group, self._parts, self._infos, self._pending)
            self._parts, self._infos, self._pending = [], [], 0

    def write(self, group: _Group, parts: list, infos: list[BatchInfo], size: int) -> None:
        if group.writer is None:
            group.writer = self.new_writer(group.head)
        group.writer.append(parts, infos, self.now)
        group.output_size += size
        self.stats.bytes_written += size
        self.throttler.maybe_throttle(size)

    def new_writer(self, head: LogSegment) -> LogSegment:
        writer = LogSegment.create(self.log.directory, head.base_offset, self.config.index_interval_bytes, self.now,
                                   suffix=CLEANED_SUFFIX)
        self.writers.append(writer)
        return writer

    def close(self, group: _Group, members: int) -> None:
        """Finish ``group`` with its first ``members`` segments (the rest were carried on)."""
        if members <= 0:
            return
        replaced = group.members[:members]
        entries = self.index_entries(self._upper[replaced[-1].base_offset])
        if not (group.changed or members > 1 or entries != [e for old in replaced for e in old.txn_index.entries]):
            if group.writer is not None:
                group.writer.delete()
                self.writers.remove(group.writer)
            return
        writer = group.writer if group.writer is not None else self.new_writer(group.head)
        writer.txn_index.append_all(entries)
        writer.save_indexes()  # a cache: an index a crash leaves short or stale is rebuilt on open
        writer.flush()
        writer.set_last_modified(replaced[-1].last_modified_ms)
        self.swaps.append(SegmentSwap(writer, tuple(replaced)))

    def index_entries(self, last_offset: int) -> list[AbortedTxn]:
        """The aborted transactions the cleaned segments up to ``last_offset`` index (those with a batch
        left, whose markers lie there) that no earlier cleaned segment took."""
        retained = self.txns.retained_index
        start = end = self._indexed
        while end < len(retained) and retained[end].last_offset <= last_offset:
            end += 1
        self._indexed = end
        return retained[start:end]

    def clean_batch(self, header: BatchHeader, batch: memoryview) -> memoryview | bytes | None:
        """The batch as the cleaned log holds it: ``batch`` itself, a re-encoded one (its record count
        in ``last_kept``), or None (dropped)."""
        count = header.record_count
        self.last_kept = 0
        self.stats.records_read += count
        producer_id = header.producer_id
        last_of_producer = (producer_id != NO_PRODUCER_ID
                            and self.producers.get(producer_id) == header.last_offset)
        if header.attributes & CONTROL_BIT:
            return self.clean_control_batch(header, batch, last_of_producer)
        if not header.attributes & TRANSACTIONAL_BIT:
            return self.clean_data_batch(header, batch, last_of_producer)
        if self.txns.on_data_batch(header):  # an aborted transaction's: its records go
            self.stats.aborted_dropped += count
            out = (batch if count == 0 else empty_batch(header)) if last_of_producer else None
        else:
            out = self.clean_data_batch(header, batch, last_of_producer)
        if out is not None:
            self.txns.on_data_kept(header)
        return out

    def clean_control_batch(self, header: BatchHeader, batch: memoryview,
                            last_of_producer: bool) -> memoryview | bytes | None:
        """A control batch: kept, unless it is a transaction marker of which the pass read no batch of its
        transaction (:mod:`kraftpy.storage.cleaner_txn`) and whose delete horizon has passed; the first
        pass that finds it removable sets that horizon (KIP-534, as for tombstones)."""
        count = header.record_count
        stats = self.stats
        if count == 0:  # a marker emptied before: it stays only as the last batch of a live producer
            return batch if last_of_producer else None
        if not header.is_transactional:
            stats.records_kept += count
            return batch
        fate = self.txns.on_marker(header, self.control_type(header, batch))
        if fate.revisit:  # this pass removed its transaction's last batches: the next one may stamp it
            self.note_horizon(self.now)
        removable = fate.removable
        has_horizon = bool(header.attributes & DELETE_HORIZON_BIT)
        if removable and has_horizon and self.now >= header.base_timestamp:
            stats.markers_dropped += 1
            return empty_batch(header) if last_of_producer else None
        stats.records_kept += count
        if not removable:
            return batch
        if has_horizon:
            self.note_horizon(header.base_timestamp)
            return batch
        horizon = self.now + self.config.delete_retention_ms
        self.note_horizon(horizon)
        self.last_kept = count
        section, start = self.records_of(header, batch)
        kept = self.map.rewrite_records(section, start, count, b"\x01" * count, header.base_timestamp - horizon)
        codec = header.attributes & CODEC_MASK
        if codec != Compression.NONE:
            kept = compress(codec, kept)
        return pack_batch(
            kept,
            base_offset=header.base_offset,
            partition_leader_epoch=header.partition_leader_epoch,
            attributes=header.attributes | DELETE_HORIZON_BIT,
            last_offset_delta=header.last_offset_delta,
            base_timestamp=horizon,
            max_timestamp=header.max_timestamp,
            producer_id=header.producer_id,
            producer_epoch=header.producer_epoch,
            base_sequence=header.base_sequence,
            record_count=count,
        )

    def clean_data_batch(self, header: BatchHeader, batch: memoryview,
                         last_of_producer: bool) -> memoryview | bytes | None:
        """A data batch not of an aborted transaction: its records filtered by the offset map."""
        count = header.record_count
        stats = self.stats
        attributes = header.attributes
        if count == 0:
            return batch if last_of_producer else None
        has_horizon = bool(attributes & DELETE_HORIZON_BIT)
        retain_tombstones = not has_horizon or self.now < header.base_timestamp
        if attributes & CODEC_MASK:
            section, start = self.records_of(header, batch)
        else:
            section, start = batch, HEADER_SIZE
        filtered = self.map.filter_records(section, start, count, header.base_offset, retain_tombstones)
        stats.keyless_dropped += filtered.keyless
        stats.records_kept += filtered.kept
        if filtered.kept == 0:
            stats.batches_emptied += 1
            return empty_batch(header) if last_of_producer else None
        set_horizon = filtered.tombstones > 0 and not has_horizon
        if set_horizon:
            base_timestamp = self.now + self.config.delete_retention_ms
        elif has_horizon:
            base_timestamp = header.base_timestamp
        else:
            base_timestamp = header.base_timestamp + filtered.min_timestamp_delta
        if filtered.tombstones:
            self.note_horizon(base_timestamp)
        if filtered.kept == count and not set_horizon:
            return batch
        self.last_kept = filtered.kept
        kept = self.map.rewrite_records(section, start, count, filtered.mask, header.base_timestamp - base_timestamp)
        codec = header.attributes & CODEC_MASK
        if codec != Compression.NONE:
            kept = compress(codec, kept)
        return pack_batch(
            kept,
            base_offset=header.base_offset,
            partition_leader_epoch=header.partition_leader_epoch,
            attributes=header.attributes | (DELETE_HORIZON_BIT if set_horizon or has_horizon else 0),
            last_offset_delta=header.last_offset_delta,
            base_timestamp=base_timestamp,
            max_timestamp=header.max_timestamp,
            producer_id=header.producer_id,
            producer_epoch=header.producer_epoch,
            base_sequence=header.base_sequence,
            record_count=filtered.kept,
        )

    def note_horizon(self, horizon: int) -> None:
        if self.earliest_horizon is None or horizon < self.earliest_horizon:
            self.earliest_horizon = horizon


def empty_batch(header: BatchHeader) -> bytes:
    """Kafka's empty batch (``DefaultRecordBatch.writeEmptyHeader``): ``header``'s offsets, producer
    fields and max timestamp, no records, no codec."""
    return pack_batch(
        b"",
        base_offset=header.base_offset,
        partition_leader_epoch=header.partition_leader_epoch,
        attributes=header.attributes & _EMPTY_BATCH_ATTRIBUTES,
        last_offset_delta=header.last_offset_delta,
        base_timestamp=NO_TIMESTAMP,
        max_timestamp=header.max_timestamp,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        record_count=0,
    )
