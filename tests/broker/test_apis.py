"""The Kafka API handlers at the protocol level, against one real broker."""

from __future__ import annotations

import os
import struct
import uuid

import pytest
import trio
import trio.testing

from kraftpy.broker.apis import fetch as apis_module
from kraftpy.broker.client import ConnectionClosed, KafkaConnection
from kraftpy.broker.purgatory import wait_for_change
from kraftpy.broker.server import BrokerServer
from kraftpy.metadata.controller_config import LATEST_METADATA_VERSION, ControllerConfig
from kraftpy.metadata.messages import FeatureUpdateKey, UpdateFeaturesRequest
from kraftpy.metadata.records import FeatureLevelRecord
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.frames import decode_response, encode_request, join_frame
from kraftpy.protocol.messages import (
    ApiVersionsRequest,
    CreateTopicsRequest,
    DeleteRecordsRequest,
    DescribeClusterRequest,
    DescribeConfigsRequest,
    IncrementalAlterConfigsRequest,
    InitProducerIdRequest,
    MetadataRequest,
    OffsetForLeaderEpochRequest,
)
from kraftpy.protocol.types import FileRegion
from tests.helpers.cluster import CLUSTER_ID, InProcessController, broker_settings, open_cluster
from tests.helpers.protocol import (
    batch,
    fetch,
    fetch_request,
    list_offset,
    metadata,
    produce,
    produce_request,
    values_of,
)


@pytest.fixture
async def cluster(tmp_path):
    async with open_cluster(tmp_path, brokers=1, static_configs={"message.max.bytes": "4096"}) as c:
        await c.create_topic("t", partitions=2)
        yield c


@pytest.fixture
async def conn(cluster):
    async with await KafkaConnection.connect("127.0.0.1", cluster.ports[1]) as c:
        yield c


async def test_api_versions_lists_served_apis_and_answers_unknown_versions_with_v0(conn):
    response = await conn.request(ApiKey.API_VERSIONS, 3, ApiVersionsRequest(client_software_name="t",
                                                                            client_software_version="1"))
    ranges = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert ranges[ApiKey.PRODUCE] == (0, 11)
    assert ranges[ApiKey.FETCH] == (4, 17)
    assert ranges[ApiKey.METADATA] == (0, 12)
    assert ranges[ApiKey.JOIN_GROUP] == (0, 9)  # the group coordinator's APIs (tests/broker/test_groups_apis.py)
    # ApiVersions v9, from a client newer than the broker: a v0 answer with UNSUPPORTED_VERSION.
    frame = bytearray(join_frame(encode_request(ApiKey.API_VERSIONS, 0, 77, "new", ApiVersionsRequest())))
    struct.pack_into(">h", frame, 6, 9)
    await conn.send_raw(bytes(frame))
    header, body = decode_response(ApiKey.API_VERSIONS, 0, await conn.receive_frame())
    assert header.correlation_id == 77
    assert body.error_code == ErrorCode.UNSUPPORTED_VERSION
    assert {k.api_key for k in body.api_keys} == set(ranges)


async def test_api_versions_answers_follow_the_finalized_features_and_the_served_apis(tmp_path):
    """What ApiVersions answers is kept between requests, and built again when it changes: a raised
    metadata.version is in the next answer on the same connection, and so is an API served later; the
    features listed are those of the answer's version."""
    at_7 = {"bootstrap_records": (FeatureLevelRecord("metadata.version", 7),)}
    async with open_cluster(tmp_path, brokers=1, controller_config=at_7) as cluster, \
            await KafkaConnection.connect("127.0.0.1", cluster.ports[1]) as conn:
        async def answer(version: int = 3):
            response = await conn.request(ApiKey.API_VERSIONS, version, ApiVersionsRequest(
                client_software_name="t", client_software_version="1"))
            assert response.error_code == ErrorCode.NONE
            return ({f.name: f.max_version_level for f in response.finalized_features},
                    {k.api_key for k in response.api_keys}, {f.name for f in response.supported_features})

        levels, served, supported = await answer()
        # Before v4 an answer leaves out the features whose lowest level is 0 (kraft.version).
        assert levels == {"metadata.version": 7} and supported == {"metadata.version"}
        assert (await answer(4))[2] == {"metadata.version", "kraft.version"}
        assert (levels, served, supported) == await answer()
        raised = await cluster.controller.update_features(UpdateFeaturesRequest((FeatureUpdateKey(
            "metadata.version", LATEST_METADATA_VERSION),)))
        assert all(r.error_code == ErrorCode.NONE for r in raised.results), raised
        await cluster.caught_up()
        assert (await answer())[0] == {"metadata.version": LATEST_METADATA_VERSION}

        apis = cluster.brokers[1].apis
        delete_records = apis.handlers.pop(ApiKey.DELETE_RECORDS)
        assert ApiKey.DELETE_RECORDS not in (await answer())[1]
        apis.register(ApiKey.DELETE_RECORDS, delete_records)
        assert (await answer())[1] == served


