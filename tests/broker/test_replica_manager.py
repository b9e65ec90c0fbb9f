"""The replica manager without sockets: metadata deltas in, logs and roles out, on injected clocks.

The metadata comes from a real `QuorumController` (records replayed into real deltas); the replica
manager's timers run on trio's autojump clock and its wall clock is a manual one, so follower lag,
retention and delayed segment deletion are driven by the test, never by waiting.
"""

from __future__ import annotations

import pytest
import trio
import trio.testing

from kraftpy.broker.partition import Role
from kraftpy.broker.replica_manager import ReplicaManager
from kraftpy.broker.settings import BrokerSettings
from kraftpy.metadata import cluster_control
from kraftpy.metadata.delta import MetadataDelta
from kraftpy.metadata.image import EMPTY_IMAGE
from kraftpy.metadata.messages import (
    DeleteTopicsRequest,
    DeleteTopicState,
)
from kraftpy.metadata.result import ControllerResult
from kraftpy.protocol.batch_header import read_header
from kraftpy.protocol.errors import ErrorCode
from kraftpy.storage.log_manager import LOG_START_CHECKPOINT_FILE, REPLICATION_CHECKPOINT_FILE
from kraftpy.storage.segment import LogSegment
from tests.helpers.blocking import file_work_forbidden_here
from tests.helpers.metadata import CLUSTER_ID, Metadata, WallClock
from tests.helpers.protocol import batch

NODE = 1


def settings(tmp_path, **overrides) -> BrokerSettings:
    values = dict(node_id=NODE, cluster_id=CLUSTER_ID, log_dirs=(tmp_path / "a", tmp_path / "b"),
                  replica_lag_time_max_ms=10_000, log_retention_check_interval_ms=1000,
                  high_watermark_checkpoint_interval_ms=5000)
    values.update(overrides)
    return BrokerSettings(**values)


@pytest.fixture
async def broker(tmp_path, autojump_clock, nursery):
    # pytest-trio runs a test on a clock only when the test itself names it: a test that waits out
    # timers asks for autojump_clock too; the others run on the real clock.
    metadata = Metadata(brokers=range(1, 7))
    clock = WallClock()
    replicas = ReplicaManager(settings(tmp_path), metadata, clock)
    await nursery.start(replicas.run)
    await replicas.set_running(True)
    await metadata.publish_to(replicas)
    yield metadata, replicas, clock
    await replicas.close()


async def test_a_delta_changes_and_wakes_only_the_partitions_it_touches(broker):
    metadata, replicas, _ = broker
    metadata.create("many", 60)
    await metadata.publish_to(replicas)
    local = len(replicas.partitions)
    assert 0 < local < 60  # six brokers, three replicas each
    woken = {tp: trio.Event() for tp in replicas.partitions}
    for tp, part in replicas.partitions.items():
        part.hw_watchers.add(woken[tp])
        part.append_watchers.add(woken[tp])
    led = sorted(tp for tp, part in replicas.partitions.items() if part.is_leader)
    # One partition's leader is fenced away: only that partition changes here.
    other = next(tp for tp, part in replicas.partitions.items() if not part.is_leader)
    fenced_leader = replicas.partitions[other].leader_id
    for record_list in [cluster_control.fence_brokers(metadata.controller.image, [fenced_leader],
                                                       metadata.controller.config)]:
        metadata.commit(ControllerResult(record_list, None))
    image, delta = metadata.pending[-1]
    touched = {(p.topic_name, p.partition) for p in (*delta.local_changes(NODE).leaders,
                                                     *delta.local_changes(NODE).followers)}
    await metadata.publish_to(replicas)
    assert {(tp.topic, tp.partition) for tp, event in woken.items() if event.is_set()} == touched
    assert 0 < len(touched) < local
    assert led == sorted(tp for tp in led if replicas.partitions[tp].is_leader)  # nothing else moved


async def test_logs_open_and_close_off_the_event_loop_in_one_hop_per_delta(broker, monkeypatch):
    metadata, replicas, _ = broker
    hops = []
    real = trio.to_thread.run_sync

    async def counting(fn, *args, **kwargs):
        hops.append(getattr(fn, "__name__", fn))
        return await real(fn, *args, **kwargs)

    monkeypatch.setattr(trio.to_thread, "run_sync", counting)
    with file_work_forbidden_here() as elsewhere:
        metadata.create("orders", 12, rf=6)
        await metadata.publish_to(replicas)
        assert len(replicas.partitions) == 12 and hops.count("_open_logs") == 1 and "mkdir" in elsewhere
        # Spread over both log dirs, fewest first.
        dirs = {part.log.directory.parent.name for part in replicas.partitions.values()}
        assert dirs == {"a", "b"}
        topic_id = metadata.controller.image.topics.get_by_name("orders").id
        metadata.commit(metadata.controller.handle_delete_topics(DeleteTopicsRequest((DeleteTopicState("orders"),))))
        await metadata.publish_to(replicas)
        assert replicas.partitions == {} and hops.count("_delete_logs") == 1
        # Re-created under the same name: a new log, the old directory is gone.
        metadata.create("orders", 2, rf=6)
        await metadata.publish_to(replicas)
        part = replicas.get("orders", 0)
        assert part is not None and part.topic_id != topic_id and part.log_end_offset == 0
        await replicas.checkpoint_now()

    def leftovers() -> list[str]:
        return [p.name for d in ("a", "b") for p in (replicas.settings.log_dirs[0].parent / d).iterdir()
                if p.name.endswith("-delete")]

    while leftovers():  # the background deletion, in a worker thread: each directory removed sets `deleted`
        await replicas.deleted.wait()


