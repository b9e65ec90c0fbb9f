"""Following the metadata log: commits replayed into images, snapshots written and loaded at start
with the log trimmed below them, and the offline `kraftpy metadata dump | show` tools on the files."""

from __future__ import annotations

import random
from pathlib import Path

from kraftpy.cli.main import app
from kraftpy.metadata.image import EMPTY_IMAGE
from kraftpy.metadata.loader import MetadataLoader, encode_snapshot_file
from kraftpy.metadata.messages import DeleteTopicsRequest, DeleteTopicState
from kraftpy.metadata.records import encode_record
from kraftpy.metadata.snapshot import image_to_records
from kraftpy.raft.config import RaftConfig
from kraftpy.raft.core import RaftCore
from kraftpy.raft.effects import Commit, SnapshotLoaded
from kraftpy.raft.file_log import FileRaftLog
from kraftpy.raft.log import SnapshotId
from kraftpy.raft.snapshot import snapshot_file_name
from tests.helpers.cli_runner import CliRunner

from .conftest import Cluster


def a_cluster() -> Cluster:
    cluster = Cluster()
    cluster.add_brokers(1, 2, 3)
    cluster.create_topic("orders", 3, 3)
    cluster.create_topic("audit", 1, 2, configs={"retention.ms": "1000"})
    return cluster


def write_log(log: FileRaftLog, records, epoch: int = 1, per_batch: int = 3) -> None:
    for start in range(0, len(records), per_batch):
        log.append_as_leader([encode_record(r) for r in records[start:start + per_batch]], epoch)
    log.flush(log.end_offset)


def feed(loader: MetadataLoader, effects) -> None:
    for effect in effects:
        if isinstance(effect, Commit):
            loader.handle_commit(effect)
        elif isinstance(effect, SnapshotLoaded):
            loader.handle_snapshot_loaded(effect)


def same_state(a, b) -> bool:
    return image_to_records(a) == image_to_records(b)


def test_replaying_commits_gives_the_controllers_image(tmp_path: Path) -> None:
    cluster = a_cluster()
    log = FileRaftLog.open(tmp_path)
    write_log(log, cluster.log)
    loader = MetadataLoader(log)
    published = []
    loader.subscribe(lambda image, delta: published.append(image))
    loader.handle_commit(Commit(log.end_offset, log.read(0, 1 << 30)))
    assert same_state(loader.image, cluster.image)
    assert loader.next_offset == log.end_offset
    assert published[-1] is loader.image
    log.close()


def test_snapshot_is_loaded_at_start_and_the_log_below_it_is_gone(tmp_path: Path) -> None:
    cluster = a_cluster()
    half = len(cluster.log) // 2 // 3 * 3
    log = FileRaftLog.open(tmp_path)
    write_log(log, cluster.log[:half])
    first = MetadataLoader(log)
    first.handle_commit(Commit(log.end_offset, log.read(0, 1 << 30)))
    snapshot = SnapshotId(log.end_offset, 1)
    log.create_snapshot(snapshot, encode_snapshot_file(first.image))
    log.delete_before_snapshot(snapshot)
    write_log(log, cluster.log[half:])
    log.close()

    log = FileRaftLog.open(tmp_path)
    assert log.start_offset == snapshot.end_offset  # trimmed below the snapshot
    core = RaftCore(RaftConfig(1, [1], "c", election_timeout_ms=10), log, rng=random.Random(1), now=0.0)
    loader = MetadataLoader(log)
    effects = core.start(0.0) + core.tick(1.0)  # a quorum of one: leader at once, everything commits
    loaded = [e for e in effects if isinstance(e, SnapshotLoaded)]
    commits = [e for e in effects if isinstance(e, Commit) and e.batches]
    assert loaded == [SnapshotLoaded(snapshot)]
    assert effects.index(loaded[0]) < effects.index(commits[0])
    assert commits[0].batches[0].base_offset == snapshot.end_offset  # the log before it is not replayed
    feed(loader, effects)
    assert loader.next_offset >= len(cluster.log)
    assert same_state(loader.image, cluster.image)
    log.close()


def test_metadata_dump_and_show(tmp_path: Path) -> None:
    cluster = a_cluster()
    log = FileRaftLog.open(tmp_path)
    write_log(log, cluster.log)
    snapshot = SnapshotId(log.end_offset, 1)
    loader = MetadataLoader(log)
    loader.handle_commit(Commit(log.end_offset, log.read(0, 1 << 30)))
    log.create_snapshot(snapshot, encode_snapshot_file(loader.image))
    log.close()
    runner = CliRunner()
    dumped = runner.invoke(app, ["metadata", "dump", "--log", str(tmp_path)])
    assert dumped.exit_code == 0, dumped.output
    lines = dumped.stdout.splitlines()
    assert len(lines) == len(cluster.log)
    assert lines[0].startswith("offset=0 epoch=1 FeatureLevelRecord")
    assert any("TopicRecord(name='orders'" in line for line in lines)
    as_json = runner.invoke(app, ["metadata", "dump", "--log", str(tmp_path), "--json"])
    assert '"type": "RegisterBrokerRecord"' in as_json.stdout
    snap_file = tmp_path / "__cluster_metadata-0" / snapshot_file_name(snapshot)
    snap = runner.invoke(app, ["metadata", "dump", "--snapshot", str(snap_file)])
    assert snap.exit_code == 0, snap.output
    assert "TopicRecord(name='audit'" in snap.stdout
    shown = runner.invoke(app, ["metadata", "show", "--log", str(tmp_path)])
    assert shown.exit_code == 0, shown.output
    assert "orders (id" in shown.stdout and "3 partitions" in shown.stdout
    assert "retention.ms" in shown.stdout
    for broker_id in (1, 2, 3):
        assert f"  {broker_id}: epoch" in shown.stdout
    missing = runner.invoke(app, ["metadata", "dump", "--log", str(tmp_path / "nope")])
    assert missing.exit_code == 1 and "not a directory" in missing.stderr


