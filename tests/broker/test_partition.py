"""A partition without sockets: the leader's bookkeeping (follower caught-up times, maximal ISR, high
watermark), and appends, rolls and truncation with the log's file work off the event loop."""

from __future__ import annotations

import threading

import pytest
import trio
from trio.testing import wait_all_tasks_blocked

from kraftpy.broker import producer_state as ps
from kraftpy.broker.partition import Partition, PartitionChanged, TopicPartition
from kraftpy.broker.producer_state import ProducerStateManager
from kraftpy.broker.settings import BrokerSettings
from kraftpy.config import load_config
from kraftpy.ids import Uuid
from kraftpy.metadata.controller_server import controller_config
from kraftpy.metadata.image import PartitionRegistration
from kraftpy.metadata.records import LeaderRecoveryState
from kraftpy.protocol.batch_header import read_header
from kraftpy.protocol.errors import ErrorCode
from kraftpy.storage.log import Log
from kraftpy.storage.log_config import LogConfig
from tests.helpers.blocking import file_work_forbidden_here
from tests.helpers.protocol import batch


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def leader(tmp_path, isr=(1, 2, 3)):
    clock = Clock()
    log = Log.open(tmp_path / "t-0", clock=clock)
    part = Partition(TopicPartition("t", 0), Uuid(bytes(15) + b"\x01"), log, 1, clock, ProducerStateManager())
    part.make_leader(PartitionRegistration(replicas=(1, 2, 3), isr=isr, leader=1, leader_epoch=4, partition_epoch=7))
    return part, clock


async def append(part, *values):
    data = batch(*values)
    return await part.append_as_leader(data, read_header(data), acks=1, now=part.clock())


async def test_high_watermark_is_the_smallest_end_offset_over_the_isr_and_never_goes_back(tmp_path):
    part, _ = leader(tmp_path)
    assert part.log.leader_epoch_cache.latest_entry.epoch == 4
    await append(part, b"a", b"b", b"c")
    assert part.high_watermark == 0
    part.update_follower_fetch(2, 3)
    assert part.high_watermark == 0  # follower 3 has not fetched in this epoch
    part.update_follower_fetch(3, 2)
    assert part.high_watermark == 2
    part.update_follower_fetch(3, 1)  # an older fetch offset never moves the HW back
    assert part.high_watermark == 2


async def test_lagging_followers_are_proposed_out_and_the_maximal_isr_holds_the_hw(tmp_path):
    part, clock = leader(tmp_path)
    await append(part, b"a")
    part.update_follower_fetch(2, 1)
    part.update_follower_fetch(3, 1)
    await append(part, b"b")
    clock.now += 500
    part.update_follower_fetch(2, 2)  # caught up
    part.update_follower_fetch(3, 1)  # fetching, but behind since the last append
    clock.now += 600
    assert part.isr_to_shrink(1000) == (1, 2)
    part.propose_isr((1, 2))
    assert part.isr_to_shrink(1000) is None  # one proposal at a time
    assert part.maximal_isr == (1, 2, 3)
    assert part.high_watermark == 1  # follower 3 still counts until the shrink is committed
    part.isr_change_committed(4, 8, (1, 2))
    assert part.isr == (1, 2) and part.pending_isr is None and part.high_watermark == 2


async def test_a_caught_up_follower_is_proposed_back_in(tmp_path):
    part, _ = leader(tmp_path, isr=(1, 2))
    await append(part, b"a", b"b")
    part.update_follower_fetch(2, 2)
    assert part.high_watermark == 2
    part.update_follower_fetch(3, 1)
    assert part.isr_to_expand(3) is None
    part.update_follower_fetch(3, 2)
    assert part.isr_to_expand(3) == (1, 2, 3)


async def test_truncation_never_goes_below_the_high_watermark(tmp_path):
    part, _ = leader(tmp_path, isr=(1,))
    await append(part, b"a", b"b")
    assert part.high_watermark == 2
    part.make_follower(PartitionRegistration(replicas=(1, 2, 3), isr=(2,), leader=2, leader_epoch=5,
                                             partition_epoch=8))
    assert await part.truncate_to(1) == 2


async def test_divergence_named_by_an_unclean_leader_truncates_below_the_high_watermark(tmp_path):
    """A replica that was the whole ISR comes back to a leader elected uncleanly, whose log ends below
    this replica's high watermark: it cuts what only it holds (a clamp would leave its log diverging
    from the leader's for good, the follower fetching the same divergence again and again)."""
    part, _ = leader(tmp_path, isr=(1,))
    for value in (b"a", b"b", b"c"):
        await append(part, value)
    assert part.high_watermark == 3
    part.make_follower(PartitionRegistration(replicas=(1, 2), isr=(2,), leader=2, leader_epoch=5,
                                             partition_epoch=8, leader_recovery_state=LeaderRecoveryState.RECOVERING))
    assert await part.truncate_to(1, diverged=True) == 1
    assert part.high_watermark == 1 and part.log_end_offset == 1