async def test_set_running_takes_and_gives_back_leaderships(broker):
    metadata, replicas, _ = broker
    metadata.create("t", 12)
    await metadata.publish_to(replicas)
    led = {tp for tp, part in replicas.partitions.items() if part.is_leader}
    assert led
    await replicas.set_running(False)
    assert all(part.role is not Role.LEADER for part in replicas.partitions.values())
    assert not any(tp in parts for parts in replicas.fetch_assignments.values() for tp in led)
    await replicas.set_running(True)
    assert {tp for tp, part in replicas.partitions.items() if part.is_leader} == led
    for leader, parts in replicas.fetch_assignments.items():
        assert all(replicas.partitions[tp].leader_id == leader for tp in parts)


async def test_a_delta_of_many_partitions_logs_a_summary_and_each_partition_at_debug(broker, monkeypatch):
    """Up to ROLE_LINES_MAX partitions a delta logs each role change at info level; past it, one summary
    line (a broker restarted with 33,000 partitions spent seconds writing their lines)."""
    import structlog

    from kraftpy.broker import replica_manager

    metadata, replicas, _ = broker
    monkeypatch.setattr(replica_manager, "ROLE_LINES_MAX", 5)
    with structlog.testing.capture_logs() as few:
        metadata.create("few", 3, rf=6)  # a replica everywhere: three partitions change here
        await metadata.publish_to(replicas)
    with structlog.testing.capture_logs() as many:
        metadata.create("many", 12, rf=6)
        await metadata.publish_to(replicas)

    def levels(logs: list[dict], event: str) -> list[str]:
        return [line["log_level"] for line in logs if line["event"] == event]

    assert levels(few, "became leader") + levels(few, "ISR changed") and set(
        levels(few, "became leader") + levels(few, "ISR changed")) == {"info"}
    assert not levels(few, "partitions changed")
    # (debug lines reach the capture only when the configured level lets them through)
    assert "info" not in levels(many, "became leader") + levels(many, "ISR changed")
    [summary] = [line for line in many if line["event"] == "partitions changed"]
    assert summary["log_level"] == "info" and summary["leaders"] + summary["followers"] == 12


async def test_a_lagging_follower_is_proposed_out_of_the_isr_by_the_wall_clock(broker):
    metadata, replicas, clock = broker
    metadata.create("t", 12)
    await metadata.publish_to(replicas)
    part = next(part for part in replicas.partitions.values() if part.is_leader)
    data = batch(b"x")
    assert (await part.append_as_leader(data, read_header(data), acks=1, now=clock())).error == ErrorCode.NONE
    followers = [r for r in part.replicas if r != NODE]
    part.update_follower_fetch(followers[0], 1)  # caught up; the other never fetches
    clock.now += 10_001
    part.update_follower_fetch(followers[0], 1)
    await replicas.maybe_shrink_isrs()
    await trio.testing.wait_all_tasks_blocked()  # the ISR-change task has sent the proposals
    proposed = [tuple(b.broker_id for b in p.new_isr_with_epochs) for r in metadata.alter_partitions for t in r.topics
                for p in t.partitions if p.partition_index == part.tp.partition]
    assert proposed and followers[1] not in proposed[-1] and followers[0] in proposed[-1]
    await metadata.publish_to(replicas)
    assert part.isr == proposed[-1] and part.pending_isr is None


