"""The transaction APIs on the wire between two in-process brokers: KIP-890 part 1 verification of a
producer's first transactional batch in a partition (asked of the coordinator in the same broker, or
of the other broker with AddPartitionsToTxn v4 ``verify_only``; retriable when no coordinator can
answer), the v4 request as a batch of transactions each answered under its own id, the
producer-epoch errors each request version knows (PRODUCER_FENCED, or INVALID_PRODUCER_EPOCH for the
versions before it), and ``__transaction_state`` loaded on leadership and dropped on its loss.

The coordinator is the leader of the one ``__transaction_state`` partition; the topic ``t`` has a
partition led by each broker, so one is verified in the coordinator's broker and one across."""

from __future__ import annotations

import time
from contextlib import AsyncExitStack

import pytest
import trio
import trio.testing

from kraftpy.broker.client import KafkaConnection
from kraftpy.coordinator.txn_state import TxnConfig, TxnState
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.messages import (
    AddPartitionsToTxnRequest,
    DescribeTransactionsRequest,
    EndTxnRequest,
    FindCoordinatorRequest,
    InitProducerIdRequest,
    ProduceRequest,
)
from kraftpy.protocol.records import SimpleRecord, build_batch
from tests.helpers.cluster import open_cluster

TXN = TxnConfig(state_log_num_partitions=1, state_log_replication_factor=1, state_log_min_isr=1)
TOPIC = "t"
E = ErrorCode


def connect(cluster, broker_id: int) -> KafkaConnection:
    return KafkaConnection.connect("127.0.0.1", cluster.ports[broker_id], client_id="txn-wire-test")


def txn_batch(producer_id: int, epoch: int, sequence: int, value: bytes) -> bytes:
    return build_batch([SimpleRecord(b"k", value, timestamp=time.time_ns() // 1_000_000)], producer_id=producer_id,
                       producer_epoch=epoch, base_sequence=sequence, is_transactional=True)


async def until(cluster, condition, timeout: float = 30.0) -> None:
    """Wait until ``condition()`` holds, for state that changes after the events `Cluster.wait_for`
    wakes on (the coordinator applies a write once its partition's high watermark passed it): checked
    once every task is blocked, then again after the next partition or metadata change."""
    with trio.fail_after(timeout):
        while True:
            await trio.testing.wait_all_tasks_blocked()
            if condition():
                return
            await next_change(cluster)


async def next_change(cluster) -> None:
    """Return after the next partition or metadata change of any broker."""
    checks: list[None] = []
    await cluster.wait_for(lambda: bool(checks.append(None)) or len(checks) > 1)


async def loaded(cluster, broker_id: int) -> None:
    """Wait until ``broker_id`` leads ``__transaction_state``-0 and its coordinator has loaded it."""
    runtime = cluster.brokers[broker_id].txn_coordinator.runtime
    await cluster.wait_for(lambda: cluster.leader("__transaction_state", 0) == broker_id
                           and runtime.shard(0) is not None)
    with trio.fail_after(30):
        await runtime.shard(0).loaded.wait()
    assert runtime.shard(0).active, "the coordinator stopped serving the partition it loaded"


class Wire:
    """A transactional producer's requests, each to the broker that serves it."""

    def __init__(self, cluster, coordinator: KafkaConnection, leaders: dict[int, KafkaConnection]) -> None:
        self.cluster = cluster
        self.coordinator = coordinator
        self.leaders = leaders  # by partition of TOPIC

    async def init(self, txn_id: str, *, timeout_ms: int = 60_000, version: int = 4):
        return await self.coordinator.request(ApiKey.INIT_PRODUCER_ID, version, InitProducerIdRequest(
            transactional_id=txn_id, transaction_timeout_ms=timeout_ms, producer_id=-1, producer_epoch=-1))

    async def add(self, txn_id: str, pid: int, epoch: int, *partitions: int) -> dict[int, ErrorCode]:
        response = await self.coordinator.request(ApiKey.ADD_PARTITIONS_TO_TXN, 3, AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=txn_id, v3_and_below_producer_id=pid, v3_and_below_producer_epoch=epoch,
            v3_and_below_topics=[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=TOPIC,
                                                                                   partitions=list(partitions))]))
        return {p.partition_index: ErrorCode(p.partition_error_code)
                for t in response.results_by_topic_v3_and_below for p in t.results_by_partition}

    async def end(self, txn_id: str, pid: int, epoch: int, *, commit: bool = True, version: int = 3) -> ErrorCode:
        response = await self.coordinator.request(ApiKey.END_TXN, version, EndTxnRequest(
            transactional_id=txn_id, producer_id=pid, producer_epoch=epoch, committed=commit))
        return ErrorCode(response.error_code)

    async def produce(self, txn_id: str | None, partition: int, data: bytes, version: int = 9):
        request = ProduceRequest(transactional_id=txn_id, acks=-1, timeout_ms=10_000, topic_data=[
            ProduceRequest.TopicProduceData(name=TOPIC, partition_data=[
                ProduceRequest.PartitionProduceData(index=partition, records=data)])])
        response = await self.leaders[partition].request(ApiKey.PRODUCE, version, request)
        return response.responses[0].partition_responses[0]

    def log(self, partition: int):
        """(log end offset, high watermark, last stable offset) of TOPIC-partition at its leader."""
        part = self.cluster.partition(self.cluster.leader(TOPIC, partition), TOPIC, partition)
        return part.log.log_end_offset, part.high_watermark, part.last_stable_offset


