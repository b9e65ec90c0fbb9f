"""Hostile Raft messages for the simulation's Byzantine-input mode (`SimCluster.inject_hostile`).

Every message built here is well typed (the classes' own field types, as if it had passed the codec
with a bad value that still fits the type) and carries at least one thing no correct node could
send: an epoch or offset outside its Kafka type or negative, another cluster's id, a candidate or
leader that is not a voter, a sender that is not the node the request names, this node itself as
the sender, offsets past the end of the log, contradictory epochs, a snapshot that does not exist,
a Fetch answer that would cut committed entries or skip past them, a snapshot chunk larger than
asked for. So each must be refused: the node's epoch state, log and high watermark stay as they
were and nothing is persisted (the simulation checks that after every injection), and its invariants
hold as before.

What is *not* generated: a message a correct node could have sent with other timing (a valid vote,
a valid fetch at the leader's end, a leader's valid answer). Forging those is a real Byzantine
fault, which Raft does not claim to survive.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING

import attrs

from kraftpy.raft import ErrorCode, SnapshotId
from kraftpy.raft.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    DescribeQuorumRequest,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    EpochEndOffset,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    Message,
    VoteRequest,
    VoteResponse,
)
from kraftpy.raft.quorum_state import Follower

if TYPE_CHECKING:
    from tests.helpers.raft_sim import SimCluster, SimNode

#: Epochs no message may carry (negative, or outside int32).
BAD_EPOCHS = (-1, -2, -(2**31), 2**31, 2**31 + 5, 2**32, 2**63, 2**64 + 3)
#: Offsets no message may carry (negative, or outside int64).
BAD_OFFSETS = (-1, -7, -(2**63), 2**63, 2**70)
#: Ids outside int32, and an id no node has.
BAD_IDS = (-(2**31) - 1, 2**31, 2**40)
STRANGER = 999


@attrs.frozen
class Hostile:
    """One injected message: what kind of hostility, from whom (claimed), to whom."""

    kind: str
    source: int
    dest: int
    correlation_id: int
    message: Message


class HostileInput:
    """Builds hostile messages for the live nodes of `cluster`, from its own seeded random source."""

    def __init__(self, cluster: SimCluster, rng: random.Random) -> None:
        self.cluster = cluster
        self.rng = rng
        self.voters = sorted(cluster.voters)
        self.observers = sorted(set(cluster.nodes) - cluster.voters)
        self.cluster_id = next(iter(cluster.nodes.values())).config.cluster_id
        #: How many of each kind were built.
        self.sent: Counter[str] = Counter()

    def next(self) -> Hostile | None:
        """A hostile message for a random live node, or None when no node is alive."""
        alive = self.cluster.alive_nodes()
        if not alive:
            return None
        target = self.rng.choice(alive)
        builders: list[Callable[[SimNode], Hostile | None]] = [
            self.other_cluster, self.bad_epoch_request, self.bad_field, self.not_a_voter, self.spoofed_sender,
            self.from_itself, self.bad_successors, self.wrong_voter_key, self.fetch_past_the_end,
            self.bogus_snapshot, self.describe, self.bad_epoch_response, self.response_naming_a_non_voter,
            self.response_naming_the_receiver, self.impossible_fetch_answer, self.impossible_snapshot_chunk,
        ]
        while builders:
            builder = builders.pop(self.rng.randrange(len(builders)))
            hostile = builder(target)
            if hostile is not None:
                self.sent[hostile.kind] += 1
                return hostile
        return None

    # -- helpers ---------------------------------------------------------------------------------

    def _epoch(self, node: SimNode) -> int:
        """A plausible epoch: the node's, or a little newer."""
        assert node.core is not None
        return node.core.epoch + self.rng.choice([0, 0, 1, 2, 5])

    def _other_voter(self, node: SimNode) -> int | None:
        others = [v for v in self.voters if v != node.node_id]
        return self.rng.choice(others) if others else None

    def _non_voter(self) -> int:
        return self.rng.choice([*self.observers, STRANGER, STRANGER + 1, *BAD_IDS])

    def _cid(self) -> int:
        return self.rng.getrandbits(31)

    def _plausible_request(self, node: SimNode, sender: int, epoch: int) -> Message:
        """A request that would be valid but for whatever the caller changes in it."""
        assert node.core is not None
        log = node.core.log
        last_epoch = min(log.last_fetched_epoch, max(epoch - 1, 0))
        return self.rng.choice([
            VoteRequest(self.cluster_id, node.node_id, epoch, sender, last_epoch, log.end_offset,
                        pre_vote=self.rng.random() < 0.5),
            BeginQuorumEpochRequest(self.cluster_id, node.node_id, sender, epoch),
            EndQuorumEpochRequest(self.cluster_id, sender, epoch, ()),
            FetchRequest(self.cluster_id, sender, 0, epoch, log.end_offset, last_epoch),
            FetchSnapshotRequest(self.cluster_id, sender, epoch, SnapshotId(log.end_offset, last_epoch), 0),
        ])

    def _request(self, kind: str, node: SimNode, source: int, message: Message) -> Hostile:
        return Hostile(kind, source, node.node_id, self._cid(), message)

    # -- requests ----------------------------------------------------------------------------------

    def other_cluster(self, node: SimNode) -> Hostile:
        sender = self._other_voter(node) or STRANGER
        message = self._plausible_request(node, sender, self._epoch(node))
        return self._request("other-cluster", node, sender, attrs.evolve(message, cluster_id="another-cluster"))

    def bad_epoch_request(self, node: SimNode) -> Hostile:
        sender = self._other_voter(node) or STRANGER
        epoch = self.rng.choice(BAD_EPOCHS)
        message = self._plausible_request(node, sender, 1)
        match message:
            case VoteRequest():
                message = attrs.evolve(message, candidate_epoch=epoch, last_offset_epoch=0)
            case BeginQuorumEpochRequest() | EndQuorumEpochRequest():
                message = attrs.evolve(message, leader_epoch=epoch)
            case FetchRequest() | FetchSnapshotRequest():
                message = attrs.evolve(message, current_leader_epoch=epoch)
        return self._request("bad-epoch", node, sender, message)

    def bad_field(self, node: SimNode) -> Hostile:
        sender = self._other_voter(node) or STRANGER
        epoch = self._epoch(node)
        rng = self.rng
        message = self._plausible_request(node, sender, epoch)
        match message:
            case VoteRequest():
                message = rng.choice([
                    attrs.evolve(message, last_offset=rng.choice(BAD_OFFSETS)),
                    attrs.evolve(message, last_offset_epoch=rng.choice([-1, epoch, epoch + 1, 2**31])),
                    attrs.evolve(message, voter_id=rng.choice(BAD_IDS)),
                ])
            case FetchRequest():
                message = rng.choice([
                    attrs.evolve(message, fetch_offset=rng.choice(BAD_OFFSETS)),
                    attrs.evolve(message, last_fetched_epoch=rng.choice([-1, epoch + 1, 2**31])),
                    attrs.evolve(message, max_wait_ms=rng.choice([-1, 2**31])),
                    attrs.evolve(message, max_bytes=rng.choice([-1, 2**31])),
                ])
            case FetchSnapshotRequest():
                message = rng.choice([
                    attrs.evolve(message, max_bytes=rng.choice([-1, 2**31])),
                    attrs.evolve(message, snapshot_id=SnapshotId(rng.choice(BAD_OFFSETS), 0)),
                    attrs.evolve(message, snapshot_id=SnapshotId(1, rng.choice(BAD_EPOCHS))),
                    attrs.evolve(message, position=rng.choice([2**63, 2**70])),
                ])
            case BeginQuorumEpochRequest():
                message = attrs.evolve(message, voter_id=rng.choice(BAD_IDS))
            case EndQuorumEpochRequest():
                message = attrs.evolve(message, preferred_successors=(rng.choice(BAD_IDS),))
        return self._request("bad-field", node, sender, message)

    def not_a_voter(self, node: SimNode) -> Hostile:
        """A candidate or leader that is not a voter (as itself, or an id that cannot be one)."""
        stranger = self._non_voter()
        message = self.rng.choice([
            VoteRequest(self.cluster_id, node.node_id, self._epoch(node) + 1, stranger, 0, 0),
            BeginQuorumEpochRequest(self.cluster_id, node.node_id, stranger, self._epoch(node) + 1),
            EndQuorumEpochRequest(self.cluster_id, stranger, self._epoch(node)),
        ])
        return self._request("not-a-voter", node, stranger, message)

    def spoofed_sender(self, node: SimNode) -> Hostile | None:
        """A request naming a real voter, sent by some other node (or none)."""
        named = self._other_voter(node)
        if named is None:
            return None
        sender = self.rng.choice([n for n in [*self.cluster.nodes, STRANGER] if n != named])
        message = self._plausible_request(node, named, self._epoch(node) + 1)
        return self._request("spoofed-sender", node, sender, message)

    def from_itself(self, node: SimNode) -> Hostile:
        """A request that names the receiving node as its sender."""
        message = self._plausible_request(node, node.node_id, self._epoch(node) + 1)
        return self._request("from-itself", node, node.node_id, message)

    def bad_successors(self, node: SimNode) -> Hostile | None:
        leader = self._other_voter(node)
        if leader is None:
            return None
        successors = self.rng.choice([
            (self._non_voter(),),
            (node.node_id, node.node_id),
            (leader,),
            (*self.voters, STRANGER),
        ])
        message = EndQuorumEpochRequest(self.cluster_id, leader, self._epoch(node), successors)
        return self._request("bad-successors", node, leader, message)

    def wrong_voter_key(self, node: SimNode) -> Hostile | None:
        """A Vote or BeginQuorumEpoch meant for another voter (its voter_id is not the receiver's)."""
        sender = self._other_voter(node)
        if sender is None:
            return None
        key = self.rng.choice([v for v in [*self.voters, STRANGER] if v != node.node_id])
        epoch = self._epoch(node) + 1
        message = self.rng.choice([
            VoteRequest(self.cluster_id, key, epoch, sender, 0, 0),
            BeginQuorumEpochRequest(self.cluster_id, key, sender, epoch),
        ])
        return self._request("wrong-voter-key", node, sender, message)

    def fetch_past_the_end(self, node: SimNode) -> Hostile | None:
        """A Fetch from a real replica for offsets the receiver's log does not reach."""
        assert node.core is not None
        sender = self.rng.choice([n for n in self.cluster.nodes if n != node.node_id] or [STRANGER])
        epoch = node.core.epoch
        offset = node.core.log.end_offset + self.rng.choice([10**6, 10**9, 2**40, 2**62])
        message = FetchRequest(self.cluster_id, sender, 0, epoch, offset, node.core.log.last_fetched_epoch)
        return self._request("fetch-past-the-end", node, sender, message)

    def bogus_snapshot(self, node: SimNode) -> Hostile:
        assert node.core is not None
        sender = self.rng.choice([n for n in self.cluster.nodes if n != node.node_id] or [STRANGER])
        snapshot = SnapshotId(self.rng.choice([0, 10**6, 2**62]), self.rng.choice([0, node.core.epoch + 7]))
        position = self.rng.choice([-5, 0, 3, 2**40])
        message = FetchSnapshotRequest(self.cluster_id, sender, node.core.epoch, snapshot, position)
        return self._request("bogus-snapshot", node, sender, message)

    def describe(self, node: SimNode) -> Hostile:
        return self._request("describe", node, self.rng.choice([*self.cluster.nodes, STRANGER]),
                             DescribeQuorumRequest())

    # -- responses ---------------------------------------------------------------------------------

    def _response_to(self, node: SimNode) -> tuple[int, int]:
        """(source, correlation id): the answer to this node's last request, or a random one."""
        last = self.cluster.last_requests.get(node.node_id)
        if last and self.rng.random() < 0.7:
            dest, cid, _ = self.rng.choice(list(last.values()))
            return dest, cid
        return self.rng.choice([*self.cluster.nodes, STRANGER]), self._cid()

    def _any_response(self, leader: int, epoch: int) -> Message:
        return self.rng.choice([
            VoteResponse(ErrorCode.NONE, leader, epoch, True),
            BeginQuorumEpochResponse(ErrorCode.NONE, leader, epoch),
            EndQuorumEpochResponse(ErrorCode.NONE, leader, epoch),
            FetchResponse(ErrorCode.NONE, leader, epoch, high_watermark=2**40),
            FetchSnapshotResponse(ErrorCode.NONE, leader, epoch),
        ])

    def bad_epoch_response(self, node: SimNode) -> Hostile:
        source, cid = self._response_to(node)
        leader = self.rng.choice([*self.voters, -1])
        return Hostile("bad-epoch-response", source, node.node_id, cid,
                       self._any_response(leader, self.rng.choice(BAD_EPOCHS)))

    def response_naming_a_non_voter(self, node: SimNode) -> Hostile:
        source, cid = self._response_to(node)
        return Hostile("non-voter-leader", source, node.node_id, cid,
                       self._any_response(self._non_voter(), self._epoch(node) + 1))

    def response_naming_the_receiver(self, node: SimNode) -> Hostile:
        """An answer saying the receiver leads an epoch newer than any it knows of."""
        source, cid = self._response_to(node)
        assert node.core is not None
        return Hostile("receiver-as-leader", source, node.node_id, cid,
                       self._any_response(node.node_id, node.core.epoch + self.rng.choice([1, 3])))

    def _leader_and_last(self, node: SimNode, kind: type) -> tuple[int, int, Message] | None:
        """A follower's leader and its last request of `kind` to it: (leader, cid, request)."""
        core = node.core
        assert core is not None
        state = core.state
        if not isinstance(state, Follower):
            return None
        last = self.cluster.last_requests.get(node.node_id, {}).get(kind)
        if last is None or last[0] != state.leader_id:
            return None
        return last

    def impossible_fetch_answer(self, node: SimNode) -> Hostile | None:
        """An answer from the follower's own leader, in its epoch, that no leader could give."""
        last = self._leader_and_last(node, FetchRequest)
        if last is None:
            return None
        leader, cid, _ = last
        core = node.core
        assert core is not None
        epoch, hwm, rng = core.epoch, core.high_watermark, self.rng
        options = [
            FetchResponse(ErrorCode.NONE, leader, epoch, diverging_epoch=EpochEndOffset(epoch + 1, 0)),
            FetchResponse(ErrorCode.NONE, leader, epoch, diverging_epoch=EpochEndOffset(0, rng.choice(BAD_OFFSETS))),
            FetchResponse(ErrorCode.NONE, leader, epoch, snapshot_id=SnapshotId(10**6, epoch + 1)),
            FetchResponse(ErrorCode.NONE, leader, epoch, snapshot_id=SnapshotId(rng.choice(BAD_OFFSETS), 0)),
            FetchResponse(ErrorCode.NONE, leader, epoch, high_watermark=2**40,
                          records=rng.randbytes(rng.randrange(1, 90))),
            FetchResponse(ErrorCode.NONE, leader, epoch, diverging_epoch=EpochEndOffset(0, 0),
                          snapshot_id=SnapshotId(10**6, 0)),
        ]
        if hwm >= 1:
            cut = rng.randrange(hwm)
            options += [
                FetchResponse(ErrorCode.NONE, leader, epoch, diverging_epoch=EpochEndOffset(rng.randrange(epoch + 1), cut)),
                FetchResponse(ErrorCode.NONE, leader, epoch, snapshot_id=SnapshotId(cut, rng.randrange(epoch + 1))),
            ]
        return Hostile("impossible-fetch-answer", leader, node.node_id, cid, rng.choice(options))

    def impossible_snapshot_chunk(self, node: SimNode) -> Hostile | None:
        last = self._leader_and_last(node, FetchSnapshotRequest)
        if last is None:
            return None
        leader, cid, request = last
        assert isinstance(request, FetchSnapshotRequest) and node.core is not None
        chunk_bytes = node.config.snapshot_chunk_bytes
        position = request.position
        rng = self.rng
        response = rng.choice([
            FetchSnapshotResponse(ErrorCode.NONE, leader, node.core.epoch, request.snapshot_id, size=-1,
                                  position=position, unaligned_records=b"x"),
            FetchSnapshotResponse(ErrorCode.NONE, leader, node.core.epoch, request.snapshot_id,
                                  size=position + 10 * chunk_bytes, position=position,
                                  unaligned_records=b"x" * (chunk_bytes + 1)),
            FetchSnapshotResponse(ErrorCode.NONE, leader, node.core.epoch, request.snapshot_id,
                                  size=position + 1, position=position, unaligned_records=b"xy"),
        ])
        return Hostile("impossible-snapshot-chunk", leader, node.node_id, cid, response)