async def test_retention_and_delayed_segment_deletion_follow_the_clocks(broker, autojump_clock):
    metadata, replicas, clock = broker
    metadata.create("logs", 1, only_here=True, **{"retention.ms": "60000", "segment.bytes": "200",
                                         "file.delete.delay.ms": "30000"})
    await metadata.publish_to(replicas)
    part = replicas.get("logs", 0)
    assert part.is_leader and part.log.config.file_delete_delay_ms == 30_000
    for _ in range(6):
        data = batch(b"x" * 80, timestamp=clock())
        await part.append_as_leader(data, read_header(data), acks=1, now=clock())
    assert len(part.log.segments) >= 3
    clock.now += 61_000
    with file_work_forbidden_here():
        assert await replicas.housekeeping() >= 2
    detached_at = trio.current_time()
    deleted = list(part.log.directory.glob("*.log.deleted"))
    assert deleted and part.log_start_offset > 0
    await trio.sleep(29)
    assert all(p.exists() for p in deleted)  # readers may still hold regions of them
    # The removal, due at 30 s, runs in a worker thread once no other log work does (the background
    # retention pass may hold the log then). Waited for a virtual second at a time, bounded by a count
    # of them and not by a deadline: while a worker thread works, the autojump clock leaps to the next
    # timer, and a deadline's is one.
    for _ in range(60):
        if not any(p.exists() for p in deleted):
            break
        await trio.sleep(1)
        await part.wait_idle()
    assert not any(p.exists() for p in deleted)
    assert trio.current_time() - detached_at >= 30
    await replicas.checkpoint_now()
    log_dir = part.log.directory.parent
    assert f"logs 0 {part.log_start_offset}" in (log_dir / LOG_START_CHECKPOINT_FILE).read_text()
    assert f"logs 0 {part.high_watermark}" in (log_dir / REPLICATION_CHECKPOINT_FILE).read_text()


async def test_a_clean_close_is_trusted_at_the_next_start(tmp_path, autojump_clock, monkeypatch):
    metadata = Metadata()
    clock = WallClock()
    metadata.create("t", 4, only_here=True)
    async with trio.open_nursery() as nursery:
        replicas = ReplicaManager(settings(tmp_path), metadata, clock)
        await nursery.start(replicas.run)
        await replicas.set_running(True)
        await metadata.publish_to(replicas)
        for part in replicas.partitions.values():
            data = batch(b"a", b"b")
            await part.append_as_leader(data, read_header(data), acks=1, now=clock())
        with file_work_forbidden_here():
            await replicas.close()
        nursery.cancel_scope.cancel()
    assert all((d / ".kraftpy_cleanshutdown").exists() for d in (tmp_path / "a", tmp_path / "b"))

    def no_recovery(self, on_batch=None):
        raise AssertionError("a clean restart must not scan CRCs")

    monkeypatch.setattr(LogSegment, "recover", no_recovery)
    async with trio.open_nursery() as nursery:
        again = ReplicaManager(settings(tmp_path), metadata, clock)
        await nursery.start(again.run)
        await again.set_running(True)
        image = metadata.controller.image
        await again.apply_delta(image, MetadataDelta.between(EMPTY_IMAGE, image))  # a broker's first image
        assert sorted(p.log_end_offset for p in again.partitions.values()) == [2, 2, 2, 2]
        assert all(p.log.recovery_point == p.high_watermark == 2 for p in again.partitions.values())
        await again.close()
        nursery.cancel_scope.cancel()


async def test_a_clean_start_opens_logs_on_one_thread_and_a_bulk_open_pauses_the_collector(
        tmp_path, autojump_clock, monkeypatch):
    """After a clean stop the logs are opened by one worker thread at a time (nothing to recover: more
    threads only take turns at the interpreter lock); after an unclean one by
    num.recovery.threads.per.data.dir per log directory. Opening many logs at once keeps the cyclic
    garbage collector off meanwhile, and on again after."""
    import gc

    from kraftpy.broker import replica_manager

    monkeypatch.setattr(replica_manager, "_FREEZE_AFTER", 3)
    metadata = Metadata()
    clock = WallClock()
    metadata.create("t", 4, only_here=True)
    seen: list[tuple[int, bool]] = []
    real = trio.to_thread.run_sync

    async def watching(fn, *args, limiter=None, **kwargs):
        if getattr(fn, "__name__", "") == "_open_logs":
            seen.append((int(limiter.total_tokens), gc.isenabled()))
        return await real(fn, *args, limiter=limiter, **kwargs)

    async def start_and_close(*, clean: bool) -> None:
        async with trio.open_nursery() as nursery:
            replicas = ReplicaManager(settings(tmp_path, recovery_threads_per_data_dir=3), metadata, clock)
            await nursery.start(replicas.run)
            await replicas.set_running(True)
            image = metadata.controller.image
            monkeypatch.setattr(trio.to_thread, "run_sync", watching)
            await replicas.apply_delta(image, MetadataDelta.between(EMPTY_IMAGE, image))
            monkeypatch.setattr(trio.to_thread, "run_sync", real)
            assert len(replicas.partitions) == 4 and gc.isenabled()
            if clean:
                await replicas.close()
            nursery.cancel_scope.cancel()

    await start_and_close(clean=True)  # the first start: nothing was stopped cleanly before it
    assert seen and all(entry == (3 * 2, False) for entry in seen)
    seen.clear()
    await start_and_close(clean=False)  # after a clean stop; this one ends without closing its logs
    assert seen and all(entry == (1, False) for entry in seen)
    seen.clear()
    await start_and_close(clean=True)  # after an unclean stop
    assert seen and all(entry == (3 * 2, False) for entry in seen)