async def open_wire(cluster, stack) -> Wire:
    """Create ``__transaction_state`` (FindCoordinator), wait until its coordinator loaded it, and connect."""
    async with await connect(cluster, 1) as conn:
        found = await conn.request(ApiKey.FIND_COORDINATOR, 4, FindCoordinatorRequest(key_type=1,
                                                                                    coordinator_keys=["any"]))
        assert found.coordinators[0].error_code == E.NONE, found
    coordinator_id = cluster.leader("__transaction_state", 0)
    await loaded(cluster, coordinator_id)
    leaders = {p: cluster.leader(TOPIC, p) for p in (0, 1)}
    assert set(leaders.values()) == {1, 2}, f"each broker should lead a partition of {TOPIC}: {leaders}"
    conns = {b: await stack.enter_async_context(await connect(cluster, b)) for b in (1, 2)}
    return Wire(cluster, conns[coordinator_id], {p: conns[b] for p, b in leaders.items()})


@pytest.mark.parametrize("verification", [True, False], ids=["verification", "no-verification"])
async def test_a_batch_outside_the_producers_transaction_is_refused_and_opens_nothing(tmp_path, verification):
    """With transaction.partition.verification.enable (the default), a transactional batch for a
    partition its transaction does not hold is refused INVALID_TXN_STATE (TRANSACTION_ABORTABLE from
    Produce v11, KIP-890) and leaves the partition as it was, before AddPartitionsToTxn and after the
    transaction ended (a late batch of the ended transaction). Without it, the same late batch is appended and opens a transaction no coordinator
    will ever end: the last stable offset stays below it."""
    async with open_cluster(tmp_path, brokers=2, transaction=TXN,
                            transaction_partition_verification_enable=verification) as cluster, \
            AsyncExitStack() as stack:
        await cluster.create_topic(TOPIC, partitions=2)
        wire = await open_wire(cluster, stack)
        init = await wire.init("app")
        assert init.error_code == E.NONE, init
        pid, epoch = init.producer_id, init.producer_epoch

        if verification:
            for p in (0, 1):  # not added yet: refused in the coordinator's broker and in the other one
                refused = await wire.produce("app", p, txn_batch(pid, epoch, 0, b"early"))
                assert refused.error_code == E.INVALID_TXN_STATE, refused
                assert "does not include" in refused.error_message
                assert wire.log(p) == (0, 0, 0)
                # A producer that knows TRANSACTION_ABORTABLE (Produce v11) is told so.
                told = await wire.produce("app", p, txn_batch(pid, epoch, 0, b"early"), version=11)
                assert told.error_code == E.TRANSACTION_ABORTABLE, told
                assert wire.log(p) == (0, 0, 0)
        assert await wire.add("app", pid, epoch, 0, 1) == {0: E.NONE, 1: E.NONE}
        for p in (0, 1):
            appended = await wire.produce("app", p, txn_batch(pid, epoch, 0, b"in"))
            assert (appended.error_code, appended.base_offset) == (E.NONE, 0), appended
            assert wire.log(p) == (1, 1, 0)  # open: the LSO stays at its first offset
        # A transactional batch in a request without a transactional id: refused whole, as Kafka does.
        anonymous = await wire.produce(None, 0, txn_batch(pid, epoch, 1, b"anonymous"))
        assert anonymous.error_code == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED

        assert await wire.end("app", pid, epoch) == E.NONE
        shard = cluster.brokers[cluster.leader("__transaction_state", 0)].txn_coordinator.shard_for("app")
        await until(cluster, lambda: shard.describe("app").state is TxnState.COMPLETE_COMMIT
                               and all(wire.log(p) == (2, 2, 2) for p in (0, 1)))

        late = await wire.produce("app", 0, txn_batch(pid, epoch, 1, b"late"))
        if verification:
            assert late.error_code == E.INVALID_TXN_STATE, late
            assert (await wire.produce("app", 0, txn_batch(pid, epoch, 1, b"late"), version=11)).error_code \
                == E.TRANSACTION_ABORTABLE
            assert wire.log(0) == (2, 2, 2)
        else:
            assert late.error_code == E.NONE, late
            assert wire.log(0) == (3, 3, 2), "an unverified late batch opens a transaction nothing ends"


