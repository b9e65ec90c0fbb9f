"""Every input of the bad-input probe of ``kraftpy dev`` (issue 13), sent again to a real ``kraftpy dev``.

Valid-looking input that did damage: Produce batches whose records are garbage behind a recomputed
CRC, forged Raft messages, size prefixes that allocate at once, a Metadata request naming a million
topics; and the faults that ended in tracebacks. Each test sends the input as the probe did and
checks what must hold instead: refused with Kafka's code and nothing written, the node alive (and
able to restart), memory bounded, other clients served.

Faults that need a process set up around them (a full disk, a port in use, a partition directory
that cannot be opened, a restart after kill -9) are tested in tests/cli/test_faults.py;
`test_the_fault_probes_are_tested_there` keeps that list honest. Inputs the fuzzer found beyond the
probe's are in tests/fuzz/findings/ (see test_findings.py).
"""

from __future__ import annotations

import ast
import json
import struct
from pathlib import Path

import pytest
import trio

from kraftpy.broker.client import KafkaConnection
from kraftpy.cli.quorum import fetch_status
from kraftpy.metadata.rpc import WIRE
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.frames import encode_request, join_frame
from kraftpy.protocol.messages import (
    ApiVersionsRequest,
    CreateTopicsRequest,
    ListOffsetsRequest,
    MetadataRequest,
)
from kraftpy.raft import codec as raft_codec
from kraftpy.raft.messages import BeginQuorumEpochRequest, VoteRequest
from kraftpy.rpc.control import ControlClient, RpcError
from tests.fuzz.batches import BatchSpec, RecordSpec
from tests.fuzz.verify import Ack, judge, read_partition
from tests.helpers.processes import DevProcess, KraftProcess, controller_configs, format_all
from tests.helpers.protocol import batch, produce

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def shared_dev(tmp_path_factory):
    dev = DevProcess(tmp_path_factory.mktemp("regressions"))
    dev.start()
    yield dev
    dev.stop()


@pytest.fixture
def dev(shared_dev):
    """The module's ``kraftpy dev``, started again (same directory) if an earlier test stopped it."""
    if shared_dev.process.poll() is not None:
        shared_dev.lines.clear()
        shared_dev.start()
    return shared_dev


async def connect(dev: DevProcess) -> KafkaConnection:
    return await KafkaConnection.connect("127.0.0.1", dev.port, client_id="regression")


async def create_topic(conn: KafkaConnection, name: str, partitions: int = 1) -> None:
    response = await conn.request(ApiKey.CREATE_TOPICS, 7, CreateTopicsRequest(topics=[
        CreateTopicsRequest.CreatableTopic(name=name, num_partitions=partitions, replication_factor=1)],
        timeout_ms=30000))
    assert response.topics[0].error_code in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS)


async def log_end(conn: KafkaConnection, topic: str, partition: int = 0) -> int:
    response = await conn.request(ApiKey.LIST_OFFSETS, 7, ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[
        ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=[
            ListOffsetsRequest.ListOffsetsPartition(partition_index=partition, timestamp=-1)])]))
    result = response.topics[0].partitions[0]
    assert result.error_code == ErrorCode.NONE
    return result.offset


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def one_record(**fields) -> BatchSpec:
    spec = BatchSpec([RecordSpec(0, 0, b"k", b"value", [])])
    for name, value in fields.items():
        setattr(spec, name, value)
    return spec


def garbage_section() -> BatchSpec:
    spec = one_record()
    spec.raw_section = b"\x10\xff\xff\xff\xff\xff\xffgarbage that is not a record"
    return spec


def count_lie() -> BatchSpec:
    spec = BatchSpec([RecordSpec(0, 0, b"a", b"1", []), RecordSpec(1, 0, b"b", b"2", [])])
    spec.record_count = 3
    spec.last_offset_delta = 2
    return spec


def overlapping_deltas() -> BatchSpec:
    """Two records at deltas 0 and 5 in a batch that claims offsets 0-1: the probe saw records of two
    batches at neighbouring offsets."""
    return BatchSpec([RecordSpec(0, 0, b"a", b"1", []), RecordSpec(5, 0, b"b", b"2", [])])


