"""The replica fetcher without sockets: what it asks its leader, and what it does with each answer.

The follower is a real `ReplicaManager` fed real metadata deltas; the leader's side is a connection
double that records each Fetch and answers with the response the test builds. Back-offs run on
trio's autojump clock.
"""

from __future__ import annotations

import uuid

import pytest
import structlog.testing
import trio

from kraftpy.broker.fetcher import FetcherManager, ReplicaFetcher
from kraftpy.broker.replica_manager import ReplicaManager
from kraftpy.broker.settings import BrokerSettings
from kraftpy.metadata import cluster_control, metadata_version
from kraftpy.metadata.image import METADATA_VERSION
from kraftpy.metadata.messages import (
    AlterPartitionPartitionData,
    AlterPartitionRequest,
    AlterPartitionTopicData,
    BrokerHeartbeatRequest,
    BrokerState,
    CreatableReplicaAssignment,
    CreatableTopic,
    CreateTopicsRequest,
    ElectionType,
    ElectLeadersRequest,
    TopicPartitions,
)
from kraftpy.metadata.records import FeatureLevelRecord
from kraftpy.metadata.result import ControllerResult
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.messages import FetchRequest, FetchResponse
from kraftpy.protocol.records import SimpleRecord, build_batch
from tests.helpers.metadata import CLUSTER_ID, Metadata, WallClock

FOLLOWER, LEADER = 1, 2
BACKOFF_MS = 700


class Leader:
    """The leader's end of a fetcher's connection: records requests, answers with ``answer(request)``."""

    def __init__(self) -> None:
        self.requests = []
        self.versions = []
        self.answer = None

    async def request(self, api_key, version, request):
        assert api_key == ApiKey.FETCH
        self.requests.append(request)
        self.versions.append(version)
        return self.answer(request)


def batches(first: int, count: int, epoch: int) -> bytes:
    return b"".join(build_batch([SimpleRecord(b"k", b"v%d" % offset)], base_offset=offset,
                                partition_leader_epoch=epoch) for offset in range(first, first + count))


@pytest.fixture
async def follower(tmp_path, autojump_clock, nursery):
    metadata = Metadata(brokers=(FOLLOWER, LEADER))
    metadata.commit(metadata.controller.handle_create_topics(CreateTopicsRequest((
        CreatableTopic("t", -1, -1, (CreatableReplicaAssignment(0, (LEADER, FOLLOWER)),)),))))
    settings = BrokerSettings(node_id=FOLLOWER, cluster_id=CLUSTER_ID, log_dirs=(tmp_path / "logs",),
                              replica_fetch_backoff_ms=BACKOFF_MS)
    replicas = ReplicaManager(settings, metadata, WallClock())
    await nursery.start(replicas.run)
    await replicas.set_running(True)
    await metadata.publish_to(replicas)
    part = replicas.get("t", 0)
    assert part.leader_id == LEADER and replicas.fetch_assignments == {LEADER: {part.tp}}
    fetcher = ReplicaFetcher(FetcherManager(replicas), LEADER)
    yield metadata, replicas, part, fetcher
    await replicas.close()


def answer(part, **fields):
    """A Fetch response for the one partition, with ``fields`` set on its data."""
    data = FetchResponse.PartitionData(partition_index=0, error_code=fields.pop("error_code", ErrorCode.NONE),
                                       high_watermark=fields.pop("high_watermark", -1), records=b"")
    diverging = fields.pop("diverging", None)
    if diverging is not None:
        data.diverging_epoch.epoch, data.diverging_epoch.end_offset = diverging
    for name, value in fields.items():
        setattr(data, name, value)
    return lambda request: FetchResponse(throttle_time_ms=0, error_code=ErrorCode.NONE, responses=[
        FetchResponse.FetchableTopicResponse(topic="t", topic_id=uuid.UUID(bytes=part.topic_id.raw),
                                             partitions=[data])])