async def test_add_partitions_v4_answers_each_transaction_of_the_batch_under_its_id(tmp_path):
    """A partition leader's AddPartitionsToTxn v4: several transactions in one request, verify_only or
    not, each answered under its transactional id. A verify_only asks and writes nothing: a partition
    outside the transaction is TRANSACTION_ABORTABLE; an older epoch PRODUCER_FENCED; an unknown id
    INVALID_PRODUCER_ID_MAPPING. One that is not verify_only adds its partitions."""
    async with open_cluster(tmp_path, brokers=2, transaction=TXN) as cluster, AsyncExitStack() as stack:
        await cluster.create_topic(TOPIC, partitions=2)
        wire = await open_wire(cluster, stack)
        a, b = await wire.init("tx-a"), await wire.init("tx-b")
        assert await wire.add("tx-a", a.producer_id, a.producer_epoch, 0) == {0: E.NONE}

        Txn = AddPartitionsToTxnRequest.AddPartitionsToTxnTransaction
        Topic = AddPartitionsToTxnRequest.AddPartitionsToTxnTopic
        request = AddPartitionsToTxnRequest(transactions=[
            Txn(transactional_id="tx-a", producer_id=a.producer_id, producer_epoch=a.producer_epoch, verify_only=True,
                topics=[Topic(name=TOPIC, partitions=[0, 1])]),
            Txn(transactional_id="tx-b", producer_id=b.producer_id, producer_epoch=b.producer_epoch, verify_only=False,
                topics=[Topic(name=TOPIC, partitions=[1])]),
            Txn(transactional_id="tx-stale", producer_id=0, producer_epoch=0, verify_only=True,
                topics=[Topic(name=TOPIC, partitions=[0])]),
        ])
        response = await wire.coordinator.request(ApiKey.ADD_PARTITIONS_TO_TXN, 4, request)
        assert response.error_code == E.NONE
        answers = {r.transactional_id: {(t.name, p.partition_index): ErrorCode(p.partition_error_code)
                                        for t in r.topic_results for p in t.results_by_partition}
                   for r in response.results_by_transaction}
        assert answers == {
            "tx-a": {(TOPIC, 0): E.NONE, (TOPIC, 1): E.TRANSACTION_ABORTABLE},
            "tx-b": {(TOPIC, 1): E.NONE},
            "tx-stale": {(TOPIC, 0): E.INVALID_PRODUCER_ID_MAPPING},
        }

        described = await wire.coordinator.request(ApiKey.DESCRIBE_TRANSACTIONS, 0,
                                                   DescribeTransactionsRequest(transactional_ids=["tx-a", "tx-b"]))
        by_id = {s.transactional_id: (s.transaction_state, {t.topic: list(t.partitions) for t in s.topics})
                 for s in described.transaction_states}
        assert by_id == {"tx-a": ("Ongoing", {TOPIC: [0]}), "tx-b": ("Ongoing", {TOPIC: [1]})}, \
            "a verify_only changed the transaction, or the added partition is missing"

        # tx-a again: its open transaction is aborted with the epoch bumped (the first InitProducerId is
        # answered CONCURRENT_TRANSACTIONS meanwhile, as Kafka answers it), then the id gets a new epoch.
        assert (await wire.init("tx-a")).error_code == E.CONCURRENT_TRANSACTIONS
        shard = cluster.brokers[cluster.leader("__transaction_state", 0)].txn_coordinator.shard_for("tx-a")
        await until(cluster, lambda: shard.describe("tx-a").state is TxnState.COMPLETE_ABORT)
        bumped = await wire.init("tx-a")
        assert (bumped.error_code, bumped.producer_id) == (E.NONE, a.producer_id)
        assert bumped.producer_epoch > a.producer_epoch
        # The old epoch is fenced in a verification as in every request.
        fenced = await wire.coordinator.request(ApiKey.ADD_PARTITIONS_TO_TXN, 4, AddPartitionsToTxnRequest(
            transactions=[Txn(transactional_id="tx-a", producer_id=a.producer_id, producer_epoch=a.producer_epoch,
                              verify_only=True, topics=[Topic(name=TOPIC, partitions=[0])])]))
        assert fenced.results_by_transaction[0].topic_results[0].results_by_partition[0].partition_error_code == \
            E.PRODUCER_FENCED