PRODUCE_PROBES = {
    "codec 5": (lambda: one_record(attributes=5, compress_with=0), ErrorCode.UNSUPPORTED_COMPRESSION_TYPE),
    "codec 7": (lambda: one_record(attributes=7, compress_with=0), ErrorCode.UNSUPPORTED_COMPRESSION_TYPE),
    "gzip flag on raw bytes": (lambda: one_record(attributes=1, compress_with=0), ErrorCode.CORRUPT_MESSAGE),
    "records that do not parse": (garbage_section, ErrorCode.INVALID_RECORD),
    "record_count past the records": (count_lie, ErrorCode.INVALID_RECORD),
    "1 record, last_offset_delta 2^31-1": (lambda: one_record(last_offset_delta=2**31 - 1), ErrorCode.INVALID_RECORD),
    "offset deltas past last_offset_delta": (overlapping_deltas, ErrorCode.INVALID_RECORD),
}


@pytest.mark.parametrize("probe", sorted(PRODUCE_PROBES))
async def test_produce_refuses_garbage_behind_a_good_crc_and_the_partition_stays_readable(dev, probe):
    make, code = PRODUCE_PROBES[probe]
    topic = "probe-" + "".join(c if c.isalnum() else "-" for c in probe)
    data = make().encode()
    async with await connect(dev) as conn:
        await create_topic(conn, topic)
        good_before = batch(b"before")
        first = await produce(conn, topic, 0, good_before)
        assert first.error_code == ErrorCode.NONE
        end = await log_end(conn, topic)
        refused = await produce(conn, topic, 0, data)
        assert refused.error_code == code, ErrorCode(refused.error_code).name
        assert await log_end(conn, topic) == end, "nothing of a refused batch is written"
        good_after = batch(b"after")
        second = await produce(conn, topic, 0, good_after)
        assert second.error_code == ErrorCode.NONE and second.base_offset == end
        log = await read_partition(conn, topic, 0)
        acks = [Ack(topic, 0, first.base_offset, good_before, 0), Ack(topic, 0, second.base_offset, good_after, 1)]
        assert judge(acks, log) == [] and log.poison is None and not log.problems


# -- the control plane ---------------------------------------------------------------------------------


async def raft_request(port: int, source: int, message) -> object:
    """Send one Raft message to the controller on ``port``; the decoded answer, or the RpcError it raised."""
    async with trio.open_nursery() as nursery:
        client = ControlClient(nursery, "127.0.0.1", port, request_timeout=5)
        try:
            answer = await client.request("raft", {"source": source, "message": raft_codec.encode(message)})
            return raft_codec.decode(answer["message"])
        except RpcError as exc:
            return exc
        finally:
            await client.aclose()


def refused(answer: object) -> bool:
    """An RpcError, or an answer with an error code that grants nothing."""
    return isinstance(answer, RpcError) or (answer.error_code != 0 and not getattr(answer, "vote_granted", False))


def quorum_state(directory: Path) -> dict:
    [path] = directory.glob("**/quorum-state")
    return json.loads(path.read_text())


async def first_active_controller(procs) -> None:
    """Until one of the controllers says it became the active one."""
    async with trio.open_nursery() as nursery:
        async def wait(proc: KraftProcess) -> None:
            await proc.wait_for("active controller", timeout=60)
            nursery.cancel_scope.cancel()

        for proc in procs:
            nursery.start_soon(wait, proc)


