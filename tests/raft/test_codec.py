"""Every Raft message type round-trips through the codec and through msgpack."""

from __future__ import annotations

import msgpack
import pytest

from kraftpy.ids import Uuid
from kraftpy.raft import codec
from kraftpy.raft.batch import RecordBatch
from kraftpy.raft.log import SnapshotId
from kraftpy.raft.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    EpochEndOffset,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    ReplicaState,
    UpdateVoterRequest,
    UpdateVoterResponse,
    VoteRequest,
    VoteResponse,
)
from kraftpy.raft.voters import Endpoint, ReplicaKey, VoterNode

DIR_A = Uuid(bytes(range(16)))
DIR_B = Uuid(bytes(range(16, 32)))
ENDPOINTS = (Endpoint("CONTROLLER", "c1.example", 9093),)

SAMPLES = [
    VoteRequest("c", voter_id=2, candidate_epoch=5, candidate_id=1, last_offset_epoch=4, last_offset=17),
    VoteRequest(
        None,
        voter_id=-1,
        candidate_epoch=5,
        candidate_id=1,
        last_offset_epoch=4,
        last_offset=17,
        pre_vote=True,
    ),
    VoteResponse(0, leader_id=-1, leader_epoch=5, vote_granted=True),
    BeginQuorumEpochRequest("c", voter_id=3, leader_id=1, leader_epoch=5),
    BeginQuorumEpochResponse(74, leader_id=2, leader_epoch=6),
    EndQuorumEpochRequest("c", leader_id=1, leader_epoch=5, preferred_successors=(3, 2)),
    EndQuorumEpochResponse(0, leader_id=1, leader_epoch=5),
    FetchRequest(
        "c", replica_id=2, max_wait_ms=500, current_leader_epoch=5, fetch_offset=10, last_fetched_epoch=4
    ),
    FetchResponse(
        0,
        leader_id=1,
        leader_epoch=5,
        high_watermark=9,
        log_start_offset=0,
        records=RecordBatch.build([b"\x00\xffa", b""], base_offset=10, epoch=5, is_control=True).data
        + RecordBatch.build([b"x"], base_offset=12, epoch=5, timestamp_ms=1_700_000_000_000).data,
    ),
    FetchResponse(0, leader_id=1, leader_epoch=5, diverging_epoch=EpochEndOffset(3, 8)),
    FetchResponse(0, leader_id=1, leader_epoch=5, snapshot_id=SnapshotId(100, 4)),
    FetchResponse(6, leader_id=-1, leader_epoch=5),
    FetchSnapshotRequest(
        "c", replica_id=4, current_leader_epoch=5, snapshot_id=SnapshotId(100, 4), position=64
    ),
    FetchSnapshotResponse(
        0,
        leader_id=1,
        leader_epoch=5,
        snapshot_id=SnapshotId(100, 4),
        size=200,
        position=64,
        unaligned_records=b"ab",
    ),
    DescribeQuorumRequest(),
    DescribeQuorumResponse(
        0,
        leader_id=1,
        leader_epoch=5,
        high_watermark=20,
        current_voters=(ReplicaState(1, 21, 5000, 5000), ReplicaState(2, 20, 4990, 4900)),
        observers=(ReplicaState(7, 3),),
    ),
    DescribeQuorumResponse(6, error_message="not the leader"),
    # KIP-853: directory ids, leader endpoints, the voters' records, UpdateVoter.
    VoteRequest("c", 2, 5, 1, 4, 17, candidate_directory_id=DIR_A, voter_directory_id=DIR_B),
    VoteResponse(0, leader_id=3, leader_epoch=5, vote_granted=False, leader_endpoints=ENDPOINTS),
    BeginQuorumEpochRequest("c", 3, 1, 5, voter_directory_id=DIR_B, leader_endpoints=ENDPOINTS),
    FetchRequest("c", 2, 500, 5, 10, 4, replica_directory_id=DIR_A),
    FetchResponse(0, 1, 5, high_watermark=9, leader_endpoints=ENDPOINTS),
    DescribeQuorumResponse(
        0, 1, 5, 20, current_voters=(ReplicaState(1, 21, replica_directory_id=DIR_A),),
        nodes=(VoterNode(ReplicaKey(1, DIR_A), ENDPOINTS, (0, 1)),), kraft_version=1,
    ),
    UpdateVoterRequest("c", 5, 2, DIR_B, ENDPOINTS, (0, 1)),
    UpdateVoterRequest(None, 5, 2, None, (), (0, 0)),
    UpdateVoterResponse(0, 1, 5, leader_endpoints=ENDPOINTS),
]