async def test_produce_below_v3_is_unsupported(conn):
    response = await conn.request(ApiKey.PRODUCE, 2, produce_request("t", 0, batch(b"old")))
    assert response.responses[0].partition_responses[0].error_code == ErrorCode.UNSUPPORTED_VERSION


async def test_produce_validation_errors(cluster, conn):
    good = batch(b"a", b"b")
    assert (await produce(conn, "t", 0, good, acks=1)).base_offset == 0
    assert (await produce(conn, "nope", 0, good)).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert (await produce(conn, "t", 7, good)).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    corrupt = bytearray(good)
    corrupt[-1] ^= 0xFF
    assert (await produce(conn, "t", 0, bytes(corrupt))).error_code == ErrorCode.CORRUPT_MESSAGE
    old_magic = bytearray(good)
    old_magic[16] = 1
    assert (await produce(conn, "t", 0, bytes(old_magic))).error_code == ErrorCode.INVALID_RECORD
    assert (await produce(conn, "t", 0, good + good)).error_code == ErrorCode.INVALID_RECORD
    assert (await produce(conn, "t", 0, good[:30])).error_code == ErrorCode.CORRUPT_MESSAGE
    big = batch(bytes(5000))
    assert (await produce(conn, "t", 0, big)).error_code == ErrorCode.MESSAGE_TOO_LARGE
    assert (await produce(conn, "t", 0, good, acks=2)).error_code == ErrorCode.INVALID_REQUIRED_ACKS
    assert cluster.partition(1, "t").log_end_offset == 2
    await cluster.fence(1)
    assert (await produce(conn, "t", 0, good)).error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    data = await fetch(conn, "t", 0, 0)
    assert data.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER


async def test_acks_zero_gets_no_answer_and_an_error_closes_the_connection(cluster, conn):
    await conn.send_only(ApiKey.PRODUCE, 9, produce_request("t", 0, batch(b"fire"), acks=0))
    result = await produce(conn, "t", 0, batch(b"after"), acks=1)
    assert result.base_offset == 1  # the acks=0 batch went first, and only this one was answered
    await conn.send_only(ApiKey.PRODUCE, 9, produce_request("nope", 0, batch(b"x"), acks=0))
    with pytest.raises(ConnectionClosed):
        await conn.receive_frame()


