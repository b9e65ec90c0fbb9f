"""The controller process's logic without sockets, on trio's virtual clock.

A real `ControllerServer` over a real single-voter `RaftNode` (its metadata log on disk), driven
through its control-plane handler (`handle`) as a broker's requests would reach it; no listener
is opened, so broker sessions, their expiry and the append linger run on trio's virtual clock (each test
names the `clock` fixture).
"""

from __future__ import annotations

import random

import pytest
import trio
import trio.testing

from kraftpy.config import load_config
from kraftpy.ids import Uuid, random_uuid_str
from kraftpy.metadata.controller_config import DEFAULT_SUPPORTED_FEATURES
from kraftpy.metadata.controller_server import ControllerServer
from kraftpy.metadata.errors import Errors
from kraftpy.metadata.messages import (
    AlterPartitionPartitionData,
    AlterPartitionRequest,
    AlterPartitionTopicData,
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    BrokerState,
    CreatableReplicaAssignment,
    CreatableTopic,
    CreatePartitionsRequest,
    CreatePartitionsTopic,
    CreateTopicsRequest,
    CreateTopicsResponse,
)
from kraftpy.metadata.records import BrokerEndpoint, BrokerFeature
from kraftpy.metadata.rpc import API_OF, CONTROLLER_APIS, QUORUM_STATUS_API, WIRE
from kraftpy.node.raft_node import RaftNode
from kraftpy.rpc.control import RpcError
from kraftpy.storage.formatter import format_dirs

SESSION_MS = 9000
FEATURES = tuple(BrokerFeature(name, low, high) for name, (low, high) in DEFAULT_SUPPORTED_FEATURES.items())


async def call(controller: ControllerServer, request):
    api = API_OF[type(request)]
    _, response_type = CONTROLLER_APIS[api]
    answer = await controller.handle(api, {"request": WIRE.encode(request)})
    return WIRE.decode_as(answer["response"], response_type)


@pytest.fixture
def clock():
    """trio's virtual clock, jumping to the next deadline once the loop has had nothing to do for a twentieth
    of a real second. Not trio's `autojump_clock` (which jumps at once): that would jump while a write
    waits for its fsync in a worker thread, straight to the next broker session's expiry, and fence
    brokers in the middle of a request. A test names it among its own arguments (pytest-trio takes the
    clock from those)."""
    return trio.testing.MockClock(autojump_threshold=0.05)


@pytest.fixture
async def controller(tmp_path, nursery):
    config = load_config(text="\n".join([
        "process.roles=controller", "node.id=1", "controller.quorum.voters=1@127.0.0.1:9",
        "listeners=CONTROLLER://127.0.0.1:9", "controller.listener.names=CONTROLLER",
        f"log.dirs={tmp_path / 'controller'}", f"broker.session.timeout.ms={SESSION_MS}",
    ]))
    cluster_id = random_uuid_str()
    format_dirs(config.all_dirs, cluster_id, config.node_id)
    raft = await RaftNode.open(config, cluster_id, rng=random.Random(1))
    server = ControllerServer(config, cluster_id, raft, rng=random.Random(2))
    await nursery.start(server.run_quorum)
    while server.active is None:  # a single voter elects itself and activates (virtual time)
        await trio.sleep(0.01)
    return server


async def register(controller: ControllerServer, broker_id: int) -> int:
    response = await call(controller, BrokerRegistrationRequest(
        broker_id, controller.cluster_id, Uuid(bytes([broker_id]) * 16),
        listeners=(BrokerEndpoint("PLAINTEXT", "127.0.0.1", 9000 + broker_id),), features=FEATURES))
    assert isinstance(response, BrokerRegistrationResponse) and response.error_code == Errors.NONE
    return response.broker_epoch


async def test_a_write_is_answered_once_committed_and_replayed_everywhere(controller, clock):
    epoch = await register(controller, 10)
    # The registration record's offset is the broker epoch; it is committed and loaded.
    assert controller.loader.image.cluster.broker(10).epoch == epoch
    assert controller.driver.core.high_watermark > epoch
    beat = await call(controller, BrokerHeartbeatRequest(10, epoch, current_metadata_offset=epoch))
    assert isinstance(beat, BrokerHeartbeatResponse) and not beat.is_fenced
    response = await call(controller, CreateTopicsRequest((CreatableTopic("t", 3, 1),)))
    assert isinstance(response, CreateTopicsResponse)
    assert response.result("t").error_code == Errors.NONE
    assert len(controller.loader.image.topics.get_by_name("t").partitions) == 3
    assert controller.active.image.topics.get_by_name("t") is not None


