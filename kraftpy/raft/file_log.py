"""`FileRaftLog`: the Raft log on disk, a `RaftLog` over the segmented log of kraftpy.storage.

The metadata log lives in ``<metadata.log.dir>/__cluster_metadata-0/`` in the same segment format
as every partition: each Raft batch is one RecordBatch v2 whose records carry the opaque Raft record
bytes as values, stamped with the batch's epoch as partition leader epoch. A control batch (the
leader-change record a new leader writes) is a RecordBatch with the control bit set and Kafka's
LEADER_CHANGE control key, so `kraftpy dump-log` shows it as one.

Snapshots sit beside the segments as ``<end offset>-<epoch>.checkpoint`` files (KIP-630 naming),
written whole and atomically; a download in progress is a ``.checkpoint.part`` file, deleted if
found at start.

The log keeps no offsets file: it starts at its latest snapshot's end offset (everything below
is in the snapshot; a log that ends before it is emptied and starts there, as Kafka's metadata
log does), and an unclean stop re-reads the whole log with CRCs, which the snapshots keep short.
``.kraftpy_cleanshutdown`` in the directory marks a clean close, so a clean restart reads nothing twice.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from kraftpy.protocol.records import ControlRecordType, SimpleRecord, build_batch, control_key, iter_decoded
from kraftpy.raft.log import OffsetAndEpoch, RecordBatch, SnapshotId, end_offset_for_epoch
from kraftpy.raft.snapshot import parse_snapshot_file_name, partial_snapshot_file_name, snapshot_file_name
from kraftpy.storage.checkpoint import LogOffsets
from kraftpy.storage.fsutil import fsync_dir, write_atomic
from kraftpy.storage.log import Log, LogConfig

CLEAN_SHUTDOWN_FILE = ".kraftpy_cleanshutdown"

METADATA_LOG_DIR_NAME = "__cluster_metadata-0"
_LEADER_CHANGE_KEY = control_key(ControlRecordType.LEADER_CHANGE)


def encode_raft_batch(batch_records: Sequence[bytes], *, base_offset: int, epoch: int, is_control: bool) -> bytes:
    key = _LEADER_CHANGE_KEY if is_control else None
    return build_batch(
        [SimpleRecord(key, value) for value in batch_records],
        base_offset=base_offset,
        partition_leader_epoch=epoch,
        is_control=is_control,
    )


def decode_raft_batches(data: bytes) -> list[RecordBatch]:
    return [
        RecordBatch(
            base_offset=decoded.header.base_offset,
            epoch=decoded.header.partition_leader_epoch,
            records=tuple(r.value or b"" for r in decoded.records),
            is_control=decoded.header.is_control,
        )
        for decoded in iter_decoded(data)
    ]


class FileRaftLog:
    """A `RaftLog` in one directory. Invariant: every snapshot file named in ``_snapshots`` is
    complete and durable; ``_latest`` is the greatest of them."""

    def __init__(self, log: Log) -> None:
        self.storage = log
        self.directory = log.directory
        self._snapshots: set[SnapshotId] = set()
        for name in os.listdir(self.directory):
            parsed = parse_snapshot_file_name(name)
            if parsed is None:
                continue
            snapshot_id, partial = parsed
            if partial:
                os.unlink(self.directory / name)
            else:
                self._snapshots.add(snapshot_id)

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
        if self.storage.closed:
            return
        self.storage.close()
        fd = os.open(self.directory / CLEAN_SHUTDOWN_FILE, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        fsync_dir(self.directory)

    # -- offsets ---------------------------------------------------------------------------------

    @property
    def start_offset(self) -> int:
        return self.storage.log_start_offset

    @property
    def end_offset(self) -> int:
        return self.storage.log_end_offset

    @property
    def last_fetched_epoch(self) -> int:
        if self.end_offset > self.start_offset:
            latest = self.storage.latest_epoch
            return 0 if latest is None else latest
        latest_snapshot = self.latest_snapshot_id
        return latest_snapshot.epoch if latest_snapshot is not None else 0

    def _epoch_starts(self) -> list[tuple[int, int]]:
        end = self.end_offset
        return [(e.epoch, e.start_offset) for e in self.storage.leader_epoch_cache.entries if e.start_offset < end]

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        return end_offset_for_epoch(self._epoch_starts(), self.latest_snapshot_id, self.start_offset,
                                    self.end_offset, epoch)

    def read(self, offset: int, max_bytes: int) -> list[RecordBatch]:
        if offset == self.end_offset:
            return []
        data = self.storage.read_bytes(offset, max(1, max_bytes), whole_batches=True)
        return decode_raft_batches(data)

    # -- writes ----------------------------------------------------------------------------------

    def append_as_leader(self, records: Sequence[bytes], epoch: int, *, is_control: bool = False) -> RecordBatch:
        base = self.end_offset
        data = encode_raft_batch(records, base_offset=base, epoch=epoch, is_control=is_control)
        self.storage.append_as_leader(data, epoch, crc_verified=True)  # just built here
        return RecordBatch(base_offset=base, epoch=epoch, records=tuple(records), is_control=is_control)

    def append_as_follower(self, batches: Sequence[RecordBatch]) -> None:
        if not batches:
            return
        data = b"".join(
            encode_raft_batch(b.records, base_offset=b.base_offset, epoch=b.epoch, is_control=b.is_control)
            for b in batches
        )
        if batches[0].base_offset != self.end_offset:
            raise ValueError(f"batch at {batches[0].base_offset}, log ends at {self.end_offset}")
        self.storage.append_as_follower(data)

    def truncate_to(self, offset: int) -> None:
        if offset < self.start_offset:
            raise ValueError(f"truncate to {offset} below log start {self.start_offset}")
        self.storage.truncate_to(offset)
        self.storage.delete_detached_segments()

    def flush(self, up_to: int) -> None:
        self.storage.flush(up_to)

    # -- snapshots -------------------------------------------------------------------------------

    @property
    def latest_snapshot_id(self) -> SnapshotId | None:
        return max(self._snapshots) if self._snapshots else None

    @property
    def earliest_snapshot_id(self) -> SnapshotId | None:
        if self.start_offset == 0:
            return None
        candidates = [s for s in self._snapshots if s.end_offset >= self.start_offset]
        return min(candidates) if candidates else None

    def _path(self, snapshot_id: SnapshotId) -> Path:
        return self.directory / snapshot_file_name(snapshot_id)

    def create_snapshot(self, snapshot_id: SnapshotId, data: bytes) -> None:
        write_atomic(self._path(snapshot_id), bytes(data))
        self._snapshots.add(snapshot_id)

    def delete_before_snapshot(self, snapshot_id: SnapshotId) -> None:
        if snapshot_id not in self._snapshots:
            raise ValueError(f"no snapshot {snapshot_id}")
        new_start = snapshot_id.end_offset
        if new_start > self.start_offset:
            if new_start > self.storage.recovery_point:
                raise ValueError(f"snapshot end {new_start} beyond the flushed log {self.storage.recovery_point}")
            # A snapshot covers committed records only, so the high watermark is at least its end.
            self.storage.update_high_watermark(max(self.storage.high_watermark, new_start))
            self.storage.delete_records_before(new_start)
            self.storage.delete_detached_segments()
        for older in [s for s in self._snapshots if s < snapshot_id]:
            self._snapshots.discard(older)
            self._path(older).unlink(missing_ok=True)

    def snapshot_size(self, snapshot_id: SnapshotId) -> int | None:
        if snapshot_id not in self._snapshots:
            return None
        return self._path(snapshot_id).stat().st_size

    def read_snapshot(self, snapshot_id: SnapshotId, position: int, max_bytes: int) -> bytes:
        with open(self._path(snapshot_id), "rb") as f:
            f.seek(position)
            return f.read(max_bytes)

    def write_snapshot_chunk(self, snapshot_id: SnapshotId, position: int, data: bytes) -> None:
        path = self.directory / partial_snapshot_file_name(snapshot_id)
        if position == 0:
            for name in os.listdir(self.directory):
                parsed = parse_snapshot_file_name(name)
                if parsed is not None and parsed[1]:
                    os.unlink(self.directory / name)
        size = path.stat().st_size if path.exists() else 0
        if position != size:
            raise ValueError(f"chunk at {position}, {size} bytes written so far")
        with open(path, "ab") as f:
            f.write(data)

    def finish_snapshot_download(self, snapshot_id: SnapshotId) -> None:
        partial = self.directory / partial_snapshot_file_name(snapshot_id)
        fd = os.open(partial, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(partial, self._path(snapshot_id))
        fsync_dir(self.directory)
        self.storage.truncate_fully_and_start_at(snapshot_id.end_offset)
        self.storage.delete_detached_segments()
        for other in [s for s in self._snapshots if s != snapshot_id]:
            self._path(other).unlink(missing_ok=True)
        self._snapshots = {snapshot_id}
