"""Committed metadata → `MetadataImage`s, the way every controller and broker follows the log.

`MetadataLoader` is a Raft listener: committed batches are decoded (msgpack metadata records in
RecordBatch values) and replayed through one `MetadataDelta` per commit, control batches only move
the provenance (and a KRaftVersionRecord the image's kraft.version); a loaded snapshot replaces the image outright. Each new image is handed to every
subscriber as ``publish(image, delta)``, the delta always leading from the image that subscriber saw
last to the new one, so a subscriber can act on what changed (``delta.local_changes(broker_id)``)
instead of comparing images:

* a commit: the delta the commit's records were replayed into;
* a snapshot load: ``MetadataDelta.between(previous image, snapshot image)`` — topics the snapshot no
  longer has are deletions (Kafka's ``finishSnapshot``);
* ``subscribe``: ``MetadataDelta.between(EMPTY_IMAGE, current image)`` — everything is new to it.

A loader follows the log in one of two ways. Called directly (``handle_commit``), it replays at once.
As a Raft listener in a running node it only queues what the Raft driver hands it (`listener`): its
own task (`run`) replays the queue, yielding to the event loop every `STEP_RECORDS` records, so that
a commit of tens of thousands of records (fencing a broker of 30,000 partitions) never holds up the
node's Raft work — its fetches, its election timer, a leader's answers — for longer than a step, as
Kafka's loader runs on its own event queue beside the Raft client's thread. A commit of several
batches holding more than `PUBLISH_RECORDS` records is published batch by batch once that many are
replayed (the image is still only ever published at a batch boundary: every committed record below
``next_offset`` and nothing else). A snapshot is decoded in a worker thread.

Snapshot files hold the records that rebuild an image (kraftpy.metadata.snapshot), as RecordBatch v2
batches of at most `SNAPSHOT_BATCH_RECORDS` records — the same framing as the log, so `kraftpy
dump-log` and `kraftpy metadata dump --snapshot` read them. At kraft.version 1 the Raft core puts a
control batch (the voters) in front of them; the loader skips it, as it skips control batches in the log.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterator
from typing import Any

import attrs
import trio

from kraftpy.metadata.delta import MetadataDelta
from kraftpy.metadata.image import EMPTY_IMAGE, MetadataImage, MetadataProvenance
from kraftpy.metadata.records import MetadataRecord, decode_record
from kraftpy.metadata.snapshot import encode_snapshot, load_snapshot
from kraftpy.protocol.records import ControlRecordType, SimpleRecord, build_batch, iter_decoded
from kraftpy.raft.driver import RaftDriver
from kraftpy.raft.effects import Commit, LeaderChange, SnapshotLoaded
from kraftpy.raft.log import RaftLog, RecordBatch
from kraftpy.raft.snapshot_control import split_snapshot
from kraftpy.raft.voters import decode_kraft_version_record

SNAPSHOT_BATCH_RECORDS = 1000
#: Records a running loader replays between two yields to the event loop (about 30 ms of replay).
STEP_RECORDS = 1000
#: Records after which a commit of several batches is published at the next batch boundary.
PUBLISH_RECORDS = 5000

Publisher = Callable[[MetadataImage, MetadataDelta], None]


def encode_snapshot_file(image: MetadataImage) -> bytes:
    values = encode_snapshot(image)
    out = []
    for start in range(0, len(values), SNAPSHOT_BATCH_RECORDS):
        chunk = values[start : start + SNAPSHOT_BATCH_RECORDS]
        out.append(build_batch([SimpleRecord(None, v) for v in chunk], base_offset=start))
    return b"".join(out)


def decode_snapshot_records(data: bytes) -> list[MetadataRecord]:
    """The metadata records of a snapshot file; the control batch a snapshot of a dynamic quorum starts
    with (its kraft.version and voters, kraftpy.raft.snapshot_control) is Raft's, and skipped."""
    return [decode_record(r.value or b"") for batch in iter_decoded(data) if not batch.header.is_control
            for r in batch.records]