async def test_a_silent_broker_is_fenced_when_its_session_runs_out(controller, clock):
    epoch = await register(controller, 10)
    # Taken before the heartbeat is sent: the session the controller counts starts no earlier.
    start = trio.current_time()
    await call(controller, BrokerHeartbeatRequest(10, epoch, current_metadata_offset=epoch))
    assert not controller.loader.image.cluster.broker(10).fenced
    await trio.sleep_until(start + SESSION_MS / 1000 - 1)
    assert not controller.loader.image.cluster.broker(10).fenced
    while not controller.loader.image.cluster.broker(10).fenced:
        await trio.sleep(0.5)
    # Never before its session ran out (how soon after is the controller's tick, not asserted here).
    assert trio.current_time() - start >= SESSION_MS / 1000
    # A heartbeat of the same incarnation is answered fenced until it has caught up again.
    beat = await call(controller, BrokerHeartbeatRequest(10, epoch, current_metadata_offset=0))
    assert beat.is_fenced


async def test_a_committed_write_is_answered_though_the_leadership_goes_before_the_loader_replays_it(
        controller, nursery, clock):
    """A write is answered once committed and replayed by the loader. If the leadership moves in
    between, the write is not failed NOT_CONTROLLER (a retry would be told it was already done): it
    is answered when the loader, which goes on following the log, replays it."""
    from kraftpy.raft.effects import LeaderChange

    held: list = []
    replay = controller.loader._enqueue
    controller.loader._enqueue = held.append  # the loader's task gets nothing for now
    answered: list = []

    async def registration() -> None:
        answered.append(await register(controller, 10))

    nursery.start_soon(registration)
    while not held:  # committed (a quorum of one), handed to the loader, not replayed
        await trio.sleep(0.01)
    assert not answered and controller.loader.image.cluster.broker(10) is None
    controller.handle_leader_change(LeaderChange(controller.loader.leader_epoch + 1, 2))
    assert controller.active is None
    for item in held:
        replay(item)
    while not answered:
        await trio.sleep(0.01)
    assert controller.loader.image.cluster.broker(10).epoch == answered[0]


@pytest.fixture
def small_batches(monkeypatch):
    """Batches of a result that is not atomic, and of proposals gathered by the Raft leader, of 4 records."""
    from kraftpy.metadata import controller_server
    from kraftpy.node import raft_node

    monkeypatch.setattr(controller_server, "NON_ATOMIC_BATCH_RECORDS", 4)
    monkeypatch.setattr(raft_node, "NON_ATOMIC_BATCH_RECORDS", 4)


async def test_fencing_a_broker_of_many_partitions_is_written_as_bounded_batches_the_fence_last(
        small_batches, controller, clock):
    """A result that is not atomic (a fencing) is written as batches of at most NON_ATOMIC_BATCH_RECORDS
    records, its FenceBrokerRecord in the last; an atomic one (CreateTopics) stays one batch whatever its
    size. Each batch is replayed into the active controller as it is written."""
    from kraftpy.metadata.records import FenceBrokerRecord, PartitionChangeRecord, TopicRecord, decode_record

    epoch = await register(controller, 10)
    await call(controller, BrokerHeartbeatRequest(10, epoch, current_metadata_offset=epoch))
    log = controller.driver.core.log

    def batches_from(offset: int) -> list[list]:
        return [[decode_record(v) for v in b.records] for b in log.read(offset, 1 << 30) if not b.is_control]

    before = log.end_offset
    response = await call(controller, CreateTopicsRequest((CreatableTopic("many", 10, 1),)))
    assert response.result("many").error_code == Errors.NONE
    await trio.sleep(SESSION_MS / 1000)
    while not controller.loader.image.cluster.broker(10).fenced:  # no heartbeat: its session runs out
        await trio.sleep(0.5)
    created, *fence = batches_from(before)
    assert isinstance(created[0], TopicRecord) and len(created) == 11
    assert [len(b) for b in fence] == [4, 4, 3]
    flat = [r for b in fence for r in b]
    assert all(isinstance(r, PartitionChangeRecord) and r.leader == -1 for r in flat[:-1])
    assert flat[-1] == FenceBrokerRecord(10, epoch)
    topic = controller.loader.image.topics.get_by_name("many")
    assert all(p.leader == -1 for p in topic.partitions.values())
    assert controller.active.image.topics.get_by_name("many") == topic