async def test_idempotent_producer_duplicates_gaps_and_fenced_epochs(conn):
    response = await conn.request(ApiKey.INIT_PRODUCER_ID, 4, InitProducerIdRequest(transactional_id=None,
                                                                                   transaction_timeout_ms=1000))
    assert response.error_code == ErrorCode.NONE
    pid, epoch = response.producer_id, response.producer_epoch
    again = await conn.request(ApiKey.INIT_PRODUCER_ID, 4, InitProducerIdRequest(transactional_id=None,
                                                                                transaction_timeout_ms=1000))
    assert again.producer_id == pid + 1

    def idem(seq, *values, producer_epoch=epoch):
        return batch(*values, producer_id=pid, producer_epoch=producer_epoch, base_sequence=seq)

    assert (await produce(conn, "t", 0, idem(0, b"a", b"b"))).base_offset == 0
    assert (await produce(conn, "t", 0, idem(2, b"c"))).base_offset == 2
    duplicate = await produce(conn, "t", 0, idem(0, b"a", b"b"))
    assert (duplicate.error_code, duplicate.base_offset) == (ErrorCode.NONE, 0)
    gap = await produce(conn, "t", 0, idem(5, b"z"))
    assert gap.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert (await produce(conn, "t", 0, idem(0, b"new epoch", producer_epoch=epoch + 1))).base_offset == 3
    stale = await produce(conn, "t", 0, idem(3, b"old epoch"))
    assert stale.error_code == ErrorCode.INVALID_PRODUCER_EPOCH
    data = await fetch(conn, "t", 0, 0)
    assert values_of(data.records) == [b"a", b"b", b"c", b"new epoch"]


async def test_fetch_long_poll_is_woken_by_a_produce(cluster, conn, monkeypatch):
    results = {}
    parked = trio.Event()

    async def park(watchers, deadline):
        parked.set()
        return await wait_for_change(watchers, deadline)

    monkeypatch.setattr(apis_module, "wait_for_change", park)

    async def poll():
        async with await KafkaConnection.connect("127.0.0.1", cluster.ports[1]) as other:
            results["data"] = await fetch(other, "t", 1, 0, max_wait_ms=30_000, min_bytes=1)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(poll)
        await parked.wait()
        await produce(conn, "t", 1, batch(b"wake up"), acks=1)
    assert values_of(results["data"].records) == [b"wake up"]


async def test_a_partition_named_again_in_one_fetch_is_answered_once(conn):
    """Kafka keys a fetch's partitions: named 1,000 times, a partition is read (and holds a file
    descriptor) once, with the last mention's offset."""
    await produce(conn, "t", 0, batch(b"a", b"b", b"c"), acks=1)
    await produce(conn, "t", 0, batch(b"d"), acks=1)
    request = fetch_request("t", 0, 0)
    mention = request.topics[0].partitions[0]
    request.topics[0].partitions = [mention] * 999
    request.topics.append(fetch_request("t", 0, 3).topics[0])  # the topic named again, at offset 3
    response = await conn.request(ApiKey.FETCH, 12, request)
    assert [(t.topic, [p.partition_index for p in t.partitions]) for t in response.responses] == [("t", [0])]
    assert values_of(response.responses[0].partitions[0].records) == [b"d"]


async def test_fetch_long_poll_times_out_with_nothing(conn, monkeypatch):
    woken = []

    async def park(watchers, deadline):
        woken.append(await wait_for_change(watchers, deadline))
        return woken[-1]

    monkeypatch.setattr(apis_module, "wait_for_change", park)
    start = trio.current_time()
    with trio.fail_after(30):  # bounds a failure only
        data = await fetch(conn, "t", 0, 0, max_wait_ms=200, min_bytes=1)
    assert data.error_code == ErrorCode.NONE and values_of(data.records) == []
    assert woken and woken[-1] is False  # it parked, and its deadline (not a change) ended the wait
    assert trio.current_time() - start >= 0.2


