"""The control-plane requests that change a dynamic quorum's voters (kraftpy.metadata.quorum_membership):
what they carry, and every malformed one refused INVALID_REQUEST naming the field, before any change."""

from __future__ import annotations

import pytest

from kraftpy.ids import ZERO_UUID, Uuid
from kraftpy.metadata import quorum_membership as membership
from kraftpy.protocol.errors import ErrorCode
from kraftpy.raft.effects import VoterChangeDone
from kraftpy.raft.voters import Endpoint, ReplicaKey
from kraftpy.rpc.control import RpcError

KEY = ReplicaKey(2, Uuid(bytes(range(16))))
ENDPOINTS = (Endpoint("CONTROLLER", "c2.example", 9093),)


def test_the_requests_round_trip():
    add = membership.add_request(KEY, ENDPOINTS)
    assert membership.parse_voter_key(membership.ADD_RAFT_VOTER_API, add) == KEY
    assert membership.parse_listeners(membership.ADD_RAFT_VOTER_API, add["listeners"]) == ENDPOINTS
    assert membership.parse_voter_key(membership.REMOVE_RAFT_VOTER_API, membership.remove_request(KEY)) == KEY


@pytest.mark.parametrize(("body", "field"), [
    ([1, 2], "not a map"),
    ({"voter_id": "2", "voter_directory_id": str(KEY.directory_id)}, "voter_id"),
    ({"voter_id": -1, "voter_directory_id": str(KEY.directory_id)}, "voter_id"),
    ({"voter_id": 2**31, "voter_directory_id": str(KEY.directory_id)}, "voter_id"),
    ({"voter_id": 2}, "voter_directory_id"),
    ({"voter_id": 2, "voter_directory_id": "short"}, "voter_directory_id"),
    ({"voter_id": 2, "voter_directory_id": ZERO_UUID.to_base64()}, "zero id"),
])
def test_a_malformed_voter_is_refused_naming_the_field(body, field):
    with pytest.raises(RpcError) as refused:
        membership.parse_voter_key(membership.REMOVE_RAFT_VOTER_API, body)
    assert refused.value.code == "INVALID_REQUEST" and field in refused.value.message
    assert refused.value.message.startswith("RemoveRaftVoter:")


@pytest.mark.parametrize(("listeners", "field"), [
    (None, "non-empty list"),
    ([], "non-empty list"),
    ([{"name": "CONTROLLER", "host": "h"}], "{name, host, port}"),
    ([{"name": "", "host": "h", "port": 1}], "a name and a host"),
    ([{"name": "CONTROLLER", "host": "h", "port": 0}], "port"),
    ([{"name": "CONTROLLER", "host": "h", "port": 65536}], "port"),
])
def test_malformed_listeners_are_refused(listeners, field):
    with pytest.raises(RpcError) as refused:
        membership.parse_listeners(membership.ADD_RAFT_VOTER_API, listeners)
    assert refused.value.code == "INVALID_REQUEST" and field in refused.value.message


def test_the_leader_checks_the_controller_it_adds_is_the_replica_named():
    answer = membership.describe_replica(2, KEY.directory_id, (0, 1), ENDPOINTS)
    assert membership.parse_replica_description(answer, KEY) == (0, 1)
    other_disk = membership.describe_replica(2, Uuid(bytes(16 * [7])), (0, 1), ENDPOINTS)
    for wrong in (other_disk, {**answer, "node_id": 3}, {**answer, "kraft_versions": [2, 1]}, "nope"):
        with pytest.raises(RpcError) as refused:
            membership.parse_replica_description(wrong, KEY)
        assert refused.value.code == "INVALID_REQUEST"


def test_a_refused_change_keeps_the_cores_code_and_reason():
    assert membership.raise_unless_done(VoterChangeDone(1, ErrorCode.NONE)) == {}
    with pytest.raises(RpcError) as refused:
        membership.raise_unless_done(VoterChangeDone(1, ErrorCode.DUPLICATE_VOTER, "node 2 is a voter already"))
    assert (refused.value.code, refused.value.message) == ("DUPLICATE_VOTER", "node 2 is a voter already")