def test_every_message_type_has_a_sample() -> None:
    assert {type(m) for m in SAMPLES} == set(codec.MESSAGE_TYPES.values())


@pytest.mark.parametrize("message", SAMPLES, ids=lambda m: type(m).__name__)
def test_round_trip(message: object) -> None:
    encoded = codec.encode(message)  # type: ignore[arg-type]
    assert codec.decode(encoded) == message
    wire = msgpack.packb(encoded, use_bin_type=True)
    assert codec.decode(msgpack.unpackb(wire, raw=False)) == message


def test_unknown_tag_is_rejected() -> None:
    with pytest.raises(codec.CodecError):
        codec.decode({"@": "ProduceRequest"})


def test_unexpected_field_is_rejected() -> None:
    encoded = codec.encode(VoteResponse(0, 1, 2, True))
    encoded["bogus"] = 1
    with pytest.raises(codec.CodecError):
        codec.decode(encoded)


def test_missing_field_is_rejected() -> None:
    encoded = codec.encode(VoteResponse(0, 1, 2, True))
    del encoded["leader_epoch"]
    with pytest.raises(codec.CodecError):
        codec.decode(encoded)


def test_nested_struct_cannot_pose_as_message() -> None:
    with pytest.raises(codec.CodecError):
        codec.decode(codec._WIRE.encode(SnapshotId(1, 1)))


def encoded_vote(**changes: object) -> dict:
    encoded = codec.encode(VoteRequest("c", 2, 5, 1, 4, 17))
    encoded.update(changes)
    return encoded


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("candidate_epoch", "5", "VoteRequest.candidate_epoch: expected an integer, got str"),
        ("candidate_epoch", 5.0, "expected an integer, got float"),
        ("candidate_epoch", True, "expected an integer, got bool"),
        ("candidate_epoch", None, "expected an integer, got None"),
        ("candidate_epoch", [5], "expected an integer, got a list"),
        ("candidate_epoch", {"v": 5}, "expected an integer, got a map"),
        ("candidate_epoch", 2**31 + 5, "2147483653 is out of int32 range"),
        ("candidate_epoch", -(2**31) - 1, "out of int32 range"),
        ("last_offset", 2**63, "VoteRequest.last_offset: 9223372036854775808 is out of int64 range"),
        ("cluster_id", 7, "VoteRequest.cluster_id: expected str, got int"),
        ("pre_vote", 1, "VoteRequest.pre_vote: expected bool, got int"),
    ],
)
def test_a_field_of_the_wrong_type_or_range_is_refused_naming_it(field: str, value: object, says: str) -> None:
    with pytest.raises(codec.CodecError, match=says.replace("(", r"\(").replace(")", r"\)")):
        codec.decode(encoded_vote(**{field: value}))


def test_nested_structures_are_checked_too() -> None:
    fetch = codec.encode(FetchResponse(0, 1, 5, diverging_epoch=EpochEndOffset(3, 8)))
    fetch["diverging_epoch"]["end_offset"] = "8"
    with pytest.raises(codec.CodecError, match="FetchResponse.diverging_epoch.end_offset: expected an integer"):
        codec.decode(fetch)
    fetch["diverging_epoch"] = [3, 8]
    with pytest.raises(codec.CodecError, match="FetchResponse.diverging_epoch: expected a EpochEndOffset, got a list"):
        codec.decode(fetch)
    end = codec.encode(EndQuorumEpochRequest("c", 1, 5, (3, 2)))
    end["preferred_successors"] = {"3": 1}
    with pytest.raises(codec.CodecError, match="preferred_successors: expected a list, got a map"):
        codec.decode(end)
    end["preferred_successors"] = [3, 2**40]
    with pytest.raises(codec.CodecError, match=r"preferred_successors\[1\]: 1099511627776 is out of int32 range"):
        codec.decode(end)


def test_a_missing_field_is_named() -> None:
    encoded = encoded_vote()
    del encoded["candidate_id"]
    with pytest.raises(codec.CodecError, match="VoteRequest.candidate_id: missing"):
        codec.decode(encoded)


def test_an_error_code_travels_as_a_tagged_enum_or_a_plain_integer() -> None:
    encoded = codec.encode(VoteResponse(0, 1, 2, True))
    assert codec.decode({**encoded, "error_code": 42}) == VoteResponse(42, 1, 2, True)
    with pytest.raises(codec.CodecError, match="error_code: 40000 is out of int16 range"):
        codec.decode({**encoded, "error_code": 40000})