async def test_a_write_on_a_large_image_is_built_in_a_worker_thread_while_the_loop_runs(
        small_batches, controller, clock, monkeypatch):
    """On an image of `offload_memberships` partition memberships or more, a write's records are built,
    encoded and replayed in a worker thread, the event loop running meanwhile (at 100,000 partitions a
    fencing takes a second to build, and a Raft leader silent for controller.quorum.fetch.timeout.ms is
    replaced); below it, on the event loop. What is written is the same either way."""
    import threading

    from kraftpy.metadata import cluster_control
    from kraftpy.metadata.records import FenceBrokerRecord, PartitionChangeRecord, decode_record

    epochs = {b: await register(controller, b) for b in (10, 11)}
    for b, epoch in epochs.items():
        await call(controller, BrokerHeartbeatRequest(b, epoch, current_metadata_offset=epoch))
    assignment = tuple(CreatableReplicaAssignment(p, (10 + p % 2,)) for p in range(10))
    response = await call(controller, CreateTopicsRequest((CreatableTopic("many", -1, -1, assignment),)))
    assert response.result("many").error_code == Errors.NONE
    assert controller.active.image.topics.index.memberships() == 10

    built_in: list[threading.Thread] = []
    building, loop_ran = threading.Event(), threading.Event()
    fence_brokers = cluster_control.fence_brokers

    def watched(*args):
        built_in.append(threading.current_thread())
        building.set()
        if built_in[-1] is not threading.main_thread():
            assert loop_ran.wait(30), "the event loop did not run while the records were built"
        return fence_brokers(*args)

    monkeypatch.setattr(cluster_control, "fence_brokers", watched)
    log = controller.driver.core.log

    async def fence(broker_id: int) -> list[list]:
        before = log.end_offset
        beat = await call(controller, BrokerHeartbeatRequest(broker_id, epochs[broker_id],
                                                             current_metadata_offset=epochs[broker_id],
                                                             want_fence=True))
        assert beat.is_fenced
        return [[decode_record(v) for v in b.records] for b in log.read(before, 1 << 30) if not b.is_control]

    inline = await fence(10)  # 10 memberships, under the default
    assert built_in == [threading.main_thread()]

    controller.offload_memberships = 5  # broker 11's 5 are left
    building.clear()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(fence, 11)
        await trio.to_thread.run_sync(building.wait)
        loop_ran.set()  # this task ran while the fencing was being built
    assert len(built_in) == 2 and built_in[1] is not threading.main_thread()

    def shape(batches):
        return [[type(r).__name__ for r in b] for b in batches]

    offloaded = [[decode_record(v) for v in b.records] for b in log.read(0, 1 << 30) if not b.is_control][-2:]
    assert shape(inline) == shape(offloaded) == [["PartitionChangeRecord"] * 4, ["PartitionChangeRecord",
                                                                               "FenceBrokerRecord"]]
    assert offloaded[-1][-1] == FenceBrokerRecord(11, epochs[11])
    assert all(isinstance(r, PartitionChangeRecord) and r.leader == -1 for r in [*offloaded[0], offloaded[1][0]])
    topic = controller.loader.image.topics.get_by_name("many")
    assert all(p.leader == -1 for p in topic.partitions.values())
    assert controller.active.image.topics.get_by_name("many") == topic  # replayed into the controller too
    assert controller.active.image.cluster.broker(11).fenced


async def test_quorum_status_and_unknown_apis(controller, clock):
    status = await controller.handle(QUORUM_STATUS_API, {})
    assert status["leader_id"] == 1 and [v["id"] for v in status["voters"]] == [1]
    assert status["high_watermark"] == controller.driver.core.high_watermark
    with pytest.raises(RpcError) as err:
        await controller.handle("NoSuchApi", {})
    assert err.value.code == "UNSUPPORTED_VERSION"


