"""Requests naming many topics or partitions: answered once per distinct name, in turns that let
other connections be served meanwhile, and without auto-creating an unbounded number of topics.

The million-topic Metadata request of the probe runs against a combined node (controller and broker
in one process, as ``kraftpy dev``) with a short broker session: the broker must not be fenced while
the request is worked on, another client must be answered over and over meanwhile, nothing is
created, and the process does not grow by gigabytes.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import structlog
import trio

from kraftpy.broker.apis.metadata import MAX_AUTO_CREATE_PARTITIONS
from kraftpy.broker.client import KafkaConnection
from kraftpy.broker.lifecycle import BrokerLifecycle
from kraftpy.cli.dev import dev_properties
from kraftpy.config import load_config
from kraftpy.config.properties import format_properties
from kraftpy.metadata.errors import Errors
from kraftpy.metadata.messages import (
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
)
from kraftpy.node import KraftNode
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.frames import decode_response, encode_request, join_frame
from kraftpy.protocol.messages import (
    ApiVersionsRequest,
    DescribeConfigsRequest,
    ListOffsetsRequest,
    MetadataRequest,
)
from tests.helpers.cluster import open_cluster
from tests.helpers.nodes import formatted_node_config
from tests.helpers.processes import free_ports

TOPIC_CONFIG = 2  # DescribeConfigs resource type of a topic


def metadata_request(names, *, auto_create: bool = True) -> MetadataRequest:
    return MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=n) for n in names],
                           allow_auto_topic_creation=auto_create)


def status_bytes(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1]) * 1024
    raise AssertionError(key)


async def read_frame(stream: trio.SocketStream) -> bytes:
    head = b""
    while len(head) < 4:
        chunk = await stream.receive_some(4 - len(head))
        assert chunk, "connection closed"
        head += chunk
    size = int.from_bytes(head, "big")
    chunks, got = [], 0
    while got < size:
        chunk = await stream.receive_some(min(size - got, 1 << 20))
        assert chunk, "connection closed"
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


class Pinger:
    """Another client asking every `PERIOD` seconds while a big request is in flight (a probe, like
    the event-loop lag watcher: it measures, nothing waits on it); `slowest` is its longest wait."""

    PERIOD = 0.05

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.answered = 0
        self.slowest = 0.0
        self._frame = join_frame(encode_request(ApiKey.API_VERSIONS, 0, 7, "pinger", ApiVersionsRequest()))

    async def run(self, stop: trio.Event) -> None:
        while not stop.is_set():
            started = trio.current_time()
            await self.stream.send_all(self._frame)
            await read_frame(self.stream)
            self.answered += 1
            self.slowest = max(self.slowest, trio.current_time() - started)
            with trio.move_on_at(started + self.PERIOD):
                await stop.wait()


# -- Metadata --------------------------------------------------------------------------------------------


async def test_metadata_answers_each_topic_once_and_never_creates_illegal_names(tmp_path: Path) -> None:
    async with open_cluster(tmp_path, brokers=1) as cluster:
        await cluster.create_topic("known")
        before = len(cluster.controller.requests)
        async with await KafkaConnection.connect("127.0.0.1", cluster.ports[1]) as conn:
            names = ["known", "new-one", "known", "bad name!", "new-one", "", "x" * 250, "bad name!"]
            response = await conn.request(ApiKey.METADATA, 12, metadata_request(names))
        answered = [(t.name, t.error_code) for t in response.topics]
        assert answered == [
            ("known", ErrorCode.NONE),
            ("new-one", ErrorCode.NONE),  # auto-created (the in-process controller commits at once)
            ("bad name!", ErrorCode.INVALID_TOPIC_EXCEPTION),
            ("", ErrorCode.INVALID_TOPIC_EXCEPTION),
            ("x" * 250, ErrorCode.INVALID_TOPIC_EXCEPTION),
        ]
        created = [r for name, r in cluster.controller.requests[before:] if name == "create_topics"]
        assert [[t.name for t in r.topics] for r in created] == [["new-one"]]


async def test_a_request_auto_creating_more_than_the_limit_creates_nothing(tmp_path: Path) -> None:
    async with open_cluster(tmp_path, brokers=1, num_partitions=1) as cluster:
        names = [f"t{i}" for i in range(MAX_AUTO_CREATE_PARTITIONS + 1)]
        async with await KafkaConnection.connect("127.0.0.1", cluster.ports[1]) as conn:
            response = await conn.request(ApiKey.METADATA, 12, metadata_request(names))
        assert len(response.topics) == len(names)
        assert {t.error_code for t in response.topics} == {ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
        assert not [name for name, _ in cluster.controller.requests if name == "create_topics"]
        assert not cluster.image.topics.by_name


# -- ListOffsets and DescribeConfigs ---------------------------------------------------------------------


async def test_list_offsets_refuses_a_partition_named_twice_as_kafka_does(tmp_path: Path) -> None:
    Topic, Partition = ListOffsetsRequest.ListOffsetsTopic, ListOffsetsRequest.ListOffsetsPartition
    async with open_cluster(tmp_path, brokers=1) as cluster:
        await cluster.create_topic("t", partitions=2)
        request = ListOffsetsRequest(replica_id=-1, topics=[
            Topic(name="t", partitions=[Partition(partition_index=0, timestamp=-1),
                                        Partition(partition_index=1, timestamp=-1)]),
            Topic(name="t", partitions=[Partition(partition_index=0, timestamp=-2)]),
        ])
        async with await KafkaConnection.connect("127.0.0.1", cluster.ports[1]) as conn:
            response = await conn.request(ApiKey.LIST_OFFSETS, 7, request)
    answered = [(t.name, p.partition_index, p.error_code) for t in response.topics for p in t.partitions]
    assert answered == [("t", 0, ErrorCode.INVALID_REQUEST), ("t", 1, ErrorCode.NONE),
                        ("t", 0, ErrorCode.INVALID_REQUEST)]


async def test_many_partitions_and_resources_are_answered_in_turns(tmp_path: Path) -> None:
    """ListOffsets naming 300,000 partitions and DescribeConfigs naming 50,000 topics (each twice):
    another connection is answered many times while each is worked on."""
    Topic, Partition = ListOffsetsRequest.ListOffsetsTopic, ListOffsetsRequest.ListOffsetsPartition
    Resource = DescribeConfigsRequest.DescribeConfigsResource
    list_offsets = ListOffsetsRequest(replica_id=-1, topics=[
        Topic(name="t", partitions=[Partition(partition_index=i, timestamp=-1) for i in range(300_000)])])
    names = [f"topic-{i}" for i in range(50_000)]
    describe = DescribeConfigsRequest(resources=[
        Resource(resource_type=TOPIC_CONFIG, resource_name=n, configuration_keys=None) for n in names + names])
    async with open_cluster(tmp_path, brokers=1) as cluster:
        await cluster.create_topic("t")
        await cluster.create_topic("topic-7")
        port = cluster.ports[1]
        for api_key, version, request in ((ApiKey.LIST_OFFSETS, 7, list_offsets),
                                          (ApiKey.DESCRIBE_CONFIGS, 4, describe)):
            big = await trio.open_tcp_stream("127.0.0.1", port)
            pinger = Pinger(await trio.open_tcp_stream("127.0.0.1", port))
            stop = trio.Event()
            with trio.fail_after(120):  # bounds a failure only
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(pinger.run, stop)
                    sent = trio.current_time()
                    await big.send_all(join_frame(encode_request(api_key, version, 1, "big", request)))
                    frame = await read_frame(big)
                    elapsed = trio.current_time() - sent
                    stop.set()
            answered_meanwhile = pinger.answered
            _, response = decode_response(api_key, version, frame)
            if api_key == ApiKey.LIST_OFFSETS:
                errors = Counter(p.error_code for t in response.topics for p in t.partitions)
                assert errors == {ErrorCode.NONE: 1, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: 299_999}
            else:
                results = response.results
                assert [r.resource_name for r in results] == names + names
                assert Counter(r.error_code for r in results) == {ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: 99_998,
                                                                   ErrorCode.NONE: 2}
                known = [r for r in results if r.resource_name == "topic-7"]
                assert known[0].configs == known[1].configs != []
            # Answered again and again, never held up for long: a handler that held the event loop
            # would answer the other client about once, after about as long as the request took. (How
            # many times exactly, and its longest wait, depend on the machine's load: a few answers, none
            # waiting half the request's time, are enough to show turns.)
            assert answered_meanwhile >= 3 and pinger.slowest < elapsed / 2, (api_key, answered_meanwhile,
                                                                                 pinger.slowest, elapsed)
            await big.aclose()
            await pinger.stream.aclose()


# -- a million unknown topics, against a combined node ---------------------------------------------------


async def test_a_million_unknown_topics_neither_fence_the_broker_nor_hold_up_others(tmp_path: Path) -> None:
    names = [f"unknown-topic-{i}" for i in range(1_000_000)]
    big_frame = join_frame(encode_request(ApiKey.METADATA, 12, 1, "big", metadata_request(names + names[:1000])))
    port, controller_port = free_ports(2)
    # A broker that misses heartbeats for 3 s is fenced: the event loop may not stall that long.
    config, cluster_id = formatted_node_config(tmp_path, port, controller_port, {
        "broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "500"})
    node = KraftNode(config, cluster_id)
    async with trio.open_nursery() as nursery:
        await nursery.start(node.run)
        with trio.fail_after(300):  # bounds a failure only
            await node.ready.wait()
            assert node.loader is not None and node.lifecycle is not None
            topics_before = len(node.loader.image.topics.by_name)
            big = await trio.open_tcp_stream("127.0.0.1", port)
            pinger = Pinger(await trio.open_tcp_stream("127.0.0.1", port))
            stop = trio.Event()
            baseline = status_bytes("VmRSS:")
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")  # start the peak-RSS mark (VmHWM) again from here
            with structlog.testing.capture_logs() as logs:
                async with trio.open_nursery() as inner:
                    inner.start_soon(pinger.run, stop)
                    sent = trio.current_time()
                    await big.send_all(big_frame)
                    frame = await read_frame(big)
                    elapsed = trio.current_time() - sent
                    stop.set()
            grown = status_bytes("VmHWM:") - baseline
            assert node.lifecycle.state.value == "running"
            fenced = [line for line in logs if line["event"] == "fenced brokers whose sessions expired"]
            assert not fenced, "the controller fenced the broker during the request"
            assert pinger.answered >= 10 and pinger.slowest < elapsed / 3, (pinger.answered, pinger.slowest, elapsed)
            assert len(node.loader.image.topics.by_name) == topics_before  # nothing was auto-created
        nursery.cancel_scope.cancel()
    _, response = await trio.to_thread.run_sync(decode_response, ApiKey.METADATA, 12, frame)
    assert len(response.topics) == len(names)
    assert {t.error_code for t in response.topics} == {ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    assert grown < 1024 ** 3, f"the process grew by {grown / 2**20:.0f} MiB"
    print(f"request answered in {elapsed:.1f} s; another client answered {pinger.answered} times meanwhile, "
          f"slowest {pinger.slowest * 1000:.0f} ms; peak growth {grown / 2**20:.0f} MiB")


# -- the heartbeat's period --------------------------------------------------------------------------------


class BusyController:
    """Answers each heartbeat ``delay`` seconds after it arrives (a controller busy with other work)."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.heartbeats: list[float] = []

    async def call(self, request, timeout: float = 30.0):
        if isinstance(request, BrokerRegistrationRequest):
            return BrokerRegistrationResponse(Errors.NONE, 5)
        assert isinstance(request, BrokerHeartbeatRequest)
        self.heartbeats.append(trio.current_time())
        await trio.sleep(self.delay)
        return BrokerHeartbeatResponse(Errors.NONE, is_caught_up=True, is_fenced=False)