async def test_forged_raft_messages_to_a_follower_change_nothing_and_it_restarts(tmp_path):
    """The probe: a VoteRequest with candidate_epoch 2^31+5 was granted, the epoch persisted to
    quorum-state, and the process died in build_batch at every restart; a BeginQuorumEpoch naming
    leader 999 (not a voter) was accepted and written too. Both are sent, as from another voter, to
    a follower of a three-voter quorum."""
    configs, voters = controller_configs(tmp_path, **{"controller.quorum.election.timeout.ms": 500})
    format_all(configs)
    procs = {i: KraftProcess(f"controller-{i}", "controller", c) for i, c in enumerate(configs, start=1)}
    async with trio.open_nursery() as nursery:
        for proc in procs.values():
            await proc.start(nursery)
        await first_active_controller(procs.values())
        status = await fetch_status(list(voters.values()))
        leader, epoch = status["leader_id"], status["leader_epoch"]
        follower, other = [i for i in sorted(voters) if i != leader]
        port = voters[follower][1]
        vote = VoteRequest(cluster_id=None, voter_id=follower, candidate_epoch=2**31 + 5, candidate_id=other,
                           last_offset_epoch=epoch, last_offset=10**9)
        assert refused(await raft_request(port, other, vote))
        begin = BeginQuorumEpochRequest(cluster_id=None, voter_id=follower, leader_id=999, leader_epoch=epoch + 1)
        assert refused(await raft_request(port, other, begin))
        assert refused(await raft_request(port, 999, begin))
        state = quorum_state(tmp_path / f"controller-{follower}")
        assert state["leaderEpoch"] < 2**31 and state["leaderId"] in (leader, -1), state
        again = await fetch_status(list(voters.values()))
        assert again["leader_id"] == leader and again["leader_epoch"] < 2**31
        procs[follower].kill()  # and back: the restart the probe could not make
        await procs[follower].wait()
        await procs[follower].start(nursery)
        await procs[follower].wait_for("controller started")
        for proc in procs.values():
            assert proc.process.returncode is None, proc.name
            proc.kill()
        nursery.cancel_scope.cancel()


async def test_a_single_voter_refuses_votes_and_leaders_it_cannot_have(dev):
    """In ``kraftpy dev`` the only voter is node 1: a vote for anyone at any epoch, or another leader,
    is refused and the quorum stays as it was."""
    before = await quorum_status(dev)
    epoch = before["leader_epoch"]
    for source, message in [
        (1, VoteRequest(cluster_id=None, voter_id=1, candidate_epoch=2**31 + 5, candidate_id=1,
                        last_offset_epoch=2**31 + 4, last_offset=10**6)),
        (7, VoteRequest(cluster_id=None, voter_id=1, candidate_epoch=epoch + 1, candidate_id=7,
                        last_offset_epoch=epoch, last_offset=10**9)),
        (999, BeginQuorumEpochRequest(cluster_id=None, voter_id=1, leader_id=999, leader_epoch=epoch + 1)),
    ]:
        assert refused(await raft_request(dev.controller_port, source, message)), message
    after = await quorum_status(dev)
    assert (after["leader_id"], after["leader_epoch"]) == (1, epoch)
    assert quorum_state(dev.directory)["leaderId"] == 1


async def quorum_status(dev: DevProcess) -> dict:
    async with trio.open_nursery() as nursery:
        client = ControlClient(nursery, "127.0.0.1", dev.controller_port, request_timeout=5)
        try:
            return await client.request("QuorumStatus", {})
        finally:
            await client.aclose()


async def control_call(dev: DevProcess, api: str, body: dict) -> object:
    async with trio.open_nursery() as nursery:
        client = ControlClient(nursery, "127.0.0.1", dev.controller_port, request_timeout=10)
        try:
            return await client.request(api, body)
        except RpcError as exc:
            return exc
        finally:
            await client.aclose()


CONTROL_TYPE_ERRORS = {
    "a list of strings where topics are due": ("ElectLeaders", {"@": "ElectLeadersRequest",
                                                                "election_type": {"@": "ElectionType", "v": 0},
                                                                "topic_partitions": ["x"]}),
    "a type tag removed": ("IncrementalAlterConfigs", {"@": "IncrementalAlterConfigsRequest", "validate_only": True,
                                                       "resources": [{"resource_type": 2, "resource_name": "t",
                                                                      "configs": []}]}),
    "a map where a name is due": ("CreatePartitions", {"@": "CreatePartitionsRequest", "validate_only": True,
                                                       "topics": [{"@": "CreatePartitionsTopic", "name": {},
                                                                   "count": 2, "assignments": None}]}),
}


@pytest.mark.parametrize("case", sorted(CONTROL_TYPE_ERRORS))
async def test_controller_requests_of_the_wrong_shape_are_invalid_requests(dev, case):
    api, request = CONTROL_TYPE_ERRORS[case]
    answer = await control_call(dev, api, {"request": request})
    assert isinstance(answer, RpcError) and answer.code == "INVALID_REQUEST", answer
    assert WIRE  # the codec these requests bypass on purpose


