"""`FileRaftLog`: the Raft log on disk, a `RaftLog` over the segmented log of kraftpy.storage.

The metadata log lives in ``<metadata.log.dir>/__cluster_metadata-0/`` in the same segment format
as every partition: each Raft batch is the leader's RecordBatch v2 (kraftpy.raft.batch) written as
it is, so every replica's segments hold the same batches, byte for byte, and `kraftpy dump-log`
reads them. Snapshots sit beside the segments as ``<end offset>-<epoch>.checkpoint`` files
(KIP-630 naming), written whole and atomically (tmp, fsync, rename, fsync the directory).

Theory of operation. Only `flush` (and `open`, `close`) do file work; every other method changes
memory, so the Raft core may call them on the event loop. What a read sees is the *logical* log::

    segments [storage start ....................... storage end)    on disk (page cache)
    logical  [start ........ _durable_end) + _tail                   what reads see
                             ^ a pending truncation point: segment bytes past it are no longer
                               part of the log; `flush` cuts them off the files

- appends go to `_tail`, a list of encoded batches; `truncate_to` trims the tail or moves
  `_durable_end` down (to a batch boundary found by reading the segments);
- `create_snapshot` keeps the snapshot's bytes in memory, `finish_snapshot_download` keeps the
  downloaded bytes and marks the log as reset to start at the snapshot's end, and
  `delete_before_snapshot` moves the logical start; snapshots no longer wanted are forgotten;
- `flush(up_to)` carries all of that out, in an order a crash at any instruction survives:
  new snapshot files first (so that a snapshot is on disk before the log it covers is dropped),
  then the reset or the truncation, fsynced before anything follows it, then the tail, written
  with one append and fsynced, then the prefix below a new start and forgotten snapshot files.

The driver runs `flush` in a worker thread while it holds the core's lock; reads may then run on
the event loop (they see the old state until `flush` swaps the new one in).

A write that fails (ENOSPC, EIO: an OSError from any file work of `flush` or `close`) raises a
`FatalError` naming the directory and the errno, and the log refuses every later flush: what is
on disk may then stop anywhere inside the last flush, and only a restart's recovery, which cuts a
torn tail, makes it a log again. `close` after such a failure leaves the files as a crash would
(no clean-shutdown marker), for that recovery.

A crash loses what `flush` did not write. ``.kraftpy_cleanshutdown`` in the directory marks a
clean `close`; without it `open` re-reads the whole log with CRCs and cuts a torn tail. The log
keeps no offsets file: it starts at its latest snapshot's end offset (everything below is in the
snapshot; a log that ends before it is emptied and starts there, as Kafka's metadata log does).
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import attrs

from kraftpy.fatal import FatalError, storage_failure
from kraftpy.raft.batch import parse_batches
from kraftpy.raft.log import (
    NO_TIMESTAMP,
    OffsetAndEpoch,
    RecordBatch,
    SnapshotId,
    check_follows,
    end_offset_for_epoch,
)
from kraftpy.raft.snapshot import parse_snapshot_file_name, snapshot_file_name
from kraftpy.storage.checkpoint import LogOffsets
from kraftpy.storage.fsutil import fsync_dir, write_atomic
from kraftpy.storage.log import Log, LogConfig, RecordTooLargeError

CLEAN_SHUTDOWN_FILE = ".kraftpy_cleanshutdown"

METADATA_LOG_DIR_NAME = "__cluster_metadata-0"
#: Leftovers of a crash: a snapshot download of an older version, a snapshot write cut short.
_LEFTOVER_SUFFIXES = (".checkpoint.part", ".checkpoint.tmp")


@attrs.define
class _Snapshot:
    """One complete snapshot: on disk (`fd` open for reads) or, until the next flush, in memory."""

    size: int
    fd: int | None = None
    data: bytes | None = None


class FileRaftLog:
    """A `RaftLog` in one directory. Invariants (between calls):

    - the logical log is the segments' batches in ``[_start, _durable_end)`` followed by `_tail`,
      contiguous; ``storage.log_start_offset <= _start <= _durable_end <= storage.log_end_offset``
      unless `_reset` is set, when the segments are not part of it at all;
    - every `_Snapshot` without `data` is a complete, durable file with `fd` open; `_forgotten`
      holds the ones still to close and delete.
    """

    def __init__(self, log: Log) -> None:
        self.storage = log
        self.directory = log.directory
        self._start = log.log_start_offset
        self._durable_end = log.log_end_offset
        self._tail: list[RecordBatch] = []
        #: A downloaded snapshot the log was reset to; the segments still await the reset.
        self._reset: SnapshotId | None = None
        self._snapshots: dict[SnapshotId, _Snapshot] = {}
        self._forgotten: dict[SnapshotId, _Snapshot] = {}
        self._downloads: dict[SnapshotId, bytearray] = {}
        #: Set when a write failed: the log refuses every later flush (see the module doc).
        self.failure: FatalError | None = None
        for name in os.listdir(self.directory):
            if name.endswith(_LEFTOVER_SUFFIXES):
                os.unlink(self.directory / name)
                continue
            parsed = parse_snapshot_file_name(name)
            if parsed is not None and not parsed[1]:
                fd = os.open(self.directory / name, os.O_RDONLY)
                self._snapshots[parsed[0]] = _Snapshot(os.fstat(fd).st_size, fd=fd)

    @classmethod
    def open(cls, metadata_log_dir: str | os.PathLike[str], config: LogConfig | None = None) -> FileRaftLog:
        directory = Path(metadata_log_dir) / METADATA_LOG_DIR_NAME
        directory.mkdir(parents=True, exist_ok=True)
        marker = directory / CLEAN_SHUTDOWN_FILE
        clean = marker.exists()
        if clean:
            marker.unlink()
            fsync_dir(directory)
        snapshots = [parsed[0] for name in os.listdir(directory)
                     if (parsed := parse_snapshot_file_name(name)) is not None and not parsed[1]]
        start = max(snapshots).end_offset if snapshots else 0
        offsets = LogOffsets(log_start_offset=start, recovery_point=0, high_watermark=start)
        return cls(Log.open(directory, config, offsets=offsets, clean_shutdown=clean))

    def close(self) -> None:
        """Flush everything, close the files and mark the shutdown clean; after a failed write, close
        the files as a crash would (the next start recovers)."""
        if self.storage.closed:
            return
        if self.failure is not None:
            self.abandon()
            return
        self.flush(self.end_offset)
        try:
            self.storage.close()
            self._close_snapshot_files()
            fd = os.open(self.directory / CLEAN_SHUTDOWN_FILE, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            fsync_dir(self.directory)
        except OSError as exc:
            raise self._failed(exc) from exc

    def abandon(self) -> None:
        """Close the files without flushing, as a crash (kill -9) would leave them (tests, tools, and
        `close` after a failed write)."""
        self.storage.abandon()
        self._close_snapshot_files()

    def _close_snapshot_files(self) -> None:
        for snapshot in [*self._snapshots.values(), *self._forgotten.values()]:
            if snapshot.fd is not None:
                os.close(snapshot.fd)
                snapshot.fd = None

    # -- offsets ---------------------------------------------------------------------------------

    @property
    def start_offset(self) -> int:
        return self._start

    @property
    def end_offset(self) -> int:
        tail = self._tail
        return tail[-1].next_offset if tail else self._durable_end

    @property
    def flushed_offset(self) -> int:
        """Everything below it is on disk as this log now reads: a crash keeps it."""
        if self._reset is not None:
            return self._start
        return min(self.storage.recovery_point, self._durable_end)

    @property
    def last_fetched_epoch(self) -> int:
        starts = self._epoch_starts()
        if starts:
            return starts[-1][0]
        latest_snapshot = self.latest_snapshot_id
        return latest_snapshot.epoch if latest_snapshot is not None else 0

    def _epoch_starts(self) -> list[tuple[int, int]]:
        """(epoch, first offset) of every epoch among the batches of the logical log."""
        starts: list[tuple[int, int]] = []
        if self._reset is None:
            end = self._durable_end
            starts = [(e.epoch, e.start_offset) for e in self.storage.leader_epoch_cache.entries
                      if e.start_offset < end]
        for batch in self._tail:
            if not starts or starts[-1][0] != batch.epoch:
                starts.append((batch.epoch, batch.base_offset))
        start = self._start
        kept = [entry for entry in starts if entry[1] >= start]
        before = [entry for entry in starts if entry[1] < start]
        if before and (not kept or kept[0][1] > start) and self.end_offset > start:
            kept.insert(0, (before[-1][0], start))  # the epoch in force at the start, moved up to it
        return kept

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        return end_offset_for_epoch(self._epoch_starts(), self.latest_snapshot_id, self.start_offset,
                                    self.end_offset, epoch)

    # -- reading ---------------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int) -> list[RecordBatch]:
        """From the segments (a page-cache read of at most about `max_bytes`) while `offset` is
        below the durable end, else from the tail."""
        end = self.end_offset
        if offset < self._start or offset > end:
            raise ValueError(f"read at {offset} outside [{self._start}, {end}]")
        if offset == end:
            return []
        durable_end = self._durable_end
        if offset < durable_end:
            # Bounded by the pending truncation point, if there is one.
            bound = durable_end if durable_end < self.storage.log_end_offset else None
            data = self.storage.read_bytes(offset, max(1, max_bytes), max_offset=bound, whole_batches=True)
            return parse_batches(data, verify=False)
        tail = self._tail
        i = bisect.bisect_right(tail, offset, key=lambda batch: batch.base_offset) - 1
        out: list[RecordBatch] = []
        size = 0
        for batch in tail[max(i, 0):]:
            if out and size + batch.size_in_bytes > max_bytes:
                break
            out.append(batch)
            size += batch.size_in_bytes
        return out

    def batch_containing(self, offset: int) -> RecordBatch | None:
        if offset < self._start or offset >= self.end_offset:
            return None
        return self.read(offset, 1)[0]

    # -- writes (memory only) --------------------------------------------------------------------

    def append_as_leader(
        self,
        records: Sequence[bytes],
        epoch: int,
        *,
        is_control: bool = False,
        timestamp_ms: int = NO_TIMESTAMP,
        control_types: Sequence[int] | None = None,
    ) -> RecordBatch:
        batch = RecordBatch.build(
            records, base_offset=self.end_offset, epoch=epoch, is_control=is_control, timestamp_ms=timestamp_ms,
            control_types=control_types,  # type: ignore[arg-type]
        )
        self.append_as_follower([batch])
        return batch

    def append_as_follower(self, batches: Sequence[RecordBatch]) -> None:
        if not batches:
            return
        check_follows(batches, self.end_offset, self.last_fetched_epoch)
        limit = self.storage.config.max_message_bytes
        for batch in batches:
            if batch.size_in_bytes > limit:
                raise RecordTooLargeError(f"batch of {batch.size_in_bytes} bytes is larger than {limit}")
        self._tail = [*self._tail, *batches]

    def truncate_to(self, offset: int) -> None:
        if offset >= self.end_offset:
            return
        if offset < self._start:
            raise ValueError(f"truncate to {offset} below log start {self._start}")
        if offset >= self._durable_end:
            self._tail = [batch for batch in self._tail if batch.last_offset < offset]
            return
        # The batch holding `offset` goes whole: cut at its base offset.
        self._durable_end = self.storage.read(offset, 1).first_offset
        self._tail = []

    # -- durability ------------------------------------------------------------------------------

    def flush(self, up_to: int) -> None:
        """Carry out every pending change (see the module doc), then fsync. Writes the whole tail,
        whatever `up_to` says. A failed write raises `FatalError` (see the module doc)."""
        if self.failure is not None:
            raise self.failure
        try:
            self._flush()
        except OSError as exc:
            raise self._failed(exc) from exc

    def _failed(self, exc: OSError) -> FatalError:
        self.failure = storage_failure("cannot write the metadata log in", self.directory, exc)
        return self.failure

    def _flush(self) -> None:
        self._write_new_snapshots()
        self._cut_segments()
        tail = self._tail
        if tail:
            self.storage.append_as_follower(b"".join(batch.data for batch in tail))
        self.storage.flush()
        self._drop_prefix_and_forgotten_snapshots()
        self._durable_end = self.storage.log_end_offset
        self._tail = self._tail[len(tail):]

    def _write_new_snapshots(self) -> None:
        for snapshot_id, snapshot in list(self._snapshots.items()):
            if snapshot.data is not None:
                path = self._path(snapshot_id)
                write_atomic(path, snapshot.data)
                snapshot.fd = os.open(path, os.O_RDONLY)
                snapshot.data = None

    def _cut_segments(self) -> None:
        """The pending reset or truncation, on disk before anything is written after it."""
        storage = self.storage
        if self._reset is not None:
            storage.truncate_fully_and_start_at(self._reset.end_offset)  # fsyncs the directory
            self._reset = None
        elif storage.log_end_offset > self._durable_end:
            storage.truncate_to(self._durable_end)
            storage.flush()

    def _drop_prefix_and_forgotten_snapshots(self) -> None:
        storage = self.storage
        if self._start > storage.log_start_offset:
            # A snapshot covers committed records only, so the high watermark is at least its end.
            storage.update_high_watermark(max(storage.high_watermark, self._start))
            storage.delete_records_before(self._start)
            storage.flush()
        storage.delete_detached_segments()
        forgotten, self._forgotten = self._forgotten, {}
        for snapshot_id, snapshot in forgotten.items():
            if snapshot.fd is not None:
                os.close(snapshot.fd)
            if snapshot_id not in self._snapshots:
                self._path(snapshot_id).unlink(missing_ok=True)
        if forgotten:
            fsync_dir(self.directory)

    def crash(self, torn: Callable[[bytes], bytes] | None = None) -> None:
        """Simulate a power loss (the simulation): close the files and lose what was not flushed.

        With `torn`, the power goes out in the middle of a flush, as it writes the tail: the new
        snapshots and the cut are on disk, and of the tail's bytes ``torn(tail bytes)`` (some
        prefix, perhaps followed by garbage) reached the active segment. Reopening must cut that."""
        if torn is not None and self._tail:
            self._write_new_snapshots()
            self._cut_segments()
            data = torn(b"".join(batch.data for batch in self._tail))
            fd = os.open(self.storage.active_segment.path, os.O_WRONLY | os.O_APPEND)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
        self.abandon()

    # -- snapshots -------------------------------------------------------------------------------

    @property
    def latest_snapshot_id(self) -> SnapshotId | None:
        return max(self._snapshots) if self._snapshots else None

    @property
    def snapshot_ids(self) -> list[SnapshotId]:
        return sorted(self._snapshots)

    @property
    def earliest_snapshot_id(self) -> SnapshotId | None:
        if self._start == 0:
            return None
        candidates = [s for s in self._snapshots if s.end_offset >= self._start]
        return min(candidates) if candidates else None

    def _path(self, snapshot_id: SnapshotId) -> Path:
        return self.directory / snapshot_file_name(snapshot_id)

    def _forget(self, snapshot_id: SnapshotId) -> None:
        snapshot = self._snapshots.pop(snapshot_id)
        if snapshot.data is None:
            self._forgotten[snapshot_id] = snapshot

    def create_snapshot(self, snapshot_id: SnapshotId, data: bytes) -> None:
        if snapshot_id in self._snapshots:
            return
        self._snapshots[snapshot_id] = _Snapshot(len(data), data=bytes(data))

    def delete_before_snapshot(self, snapshot_id: SnapshotId) -> None:
        if snapshot_id not in self._snapshots:
            raise ValueError(f"no snapshot {snapshot_id}")
        new_start = snapshot_id.end_offset
        if new_start > self._start:
            if new_start > self.flushed_offset:
                raise ValueError(f"snapshot end {new_start} beyond the flushed log {self.flushed_offset}")
            if self.read(new_start - 1, 1)[0].next_offset != new_start:
                raise ValueError(f"snapshot end {new_start}: not a batch boundary")
            self._start = new_start
        for older in [s for s in self._snapshots if s < snapshot_id]:
            self._forget(older)

    def snapshot_size(self, snapshot_id: SnapshotId) -> int | None:
        snapshot = self._snapshots.get(snapshot_id)
        return None if snapshot is None else snapshot.size

    def read_snapshot(self, snapshot_id: SnapshotId, position: int, max_bytes: int) -> bytes:
        snapshot = self._snapshots[snapshot_id]
        if snapshot.data is not None:
            return snapshot.data[position : position + max_bytes]
        assert snapshot.fd is not None
        return os.pread(snapshot.fd, max(0, min(max_bytes, snapshot.size - position)), position)

    def write_snapshot_chunk(self, snapshot_id: SnapshotId, position: int, data: bytes) -> None:
        if position == 0:
            self._downloads = {snapshot_id: bytearray()}
        buffer = self._downloads.get(snapshot_id)
        size = 0 if buffer is None else len(buffer)
        if buffer is None or position != size:
            raise ValueError(f"chunk at {position}, {size} bytes written so far")
        buffer += data

    def finish_snapshot_download(self, snapshot_id: SnapshotId) -> None:
        data = bytes(self._downloads.pop(snapshot_id))
        self._downloads.clear()
        for other in [s for s in self._snapshots if s != snapshot_id]:
            self._forget(other)
        if snapshot_id not in self._snapshots:  # one id names one state: a copy on disk will do
            self._snapshots[snapshot_id] = _Snapshot(len(data), data=data)
        self._reset = snapshot_id
        self._start = self._durable_end = snapshot_id.end_offset
        self._tail = []
