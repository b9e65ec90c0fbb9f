"""The newest versions of ApiVersions (v4), ListOffsets (v8-10) and FindCoordinator (v5-6), as Kafka 3.9
answers them on a broker without tiered storage or share groups."""

from __future__ import annotations

from kraftpy.broker.authorization import STANDARD_AUTHORIZER
from kraftpy.broker.client import KafkaConnection
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.messages import (
    ApiVersionsRequest,
    DeleteRecordsRequest,
    FindCoordinatorRequest,
    ListOffsetsRequest,
)
from kraftpy.protocol.messages.api_versions import supported_feature_keys
from tests.helpers.cluster import open_cluster
from tests.helpers.protocol import batch, list_offset, produce

GROUP_SETTINGS = dict(offsets_topic_num_partitions=2, group_initial_rebalance_delay_ms=0)


def test_before_v4_a_feature_whose_lowest_version_is_0_is_left_out():
    features = {"metadata.version": (7, 21), "kraft.version": (0, 1)}
    assert [(f.name, f.min_version, f.max_version) for f in supported_feature_keys(features, 3)] == [
        ("metadata.version", 7, 21)]
    assert [(f.name, f.min_version, f.max_version) for f in supported_feature_keys(features, 4)] == [
        ("kraft.version", 0, 1), ("metadata.version", 7, 21)]


async def test_api_versions_v4_advertises_the_new_ranges(tmp_path):
    async with open_cluster(tmp_path, brokers=1) as cluster:
        async with await KafkaConnection.connect("127.0.0.1", cluster.ports[1]) as conn:
            response = await conn.request(ApiKey.API_VERSIONS, 4, ApiVersionsRequest(
                client_software_name="t", client_software_version="1"))
    assert response.error_code == ErrorCode.NONE
    ranges = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert ranges[ApiKey.API_VERSIONS] == (0, 4)
    assert ranges[ApiKey.LIST_OFFSETS] == (1, 10)
    assert ranges[ApiKey.FIND_COORDINATOR] == (0, 6)
    assert "metadata.version" in {f.name for f in response.supported_features}


async def test_list_offsets_local_log_start_and_last_tiered_offset(tmp_path):
    async with open_cluster(tmp_path, brokers=1) as cluster:
        await cluster.create_topic("t", partitions=1)
        async with await KafkaConnection.connect("127.0.0.1", cluster.ports[1]) as conn:
            for i, ts in enumerate((1000, 2000, 3000)):
                await produce(conn, "t", 0, batch(b"%d" % i, timestamp=ts), acks=1)
            deleted = await conn.request(ApiKey.DELETE_RECORDS, 2, DeleteRecordsRequest(topics=[
                DeleteRecordsRequest.DeleteRecordsTopic(name="t", partitions=[
                    DeleteRecordsRequest.DeleteRecordsPartition(partition_index=0, offset=1)])], timeout_ms=5000))
            assert deleted.topics[0].partitions[0].low_watermark == 1
            earliest = await list_offset(conn, "t", 0, -2, version=8)
            for version in (8, 9, 10):
                # -4: with no tiered storage the local log starts where the log does.
                local = await list_offset(conn, "t", 0, -4, version=version)
                assert (local.error_code, local.offset, local.timestamp, local.leader_epoch) == (
                    ErrorCode.NONE, 1, -1, earliest.leader_epoch)
                assert local.leader_epoch >= 0
            for version in (9, 10):
                # -5: nothing is tiered: offset -1, timestamp -1, epoch -1.
                tiered = await list_offset(conn, "t", 0, -5, version=version)
                assert (tiered.error_code, tiered.offset, tiered.timestamp, tiered.leader_epoch) == (
                    ErrorCode.NONE, -1, -1, -1)
            # v10 carries TimeoutMs; the answer comes at once all the same.
            request = ListOffsetsRequest(replica_id=-1, isolation_level=0, timeout_ms=30000, topics=[
                ListOffsetsRequest.ListOffsetsTopic(name="t", partitions=[
                    ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=1500)])])
            by_time = (await conn.request(ApiKey.LIST_OFFSETS, 10, request)).topics[0].partitions[0]
            assert (by_time.error_code, by_time.offset, by_time.timestamp) == (ErrorCode.NONE, 1, 2000)


