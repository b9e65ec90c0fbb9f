"""`MemoryRaftLog`: a `RaftLog` held in memory, with a flushed point so that a simulated crash
loses exactly what a real one would (the unflushed tail and any half-downloaded snapshot).

It holds the same bytes a `FileRaftLog` does (each batch the leader's encoded RecordBatch), so the
simulation exercises the path production takes: build once on the leader, check and append as is
everywhere else. Truncations, snapshots and prefix deletions are durable at once here, which the
`RaftLog` contract allows (it only says "no later than the next flush")."""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from kraftpy.raft.log import (
    NO_TIMESTAMP,
    OffsetAndEpoch,
    RecordBatch,
    SnapshotId,
    check_follows,
    end_offset_for_epoch,
)


class MemoryRaftLog:
    """In-memory log. Invariants:

    - `_batches` are contiguous: each starts at the previous one's `next_offset`, the first at
      `_start`; `_bases[i] == _batches[i].base_offset`.
    - `_epoch_starts` lists (epoch, first offset) for every epoch change among `_batches`, epochs
      strictly increasing.
    - `_start <= _flushed <= end_offset`: everything below `_flushed` survives `crash()`.
    - the latest snapshot's end offset is `<= end_offset` and `>= _start` is not required: a snapshot
      may lie inside the log until `delete_before_snapshot`.
    """

    def __init__(self) -> None:
        self._batches: list[RecordBatch] = []
        self._bases: list[int] = []
        self._epoch_starts: list[tuple[int, int]] = []
        self._start = 0
        self._flushed = 0
        self._snapshots: dict[SnapshotId, bytes] = {}
        self._latest_snapshot: SnapshotId | None = None
        self._partial: dict[SnapshotId, bytearray] = {}

    # -- offsets ---------------------------------------------------------------------------------

    @property
    def start_offset(self) -> int:
        return self._start

    @property
    def end_offset(self) -> int:
        return self._batches[-1].next_offset if self._batches else self._start

    @property
    def flushed_offset(self) -> int:
        return self._flushed

    @property
    def last_fetched_epoch(self) -> int:
        if self._batches:
            return self._batches[-1].epoch
        if self._latest_snapshot is not None:
            return self._latest_snapshot.epoch
        return 0

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        return end_offset_for_epoch(self._epoch_starts, self._latest_snapshot, self._start, self.end_offset, epoch)

    def _index_of(self, offset: int) -> int:
        idx = bisect.bisect_right(self._bases, offset) - 1
        if idx < 0 or not (self._batches[idx].base_offset <= offset <= self._batches[idx].last_offset):
            raise ValueError(f"offset {offset} not in log [{self._start}, {self.end_offset})")
        return idx

    def batch_containing(self, offset: int) -> RecordBatch | None:
        if offset < self._start or offset >= self.end_offset:
            return None
        return self._batches[self._index_of(offset)]

    def read(self, offset: int, max_bytes: int) -> list[RecordBatch]:
        if offset < self._start or offset > self.end_offset:
            raise ValueError(f"read at {offset} outside [{self._start}, {self.end_offset}]")
        if offset == self.end_offset:
            return []
        idx = self._index_of(offset)
        out: list[RecordBatch] = []
        size = 0
        for batch in self._batches[idx:]:
            if out and size + batch.size_in_bytes > max_bytes:
                break
            out.append(batch)
            size += batch.size_in_bytes
        return out

    def batches(self) -> list[RecordBatch]:
        return list(self._batches)

    # -- writes ----------------------------------------------------------------------------------

    def _append(self, batch: RecordBatch) -> None:
        if not self._epoch_starts or self._epoch_starts[-1][0] != batch.epoch:
            self._epoch_starts.append((batch.epoch, batch.base_offset))
        self._batches.append(batch)
        self._bases.append(batch.base_offset)

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
        check_follows([batch], self.end_offset, self.last_fetched_epoch)
        self._append(batch)
        return batch

    def append_as_follower(self, batches: Sequence[RecordBatch]) -> None:
        check_follows(batches, self.end_offset, self.last_fetched_epoch)
        for batch in batches:
            self._append(batch)

    def truncate_to(self, offset: int) -> None:
        if offset >= self.end_offset:
            return
        if offset < self._start:
            raise ValueError(f"truncate to {offset} below log start {self._start}")
        # A batch holding `offset` goes whole: the log may end below `offset`.
        idx = bisect.bisect_right(self._bases, offset) - 1
        if idx < 0 or self._bases[idx] != offset and self._batches[idx].last_offset < offset:
            idx += 1
        del self._batches[idx:]
        del self._bases[idx:]
        end = self.end_offset
        while self._epoch_starts and self._epoch_starts[-1][1] >= end:
            self._epoch_starts.pop()
        self._flushed = min(self._flushed, end)

    def flush(self, up_to: int) -> None:
        self._flushed = max(self._flushed, min(up_to, self.end_offset))

    # -- snapshots -------------------------------------------------------------------------------

    @property
    def latest_snapshot_id(self) -> SnapshotId | None:
        return self._latest_snapshot

    @property
    def snapshot_ids(self) -> list[SnapshotId]:
        return sorted(self._snapshots)

    @property
    def earliest_snapshot_id(self) -> SnapshotId | None:
        if self._start == 0:
            return None
        return min(s for s in self._snapshots if s.end_offset >= self._start)

    def create_snapshot(self, snapshot_id: SnapshotId, data: bytes) -> None:
        self._snapshots[snapshot_id] = bytes(data)
        if self._latest_snapshot is None or snapshot_id > self._latest_snapshot:
            self._latest_snapshot = snapshot_id

    def delete_before_snapshot(self, snapshot_id: SnapshotId) -> None:
        if snapshot_id not in self._snapshots:
            raise ValueError(f"no snapshot {snapshot_id}")
        new_start = snapshot_id.end_offset
        if new_start <= self._start:
            return
        if new_start > self._flushed:
            raise ValueError(f"snapshot end {new_start} beyond the flushed log {self._flushed}")
        idx = bisect.bisect_left(self._bases, new_start)
        if idx < len(self._bases) and self._bases[idx] != new_start:
            raise ValueError(f"snapshot end {new_start}: not a batch boundary")
        del self._batches[:idx]
        del self._bases[:idx]
        self._start = new_start
        # Keep the epoch entry in force at the new start, moved up to it.
        kept = [e for e in self._epoch_starts if e[1] >= new_start]
        before = [e for e in self._epoch_starts if e[1] < new_start]
        if before and (not kept or kept[0][1] > new_start) and self._batches:
            kept.insert(0, (before[-1][0], new_start))
        self._epoch_starts = kept
        for sid in [s for s in self._snapshots if s < snapshot_id]:
            del self._snapshots[sid]

    def snapshot_size(self, snapshot_id: SnapshotId) -> int | None:
        data = self._snapshots.get(snapshot_id)
        return None if data is None else len(data)

    def read_snapshot(self, snapshot_id: SnapshotId, position: int, max_bytes: int) -> bytes:
        return self._snapshots[snapshot_id][position : position + max_bytes]

    def write_snapshot_chunk(self, snapshot_id: SnapshotId, position: int, data: bytes) -> None:
        buf = self._partial.setdefault(snapshot_id, bytearray())
        if position == 0:
            buf.clear()
        if position != len(buf):
            raise ValueError(f"chunk at {position}, {len(buf)} bytes written so far")
        buf += data

    def finish_snapshot_download(self, snapshot_id: SnapshotId) -> None:
        data = self._partial.pop(snapshot_id)
        self._partial.clear()
        self._snapshots[snapshot_id] = bytes(data)
        self._latest_snapshot = snapshot_id
        self._batches.clear()
        self._bases.clear()
        self._epoch_starts.clear()
        self._start = self._flushed = snapshot_id.end_offset
        for sid in [s for s in self._snapshots if s != snapshot_id]:
            del self._snapshots[sid]

    # -- simulated failure -----------------------------------------------------------------------

    def crash(self) -> None:
        """Forget what a power loss would: the unflushed tail and half-downloaded snapshots."""
        self.truncate_to(self._flushed)
        self._partial.clear()