async def test_fetches_from_its_log_end_and_appends_the_leaders_batches_as_they_are(autojump_clock, follower):
    _, _, part, fetcher = follower
    leader = Leader()
    epoch = part.leader_epoch
    data = batches(0, 3, epoch)
    leader.answer = answer(part, high_watermark=2, log_start_offset=0, records=data)
    await fetcher.fetch_once(leader)
    sent = leader.requests[-1].topics[0].partitions[0]
    assert (sent.fetch_offset, sent.last_fetched_epoch, sent.current_leader_epoch) == (0, -1, epoch)
    assert leader.requests[-1].replica_id == FOLLOWER
    assert part.log.read_bytes(0, 1 << 20) == data  # byte for byte
    assert (part.log_end_offset, part.high_watermark) == (3, 2)
    leader.answer = answer(part, high_watermark=3, log_start_offset=2)
    with structlog.testing.capture_logs() as logs:
        await fetcher.fetch_once(leader)
    sent = leader.requests[-1].topics[0].partitions[0]
    assert (sent.fetch_offset, sent.last_fetched_epoch) == (3, epoch)
    # The leader's log start moved up (retention, DeleteRecords): the follower's follows, and says so.
    assert (part.high_watermark, part.log_start_offset) == (3, 2)
    assert [(e["partition"], e["log_start_offset"]) for e in logs
            if e["event"] == "log start follows the leader's"] == [(str(part.tp), 2)]


async def test_the_fetch_version_follows_the_metadata_version_and_names_the_followers_broker_epoch(autojump_clock, follower):
    """At 3.9-IV0 a follower sends Fetch v17, naming itself and its broker epoch in ReplicaState (KIP-903);
    the top-level replica_id of the versions before is not on the wire then."""
    metadata, replicas, part, fetcher = follower
    leader = Leader()
    leader.answer = answer(part, high_watermark=0, log_start_offset=0)
    await fetcher.fetch_once(leader)
    assert replicas.image.features.metadata_version == metadata_version.LATEST
    assert leader.versions == [17]
    wire = FetchRequest.SCHEMA.from_bytes(17, FetchRequest.SCHEMA.to_bytes(17, leader.requests[-1]))
    epoch = replicas.image.cluster.broker(FOLLOWER).epoch
    assert epoch >= 0
    assert (wire.replica_state.replica_id, wire.replica_state.replica_epoch, wire.replica_id) == (FOLLOWER, epoch, -1)


@pytest.mark.parametrize(("release", "version"), [("3.4", 13), ("3.5-IV0", 14), ("3.6", 15), ("3.8", 16)])
async def test_an_older_metadata_version_fetches_with_the_version_kafka_sends_there(tmp_path, autojump_clock, nursery,
                                                                                      release, version):
    level = metadata_version.parse_release_version(release)
    metadata = Metadata(brokers=(FOLLOWER, LEADER),
                        bootstrap_records=(FeatureLevelRecord(METADATA_VERSION, level),))
    metadata.commit(metadata.controller.handle_create_topics(CreateTopicsRequest((
        CreatableTopic("t", -1, -1, (CreatableReplicaAssignment(0, (LEADER, FOLLOWER)),)),))))
    settings = BrokerSettings(node_id=FOLLOWER, cluster_id=CLUSTER_ID, log_dirs=(tmp_path / "logs",))
    replicas = ReplicaManager(settings, metadata, WallClock())
    await nursery.start(replicas.run)
    await replicas.set_running(True)
    await metadata.publish_to(replicas)
    part = replicas.get("t", 0)
    leader = Leader()
    leader.answer = answer(part, high_watermark=0, log_start_offset=0)
    await ReplicaFetcher(FetcherManager(replicas), LEADER).fetch_once(leader)
    assert replicas.image.features.metadata_version == level
    assert leader.versions == [version]
    wire = FetchRequest.SCHEMA.from_bytes(version, FetchRequest.SCHEMA.to_bytes(version, leader.requests[-1]))
    named = wire.replica_state.replica_id if version >= 15 else wire.replica_id
    assert named == FOLLOWER
    await replicas.close()


async def test_a_diverging_epoch_truncates_to_where_the_logs_meet(autojump_clock, follower):
    _, _, part, fetcher = follower
    leader = Leader()
    await part.append_as_follower(memoryview(batches(0, 2, 0) + batches(2, 3, 1)))
    leader.answer = answer(part, diverging=(0, 3), high_watermark=0)
    await fetcher.fetch_once(leader)
    assert part.log_end_offset == 2  # the leader's epoch 0 ends at 3, ours at 2: cut there
    assert part.log.latest_epoch == 0