class StandInServer:
    port = 9092
    on_offline_replicas = None

    def registered(self, broker_epoch: int) -> None:
        pass

    def set_running(self, running: bool) -> None:
        pass

    def offline_replicas(self) -> tuple:
        return ()

    def log_dir_ids(self) -> tuple:
        return ()

    def offline_log_dirs(self) -> tuple:
        return ()


async def test_slow_heartbeat_answers_do_not_stretch_the_heartbeat_period(tmp_path: Path, autojump_clock) -> None:
    """Heartbeats start every broker.heartbeat.interval.ms even when each answer takes most of it: the
    gap the controller's session timeout measures stays the interval, not interval + answer time."""
    properties = dev_properties(tmp_path, 9092, 9093) | {"broker.heartbeat.interval.ms": "2000"}
    config = load_config(text=format_properties(properties))
    controller = BusyController(delay=1.5)
    lifecycle = BrokerLifecycle(config, "cluster", StandInServer(), controller,  # type: ignore[arg-type]
                                metadata_offset=lambda: 0)
    async with trio.open_nursery() as nursery:
        await nursery.start(lifecycle.run)
        await trio.sleep(20.5)
        nursery.cancel_scope.cancel()
    gaps = [b - a for a, b in zip(controller.heartbeats, controller.heartbeats[1:], strict=False)]
    assert len(gaps) >= 9 and max(gaps) <= 2.0 + 1e-9, gaps
