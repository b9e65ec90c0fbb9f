"""Changing the controller quorum from the outside (KIP-853): the control-plane requests `kraftpy quorum
add-controller` and ``remove-controller`` send, and the check a leader makes of a controller it adds.

Three requests on the controller listener (kraftpy's control plane, msgpack maps):

``AddRaftVoter``    ``{"voter_id": int, "voter_directory_id": "<22-char id>", "listeners":
                    [{"name": str, "host": str, "port": int}]}``: add that controller (running, caught up
                    as an observer) to the voters. Answered ``{}`` once the new VotersRecord is committed.
``RemoveRaftVoter`` ``{"voter_id": int, "voter_directory_id": "<22-char id>"}``: remove that replica (the
                    leader itself too: it hands over once the removal is committed).
``DescribeRaftReplica`` ``{}``: who answers - ``{"node_id", "directory_id", "kraft_versions": [min, max],
                    "listeners": [...]}``. The leader asks a controller it is about to add, as Kafka's asks
                    ApiVersions: that it is the replica named (its directory id), and which kraft.version
                    levels it runs, which the VotersRecord records.

Only the quorum's leader changes voters: another controller answers NOT_LEADER_OR_FOLLOWER naming the leader
as ``id@host:port`` (the tool asks it next), as for ``QuorumStatus``. A request that is not one of these
shapes is answered INVALID_REQUEST naming the field; the core's refusals keep Kafka's codes
(DUPLICATE_VOTER, VOTER_NOT_FOUND, REQUEST_TIMED_OUT for a change that must wait, UNSUPPORTED_VERSION at
kraft.version 0), each with its reason.
"""

from __future__ import annotations

from typing import Any

from kraftpy.ids import ZERO_UUID, Uuid
from kraftpy.protocol.errors import ErrorCode
from kraftpy.raft.effects import VoterChangeDone
from kraftpy.raft.voters import Endpoint, ReplicaKey, VoterNode
from kraftpy.rpc.control import RpcError

ADD_RAFT_VOTER_API = "AddRaftVoter"
REMOVE_RAFT_VOTER_API = "RemoveRaftVoter"
DESCRIBE_RAFT_REPLICA_API = "DescribeRaftReplica"
MEMBERSHIP_APIS = (ADD_RAFT_VOTER_API, REMOVE_RAFT_VOTER_API, DESCRIBE_RAFT_REPLICA_API)


def from_kafka_request(request: Any, adding: bool) -> tuple[str, dict[str, Any]]:
    """The request (api, body) of Kafka's AddRaftVoter or RemoveRaftVoter v0, as a controller serving it
    on its listener, or a broker forwarding it, sends it on."""
    body: dict[str, Any] = {"voter_id": request.voter_id,
                            "voter_directory_id": Uuid(request.voter_directory_id.bytes).to_base64()}
    if not adding:
        return REMOVE_RAFT_VOTER_API, body
    body["listeners"] = [{"name": li.name, "host": li.host, "port": li.port} for li in request.listeners]
    return ADD_RAFT_VOTER_API, body


def _invalid(api: str, why: str) -> RpcError:
    return RpcError("INVALID_REQUEST", f"{api}: {why}")


def parse_voter_key(api: str, body: Any) -> ReplicaKey:
    if not isinstance(body, dict):
        raise _invalid(api, "not a map")
    voter_id = body.get("voter_id")
    if type(voter_id) is not int or not 0 <= voter_id <= 2**31 - 1:
        raise _invalid(api, f"voter_id {voter_id!r:.40} is not a node id")
    text = body.get("voter_directory_id")
    if not isinstance(text, str):
        raise _invalid(api, f"voter_directory_id {text!r:.40} is not an id")
    try:
        directory = Uuid.from_base64(text)
    except ValueError as exc:
        raise _invalid(api, f"voter_directory_id: {exc}") from None
    if directory == ZERO_UUID:
        raise _invalid(api, "voter_directory_id is the zero id")
    return ReplicaKey(voter_id, directory)


def parse_listeners(api: str, value: Any) -> tuple[Endpoint, ...]:
    if not isinstance(value, list) or not value:
        raise _invalid(api, "listeners must be a non-empty list")
    out = []
    for item in value:
        if not isinstance(item, dict) or set(item) != {"name", "host", "port"}:
            raise _invalid(api, f"listener {item!r:.60} is not {{name, host, port}}")
        name, host, port = item["name"], item["host"], item["port"]
        if not isinstance(name, str) or not name or not isinstance(host, str) or not host:
            raise _invalid(api, f"listener {item!r:.60} needs a name and a host")
        if type(port) is not int or not 0 < port < 65536:
            raise _invalid(api, f"listener {name}: port {port!r:.20} is out of range")
        out.append(Endpoint(name, host, port))
    return tuple(out)


def encode_listeners(endpoints: tuple[Endpoint, ...]) -> list[dict[str, Any]]:
    return [{"name": e.name, "host": e.host, "port": e.port} for e in endpoints]


def add_request(key: ReplicaKey, endpoints: tuple[Endpoint, ...]) -> dict[str, Any]:
    assert key.directory_id is not None
    return {"voter_id": key.id, "voter_directory_id": key.directory_id.to_base64(),
            "listeners": encode_listeners(endpoints)}


def remove_request(key: ReplicaKey) -> dict[str, Any]:
    assert key.directory_id is not None
    return {"voter_id": key.id, "voter_directory_id": key.directory_id.to_base64()}


def describe_replica(node_id: int, directory_id: Uuid | None, kraft_versions: tuple[int, int],
                     endpoints: tuple[Endpoint, ...]) -> dict[str, Any]:
    return {"node_id": node_id, "directory_id": directory_id.to_base64() if directory_id is not None else None,
            "kraft_versions": list(kraft_versions), "listeners": encode_listeners(endpoints)}


def parse_replica_description(body: Any, expected: ReplicaKey) -> tuple[int, int]:
    """The kraft.version range a DescribeRaftReplica answer reports, once it shows it is replica
    `expected`; RpcError INVALID_REQUEST when it is another one (another node, or this node's id on
    another disk)."""
    if not isinstance(body, dict):
        raise RpcError("INVALID_REQUEST", "the controller to add gave no description of itself")
    node_id, directory = body.get("node_id"), body.get("directory_id")
    wanted = expected.directory_id.to_base64() if expected.directory_id is not None else None
    if node_id != expected.id or directory != wanted:
        raise RpcError("INVALID_REQUEST", f"the controller at that address is node {node_id} with directory "
                       f"{directory}, not {expected}")
    versions = body.get("kraft_versions")
    if not (isinstance(versions, list) and len(versions) == 2 and all(type(v) is int for v in versions)
            and 0 <= versions[0] <= versions[1]):
        raise RpcError("INVALID_REQUEST", f"kraft_versions {versions!r:.40} is not a range")
    return versions[0], versions[1]


def voter_node(key: ReplicaKey, endpoints: tuple[Endpoint, ...], kraft_versions: tuple[int, int]) -> VoterNode:
    return VoterNode(key, endpoints, kraft_versions)


def raise_unless_done(done: VoterChangeDone) -> dict[str, Any]:
    """``{}`` for a change the core committed, else the RpcError of its refusal."""
    if done.error_code == ErrorCode.NONE:
        return {}
    raise RpcError(ErrorCode(done.error_code).name, done.message or "")