# -- memory ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("port_name", ["port", "controller_port"])
async def test_size_prefixes_of_100_mib_do_not_allocate_100_mib_each(dev, port_name):
    """The probe: 30 connections each announcing 100 MiB took 3 GB; 200 ended in MemoryError."""
    port = getattr(dev, port_name)
    before = rss_kb(dev.process.pid)
    streams = []
    try:
        for _ in range(30):
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            await stream.send_all(struct.pack(">i", 100 * 1024 * 1024) + b"\x00" * 1024)
            streams.append(stream)
        async with await connect(dev) as conn:  # the broker still answers, and has read what was sent
            await conn.request(ApiKey.API_VERSIONS, 3, ApiVersionsRequest(client_software_name="r",
                                                                          client_software_version="1"))
        grown = rss_kb(dev.process.pid) - before
        assert grown < 256 * 1024, f"resident memory grew by {grown // 1024} MiB"
    finally:
        for stream in streams:
            await stream.aclose()


async def test_a_metadata_request_naming_a_million_topics_does_not_stall_other_clients(dev):
    """The probe: 1,000,000 empty topic names took 44.6 s and 2 GB, others waited over 10 s, and the
    broker was fenced twice. While the broker works on such a request (seconds of decoding), another
    connection's requests are answered: several of them before the big one's answer."""
    frame = await trio.to_thread.run_sync(lambda: join_frame(encode_request(
        ApiKey.METADATA, 12, 1, "regression",
        MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="")] * 1_000_000,
                        allow_auto_topic_creation=False))))
    answered_before_big: list[int] = []
    big_answering = trio.Event()

    async def big(stream: trio.SocketStream) -> None:
        await stream.receive_some(1)  # the first byte of its answer (or the close, if refused outright)
        big_answering.set()

    with trio.fail_after(120):  # bounds a failure only
        stream = await trio.open_tcp_stream("127.0.0.1", dev.port)
        async with stream, await connect(dev) as other, trio.open_nursery() as nursery:
            await stream.send_all(frame)
            nursery.start_soon(big, stream)
            while not big_answering.is_set():
                await other.request(ApiKey.API_VERSIONS, 3, ApiVersionsRequest(client_software_name="r",
                                                                               client_software_version="1"))
                if not big_answering.is_set():
                    answered_before_big.append(1)
    assert len(answered_before_big) >= 2, "other clients waited for the big request"


# -- restarts and faults -----------------------------------------------------------------------------------


async def test_a_clean_restart_registers_at_once(tmp_path):
    """The probe: a broker restarted after a clean stop spent about 9 s in DUPLICATE_BROKER_REGISTRATION."""
    dev = DevProcess(tmp_path / "dev")
    dev.start()
    assert dev.stop() == 0
    dev.lines.clear()
    dev.start()
    try:
        refused = [line for line in dev.lines if "DUPLICATE_BROKER_REGISTRATION" in json.dumps(line)
                   or line.get("event") == "registration refused, retrying"]
        assert not refused, refused
    finally:
        assert dev.stop() == 0


FAULT_PROBES = {
    "a full disk during a metadata append, and a restart on it": "test_a_full_disk_fails_produces_stops_on_metadata_writes_and_loses_nothing",
    "the Kafka port in use": "test_the_kafka_port_in_use_is_one_line",
    "the controller port in use": "test_the_controller_port_in_use_is_one_line",
    "a partition directory that cannot be opened": "test_kraftpy_dev_with_a_partition_it_cannot_open_reports_it_offline_instead_of_leading_it",
    "a restart after kill -9": "test_kraftpy_dev_killed_registers_its_broker_at_once_when_restarted",
}


def test_the_fault_probes_are_tested_there():
    tree = ast.parse((Path(__file__).parents[1] / "cli" / "test_faults.py").read_text())
    tests = {node.name for node in tree.body if isinstance(node, ast.AsyncFunctionDef | ast.FunctionDef)}
    missing = {probe: name for probe, name in FAULT_PROBES.items() if name not in tests}
    assert not missing, missing


def test_the_open_files_limit_is_tested_with_the_memory_budget():
    source = (Path(__file__).parents[1] / "rpc" / "test_memory_budget.py").read_text()
    assert "EMFILE" in source

