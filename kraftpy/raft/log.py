"""The replicated log as the Raft core sees it: batches with one epoch each, and snapshots.

The core never touches a file. It is handed an object that satisfies `RaftLog`: `MemoryRaftLog`
(kraftpy.raft.memory_log) in tests and the simulation, `FileRaftLog` (kraftpy.raft.file_log) over
the segment-file log of kraftpy.storage in production. Both hold the same bytes: a batch is the
leader's RecordBatch v2 (`RecordBatch`, kraftpy.raft.batch), appended by followers as it is.

Offsets are contiguous from `start_offset` to `end_offset` (exclusive). A batch holds one or more
records, all appended together with one leader epoch; log ends, fetch offsets, the high watermark
and snapshot end offsets fall on batch boundaries, because batches are only ever appended,
truncated and replicated whole. (A truncation point computed from epochs may fall inside a batch;
the batch then goes whole.)

Durability contract (the simulation crashes nodes against exactly this). Every method but `flush`
only changes memory, so that the core may call it on the event loop, inside `step`; `flush` does
all the durable work, and the driver runs it off the event loop when the core returns `FlushLog`:

- `append_as_leader` / `append_as_follower` are durable once `flush(up_to)` returned for an offset
  at or past their end. The core never counts an unflushed entry as replicated.
- `truncate_to`, `delete_before_snapshot`, `create_snapshot` and `finish_snapshot_download` change
  what every read sees at once and are durable no later than the next `flush`, which carries them
  out in a safe order: a snapshot is durable before the log it covers is dropped, and a truncation
  is durable before anything appended after it is written. A crash before that flush undoes them
  (a truncated tail comes back, which is the same as the truncation never having happened).
- A snapshot being downloaded (`write_snapshot_chunk`) is held in memory and forgotten by a crash.
- Reads (`read`, `read_snapshot`) stay bounded copies out of memory or the page cache.

What a crash keeps beyond the last flush is a prefix of what was appended, possibly cut inside a
batch (a torn write): the log's recovery keeps the whole, checked batches of that prefix.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import attrs

from kraftpy.raft.batch import NO_TIMESTAMP, RecordBatch
from kraftpy.rpc.wire_schema import Int32, Int64

__all__ = ["NO_TIMESTAMP", "OffsetAndEpoch", "RaftLog", "RecordBatch", "SnapshotId", "check_follows",
           "end_offset_for_epoch"]


@attrs.frozen
class OffsetAndEpoch:
    offset: int
    epoch: int


@attrs.frozen(order=True)
class SnapshotId:
    """Names the state after applying every record below `end_offset`; `epoch` is the epoch of the
    last of those records (KIP-630). Orders by end offset, then epoch."""

    end_offset: Int64
    epoch: Int32


def end_offset_for_epoch(
    epoch_starts: Sequence[tuple[int, int]],
    snapshot: SnapshotId | None,
    start_offset: int,
    end_offset: int,
    epoch: int,
) -> OffsetAndEpoch:
    """`RaftLog.end_offset_for_epoch` for any log that knows its (epoch, first offset) changes.

    ``epoch_starts`` lists the epochs of the batches in the log with their first offsets, epochs
    increasing. The snapshot at the log start stands for the epochs it swallowed: its epoch ends no
    earlier than the log start.
    """
    starts = list(epoch_starts)
    if snapshot is not None and snapshot.end_offset == start_offset and (not starts or starts[0][0] > snapshot.epoch):
        starts.insert(0, (snapshot.epoch, start_offset))
    idx = bisect.bisect_right(starts, epoch, key=lambda entry: entry[0]) - 1
    if idx < 0:
        if not starts:
            return OffsetAndEpoch(offset=end_offset, epoch=0)
        return OffsetAndEpoch(offset=starts[0][1], epoch=epoch)
    end = starts[idx + 1][1] if idx + 1 < len(starts) else end_offset
    return OffsetAndEpoch(offset=end, epoch=starts[idx][0])


@runtime_checkable
class RaftLog(Protocol):
    """The log interface the core drives. All offsets are batch boundaries (see module doc)."""

    @property
    def start_offset(self) -> int:
        """First offset still in the log; equals the latest snapshot's end offset once the prefix
        before it was deleted, else 0."""
        ...

    @property
    def end_offset(self) -> int:
        """One past the last offset in the log (the next offset to be appended)."""
        ...

    @property
    def last_fetched_epoch(self) -> int:
        """Epoch of the last batch; the latest snapshot's epoch if the log holds no batch; else 0."""
        ...

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        """The largest epoch E' <= `epoch` known to this log (batches or the snapshot at the start)
        and the end offset of E' (the first offset of the next larger epoch, or `end_offset`).

        If `epoch` is below every known epoch, returns (`start_offset`, `epoch`)."""
        ...

    def read(self, offset: int, max_bytes: int) -> list[RecordBatch]:
        """Batches from the one holding `offset` on: at least one if `offset < end_offset`, then more
        while the total stays within `max_bytes` (a read may also stop early, e.g. at a segment's
        end). `start_offset <= offset <= end_offset`."""
        ...

    def append_as_leader(
        self,
        records: Sequence[bytes],
        epoch: int,
        *,
        is_control: bool = False,
        timestamp_ms: int = NO_TIMESTAMP,
        control_types: Sequence[int] | None = None,
    ) -> RecordBatch:
        """Encode `records` as one batch at `end_offset` stamped with `epoch`, append it, return it
        (a control batch with `is_control`, or with `control_types`, one per record)."""
        ...

    def append_as_follower(self, batches: Sequence[RecordBatch]) -> None:
        """Append batches received from the leader as they are (`check_follows` must hold)."""
        ...

    def truncate_to(self, offset: int) -> None:
        """Remove every batch holding an offset at or above `offset` (`>= start_offset`). A batch
        that straddles `offset` is removed whole, so `end_offset` may end up below `offset`."""
        ...

    def flush(self, up_to: int) -> None:
        """Make everything below `up_to`, and every truncation, snapshot and prefix deletion made so
        far, durable (see the module doc for the order). May make more durable than asked. The only
        method that writes, fsyncs, renames or deletes a file."""
        ...

    @property
    def latest_snapshot_id(self) -> SnapshotId | None: ...

    @property
    def snapshot_ids(self) -> list[SnapshotId]:
        """Every complete snapshot, oldest first (one ending at 0 is a bootstrap snapshot: the voters a
        cluster was formatted with, KIP-853)."""
        ...

    @property
    def earliest_snapshot_id(self) -> SnapshotId | None:
        """The snapshot the log starts at (its end offset is `start_offset`); None while the log
        starts at offset 0."""
        ...

    def create_snapshot(self, snapshot_id: SnapshotId, data: bytes) -> None:
        """Store a complete snapshot of the state after `snapshot_id.end_offset` (durable at the
        next `flush`)."""
        ...

    def delete_before_snapshot(self, snapshot_id: SnapshotId) -> None:
        """Advance `start_offset` to the snapshot's end offset, dropping the batches below it, and
        drop older snapshots. The snapshot's end must be flushed."""
        ...

    def snapshot_size(self, snapshot_id: SnapshotId) -> int | None:
        """Size in bytes of a complete snapshot, None if there is no such snapshot."""
        ...

    def read_snapshot(self, snapshot_id: SnapshotId, position: int, max_bytes: int) -> bytes:
        """Up to `max_bytes` of a complete snapshot from byte `position`."""
        ...

    def write_snapshot_chunk(self, snapshot_id: SnapshotId, position: int, data: bytes) -> None:
        """Add the next chunk of a snapshot being downloaded; `position` is the bytes written so far
        (0 starts the download over)."""
        ...

    def finish_snapshot_download(self, snapshot_id: SnapshotId) -> None:
        """Make the downloaded snapshot the latest and reset the log to start and end at its end
        offset (every batch and every other snapshot is dropped); durable at the next `flush`."""
        ...


def check_follows(batches: Sequence[RecordBatch], end_offset: int, last_epoch: int) -> None:
    """Raise ValueError unless `batches` continue a log ending at `end_offset` whose last batch has
    epoch `last_epoch`: contiguous offsets from there, epochs never going back."""
    expected, epoch = end_offset, last_epoch
    for batch in batches:
        if batch.base_offset != expected:
            raise ValueError(f"batch at {batch.base_offset}, log ends at {expected}")
        if batch.epoch < epoch:
            raise ValueError(f"batch at {batch.base_offset} has epoch {batch.epoch}, below the log's {epoch}")
        expected, epoch = batch.next_offset, batch.epoch
