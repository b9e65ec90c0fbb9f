"""``__consumer_offsets`` is internal: clients read it but never produce to it, delete it or auto-create it."""

from __future__ import annotations

import uuid

import pytest

from kraftpy.broker.client import KafkaConnection
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.messages import DeleteTopicsRequest
from tests.helpers.cluster import open_cluster
from tests.helpers.protocol import batch, metadata, produce

OFFSETS = "__consumer_offsets"


@pytest.fixture
async def cluster(tmp_path):
    async with open_cluster(tmp_path, brokers=1) as c:
        yield c


@pytest.fixture
async def conn(cluster):
    async with await KafkaConnection.connect("127.0.0.1", cluster.ports[1]) as c:
        yield c


async def test_metadata_never_auto_creates_the_offsets_topic(cluster, conn):
    response = await metadata(conn, [OFFSETS, "ordinary"])
    by_name = {t.name: t for t in response.topics}
    assert by_name[OFFSETS].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert by_name["ordinary"].error_code in (ErrorCode.NONE, ErrorCode.LEADER_NOT_AVAILABLE)  # auto-created
    assert cluster.image.topics.get_by_name(OFFSETS) is None
    assert cluster.image.topics.get_by_name("ordinary") is not None


async def test_internal_topics_are_reported_internal_and_refuse_produce_and_delete(cluster, conn):
    await cluster.create_topic(OFFSETS, partitions=2, configs={"cleanup.policy": "compact"})
    await cluster.create_topic("__not_internal")
    response = await metadata(conn, [OFFSETS, "__not_internal"])
    assert {t.name: t.is_internal for t in response.topics} == {OFFSETS: True, "__not_internal": False}

    result = await produce(conn, OFFSETS, 0, batch(b"forged"))
    assert result.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert result.error_message == f"Cannot append to internal topic {OFFSETS}"
    assert cluster.partition(1, OFFSETS, 0).log_end_offset == 0
    assert (await produce(conn, "__not_internal", 0, batch(b"fine"))).error_code == ErrorCode.NONE

    topic_id = cluster.image.topics.get_by_name(OFFSETS).id
    for version, request in [
        (5, DeleteTopicsRequest(topic_names=[OFFSETS, "__not_internal"], timeout_ms=5000)),
        (6, DeleteTopicsRequest(topics=[DeleteTopicsRequest.DeleteTopicState(
            name=None, topic_id=uuid.UUID(bytes=topic_id.raw))], timeout_ms=5000)),
    ]:
        response = await conn.request(ApiKey.DELETE_TOPICS, version, request)
        by_name = {r.name: r for r in response.responses}
        assert by_name[OFFSETS].error_code == ErrorCode.INVALID_REQUEST
        assert "internal topic" in by_name[OFFSETS].error_message
    assert by_name.keys() == {OFFSETS}
    assert cluster.image.topics.get_by_name(OFFSETS) is not None
    assert cluster.image.topics.get_by_name("__not_internal") is None  # deleted by the first request