async def test_a_leader_that_appended_nothing_in_its_epoch_drops_it_when_it_follows_again(tmp_path):
    """Made leader in epoch 4 and fenced before anything was appended in it: the new leader knows no
    epoch 4 and names this log's end as where they diverge. Nothing is cut, but epoch 4 goes, so the
    follower's next fetch says epoch 3 and is not told the same divergence again and again."""
    clock = Clock()
    log = Log.open(tmp_path / "t-0", clock=clock)
    part = Partition(TopicPartition("t", 0), Uuid(bytes(15) + b"\x01"), log, 1, clock, ProducerStateManager())
    part.make_leader(PartitionRegistration(replicas=(1, 2), isr=(1,), leader=1, leader_epoch=3, partition_epoch=1))
    await append(part, b"a", b"b")
    part.make_leader(PartitionRegistration(replicas=(1, 2), isr=(1, 2), leader=1, leader_epoch=4, partition_epoch=2))
    part.make_follower(PartitionRegistration(replicas=(1, 2), isr=(2,), leader=2, leader_epoch=5, partition_epoch=3))
    assert part.log.latest_epoch == 4
    assert await part.truncate_to(2, diverged=True) == 2
    assert part.log.latest_epoch == 3 and part.log_end_offset == 2


def test_settings_from_a_properties_file():
    config = load_config(text="\n".join([
        "process.roles=broker", "node.id=4", "controller.quorum.voters=1@localhost:9093",
        "controller.listener.names=CONTROLLER", "listeners=PLAINTEXT://127.0.0.1:9192",
        "log.dirs=/var/a,/var/b", "min.insync.replicas=2", "log.retention.hours=2",
        "replica.lag.time.max.ms=1234",
    ]))
    settings = BrokerSettings.from_config(config, cluster_id="c")
    assert (settings.node_id, settings.host, settings.port) == (4, "127.0.0.1", 9192)
    assert [str(d) for d in settings.log_dirs] == ["/var/a", "/var/b"]
    assert settings.replica_lag_time_max_ms == 1234
    assert settings.static_broker_configs == {"min.insync.replicas": "2", "log.retention.ms": "7200000"}
    assert (settings.num_partitions, settings.default_replication_factor) == (1, 1)


def test_controller_and_broker_derive_the_same_static_topic_defaults():
    """One derivation: what a combined node's controller gives new topics is what its broker runs with."""
    config = load_config(text="\n".join([
        "process.roles=broker,controller", "node.id=1", "controller.quorum.voters=1@localhost:9093",
        "controller.listener.names=CONTROLLER", "listeners=PLAINTEXT://127.0.0.1:9192,CONTROLLER://127.0.0.1:9093",
        "log.dirs=/var/a", "min.insync.replicas=2", "log.retention.hours=2", "log.roll.hours=1",
        "message.max.bytes=4096", "log.segment.bytes=1048576", "num.partitions=4",
    ]))
    broker = BrokerSettings.from_config(config, cluster_id="c")
    controller = controller_config(config, "c")
    assert dict(broker.static_broker_configs) == dict(controller.static_broker_configs) == {
        "min.insync.replicas": "2", "log.retention.ms": "7200000", "log.roll.ms": "3600000",
        "message.max.bytes": "4096", "log.segment.bytes": "1048576"}
    assert broker.num_partitions == controller.num_partitions == 4


def small_leader(tmp_path, **config):
    clock = Clock()
    log = Log.open(tmp_path / "t-0", LogConfig(**config), clock=clock)
    part = Partition(TopicPartition("t", 0), Uuid(bytes(15) + b"\x01"), log, 1, clock, ProducerStateManager())
    part.make_leader(PartitionRegistration(replicas=(1,), isr=(1,), leader=1, leader_epoch=1, partition_epoch=1))
    return part


async def test_rolls_truncations_and_flushes_run_off_the_event_loop(tmp_path):
    part = small_leader(tmp_path, segment_bytes=200, flush_interval_messages=2)
    with file_work_forbidden_here() as elsewhere:
        for i in range(6):
            result = await append(part, b"x" * 60, b"%d" % i)
            assert result.error == ErrorCode.NONE
        assert len(part.log.segments) > 2
        assert "fsync" in elsewhere and "open" in elsewhere  # the rolls' files and fsyncs, in threads
        assert part.log.recovery_point == part.log_end_offset == 12  # flush.messages=2: fsynced, elsewhere
        part.make_follower(PartitionRegistration(replicas=(1, 2), isr=(2,), leader=2, leader_epoch=2,
                                                 partition_epoch=2, leader_recovery_state=LeaderRecoveryState.RECOVERING))
        assert await part.truncate_to(3, diverged=True) == 2
        assert "ftruncate" in elsewhere
    # The roll took a producer snapshot at the new segment's base, in the same worker thread.
    assert ps.snapshot_offsets(part.log.directory)


