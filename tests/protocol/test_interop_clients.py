"""Byte-exact agreement with kafka-python's protocol encoders, and librdkafka's ApiVersions request.

kafka-python 3.x encodes requests from its own generated classes; each one here must parse with
``parse_request`` and re-encode with ``encode_request`` to exactly the same bytes. The librdkafka
test runs confluent_kafka against a throwaway socket and parses the first frame it sends.
"""

from __future__ import annotations

import socket
import threading

import pytest

from kraftpy.protocol.errors import UnsupportedVersionError
from kraftpy.protocol.frames import FrameReader, encode_request, join_frame, parse_request

kp = pytest.importorskip("kafka.protocol")


def kafka_python_requests():
    from kafka.protocol.consumer import FetchRequest, OffsetCommitRequest
    from kafka.protocol.metadata import ApiVersionsRequest, FindCoordinatorRequest, MetadataRequest
    from kafka.protocol.producer import ProduceRequest

    yield ApiVersionsRequest[3](client_software_name="kafka-python", client_software_version="3.0")
    yield ApiVersionsRequest[0]()
    yield MetadataRequest[12](topics=[MetadataRequest.MetadataRequestTopic(topic_id=None, name="orders")],
                              allow_auto_topic_creation=False, include_topic_authorized_operations=True)
    yield MetadataRequest[4](topics=None, allow_auto_topic_creation=True)
    for version in (3, 7, 9):
        yield ProduceRequest[version](
            transactional_id=None, acks=-1, timeout_ms=30000,
            topic_data=[ProduceRequest.TopicProduceData(name="orders", partition_data=[
                ProduceRequest.TopicProduceData.PartitionProduceData(index=2, records=b"\x00" * 70)])])
    yield FetchRequest[12](
        replica_id=-1, max_wait_ms=500, min_bytes=1, max_bytes=52428800, isolation_level=1,
        session_id=0, session_epoch=-1,
        topics=[FetchRequest.FetchTopic(topic="orders", partitions=[FetchRequest.FetchTopic.FetchPartition(
            partition=0, current_leader_epoch=3, fetch_offset=100, last_fetched_epoch=-1,
            log_start_offset=-1, partition_max_bytes=1048576)])],
        forgotten_topics_data=[], rack_id="")
    yield FindCoordinatorRequest[4](key_type=0, coordinator_keys=["group-a"])
    yield OffsetCommitRequest[8](
        group_id="g", generation_id_or_member_epoch=4, member_id="m", group_instance_id=None,
        topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name="orders", partitions=[
            OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
                partition_index=0, committed_offset=42, committed_leader_epoch=-1,
                committed_metadata="")])])


@pytest.mark.parametrize("request_obj", list(kafka_python_requests()),
                         ids=lambda r: f"{type(r).__name__}")
def test_kafka_python_requests_are_byte_exact(request_obj):
    request_obj.with_header(correlation_id=31, client_id="kafka-python-test")
    wire = request_obj.encode(header=True, framed=True)
    (frame,) = FrameReader().feed(wire)
    header, body = parse_request(frame)
    assert header.correlation_id == 31 and header.client_id == "kafka-python-test"
    assert header.request_api_version == request_obj.version
    again = join_frame(encode_request(header.request_api_key, header.request_api_version, 31,
                                      "kafka-python-test", body))
    assert again == wire


def test_librdkafka_api_versions_request_parses():
    confluent_kafka = pytest.importorskip("confluent_kafka")
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(20)
    port = server.getsockname()[1]
    frames: list = []
    done = threading.Event()

    def serve():
        try:
            conn, _ = server.accept()
        except OSError:
            done.set()
            return
        conn.settimeout(20)
        reader = FrameReader()
        with conn:
            while not frames:
                data = conn.recv(65536)
                if not data:
                    break
                frames.extend(reader.feed(data))
        done.set()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    # A producer connects to its bootstrap server as soon as it is created.
    producer = confluent_kafka.Producer({"bootstrap.servers": f"127.0.0.1:{port}",
                                         "client.id": "rdkafka-probe", "log_level": 0})
    try:
        assert done.wait(20), "librdkafka did not connect"
    finally:
        server.close()
        del producer
    assert frames, "no frame captured"
    frame = frames[0]
    try:
        header, body = parse_request(frame)
    except UnsupportedVersionError as exc:
        # A librdkafka newer than our ApiVersions range: the broker answers v0 with the error.
        assert exc.api_key == 18 and exc.correlation_id is not None
        return
    assert header.request_api_key == 18 and header.client_id == "rdkafka-probe"
    assert body.client_software_name == "confluent-kafka-python"
    assert body.client_software_version