async def test_fetch_limits_offsets_and_sendfile(cluster, conn, monkeypatch):
    for i in range(3):
        await produce(conn, "t", 0, batch(b"%d" % i * 1000), acks=1)
    # A partition limit below one batch still returns the first whole batch.
    data = await fetch(conn, "t", 0, 0, partition_max_bytes=10)
    assert values_of(data.records) == [b"0" * 1000]
    assert (data.high_watermark, data.log_start_offset) == (3, 0)
    data = await fetch(conn, "t", 0, 1)
    assert values_of(data.records) == [b"1" * 1000, b"2" * 1000]
    data = await fetch(conn, "t", 0, 9)
    assert data.error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    # v13 names topics by id; an unknown id is UNKNOWN_TOPIC_ID.
    topic_id = uuid.UUID(bytes=cluster.image.topics.get_by_name("t").id.raw)
    data = await fetch(conn, "t", 0, 0, version=13, topic_id=topic_id, max_bytes=1)
    assert values_of(data.records) == [b"0" * 1000]
    data = await fetch(conn, "t", 0, 0, version=13, topic_id=uuid.uuid4())
    assert data.error_code == ErrorCode.UNKNOWN_TOPIC_ID
    # The handler hands record data to the encoder as a file region of the segment, on a descriptor
    # of its own that the connection closes once the response is sent.
    apis = cluster.brokers[1].apis
    seen, closed = [], []
    original = apis.handlers[ApiKey.FETCH]
    original_close = FileRegion.close

    async def spy(header, request, c):
        response = await original(header, request, c)
        seen.extend(p.records for t in response.responses for p in t.partitions)
        return response

    def close_spy(region):
        closed.append((region, os.readlink(f"/proc/self/fd/{region.fd}")))
        original_close(region)

    apis.handlers[ApiKey.FETCH] = spy
    monkeypatch.setattr(FileRegion, "close", close_spy)
    assert len(values_of((await fetch(conn, "t", 0, 0)).records)) == 3
    region = seen[0]
    segment_fd = cluster.partition(1, "t", 0).log.active_segment.fd
    assert isinstance(region, FileRegion) and region.owned and region.length > 3000 and region.fd != segment_fd
    await conn.request(ApiKey.API_VERSIONS, 3, ApiVersionsRequest())  # answered after the fetch was done
    assert [c[0] for c in closed] == [region] and closed[0][1].endswith("00000000000000000000.log")
    os.fstat(segment_fd)  # the segment's own descriptor is untouched


async def test_consumers_only_see_committed_records(tmp_path):
    async with open_cluster(tmp_path, brokers=2, replica_lag_time_max_ms=60_000) as cluster:
        await cluster.create_topic("r", replication_factor=2)
        leader = cluster.leader("r")
        follower = next(b for b in cluster.brokers if b != leader)
        cluster.brokers[follower].fetchers.pause()
        async with await KafkaConnection.connect("127.0.0.1", cluster.ports[leader]) as conn:
            assert (await produce(conn, "r", 0, batch(b"pending"), acks=1)).error_code == ErrorCode.NONE
            data = await fetch(conn, "r", 0, 0)
            assert (data.high_watermark, values_of(data.records)) == (0, [])
            latest = await list_offset(conn, "r", 0, -1)
            assert latest.offset == 0
            # A follower (replica_id set) reads up to the log end.
            data = await fetch(conn, "r", 0, 0, replica_id=follower)
            assert values_of(data.records) == [b"pending"]
            cluster.brokers[follower].fetchers.resume()
            await cluster.wait_for(lambda: cluster.partition(leader, "r").high_watermark == 1)
            data = await fetch(conn, "r", 0, 0)
            assert values_of(data.records) == [b"pending"]


async def test_list_offsets_and_offset_for_leader_epoch(cluster, conn):
    for i, ts in enumerate((1000, 2000, 3000)):
        await produce(conn, "t", 0, batch(b"%d" % i, timestamp=ts), acks=1)
    assert (await list_offset(conn, "t", 0, -2)).offset == 0
    assert (await list_offset(conn, "t", 0, -1)).offset == 3
    by_time = await list_offset(conn, "t", 0, 1500)
    assert (by_time.offset, by_time.timestamp) == (1, 2000)
    assert (await list_offset(conn, "t", 0, 5000)).offset == -1
    newest = await list_offset(conn, "t", 0, -3)
    assert (newest.offset, newest.timestamp) == (2, 3000)
    assert (await list_offset(conn, "t", 0, -1, version=1)).offset == 3
    request = OffsetForLeaderEpochRequest(replica_id=-1, topics=[OffsetForLeaderEpochRequest.OffsetForLeaderTopic(
        topic="t", partitions=[OffsetForLeaderEpochRequest.OffsetForLeaderPartition(partition=0, leader_epoch=0)])])
    response = await conn.request(ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, request)
    result = response.topics[0].partitions[0]
    assert (result.error_code, result.leader_epoch, result.end_offset) == (ErrorCode.NONE, 0, 3)