def decode_snapshot_file(data: bytes, provenance: MetadataProvenance) -> MetadataImage:
    image = load_snapshot(decode_snapshot_records(data), provenance)
    control, _ = split_snapshot(data)
    return attrs.evolve(image, kraft_version=control.kraft_version) if control is not None else image


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
        #: Commits and loaded snapshots handed over by the Raft driver, not yet replayed (`run`).
        self._queue: collections.deque[Commit | _Snapshot] = collections.deque()
        self._queued = trio.Event()
        #: The Raft listener of a running loader: it queues, `run` replays.
        self.listener = _QueuingListener(self)

    # -- replaying at once -----------------------------------------------------------------------

    def handle_commit(self, commit: Commit) -> None:
        for _ in self._commit_steps(commit):
            pass

    def handle_snapshot_loaded(self, effect: SnapshotLoaded) -> None:
        snapshot = self._read_snapshot(effect)
        loaded = decode_snapshot_file(snapshot.data, snapshot.provenance)
        self._install(snapshot, loaded, MetadataDelta.between(self.image, loaded))

    def handle_leader_change(self, change: LeaderChange) -> None:
        self.leader_id = change.leader_id
        self.leader_epoch = change.epoch

    def subscribe(self, publish: Publisher) -> None:
        """Hear every new image from now on, starting with the current one (as a delta from EMPTY_IMAGE)."""
        self.subscribers.append(publish)
        publish(self.image, MetadataDelta.between(EMPTY_IMAGE, self.image))

    # -- replaying in a task -----------------------------------------------------------------------

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Replay what `listener` queues, in order, until cancelled."""
        task_status.started()
        while True:
            while not self._queue:
                await self._queued.wait()
                self._queued = trio.Event()
            item = self._queue.popleft()
            if isinstance(item, Commit):
                for _ in self._commit_steps(item):
                    await trio.lowlevel.checkpoint()
            else:
                loaded, delta = await trio.to_thread.run_sync(self._decode_against, item, self.image)
                self._install(item, loaded, delta)
            await trio.lowlevel.checkpoint()

    @property
    def backlog(self) -> int:
        """Commits and snapshots queued and not yet replayed."""
        return len(self._queue)

    def _enqueue(self, item: Commit | _Snapshot) -> None:
        self._queue.append(item)
        self._queued.set()

    # -- the replay itself -------------------------------------------------------------------------

    def _commit_steps(self, commit: Commit) -> Iterator[None]:
        """Replay ``commit``, yielding every `STEP_RECORDS` records; publish at its end, and at a batch
        boundary once `PUBLISH_RECORDS` records wait to be published."""
        if not commit.batches:
            return
        delta = MetadataDelta(self.image)
        first_timestamp_ms = commit.batches[0].timestamp_ms
        replayed = size = since_step = 0
        last = len(commit.batches) - 1
        for n, batch in enumerate(commit.batches):
            if batch.is_control:
                for kind, value in batch.control_records():
                    if kind == ControlRecordType.KRAFT_VERSION:
                        delta.set_kraft_version(decode_kraft_version_record(value))
            else:
                base, epoch = batch.base_offset, batch.epoch
                for i, value in enumerate(batch.records):
                    delta.replay(decode_record(value), base + i, epoch)
                    size += len(value)
                    since_step += 1
                    if since_step >= STEP_RECORDS:
                        since_step = 0
                        yield
                replayed += len(batch.records)
            delta.set_provenance(MetadataProvenance(batch.last_offset, batch.epoch))
            if n == last or replayed >= PUBLISH_RECORDS:
                self._publish(delta, batch, first_timestamp_ms, size)
                if n == last:
                    return
                delta = MetadataDelta(self.image)
                first_timestamp_ms = commit.batches[n + 1].timestamp_ms
                replayed = size = 0
                yield

    def _publish(self, delta: MetadataDelta, last: RecordBatch, first_timestamp_ms: int, size: int) -> None:
        self.image = delta.apply()
        self.next_offset = last.next_offset
        self.last_applied_timestamp_ms = last.timestamp_ms
        self.commit_timestamp_ms = first_timestamp_ms
        self.bytes_since_snapshot += size
        for publish in self.subscribers:
            publish(self.image, delta)

    def _read_snapshot(self, effect: SnapshotLoaded) -> _Snapshot:
        snapshot_id = effect.snapshot_id
        size = self.log.snapshot_size(snapshot_id) or 0
        return _Snapshot(snapshot_id.end_offset, MetadataProvenance(snapshot_id.end_offset - 1, snapshot_id.epoch),
                         self.log.read_snapshot(snapshot_id, 0, size))

    @staticmethod
    def _decode_against(snapshot: _Snapshot, image: MetadataImage) -> tuple[MetadataImage, MetadataDelta]:
        loaded = decode_snapshot_file(snapshot.data, snapshot.provenance)
        return loaded, MetadataDelta.between(image, loaded)

    def _install(self, snapshot: _Snapshot, loaded: MetadataImage, delta: MetadataDelta) -> None:
        self.image = loaded
        self.commit_timestamp_ms = -1  # a snapshot: no commit's latency to observe
        self.next_offset = snapshot.end_offset
        self.bytes_since_snapshot = 0
        for publish in self.subscribers:
            publish(self.image, delta)


class _Snapshot:
    """A snapshot the Raft driver loaded, read when it was handed over (a later snapshot may replace
    the file before the loader's task gets to it)."""

    __slots__ = ("end_offset", "provenance", "data")

    def __init__(self, end_offset: int, provenance: MetadataProvenance, data: bytes) -> None:
        self.end_offset = end_offset
        self.provenance = provenance
        self.data = data


class _QueuingListener:
    """A loader's side of the Raft listener protocol when it runs as a task: commits and snapshots are
    queued for `MetadataLoader.run` (the driver calls this with its lock held), the leader is noted."""

    def __init__(self, loader: MetadataLoader) -> None:
        self.loader = loader

    def handle_commit(self, commit: Commit) -> None:
        if commit.batches:
            self.loader._enqueue(commit)

    def handle_snapshot_loaded(self, effect: SnapshotLoaded) -> None:
        self.loader._enqueue(self.loader._read_snapshot(effect))

    def handle_leader_change(self, change: LeaderChange) -> None:
        self.loader.handle_leader_change(change)


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