async def test_an_early_leader_is_retried_after_the_back_off_and_a_stale_follower_waits_for_metadata(autojump_clock, follower):
    metadata, replicas, part, fetcher = follower
    leader = Leader()
    leader.answer = answer(part, error_code=ErrorCode.UNKNOWN_LEADER_EPOCH)
    await fetcher.fetch_once(leader)
    assert fetcher._fetchable() == []
    start = trio.current_time()
    await trio.sleep(BACKOFF_MS / 1000)
    assert fetcher._fetchable() == [part] and round(trio.current_time() - start, 6) >= BACKOFF_MS / 1000
    # FENCED_LEADER_EPOCH: the follower's metadata is stale; it waits for a newer leader epoch.
    leader.answer = answer(part, error_code=ErrorCode.FENCED_LEADER_EPOCH)
    await fetcher.fetch_once(leader)
    await trio.sleep(10 * BACKOFF_MS / 1000)
    assert fetcher._fetchable() == []
    # The leader is fenced (this broker leads), comes back and is elected again: a newer epoch.
    epoch = part.leader_epoch
    config = metadata.controller.config
    metadata.commit(ControllerResult(cluster_control.fence_brokers(metadata.controller.image, [LEADER], config), None))
    reg = metadata.controller.image.cluster.broker(LEADER)
    metadata.commit(metadata.controller.handle_broker_heartbeat(
        BrokerHeartbeatRequest(LEADER, reg.epoch, metadata.offset), 0.0))
    image = metadata.controller.image
    topic = image.topics.get_by_name("t")
    now_reg = topic.partitions[0]
    brokers = image.cluster.brokers
    metadata.commit(metadata.controller.handle_alter_partition(AlterPartitionRequest(
        FOLLOWER, brokers[FOLLOWER].epoch, (AlterPartitionTopicData(topic.id, (AlterPartitionPartitionData(
            0, now_reg.leader_epoch, (BrokerState(FOLLOWER, brokers[FOLLOWER].epoch),
                                      BrokerState(LEADER, brokers[LEADER].epoch)), now_reg.partition_epoch),)),))))
    metadata.commit(metadata.controller.handle_elect_leaders(
        ElectLeadersRequest(ElectionType.PREFERRED, (TopicPartitions("t", (0,)),))))
    await metadata.publish_to(replicas)
    assert part.leader_id == LEADER and part.leader_epoch == epoch + 2
    assert fetcher._fetchable() == [part]


async def test_a_follower_behind_the_leaders_start_restarts_its_log_there(autojump_clock, follower):
    _, _, part, fetcher = follower
    leader = Leader()
    await part.append_as_follower(memoryview(batches(0, 2, 0)))
    leader.answer = answer(part, error_code=ErrorCode.OFFSET_OUT_OF_RANGE, log_start_offset=50, high_watermark=60)
    await fetcher.fetch_once(leader)
    assert (part.log_start_offset, part.log_end_offset) == (50, 50)
    sent_next = []
    leader.answer = lambda request: (sent_next.append(request.topics[0].partitions[0].fetch_offset),
                                     answer(part, high_watermark=60)(request))[1]
    await fetcher.fetch_once(leader)
    assert sent_next == [50]


async def test_a_follower_ahead_of_a_new_leader_keeps_what_its_high_watermark_covers(autojump_clock, follower):
    """OFFSET_OUT_OF_RANGE past the leader's end: the follower truncates to the leader's high watermark,
    but never below its own (the partition's truncation clamps it): a new leader's may still lag behind,
    and what the follower's covers is committed."""
    _, _, part, fetcher = follower
    leader = Leader()
    await part.append_as_follower(memoryview(batches(0, 10, 0)))
    part.update_follower_high_watermark(8)
    leader.answer = answer(part, error_code=ErrorCode.OFFSET_OUT_OF_RANGE, log_start_offset=0, high_watermark=3)
    await fetcher.fetch_once(leader)
    assert (part.log_end_offset, part.high_watermark) == (8, 8)
    leader.answer = answer(part, error_code=ErrorCode.OFFSET_OUT_OF_RANGE, log_start_offset=0, high_watermark=9)
    await fetcher.fetch_once(leader)
    assert part.log_end_offset == 8  # nothing past its end to cut