async def test_a_special_timestamp_older_than_its_version_is_unsupported(tmp_path):
    async with open_cluster(tmp_path, brokers=1) as cluster:
        await cluster.create_topic("t", partitions=1)
        async with await KafkaConnection.connect("127.0.0.1", cluster.ports[1]) as conn:
            await produce(conn, "t", 0, batch(b"x", timestamp=1000), acks=1)
            for timestamp, version in ((-3, 6), (-4, 7), (-5, 8), (-6, 10), (-100, 10)):
                answer = await list_offset(conn, "t", 0, timestamp, version=version)
                assert (answer.error_code, answer.offset, answer.timestamp) == (
                    ErrorCode.UNSUPPORTED_VERSION, -1, -1), (timestamp, version)
            # Checked before the partition is looked up, as Kafka does.
            assert (await list_offset(conn, "t", 7, -5, version=8)).error_code == ErrorCode.UNSUPPORTED_VERSION
            assert (await list_offset(conn, "t", 7, -5, version=9)).error_code == \
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            assert (await list_offset(conn, "t", 0, -3, version=7)).offset == 0


async def find(conn: KafkaConnection, *keys: str, version: int, key_type: int = 0):
    request = FindCoordinatorRequest(key_type=key_type, coordinator_keys=list(keys))
    return (await conn.request(ApiKey.FIND_COORDINATOR, version, request)).coordinators


async def test_find_coordinator_v5_v6_and_the_share_key_type(tmp_path):
    async with open_cluster(tmp_path, brokers=1, **GROUP_SETTINGS) as cluster:
        async with await KafkaConnection.connect("127.0.0.1", cluster.ports[1]) as conn:
            await find(conn, "orders", version=4)  # the first ask creates __consumer_offsets
            await cluster.wait_for(lambda: cluster.image.topics.get_by_name("__consumer_offsets") is not None)
            for version in (4, 5, 6):
                (answer,) = await find(conn, "orders", version=version)
                assert (answer.key, answer.error_code, answer.node_id, answer.port) == (
                    "orders", ErrorCode.NONE, 1, cluster.ports[1])
            # Key type 2 (a share group): refused before v6; from v6, not available (no share groups).
            assert [(c.key, c.error_code, c.node_id, c.host, c.port) for c in
                    await find(conn, "s1", "s2", version=5, key_type=2)] == [
                ("s1", ErrorCode.INVALID_REQUEST, -1, "", -1), ("s2", ErrorCode.INVALID_REQUEST, -1, "", -1)]
            assert [(c.error_code, c.node_id) for c in await find(conn, "s1", version=6, key_type=2)] == [
                (ErrorCode.COORDINATOR_NOT_AVAILABLE, -1)]
            single = await conn.request(ApiKey.FIND_COORDINATOR, 3, FindCoordinatorRequest(key="s1", key_type=2))
            assert (single.error_code, single.node_id) == (ErrorCode.INVALID_REQUEST, -1)


async def test_a_share_key_needs_cluster_action(tmp_path):
    async with open_cluster(tmp_path, brokers=1, authorizer_class_name=STANDARD_AUTHORIZER) as cluster:
        async with await KafkaConnection.connect("127.0.0.1", cluster.ports[1]) as conn:
            assert [c.error_code for c in await find(conn, "s1", version=6, key_type=2)] == [
                ErrorCode.CLUSTER_AUTHORIZATION_FAILED]
            assert [c.error_code for c in await find(conn, "g", version=6)] == [ErrorCode.GROUP_AUTHORIZATION_FAILED]