async def test_delete_records_and_retention_move_the_log_start(cluster, conn):
    for i in range(4):
        await produce(conn, "t", 0, batch(b"%d" % i), acks=1)
    request = DeleteRecordsRequest(timeout_ms=1000, topics=[DeleteRecordsRequest.DeleteRecordsTopic(
        name="t", partitions=[DeleteRecordsRequest.DeleteRecordsPartition(partition_index=0, offset=2)])])
    response = await conn.request(ApiKey.DELETE_RECORDS, 2, request)
    assert response.topics[0].partitions[0].low_watermark == 2
    # Answered once the new start is in the log directory's checkpoint: no crash brings them back.
    log_dir = cluster.brokers[1].settings.log_dirs[0]
    assert "t 0 2" in (log_dir / "log-start-offset-checkpoint").read_text().splitlines()
    assert (await list_offset(conn, "t", 0, -2)).offset == 2
    assert (await fetch(conn, "t", 0, 0)).error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    data = await fetch(conn, "t", 0, 2)
    assert data.log_start_offset == 2 and values_of(data.records)[0] == b"2"

    # Time-based retention: segments whose newest record is older than retention.ms go.
    part = cluster.partition(1, "t", 1)
    await produce(conn, "t", 1, batch(b"ancient", timestamp=1000), acks=1)
    part.log.roll()
    await produce(conn, "t", 1, batch(b"recent"), acks=1)
    assert await cluster.brokers[1].replicas.housekeeping() >= 1
    assert part.log_start_offset == 1
    assert (await list_offset(conn, "t", 1, -2)).offset == 1


async def test_metadata_describe_cluster_and_configs(cluster, conn):
    response = await metadata(conn, ["t", "missing"], auto_create=False)
    assert [(b.node_id, b.port) for b in response.brokers] == [(1, cluster.ports[1])]
    assert response.cluster_id == cluster.brokers[1].settings.cluster_id
    by_name = {t.name: t for t in response.topics}
    assert by_name["missing"].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    t = by_name["t"]
    assert t.topic_id.bytes == cluster.image.topics.get_by_name("t").id.raw
    assert [(p.partition_index, p.leader_id, p.replica_nodes, p.isr_nodes) for p in t.partitions] == [
        (0, 1, [1], [1]), (1, 1, [1], [1])]
    for version in (0, 1, 4, 7, 9):
        assert {x.name for x in (await metadata(conn, ["t"], version=version)).topics} == {"t"}
    assert {x.name for x in (await metadata(conn, None)).topics} == {"t"}
    created = await metadata(conn, ["fresh"], auto_create=True)
    assert created.topics[0].error_code in (ErrorCode.NONE, ErrorCode.LEADER_NOT_AVAILABLE)
    assert cluster.image.topics.get_by_name("fresh") is not None

    cluster_info = await conn.request(ApiKey.DESCRIBE_CLUSTER, 1, DescribeClusterRequest())
    assert [b.broker_id for b in cluster_info.brokers] == [1] and cluster_info.controller_id == 1

    alter = IncrementalAlterConfigsRequest(validate_only=True, resources=[
        IncrementalAlterConfigsRequest.AlterConfigsResource(resource_type=2, resource_name="t", configs=[
            IncrementalAlterConfigsRequest.AlterableConfig(name="retention.ms", config_operation=0, value="1000")])])
    response = await conn.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, alter)
    assert response.responses[0].error_code == ErrorCode.NONE
    describe = DescribeConfigsRequest(resources=[DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=2, resource_name="t", configuration_keys=["retention.ms", "max.message.bytes"])])
    configs = (await conn.request(ApiKey.DESCRIBE_CONFIGS, 4, describe)).results[0].configs
    assert {c.name: c.value for c in configs} == {"retention.ms": "604800000", "max.message.bytes": "4096"}
    alter.validate_only = False
    await conn.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, alter)
    configs = (await conn.request(ApiKey.DESCRIBE_CONFIGS, 4, describe)).results[0].configs
    assert {c.name: c.value for c in configs}["retention.ms"] == "1000"
    assert cluster.partition(1, "t").log.config.retention_ms == 1000


