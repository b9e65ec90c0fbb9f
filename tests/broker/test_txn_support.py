"""`TxnMarkerSender` and `TxnVerifier` (kraftpy.broker.txn_support) against scripted brokers.

The metadata is a plain image stand-in (topic -> partition -> leader) and the brokers are a
`ScriptedBrokers` that records every request and answers it from a script, so the tests see exactly
which requests go to which broker:

- the markers of a decision go to each partition's leader, the leaders in parallel; a try that did
  not get every marker raises, and the next try of the same decision sends only the missing ones
  (a different decision starts over); a deleted topic counts as done, a partition without a leader
  or a broker that cannot be reached is retried;
- verification questions for one coordinator broker that arrive while a request is in flight go
  together in the next AddPartitionsToTxn v4 (one entry per transactional id: a second question of
  the same id waits for the request after), each answered under its id, with the coordinator's codes
  as a Produce tells them (TRANSACTION_ABORTABLE kept for the Produce handler, PRODUCER_FENCED ->
  INVALID_PRODUCER_EPOCH, "ask again" codes -> NOT_ENOUGH_REPLICAS).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import trio
import trio.testing

from kraftpy.broker.client import ConnectionClosed
from kraftpy.broker.txn_support import MarkersNotWritten, TxnMarkerSender, TxnVerifier
from kraftpy.metadata.records import NO_LEADER
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.messages import AddPartitionsToTxnResponse, WriteTxnMarkersResponse

E = ErrorCode
COORDINATOR = 2  # the broker leading the __transaction_state partition in the verifier tests
HERE = 1


class Image:
    """Topics by name, each partition with its leader: what the sender and verifier read of an image."""

    def __init__(self, leaders: dict[str, dict[int, int]]) -> None:
        self.leaders = leaders
        self.topics = self

    def get_by_name(self, name: str):
        partitions = self.leaders.get(name)
        if partitions is None:
            return None
        return SimpleNamespace(partitions={p: SimpleNamespace(leader=leader) for p, leader in partitions.items()})


class ScriptedBrokers:
    """Records each request as (broker, api key, request) and answers it with ``answer(broker, request)``;
    a broker in ``unreachable`` raises ConnectionClosed; while ``gate`` is set and not yet open, every
    request waits for it."""

    def __init__(self, answer) -> None:
        self.answer = answer
        self.requests: list[tuple[int, ApiKey, object]] = []
        self.unreachable: set[int] = set()
        self.gate: trio.Event | None = None
        self.arrived = trio.Event()

    async def request(self, node_id: int, api_key: ApiKey, version: int, request, **_):
        self.requests.append((node_id, api_key, request))
        self.arrived.set()
        if self.gate is not None:
            await self.gate.wait()
        if node_id in self.unreachable:
            raise ConnectionClosed(f"broker {node_id} is down")
        return self.answer(node_id, request)


# -- the markers -------------------------------------------------------------------------------------


def marker_answer(codes: dict[tuple[str, int], ErrorCode]):
    """Answer WriteTxnMarkers with ``codes`` (NONE for a partition not named)."""
    R = WriteTxnMarkersResponse

    def answer(_node_id: int, request):
        return R(markers=[R.WritableTxnMarkerResult(producer_id=m.producer_id, topics=[
            R.WritableTxnMarkerTopicResult(name=t.name, partitions=[
                R.WritableTxnMarkerPartitionResult(partition_index=p, error_code=codes.get((t.name, p), E.NONE))
                for p in t.partition_indexes])
            for t in m.topics]) for m in request.markers])

    return answer


def asked(brokers: ScriptedBrokers) -> list[tuple[int, list[tuple[str, int]]]]:
    """(broker, partitions) of each WriteTxnMarkers request, sorted by broker."""
    out = []
    for node_id, api_key, request in brokers.requests:
        assert api_key == ApiKey.WRITE_TXN_MARKERS
        out.append((node_id, sorted((t.name, p) for m in request.markers for t in m.topics
                                    for p in t.partition_indexes)))
    return sorted(out)


PARTS = frozenset({("t", 0), ("t", 1), ("u", 0)})
LEADERS = {"t": {0: 1, 1: 2}, "u": {0: 2}}


async def test_a_retry_of_the_same_decision_sends_only_the_markers_still_missing():
    codes = {("t", 1): E.NOT_LEADER_OR_FOLLOWER}
    brokers = ScriptedBrokers(marker_answer(codes))
    sender = TxnMarkerSender(SimpleNamespace(image=Image(LEADERS)), brokers)
    with pytest.raises(MarkersNotWritten, match="t-1 on broker 2: NOT_LEADER_OR_FOLLOWER"):
        await sender.send("tx", 7, 0, 3, True, PARTS)
    assert asked(brokers) == [(1, [("t", 0)]), (2, [("t", 1), ("u", 0)])]
    (marker,) = brokers.requests[0][2].markers
    assert (marker.producer_id, marker.producer_epoch, marker.transaction_result, marker.coordinator_epoch) == (
        7, 0, True, 3)

    brokers.requests.clear()
    codes.clear()
    await sender.send("tx", 7, 0, 3, True, PARTS)
    assert asked(brokers) == [(2, [("t", 1)])]

    # The next decision of the id (here its next transaction's abort) sends every marker again.
    brokers.requests.clear()
    await sender.send("tx", 7, 0, 3, False, PARTS)
    assert asked(brokers) == [(1, [("t", 0)]), (2, [("t", 1), ("u", 0)])]


async def test_no_leader_and_an_unreachable_broker_are_retried_a_deleted_topic_is_done():
    leaders = {"t": {0: NO_LEADER, 1: 2}, "u": {0: 1}}
    brokers = ScriptedBrokers(marker_answer({}))
    brokers.unreachable.add(2)
    image = Image(leaders)
    sender = TxnMarkerSender(SimpleNamespace(image=image), brokers)
    with pytest.raises(MarkersNotWritten) as failed:
        await sender.send("tx", 7, 0, 3, True, PARTS)
    assert "t-0: no leader" in str(failed.value) and "broker 2: broker 2 is down" in str(failed.value)
    assert asked(brokers) == [(1, [("u", 0)]), (2, [("t", 1)])]

    # t is deleted meanwhile: nothing is left to end there; u-0 took its marker already.
    del leaders["t"]
    brokers.requests.clear()
    await sender.send("tx", 7, 0, 3, True, PARTS)
    assert brokers.requests == []


async def test_unknown_partition_from_a_leader_is_done_only_once_the_topic_is_gone():
    leaders = {"t": {0: 1}}
    codes = {("t", 0): E.UNKNOWN_TOPIC_OR_PARTITION}
    brokers = ScriptedBrokers(marker_answer(codes))
    sender = TxnMarkerSender(SimpleNamespace(image=Image(leaders)), brokers)
    with pytest.raises(MarkersNotWritten, match="UNKNOWN_TOPIC_OR_PARTITION"):
        await sender.send("tx", 7, 0, 3, True, frozenset({("t", 0)}))

    def answer_then_delete(node_id, request):
        del leaders["t"]  # the deletion reaches this broker while the leader answers
        return marker_answer(codes)(node_id, request)

    brokers.answer = answer_then_delete
    await sender.send("tx", 7, 0, 3, True, frozenset({("t", 0)}))


# -- the verification --------------------------------------------------------------------------------


def verify_answer(codes: dict[str, ErrorCode]):
    """Answer each transaction of an AddPartitionsToTxn v4 with ``codes[transactional id]`` for all its
    partitions."""
    R = AddPartitionsToTxnResponse

    def answer(_node_id: int, request):
        return R(throttle_time_ms=0, error_code=E.NONE, results_by_transaction=[
            R.AddPartitionsToTxnResult(transactional_id=txn.transactional_id, topic_results=[
                R.AddPartitionsToTxnTopicResult(name=t.name, results_by_partition=[
                    R.AddPartitionsToTxnPartitionResult(partition_index=p,
                                                        partition_error_code=codes[txn.transactional_id])
                    for p in t.partitions]) for t in txn.topics])
            for txn in request.transactions])

    return answer


def verifier(brokers: ScriptedBrokers) -> TxnVerifier:
    image = Image({"__transaction_state": {0: COORDINATOR}})
    coordinator = SimpleNamespace(owned_partitions=set)  # this broker leads no __transaction_state partition
    return TxnVerifier(SimpleNamespace(image=image), brokers, coordinator, node_id=HERE)


async def test_questions_that_wait_for_a_request_in_flight_go_together_in_the_next(nursery):
    codes = {"a": E.NONE, "b": E.TRANSACTION_ABORTABLE, "c": E.PRODUCER_FENCED, "d": E.COORDINATOR_LOAD_IN_PROGRESS}
    brokers = ScriptedBrokers(verify_answer(codes))
    v = verifier(brokers)
    await nursery.start(v.run)
    brokers.gate = trio.Event()
    answers: dict[str, list] = {}

    async def ask(txn_id: str, partition: int) -> None:
        answers.setdefault(txn_id, []).append(await v.verify(txn_id, 10, 0, [("t", partition)]))

    nursery.start_soon(ask, "a", 0)
    await brokers.arrived.wait()  # the first question's request is in flight
    for txn_id, partition in (("b", 0), ("c", 1), ("d", 2), ("a", 3)):
        nursery.start_soon(ask, txn_id, partition)
    await trio.testing.wait_all_tasks_blocked()
    assert len(brokers.requests) == 1
    brokers.gate.set()
    await trio.testing.wait_all_tasks_blocked()

    # (trio starts the waiting tasks in any order: the transactions of a request are compared sorted)
    sent = [(node_id, api_key, sorted((txn.transactional_id, txn.verify_only,
                                       [(t.name, list(t.partitions)) for t in txn.topics])
                                      for txn in request.transactions))
            for node_id, api_key, request in brokers.requests]
    assert sent == [
        (COORDINATOR, ApiKey.ADD_PARTITIONS_TO_TXN, [("a", True, [("t", [0])])]),
        (COORDINATOR, ApiKey.ADD_PARTITIONS_TO_TXN, [("a", True, [("t", [3])]), ("b", True, [("t", [0])]),
                                                     ("c", True, [("t", [1])]), ("d", True, [("t", [2])])]),
    ]
    assert answers == {
        "a": [{("t", 0): E.NONE}, {("t", 3): E.NONE}],
        "b": [{("t", 0): E.TRANSACTION_ABORTABLE}],
        "c": [{("t", 1): E.INVALID_PRODUCER_EPOCH}],
        "d": [{("t", 2): E.NOT_ENOUGH_REPLICAS}],
    }


async def test_a_second_question_of_one_id_waits_for_the_next_request(nursery):
    brokers = ScriptedBrokers(verify_answer({"a": E.NONE, "b": E.NONE}))
    v = verifier(brokers)
    await nursery.start(v.run)
    brokers.gate = trio.Event()
    done = []

    async def ask(txn_id: str, partition: int) -> None:
        done.append((txn_id, await v.verify(txn_id, 10, 0, [("t", partition)])))

    nursery.start_soon(ask, "b", 9)
    await brokers.arrived.wait()
    for txn_id, partition in (("a", 0), ("a", 1)):
        nursery.start_soon(ask, txn_id, partition)
    await trio.testing.wait_all_tasks_blocked()
    brokers.gate.set()
    await trio.testing.wait_all_tasks_blocked()
    sent = [[(txn.transactional_id, [list(t.partitions) for t in txn.topics]) for txn in request.transactions]
            for _, _, request in brokers.requests]
    # The two questions of "a" reach the verifier in either order, each in a request of its own.
    assert sent[0] == [("b", [[9]])] and sorted(sent[1:]) == [[("a", [[0]])], [("a", [[1]])]]
    assert sorted(done, key=repr) == [("a", {("t", 0): E.NONE}), ("a", {("t", 1): E.NONE}), ("b", {("t", 9): E.NONE})]


async def test_an_unreachable_coordinator_is_asked_again_later(nursery):
    brokers = ScriptedBrokers(verify_answer({"a": E.NONE}))
    brokers.unreachable.add(COORDINATOR)
    v = verifier(brokers)
    await nursery.start(v.run)
    assert await v.verify("a", 10, 0, [("t", 0), ("u", 1)]) == {("t", 0): E.NOT_ENOUGH_REPLICAS,
                                                               ("u", 1): E.NOT_ENOUGH_REPLICAS}
    brokers.unreachable.clear()
    assert await v.verify("a", 10, 0, [("t", 0)]) == {("t", 0): E.NONE}
