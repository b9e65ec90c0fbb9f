"""The control batch a snapshot starts with: the kraft.version and voter set at its end (KIP-853).

A snapshot's bytes are the state machine's (the metadata records of an image, kraftpy.metadata.loader),
but a replica that loads one must also learn which voters were in force where it ends, since the log
that held their VotersRecord is gone. So, at kraft.version 1, the core puts one control batch in
front of the state machine's bytes when it stores a snapshot: a KRaftVersionRecord and a
VotersRecord (Kafka's snapshots carry the same two records after their header)::

    [control batch: KRAFT_VERSION record, KRAFT_VOTERS record][the state machine's bytes]

The batch is a RecordBatch v2 like any other (offsets from the snapshot's end - 2, its epoch), so
`kraftpy dump-log` and the metadata loader, which skip control batches, read such a file as they
read any snapshot. A snapshot of a static quorum (kraft.version 0) has no such batch, as before.

A *bootstrap snapshot* ``00000000000000000000-0000000000.checkpoint`` holds only this batch: the
voters `kraftpy storage format --standalone` or ``--initial-controllers`` start a cluster with.
"""

from __future__ import annotations

import attrs

from kraftpy.protocol.batch_header import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    CorruptRecordError,
    check_batch,
    read_header,
)
from kraftpy.protocol.records import ControlRecordType
from kraftpy.raft.batch import NO_TIMESTAMP, RecordBatch
from kraftpy.raft.log import RaftLog, SnapshotId
from kraftpy.raft.voters import (
    ControlRecordError,
    VoterSet,
    decode_kraft_version_record,
    decode_voters_record,
    encode_kraft_version_record,
    encode_voters_record,
)

#: The snapshot every formatted dynamic quorum starts from.
BOOTSTRAP_SNAPSHOT_ID = SnapshotId(end_offset=0, epoch=0)


@attrs.frozen
class SnapshotControl:
    kraft_version: int
    voters: VoterSet


def control_batch(kraft_version: int, voters: VoterSet, snapshot_id: SnapshotId,
                  timestamp_ms: int = NO_TIMESTAMP) -> bytes:
    """The control batch of a snapshot ending at `snapshot_id`."""
    return RecordBatch.build(
        [encode_kraft_version_record(kraft_version), encode_voters_record(voters)],
        base_offset=max(snapshot_id.end_offset - 2, 0),
        epoch=snapshot_id.epoch,
        timestamp_ms=timestamp_ms,
        control_types=[ControlRecordType.KRAFT_VERSION, ControlRecordType.KRAFT_VOTERS],
    ).data


def parse_control(batch: RecordBatch) -> SnapshotControl:
    """The kraft.version and voters of a snapshot's control batch; ControlRecordError otherwise."""
    kraft_version = voters = None
    try:
        records = batch.control_records()
    except CorruptRecordError as exc:
        raise ControlRecordError(str(exc)) from None
    for kind, value in records:
        if kind == ControlRecordType.KRAFT_VERSION:
            kraft_version = decode_kraft_version_record(value)
        elif kind == ControlRecordType.KRAFT_VOTERS:
            voters = decode_voters_record(value)
    if kraft_version is None or voters is None:
        raise ControlRecordError("a snapshot's control batch without kraft.version and voters")
    return SnapshotControl(kraft_version, voters)


def _leading_control_batch(data: bytes) -> RecordBatch | None:
    if len(data) < HEADER_SIZE:
        return None
    try:
        header = read_header(data)
    except CorruptRecordError:
        return None
    if not header.is_control or header.size > len(data) or header.size < LOG_OVERHEAD:
        return None
    try:
        check_batch(memoryview(data), 0)
    except CorruptRecordError:
        return None
    return RecordBatch(data[: header.size], header)


def split_snapshot(data: bytes) -> tuple[SnapshotControl | None, bytes]:
    """(the control records, the state machine's bytes) of a snapshot's bytes."""
    batch = _leading_control_batch(data)
    if batch is None:
        return None, data
    return parse_control(batch), data[batch.size_in_bytes:]


def read_snapshot_control(log: RaftLog, snapshot_id: SnapshotId) -> SnapshotControl | None:
    """The control records at the start of a stored snapshot, reading only them (a bounded read)."""
    size = log.snapshot_size(snapshot_id) or 0
    head = log.read_snapshot(snapshot_id, 0, min(size, HEADER_SIZE))
    if len(head) < HEADER_SIZE:
        return None
    try:
        header = read_header(head)
    except CorruptRecordError:
        return None
    if not header.is_control or header.size > size:
        return None
    batch = _leading_control_batch(log.read_snapshot(snapshot_id, 0, header.size))
    return None if batch is None else parse_control(batch)
