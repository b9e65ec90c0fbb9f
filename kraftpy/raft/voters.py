"""Who votes: replica keys, voter sets, and the kraft.version that says where they come from (KIP-853).

A *replica* is a node id together with the id of the directory its metadata log lives in
(`ReplicaKey`): a controller whose disk was wiped and formatted again is a new replica, with a new
directory id, and cannot vote with the history the old one promised. A *voter set* is the replicas
that vote, each with the endpoints the others reach it on and the kraft.version range it supports.

kraft.version (a feature, like metadata.version) says where the voter set comes from:

- 0: ``controller.quorum.voters``, fixed while the cluster runs. Voters are known by id only (their
  directory ids are not recorded), and the set never changes.
- 1: the log itself. A VotersRecord (a Raft control record, beside the leader-change record) holds
  the whole set; the newest one in a replica's log is the set it uses, committed or not (Raft
  thesis §4.1), and a truncation that removes it brings the previous one back. Snapshots start with
  the set in force at their end (kraftpy.raft.snapshot_control). A cluster formatted with
  ``--standalone`` or ``--initial-controllers`` starts at 1; a static one moves to 1 with
  ``kraftpy features upgrade --feature kraft.version=1``.

The records are kraftpy's own msgpack maps (after Kafka's VotersRecord and KRaftVersionRecord)::

    VotersRecord       {"version": 0, "voters": [{"voter_id": int, "voter_directory_id": bytes(16),
                        "endpoints": [{"name": str, "host": str, "port": int}],
                        "kraft_version_feature": {"min_supported_version": int,
                                                  "max_supported_version": int}}]}
    KRaftVersionRecord {"version": 0, "kraft_version": int}

Decoding trusts nothing: a record that is not exactly this raises `ControlRecordError`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attrs
import msgpack

from kraftpy.ids import Uuid
from kraftpy.rpc.wire_schema import INT32, UINT16, Int32, UInt16

#: kraft.version 0: the voters are controller.quorum.voters; 1: they live in the log (KIP-853).
KRAFT_VERSION_STATIC = 0
KRAFT_VERSION_DYNAMIC = 1
#: The kraft.version levels this build runs (what it reports as its supported range).
SUPPORTED_KRAFT_VERSIONS = (KRAFT_VERSION_STATIC, KRAFT_VERSION_DYNAMIC)
KRAFT_VERSION_FEATURE = "kraft.version"

_RECORD_VERSION = 0


class ControlRecordError(ValueError):
    """A VotersRecord or KRaftVersionRecord that cannot be read."""


@attrs.frozen(order=True)
class ReplicaKey:
    """A replica: a node id and the directory id of its metadata log (None: not known, as for the
    voters of a static quorum)."""

    id: Int32
    directory_id: Uuid | None = None

    def matches(self, other: ReplicaKey) -> bool:
        """Whether `other` is this replica: the same id, and the same directory when this key names one."""
        return self.id == other.id and (self.directory_id is None or self.directory_id == other.directory_id)

    def __str__(self) -> str:
        return f"{self.id}" if self.directory_id is None else f"{self.id}:{self.directory_id}"


@attrs.frozen(order=True)
class Endpoint:
    """A listener a voter is reached on."""

    name: str
    host: str
    port: UInt16

    def __str__(self) -> str:
        return f"{self.name}://{self.host}:{self.port}"


@attrs.frozen
class VoterNode:
    key: ReplicaKey
    endpoints: tuple[Endpoint, ...] = attrs.field(converter=tuple, default=())
    #: The kraft.version levels the voter runs, (min, max).
    kraft_versions: tuple[int, int] = attrs.field(converter=tuple, default=SUPPORTED_KRAFT_VERSIONS)

    @property
    def id(self) -> int:
        return self.key.id

    def endpoint(self, listener: str) -> Endpoint | None:
        return next((e for e in self.endpoints if e.name == listener), None)

    def supports(self, kraft_version: int) -> bool:
        return self.kraft_versions[0] <= kraft_version <= self.kraft_versions[1]


@attrs.frozen(cache_hash=True)
class VoterSet:
    """The voters of a quorum, by id (one replica per id). Immutable: a change makes a new set."""

    nodes: tuple[VoterNode, ...] = attrs.field(converter=lambda nodes: tuple(sorted(nodes, key=lambda n: n.id)))
    _by_id: Mapping[int, VoterNode] = attrs.field(init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        by_id = {node.id: node for node in self.nodes}
        if len(by_id) != len(self.nodes):
            raise ValueError(f"a voter set names an id twice: {[n.id for n in self.nodes]}")
        object.__setattr__(self, "_by_id", by_id)

    @classmethod
    def of_ids(cls, ids: Iterable[int], endpoints: Mapping[int, Iterable[Endpoint]] | None = None) -> VoterSet:
        """A static voter set (kraft.version 0): ids without directory ids."""
        endpoints = endpoints or {}
        return cls(tuple(VoterNode(ReplicaKey(i), tuple(endpoints.get(i, ()))) for i in ids))

    @property
    def ids(self) -> frozenset[int]:
        return frozenset(self._by_id)

    @property
    def majority(self) -> int:
        return len(self.nodes) // 2 + 1

    def __len__(self) -> int:
        return len(self.nodes)

    def __contains__(self, node_id: object) -> bool:
        return node_id in self._by_id

    def node(self, node_id: int) -> VoterNode | None:
        return self._by_id.get(node_id)

    def key_of(self, node_id: int) -> ReplicaKey | None:
        node = self._by_id.get(node_id)
        return None if node is None else node.key

    def is_voter(self, key: ReplicaKey) -> bool:
        """Whether replica `key` votes here (the id is a voter's, and so is the directory if this set
        names one)."""
        node = self._by_id.get(key.id)
        return node is not None and node.key.matches(key)

    def keys(self) -> tuple[ReplicaKey, ...]:
        return tuple(node.key for node in self.nodes)

    def add(self, node: VoterNode) -> VoterSet | None:
        """The set with `node` added; None when its id already votes."""
        if node.id in self._by_id:
            return None
        return VoterSet((*self.nodes, node))

    def remove(self, key: ReplicaKey) -> VoterSet | None:
        """The set without replica `key`; None when it is not a voter or is the last one."""
        node = self._by_id.get(key.id)
        if node is None or node.key != key or len(self.nodes) == 1:
            return None
        return VoterSet(tuple(n for n in self.nodes if n.id != key.id))

    def update(self, node: VoterNode) -> VoterSet | None:
        """The set with the voter of `node`'s key given `node`'s endpoints and range; None when that
        replica is not a voter."""
        current = self._by_id.get(node.id)
        if current is None or not current.key.matches(node.key):
            return None
        return VoterSet(tuple(node if n.id == node.id else n for n in self.nodes))

    def overlaps(self, other: VoterSet) -> bool:
        """Whether every majority of this set shares a voter with every majority of `other` (what a
        change of one voter at a time guarantees between a set and the next; Raft thesis §4.1)."""
        union = list(self.keys())
        for key in other.keys():
            if not any(key.matches(known) or known.matches(key) for known in union):
                union.append(key)  # a replica without a directory id is its id's replica
        return self.majority + other.majority > len(union)

    def __str__(self) -> str:
        return "{" + ", ".join(str(n.key) for n in self.nodes) + "}"


# -- the control records -------------------------------------------------------------------------


def encode_voters_record(voters: VoterSet) -> bytes:
    return msgpack.packb({
        "version": _RECORD_VERSION,
        "voters": [{
            "voter_id": node.id,
            "voter_directory_id": None if node.key.directory_id is None else node.key.directory_id.raw,
            "endpoints": [{"name": e.name, "host": e.host, "port": e.port} for e in node.endpoints],
            "kraft_version_feature": {"min_supported_version": node.kraft_versions[0],
                                      "max_supported_version": node.kraft_versions[1]},
        } for node in voters.nodes],
    })


def encode_kraft_version_record(kraft_version: int) -> bytes:
    return msgpack.packb({"version": _RECORD_VERSION, "kraft_version": kraft_version})


def _unpack(value: bytes, what: str) -> dict[str, Any]:
    try:
        data = msgpack.unpackb(value, strict_map_key=True)
    except Exception as exc:  # msgpack raises several types for bad bytes
        raise ControlRecordError(f"{what}: not msgpack ({exc})") from None
    if not isinstance(data, dict):
        raise ControlRecordError(f"{what}: not a map")
    if data.get("version") != _RECORD_VERSION:
        raise ControlRecordError(f"{what}: unsupported version {data.get('version')!r:.20}")
    return data


def _int(value: Any, what: str, low: int, high: int) -> int:
    if type(value) is not int or not low <= value <= high:
        raise ControlRecordError(f"{what}: {value!r:.30} is not an integer in [{low}, {high}]")
    return value


def _fields(data: Any, what: str, names: set[str]) -> dict[str, Any]:
    if not isinstance(data, dict) or set(data) != names:
        raise ControlRecordError(f"{what}: expected the fields {sorted(names)}, got {data!r:.60}")
    return data


def decode_voters_record(value: bytes) -> VoterSet:
    data = _fields(_unpack(value, "VotersRecord"), "VotersRecord", {"version", "voters"})
    voters = data["voters"]
    if not isinstance(voters, list) or not voters:
        raise ControlRecordError("VotersRecord: no voters")
    nodes = []
    for item in voters:
        item = _fields(item, "VotersRecord voter",
                       {"voter_id", "voter_directory_id", "endpoints", "kraft_version_feature"})
        voter_id = _int(item["voter_id"], "VotersRecord voter_id", 0, INT32.high)
        raw = item["voter_directory_id"]
        if raw is not None and (type(raw) is not bytes or len(raw) != 16):
            raise ControlRecordError(f"VotersRecord voter {voter_id}: directory id {raw!r:.40}")
        endpoints = item["endpoints"]
        if not isinstance(endpoints, list):
            raise ControlRecordError(f"VotersRecord voter {voter_id}: endpoints {endpoints!r:.40}")
        parsed = []
        for e in endpoints:
            e = _fields(e, f"VotersRecord voter {voter_id} endpoint", {"name", "host", "port"})
            if type(e["name"]) is not str or type(e["host"]) is not str:
                raise ControlRecordError(f"VotersRecord voter {voter_id}: endpoint {e!r:.60}")
            parsed.append(Endpoint(e["name"], e["host"], _int(e["port"], "endpoint port", UINT16.low, UINT16.high)))
        feature = _fields(item["kraft_version_feature"], "kraft_version_feature",
                          {"min_supported_version", "max_supported_version"})
        low = _int(feature["min_supported_version"], "min_supported_version", 0, 32767)
        high = _int(feature["max_supported_version"], "max_supported_version", low, 32767)
        key = ReplicaKey(voter_id, None if raw is None else Uuid.coerce(raw))
        nodes.append(VoterNode(key, tuple(parsed), (low, high)))
    try:
        return VoterSet(tuple(nodes))
    except ValueError as exc:
        raise ControlRecordError(f"VotersRecord: {exc}") from None


def decode_kraft_version_record(value: bytes) -> int:
    data = _fields(_unpack(value, "KRaftVersionRecord"), "KRaftVersionRecord", {"version", "kraft_version"})
    return _int(data["kraft_version"], "KRaftVersionRecord kraft_version", 0, 32767)