def test_every_publication_carries_a_delta_from_what_the_subscriber_saw(tmp_path: Path) -> None:
    """A subscriber's first delta starts from the empty image; a snapshot load publishes the difference
    between the previous image and the snapshot's, topics gone from the snapshot being deletions."""
    cluster = a_cluster()
    early = len(cluster.log)
    cluster.commit(cluster.controller.handle_delete_topics(DeleteTopicsRequest((DeleteTopicState(name="audit"),))))
    cluster.create_topic("late", 1, 1)
    log = FileRaftLog.open(tmp_path)
    write_log(log, cluster.log, per_batch=1)
    loader = MetadataLoader(log)
    loader.handle_commit(Commit(early, log.read(0, 1 << 30)[:early]))
    before = loader.image
    published: list = []
    loader.subscribe(lambda image, delta: published.append((image, delta)))

    image, delta = published[0]
    assert image is before and delta.image == EMPTY_IMAGE
    assert set(delta.created_topics.values()) == {"orders", "audit"}
    audit_replicas = set(before.topics.get_by_name("audit").partitions[0].replicas)
    hosts_audit = next(iter(audit_replicas))
    assert "audit" in {p.topic_name for p in delta.local_changes(hosts_audit).leaders + delta.local_changes(
        hosts_audit).followers}

    snapshot = SnapshotId(log.end_offset, 1)
    log.create_snapshot(snapshot, encode_snapshot_file(cluster.image))
    loader.handle_snapshot_loaded(SnapshotLoaded(snapshot))
    image, delta = published[1]
    assert same_state(image, cluster.image) and delta.image is before
    assert delta.apply() == image
    assert delta.deleted_topics == {before.topics.get_by_name("audit").id: "audit"}
    assert set(delta.created_topics.values()) == {"late"}
    assert [p.topic_name for p in delta.local_changes(hosts_audit).deletes] == ["audit"]
    assert all(c.topic_name == "late" for c in delta.changed_partitions)
    log.close()


async def test_a_running_loader_replays_in_steps_and_publishes_only_at_batch_boundaries(tmp_path: Path,
                                                                                        monkeypatch) -> None:
    """As a task, the loader hands the event loop back every STEP_RECORDS records of a commit, and
    publishes a commit of many batches once PUBLISH_RECORDS records are replayed, at a batch boundary:
    each image holds every record below the loader's next offset and nothing else. The listener only
    queues: nothing is replayed in the Raft driver's call."""
    import trio

    from kraftpy.metadata import loader as loader_module

    monkeypatch.setattr(loader_module, "STEP_RECORDS", 4)
    monkeypatch.setattr(loader_module, "PUBLISH_RECORDS", 10)
    cluster = a_cluster()
    for i in range(4):
        cluster.create_topic(f"more-{i}", 4, 1)
    log = FileRaftLog.open(tmp_path)
    write_log(log, cluster.log, per_batch=3)
    batches = log.read(0, 1 << 30)
    boundaries = {b.next_offset for b in batches}
    loader = MetadataLoader(log)
    ticks = 0
    published: list[tuple[int, int, int]] = []
    loader.subscribe(lambda image, delta: published.append(
        (image.provenance.last_offset, loader.next_offset, ticks)))

    async def count_ticks() -> None:
        nonlocal ticks
        while True:
            await trio.lowlevel.checkpoint()
            ticks += 1

    async with trio.open_nursery() as nursery:
        nursery.start_soon(count_ticks)
        await nursery.start(loader.run)
        loader.listener.handle_commit(Commit(log.end_offset, batches))
        assert loader.next_offset == 0 and loader.backlog == 1  # queued, not replayed
        while loader.next_offset < log.end_offset:
            await trio.sleep(0)
        nursery.cancel_scope.cancel()
    after_subscribe = published[1:]
    assert len(after_subscribe) >= len(cluster.log) // 12  # several images for the one commit
    for last_offset, next_offset, _ in after_subscribe:
        assert next_offset in boundaries and last_offset == next_offset - 1
    # The other task ran between the loader's steps, not only once the commit was done.
    assert len({t for _, _, t in after_subscribe}) == len(after_subscribe)
    assert same_state(loader.image, cluster.image)
    log.close()


async def test_a_queued_snapshot_is_read_when_the_driver_hands_it_over(tmp_path: Path) -> None:
    """A running loader reads a loaded snapshot when the Raft driver hands it over, not when its task
    gets to it: a later snapshot may have deleted the file by then."""
    import trio

    cluster = a_cluster()
    log = FileRaftLog.open(tmp_path)
    write_log(log, cluster.log)
    snapshot = SnapshotId(log.end_offset, 1)
    log.create_snapshot(snapshot, encode_snapshot_file(cluster.image))
    loader = MetadataLoader(log)
    loader.listener.handle_snapshot_loaded(SnapshotLoaded(snapshot))
    read_later = []
    log.read_snapshot = lambda *args: read_later.append(args)  # type: ignore[method-assign]
    async with trio.open_nursery() as nursery:
        await nursery.start(loader.run)
        while loader.next_offset < snapshot.end_offset:
            await trio.sleep(0)
        nursery.cancel_scope.cancel()
    assert same_state(loader.image, cluster.image) and not read_later
    log.close()