async def test_a_fenced_producer_gets_the_error_its_request_version_knows(tmp_path):
    """After a second InitProducerId bumps the epoch: the zombie's first batch in a partition is refused
    INVALID_PRODUCER_EPOCH (the verification's PRODUCER_FENCED as Produce v9 says it), its EndTxn
    PRODUCER_FENCED from v2 and INVALID_PRODUCER_EPOCH before; a transaction.timeout.ms above
    transaction.max.timeout.ms is INVALID_TRANSACTION_TIMEOUT."""
    async with open_cluster(tmp_path, brokers=2, transaction=TXN) as cluster, AsyncExitStack() as stack:
        await cluster.create_topic(TOPIC, partitions=2)
        wire = await open_wire(cluster, stack)
        zombie = await wire.init("same")
        successor = await wire.init("same")
        assert (successor.producer_id, successor.producer_epoch) == (zombie.producer_id, zombie.producer_epoch + 1)
        for p in (0, 1):
            refused = await wire.produce("same", p, txn_batch(zombie.producer_id, zombie.producer_epoch, 0, b"z"))
            assert refused.error_code == E.INVALID_PRODUCER_EPOCH, refused
            assert wire.log(p) == (0, 0, 0)
        assert await wire.end("same", zombie.producer_id, zombie.producer_epoch, version=1) == E.INVALID_PRODUCER_EPOCH
        assert await wire.end("same", zombie.producer_id, zombie.producer_epoch, version=2) == E.PRODUCER_FENCED
        too_long = await wire.init("other", timeout_ms=TXN.transaction_max_timeout_ms + 1)
        assert (too_long.error_code, too_long.producer_id) == (E.INVALID_TRANSACTION_TIMEOUT, -1)
        with trio.fail_after(30):
            assert (await wire.init("other", timeout_ms=TXN.transaction_max_timeout_ms)).error_code == E.NONE


async def test_the_coordinator_loads_its_partition_on_leadership_and_drops_it_on_loss(tmp_path):
    """``__transaction_state`` with two replicas: when its leader is fenced, the other broker becomes the
    leader, loads the partition (the open transaction and its partitions come from the log) and serves
    the id; the old leader no longer holds the partition and answers NOT_COORDINATOR."""
    txn = TxnConfig(state_log_num_partitions=1, state_log_replication_factor=2, state_log_min_isr=1)
    async with open_cluster(tmp_path, brokers=2, transaction=txn) as cluster, AsyncExitStack() as stack:
        await cluster.create_topic(TOPIC, partitions=2)
        wire = await open_wire(cluster, stack)
        init = await wire.init("moving")
        assert await wire.add("moving", init.producer_id, init.producer_epoch, 0, 1) == {0: E.NONE, 1: E.NONE}
        old = cluster.leader("__transaction_state", 0)
        new = 3 - old
        assert cluster.registration("__transaction_state", 0).replicas in ((1, 2), (2, 1))
        await cluster.wait_for(lambda: len(cluster.registration("__transaction_state", 0).isr) == 2)
        assert cluster.brokers[new].txn_coordinator.owned_partitions() == set()

        await cluster.fence(old)
        assert cluster.leader("__transaction_state", 0) == new
        old_coordinator, new_coordinator = cluster.brokers[old].txn_coordinator, cluster.brokers[new].txn_coordinator
        await loaded(cluster, new)
        assert not old_coordinator.owned_partitions()
        meta = new_coordinator.shard_for("moving").describe("moving")
        assert (meta.state, meta.producer_id, meta.producer_epoch, meta.topics()) == (
            TxnState.ONGOING, init.producer_id, init.producer_epoch, {TOPIC: [0, 1]})
        assert await wire.end("moving", init.producer_id, init.producer_epoch) == E.NOT_COORDINATOR
        async with await connect(cluster, new) as conn:
            ended = await conn.request(ApiKey.END_TXN, 3, EndTxnRequest(
                transactional_id="moving", producer_id=init.producer_id, producer_epoch=init.producer_epoch,
                committed=False))
            assert ended.error_code == E.NONE


async def test_a_verification_no_coordinator_can_answer_is_retriable(tmp_path):
    """No ``__transaction_state`` yet, so no coordinator to ask: the batch is refused NOT_ENOUGH_REPLICAS,
    which every client retries (Kafka's answer for "ask again"), and nothing is appended."""
    async with open_cluster(tmp_path, brokers=2, transaction=TXN) as cluster, AsyncExitStack() as stack:
        await cluster.create_topic(TOPIC, partitions=2)
        conns = {b: await stack.enter_async_context(await connect(cluster, b)) for b in (1, 2)}
        wire = Wire(cluster, conns[1], {p: conns[cluster.leader(TOPIC, p)] for p in (0, 1)})
        for p in (0, 1):
            refused = await wire.produce("nobody-yet", p, txn_batch(4242, 0, 0, b"x"))
            assert refused.error_code == E.NOT_ENOUGH_REPLICAS, refused
            assert wire.log(p) == (0, 0, 0)
        assert cluster.image.topics.get_by_name("__transaction_state") is None
