"""Committed metadata → `MetadataImage`s, the way every controller and broker follows the log.

`MetadataLoader` is a Raft listener: committed batches are decoded (msgpack metadata records in
RecordBatch values) and replayed through one `MetadataDelta` per commit, control batches only move
the provenance; a loaded snapshot replaces the image outright. Each new image is handed to every
subscriber as ``publish(image, delta)``, the delta always leading from the image that subscriber saw
last to the new one, so a subscriber can act on what changed (``delta.local_changes(broker_id)``)
instead of comparing images:

* a commit: the delta the commit's records were replayed into;
* a snapshot load: ``MetadataDelta.between(previous image, snapshot image)`` — topics the snapshot no
  longer has are deletions (Kafka's ``finishSnapshot``);
* ``subscribe``: ``MetadataDelta.between(EMPTY_IMAGE, current image)`` — everything is new to it.

Snapshot files hold the records that rebuild an image (kraftpy.metadata.snapshot), as RecordBatch v2
batches of at most `SNAPSHOT_BATCH_RECORDS` records — the same framing as the log, so `kraftpy
dump-log` and `kraftpy metadata dump --snapshot` read them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import trio

from kraftpy.metadata.delta import MetadataDelta
from kraftpy.metadata.image import EMPTY_IMAGE, MetadataImage, MetadataProvenance
from kraftpy.metadata.records import MetadataRecord, decode_record
from kraftpy.metadata.snapshot import encode_snapshot, load_snapshot
from kraftpy.protocol.records import SimpleRecord, build_batch, iter_decoded
from kraftpy.raft.driver import RaftDriver
from kraftpy.raft.effects import Commit, LeaderChange, SnapshotLoaded
from kraftpy.raft.log import RaftLog, RecordBatch

SNAPSHOT_BATCH_RECORDS = 1000

Publisher = Callable[[MetadataImage, MetadataDelta], None]


def encode_snapshot_file(image: MetadataImage) -> bytes:
    values = encode_snapshot(image)
    out = []
    for start in range(0, len(values), SNAPSHOT_BATCH_RECORDS):
        chunk = values[start : start + SNAPSHOT_BATCH_RECORDS]
        out.append(build_batch([SimpleRecord(None, v) for v in chunk], base_offset=start))
    return b"".join(out)


def decode_snapshot_records(data: bytes) -> list[MetadataRecord]:
    return [decode_record(r.value or b"") for batch in iter_decoded(data) for r in batch.records]


def decode_snapshot_file(data: bytes, provenance: MetadataProvenance) -> MetadataImage:
    return load_snapshot(decode_snapshot_records(data), provenance)


def batch_records(batch: RecordBatch) -> list[MetadataRecord]:
    return [] if batch.is_control else [decode_record(value) for value in batch.records]


class MetadataLoader:
    """Follows committed metadata. Invariant: ``image`` reflects every committed record below
    ``next_offset`` and nothing else."""

    def __init__(self, log: RaftLog, publish: Publisher | None = None) -> None:
        self.log = log
        self.subscribers: list[Publisher] = [] if publish is None else [publish]
        self.image: MetadataImage = EMPTY_IMAGE
        self.next_offset = 0
        self.leader_id: int | None = None
        self.leader_epoch = 0
        #: When the leader appended the last batch applied (-1: none yet); kraftpy.node.metrics reports it.
        self.last_applied_timestamp_ms = -1
        #: When the leader appended the first batch of the last commit applied (-1: none yet): the oldest
        #: change the last published image brings, for the metadata apply latency (kraftpy.node).
        self.commit_timestamp_ms = -1
        #: Bytes of record values committed since the image was last loaded from or saved to a snapshot.
        self.bytes_since_snapshot = 0

    def handle_commit(self, commit: Commit) -> None:
        if not commit.batches:
            return
        delta = MetadataDelta(self.image)
        self.commit_timestamp_ms = commit.batches[0].timestamp_ms
        for batch in commit.batches:
            records = batch_records(batch)
            for i, record in enumerate(records):
                delta.replay(record, batch.base_offset + i, batch.epoch)
            self.bytes_since_snapshot += sum(len(v) for v in batch.records)
            self.next_offset = batch.next_offset
            self.last_applied_timestamp_ms = batch.timestamp_ms
            delta.set_provenance(MetadataProvenance(batch.last_offset, batch.epoch))
        self.image = delta.apply()
        for publish in self.subscribers:
            publish(self.image, delta)

    def handle_snapshot_loaded(self, effect: SnapshotLoaded) -> None:
        snapshot_id = effect.snapshot_id
        size = self.log.snapshot_size(snapshot_id) or 0
        data = self.log.read_snapshot(snapshot_id, 0, size)
        loaded = decode_snapshot_file(data, MetadataProvenance(snapshot_id.end_offset - 1, snapshot_id.epoch))
        delta = MetadataDelta.between(self.image, loaded)
        self.image = loaded
        self.commit_timestamp_ms = -1  # a snapshot: no commit's latency to observe
        self.next_offset = snapshot_id.end_offset
        self.bytes_since_snapshot = 0
        for publish in self.subscribers:
            publish(self.image, delta)

    def subscribe(self, publish: Publisher) -> None:
        """Hear every new image from now on, starting with the current one (as a delta from EMPTY_IMAGE)."""
        self.subscribers.append(publish)
        publish(self.image, MetadataDelta.between(EMPTY_IMAGE, self.image))

    def handle_leader_change(self, change: LeaderChange) -> None:
        self.leader_id = change.leader_id
        self.leader_epoch = change.epoch


async def write_metadata_snapshots(loader: MetadataLoader, driver: RaftDriver, limit: int, log: Any) -> None:
    """Every node bounds its copy of the metadata log: once ``limit`` bytes of records
    (metadata.log.max.record.bytes.between.snapshots) were committed since the last snapshot, write
    the loaded image as a snapshot at the loader's offset and drop the log below it."""
    due = trio.Event()

    def check(_image: object, _delta: object) -> None:
        if loader.bytes_since_snapshot >= limit:
            due.set()

    loader.subscribe(check)
    while True:
        await due.wait()
        due = trio.Event()
        end = loader.next_offset
        if end <= driver.core.log.start_offset:
            continue
        data = await trio.to_thread.run_sync(encode_snapshot_file, loader.image)
        try:
            await driver.create_snapshot(end, data)
        except ValueError as exc:
            log.warning("snapshot skipped", reason=str(exc))
            continue
        loader.bytes_since_snapshot = 0