async def test_auto_created_topics_take_the_brokers_partition_and_replica_defaults(tmp_path):
    """As Kafka's AutoTopicCreationManager: the broker's num.partitions and default.replication.factor,
    not the controller's own (1 and 1 here)."""
    async with open_cluster(tmp_path, brokers=2, num_partitions=4, default_replication_factor=2) as cluster:
        assert (cluster.controller.config.num_partitions, cluster.controller.config.default_replication_factor) == (1, 1)
        async with await KafkaConnection.connect("127.0.0.1", cluster.ports[1]) as conn:
            created = await metadata(conn, ["auto"], auto_create=True)
            assert created.topics[0].error_code in (ErrorCode.NONE, ErrorCode.LEADER_NOT_AVAILABLE)
        topic = cluster.image.topics.get_by_name("auto")
        assert len(topic.partitions) == 4
        assert all(len(reg.replicas) == 2 for reg in topic.partitions.values())


async def test_create_topics_validate_only_and_controller_outage(cluster, conn):
    def request(name, validate_only=False):
        return CreateTopicsRequest(validate_only=validate_only, topics=[CreateTopicsRequest.CreatableTopic(
            name=name, num_partitions=3, replication_factor=1)])

    response = await conn.request(ApiKey.CREATE_TOPICS, 7, request("checked", validate_only=True))
    assert response.topics[0].error_code == ErrorCode.NONE
    assert cluster.image.topics.get_by_name("checked") is None
    response = await conn.request(ApiKey.CREATE_TOPICS, 7, request("made"))
    assert response.topics[0].error_code == ErrorCode.NONE and response.topics[0].num_partitions == 3
    assert {c.name for c in response.topics[0].configs} >= {"retention.ms", "cleanup.policy"}
    assert cluster.partition(1, "made", 2) is not None
    cluster.controller.available = False
    response = await conn.request(ApiKey.CREATE_TOPICS, 7, request("later"))
    assert response.topics[0].error_code == ErrorCode.REQUEST_TIMED_OUT
    response = await conn.request(ApiKey.INIT_PRODUCER_ID, 4, InitProducerIdRequest(transactional_id=None,
                                                                                   transaction_timeout_ms=1))
    assert response.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE


async def test_requests_wait_until_the_broker_caught_up_with_its_registration(tmp_path):
    """As Kafka's broker, which processes requests only after its initial metadata catch-up: an
    empty answer ("no brokers, no topics") would make librdkafka give up with "Partial response"."""
    controller = InProcessController(ControllerConfig(cluster_id=CLUSTER_ID, auto_leader_rebalance_enable=False))
    broker = BrokerServer(broker_settings(tmp_path, 1), controller)

    class Conn:  # what the metadata handler reads of a connection
        listener = "PLAINTEXT"
        peer = "test"

        def hold(self, region):
            return region

    frame = join_frame(encode_request(ApiKey.METADATA, 12, 7, "t", MetadataRequest(topics=None)))[4:]
    answers = []
    async with trio.open_nursery() as nursery:
        port = await nursery.start(broker.run)

        async def ask():
            answers.append(join_frame(await broker.apis.handle(frame, Conn()))[4:])

        nursery.start_soon(ask)
        await trio.testing.wait_all_tasks_blocked()
        assert answers == []  # parked: the broker has not seen its registration yet
        controller.register(broker, port)
        with trio.fail_after(30):  # bounds a failure only
            while not answers:
                await broker.caught_up_with_registration.wait()
                await trio.testing.wait_all_tasks_blocked()
        _, response = decode_response(ApiKey.METADATA, 12, answers[0])
        assert response.cluster_id == CLUSTER_ID
        assert broker.caught_up_with_registration.is_set() and broker.image.cluster.broker(1) is not None
        nursery.cancel_scope.cancel()