def registration(broker_id: int = 10, **changes) -> dict:
    """An encoded BrokerRegistrationRequest, with `changes` applied to its encoded fields."""
    request = BrokerRegistrationRequest(
        broker_id, "cluster", Uuid(bytes([7]) * 16),
        listeners=(BrokerEndpoint("PLAINTEXT", "127.0.0.1", 9010),), features=FEATURES)
    encoded = WIRE.encode(request)
    encoded.update(changes)
    return encoded


def listener(**changes) -> dict:
    encoded = WIRE.encode(BrokerEndpoint("PLAINTEXT", "127.0.0.1", 9010))
    encoded.update(changes)
    return encoded


MALFORMED = {
    "a string for an int": ("BrokerHeartbeat", {"@": "BrokerHeartbeatRequest", "broker_id": "10", "broker_epoch": 1,
                                                "current_metadata_offset": 0}, "broker_id: expected an integer"),
    "a missing field": ("BrokerHeartbeat", {"@": "BrokerHeartbeatRequest", "broker_id": 10, "broker_epoch": 1},
                        "current_metadata_offset: missing"),
    "a list for a map": ("UnregisterBroker", [10], "expected a UnregisterBrokerRequest, got a list"),
    "a negative broker id": ("BrokerHeartbeat", {"@": "BrokerHeartbeatRequest", "broker_id": -3, "broker_epoch": 1,
                                                 "current_metadata_offset": 0},
                             "broker_id: -3 is out of non-negative int32 range"),
    "a broker id past int32": ("AllocateProducerIds", {"@": "AllocateProducerIdsRequest", "broker_id": 2**31,
                                                       "broker_epoch": 1}, "out of non-negative int32 range"),
    "a map for a list": ("BrokerRegistration", registration(listeners={"PLAINTEXT": 9010}), "listeners: expected a list"),
    "a port out of range": ("BrokerRegistration", registration(listeners=[listener(port=70000)]),
                            "listeners[0].port 70000 is not a port"),
    "a port of zero": ("BrokerRegistration", registration(listeners=[listener(port=0)]), "is not a port"),
    "no listener": ("BrokerRegistration", registration(listeners=[]), "listeners is empty"),
    "a listener twice": ("BrokerRegistration", registration(listeners=[listener(), listener(port=9011)]),
                         "listeners name 'PLAINTEXT' twice"),
    "an unknown security protocol": ("BrokerRegistration", registration(listeners=[listener(security_protocol=9)]),
                                     "security_protocol 9"),
    "an empty rack": ("BrokerRegistration", registration(rack=""), "rack is empty"),
    "a zero incarnation id": ("BrokerRegistration", registration(incarnation_id=WIRE.encode(Uuid(bytes(16)))),
                              "incarnation_id is the zero id"),
    "an id of 15 bytes": ("BrokerRegistration", registration(incarnation_id={"@": "Uuid", "raw": bytes(15)}),
                          "a Uuid is 16 bytes"),
    "an ISR naming a broker twice": ("AlterPartition", WIRE.encode(AlterPartitionRequest(10, 5, (AlterPartitionTopicData(
        Uuid(bytes([1]) * 16), (AlterPartitionPartitionData(0, 1, (BrokerState(10), BrokerState(10))),)),))),
        "names broker 10 twice in its ISR"),
    "a partition twice": ("AlterPartition", WIRE.encode(AlterPartitionRequest(10, 5, (AlterPartitionTopicData(
        Uuid(bytes([1]) * 16), (AlterPartitionPartitionData(0, 1, (BrokerState(10),)),) * 2),))),
        "names partition 0 twice"),
    "an enum value out of its range": ("ElectLeaders", {"@": "ElectLeadersRequest",
                                                        "election_type": {"@": "ElectionType", "v": 7}}, "ElectionType"),
}


@pytest.mark.parametrize("case", MALFORMED, ids=str)
async def test_a_malformed_request_is_answered_invalid_request_and_writes_nothing(controller, case: str, clock):
    api, encoded, says = MALFORMED[case]
    end = controller.driver.core.log.end_offset
    with pytest.raises(RpcError) as err:
        await controller.handle(api, {"request": encoded})
    assert err.value.code == "INVALID_REQUEST" and says in err.value.message, err.value.message
    assert controller.driver.core.log.end_offset == end
    await register(controller, 10)  # and it serves on