async def test_an_append_waits_for_a_roll_and_checks_its_sequence_again(tmp_path):
    """Two producers' retries of one batch arrive while the segment rolls: the first is appended once
    the roll is done, the second finds it there and is answered as a duplicate."""
    part = small_leader(tmp_path, segment_bytes=300)
    await append(part, b"x" * 150)
    rolling, release = threading.Event(), threading.Event()
    real_roll = part._roll

    def slow_roll(base):
        rolling.set()
        release.wait(10)
        real_roll(base)

    part._roll = slow_roll
    data = batch(b"y" * 150, producer_id=7, producer_epoch=0, base_sequence=0)
    results = []

    async def send():
        results.append(await part.append_as_leader(data, read_header(data), acks=1, now=part.clock()))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(send)
        await trio.to_thread.run_sync(rolling.wait, 10)
        nursery.start_soon(send)
        await wait_all_tasks_blocked()
        assert results == [] and part.log_end_offset == 1  # both wait for the roll
        release.set()
    assert [r.base_offset for r in results] == [1, 1] and part.log_end_offset == 2


async def test_a_followers_log_work_is_dropped_when_its_role_changed_meanwhile(tmp_path):
    """The fetcher truncates or appends for the leader it fetched from: if the partition changed role
    or leader while that work waited, the work is not done (the log now belongs to another term)."""
    part = small_leader(tmp_path)
    for value in (b"a", b"b", b"c"):
        await append(part, value)
    part.make_follower(PartitionRegistration(replicas=(1, 2), isr=(1, 2), leader=2, leader_epoch=2, partition_epoch=2))
    generation = part.generation
    part.make_leader(PartitionRegistration(replicas=(1, 2), isr=(1, 2), leader=1, leader_epoch=3, partition_epoch=3))
    with pytest.raises(PartitionChanged):
        await part.truncate_to(0, diverged=True, generation=generation)
    with pytest.raises(PartitionChanged):
        await part.append_as_follower(memoryview(batch(b"x")), generation=generation)
    assert part.log_end_offset == 3


async def test_a_role_change_waits_for_log_work_in_a_worker_thread(tmp_path):
    part = small_leader(tmp_path)
    started, release = threading.Event(), threading.Event()

    def slow_work():
        started.set()
        release.wait(10)

    changed = []

    async def change_role():
        await part.wait_idle()
        changed.append(part.role)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(part.run_exclusive, slow_work)
        await trio.to_thread.run_sync(started.wait, 10)
        nursery.start_soon(change_role)
        await wait_all_tasks_blocked()
        assert changed == []
        release.set()
    assert changed == [part.role]


async def test_an_append_bound_to_a_leader_epoch_is_refused_in_any_other(tmp_path):
    part, _ = leader(tmp_path)
    epoch = part.leader_epoch
    data = batch(b"a")
    stale = await part.append_as_leader(data, read_header(data), acks=1, now=part.clock(), leader_epoch=epoch - 1)
    assert stale.error == ErrorCode.NOT_LEADER_OR_FOLLOWER and part.log_end_offset == 0
    ok = await part.append_as_leader(data, read_header(data), acks=1, now=part.clock(), leader_epoch=epoch)
    assert ok.error == ErrorCode.NONE and part.log_end_offset == 1


async def test_reloading_producer_state_later_sees_the_snapshots_written_since_the_log_was_opened(tmp_path):
    """The listing a log took when it was opened is for its opener only: a reload after a truncation (or
    by a log opened elsewhere, as a directory move does) lists the directory again and finds the
    producer snapshot written since; a stale listing would replay from the log start and, worse, leave a
    snapshot above a truncation point in place."""
    part, _ = leader(tmp_path)
    data = batch(b"x", producer_id=7, producer_epoch=0, base_sequence=0)
    await part.append_as_leader(data, read_header(data), acks=1, now=part.clock())
    part.snapshot_producer_state()
    ps.take_snapshot(part.log.directory, part.producer_state, 5)  # above the log end: a truncated tail's
    assert ps.snapshot_offsets(part.log.directory) == [1, 5]
    part.log.listing_at_open = []  # what an opener that never took it leaves behind
    part.reload_producer_state()
    assert ps.snapshot_offsets(part.log.directory) == [1]  # the one above the log end is gone
    assert 7 in part.producer_state.producers