async def test_what_a_kafka_client_may_send_is_answered_per_topic_not_refused_whole(controller, clock):
    """CreateTopics and CreatePartitions come from Kafka clients through a broker: a replica named
    twice or a negative partition index is the topic's INVALID_REPLICA_ASSIGNMENT, as in Kafka."""
    await register(controller, 10)
    response = await call(controller, CreateTopicsRequest((
        CreatableTopic("twice", assignments=(CreatableReplicaAssignment(0, (10, 10)),)),
        CreatableTopic("negative", assignments=(CreatableReplicaAssignment(-1, (10,)),)),
    )))
    assert [(t.name, t.error_code) for t in response.topics] == [
        ("twice", Errors.INVALID_REPLICA_ASSIGNMENT), ("negative", Errors.INVALID_REPLICA_ASSIGNMENT)]


async def test_a_request_adding_too_many_partitions_is_refused_before_any_placement(controller, clock):
    """Kafka's bound on records per operation: 2**31 - 1 partitions is answered at once, not placed."""
    for broker_id in (10, 11):
        epoch = await register(controller, broker_id)
        await call(controller, BrokerHeartbeatRequest(broker_id, epoch, current_metadata_offset=10**6))
    end = controller.driver.core.log.end_offset
    huge = await call(controller, CreateTopicsRequest((CreatableTopic("huge", 2**31 - 1, 1), CreatableTopic("ok", 1, 1))))
    assert [(t.name, t.error_code) for t in huge.topics] == [("huge", Errors.POLICY_VIOLATION),
                                                            ("ok", Errors.POLICY_VIOLATION)]
    assert controller.driver.core.log.end_offset == end
    fine = await call(controller, CreateTopicsRequest((CreatableTopic("t", 10_000, 1),)))
    assert fine.result("t").error_code == Errors.NONE
    more = await call(controller, CreatePartitionsRequest((CreatePartitionsTopic("t", 20_001),)))
    assert more.results[0].error_code == Errors.POLICY_VIOLATION
    assert (await call(controller, CreatePartitionsRequest((CreatePartitionsTopic("t", 20_000),)))).results[0].error_code \
        == Errors.NONE


async def test_an_answer_read_from_uncommitted_records_waits_for_their_commit(controller, clock):
    """Two CreateTopics of one topic: the second is decided on the image the first already changed (its
    batch still lingering, uncommitted) and is answered TOPIC_ALREADY_EXISTS only once that batch has
    committed, so no client is told a topic exists that a lost leadership could still take away."""
    epoch = await register(controller, 10)
    await call(controller, BrokerHeartbeatRequest(10, epoch, current_metadata_offset=epoch))
    answers = []

    async def create(tag: str) -> None:
        response = await call(controller, CreateTopicsRequest((CreatableTopic("twice", 1, 1),)))
        committed = controller.loader.image.topics.get_by_name("twice") is not None
        answers.append((tag, response.result("twice").error_code, committed))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(create, "first")
        await trio.testing.wait_all_tasks_blocked()
        assert controller.active.image.topics.get_by_name("twice") is not None  # decided, in memory
        assert controller.loader.image.topics.get_by_name("twice") is None  # not yet committed
        nursery.start_soon(create, "second")
    assert sorted(answers) == [("first", Errors.NONE, True), ("second", Errors.TOPIC_ALREADY_EXISTS, True)]


async def test_the_largest_operation_is_written_to_the_metadata_log(controller, clock):
    """A CreateTopics at the controller's bound (10,000 partitions) at replication factor 10 is a batch of
    about 2.5 MB: the metadata log on disk takes it (its max.message.bytes is the quorum's batch limit,
    8 MiB, not a data topic's 1 MiB) and the image holds every partition once it is committed."""
    for broker_id in range(10, 20):
        epoch = await register(controller, broker_id)
        await call(controller, BrokerHeartbeatRequest(broker_id, epoch, current_metadata_offset=epoch))
    topics = tuple(CreatableTopic(f"big-{i:03d}", 100, 10) for i in range(100))
    response = await call(controller, CreateTopicsRequest(topics))
    assert {t.error_code for t in response.topics} == {Errors.NONE}
    log = controller.driver.core.log
    assert max(b.size_in_bytes for b in log.read(log.start_offset, 1 << 30)) > 2 << 20
    assert sum(len(controller.loader.image.topics.get_by_name(t.name).partitions) for t in topics) == 10_000
