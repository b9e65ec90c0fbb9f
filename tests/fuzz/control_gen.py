"""Control-port inputs: valid msgpack requests of every control api, then mutated.

The control port takes ``{"id", "api", "body"}`` maps (`kraftpy.rpc.control`). Requests are built
from the project's own classes: the Raft messages of `kraftpy.raft.messages` (api ``raft``, body
``{"source", "message"}`` encoded by `kraftpy.raft.codec`), the controller requests of
`kraftpy.metadata.messages` (body ``{"request"}`` encoded by `kraftpy.metadata.rpc.WIRE`), and
``QuorumStatus``. Field values come from each class's type hints and a hint by field name (epochs
near the quorum's current epoch, offsets near its log end, ids from voters, observers and strangers),
so that a valid request reaches the real work.

Mutations work on the msgpack-able tree after encoding, so they can say what the classes cannot:

=====================  ===========================================================================
ctl:valid              the request as generated
ctl:int-range          one integer outside its wire range (int32 fields past 2^31, up to 2^64-1)
ctl:huge-epoch         one epoch field past int32
ctl:non-voter          one id a voter-only message names (voter, candidate, leader, source) set to
                       a node that is not a voter
ctl:type-swap          one value replaced by a value of another type
ctl:missing-key        one key removed (type tags included)
ctl:extra-key          one unexpected key added
ctl:unknown-tag        one type tag unknown, or the tag of another type
ctl:huge-list          one list grown to 100,000 entries
ctl:envelope           the request map itself wrong: id, api, body, source or message
ctl:msgpack            bytes that are not one msgpack map: cut, extended, random, nested deep
ctl:size               a size prefix larger than the bytes sent (then EOF), or huge
=====================  ===========================================================================

Requests whose only effect would be an operator's action on the live broker (unregistering it,
fencing or shutting it down by heartbeat, changing finalized features) are not sent: they are
valid, and the campaign's checks need the broker serving.
"""

from __future__ import annotations

import enum
import functools
import random
import struct
import typing
from typing import Any

import attrs
import msgpack

from kraftpy.ids import Uuid
from kraftpy.metadata import messages as controller_messages
from kraftpy.metadata.records import BrokerEndpoint, BrokerFeature
from kraftpy.metadata.rpc import CONTROLLER_APIS, QUORUM_STATUS_API, WIRE
from kraftpy.raft import codec as raft_codec
from kraftpy.raft import messages as raft_messages
from kraftpy.raft.driver import RAFT_API
from kraftpy.raft.log import SnapshotId
from kraftpy.rpc.wire_schema import IntRange
from tests.fuzz import batches
from tests.fuzz.frames import CONTROL, Frame, Pools, random_name, topic_name

INT32_MAX = 2**31 - 1
#: Every Raft message class, requests first; responses sent as requests must be refused.
RAFT_REQUESTS = (
    raft_messages.VoteRequest, raft_messages.BeginQuorumEpochRequest, raft_messages.EndQuorumEpochRequest,
    raft_messages.FetchRequest, raft_messages.FetchSnapshotRequest, raft_messages.DescribeQuorumRequest,
)
RAFT_RESPONSES = (
    raft_messages.VoteResponse, raft_messages.BeginQuorumEpochResponse, raft_messages.EndQuorumEpochResponse,
    raft_messages.FetchResponse, raft_messages.FetchSnapshotResponse, raft_messages.DescribeQuorumResponse,
)
#: Raft requests only a voter may send, and the field naming the voter who sends them.
VOTER_ONLY = {
    "VoteRequest": "candidate_id",
    "BeginQuorumEpochRequest": "leader_id",
    "EndQuorumEpochRequest": "leader_id",
}
EPOCH_FIELDS = {"candidate_epoch", "leader_epoch", "last_offset_epoch", "current_leader_epoch",
                "last_fetched_epoch", "epoch"}
OFFSET_FIELDS = {"last_offset", "fetch_offset", "log_start_offset", "position", "end_offset",
                 "current_metadata_offset", "log_end_offset", "high_watermark"}
ID_FIELDS = {"voter_id", "candidate_id", "leader_id", "replica_id", "broker_id", "source"}
OUT_OF_RANGE = (2**31, 2**31 + 5, -(2**31) - 1, 2**32, 2**63 - 1, 2**63, 2**64 - 1, -(2**63))
OBSERVER_ID = 100
STRANGERS = (2, 3, 999, -1, -5, INT32_MAX)

CONTROL_CLASSES = (
    "ctl:valid", "ctl:int-range", "ctl:huge-epoch", "ctl:non-voter", "ctl:type-swap", "ctl:missing-key",
    "ctl:extra-key", "ctl:unknown-tag", "ctl:huge-list", "ctl:envelope", "ctl:msgpack", "ctl:size",
)
_CLASS_WEIGHTS = (4, 2, 2, 2, 2, 2, 1, 1, 1, 1, 2, 1)
_SIZE = struct.Struct(">i")


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls, include_extras=True)


class ValueGen:
    """Plausible values for attrs classes, from their type hints and field names."""

    def __init__(self, rng: random.Random, pools: Pools) -> None:
        self.rng = rng
        self.pools = pools

    def instance(self, cls: type, api: str = "") -> Any:
        hints = _hints(cls)
        values = {}
        for f in attrs.fields(cls):
            values[f.name] = self.value(hints[f.name], f.name, cls.__name__, api)
        return cls(**values)

    def value(self, hint: Any, name: str, owner: str, api: str) -> Any:
        rng, pools = self.rng, self.pools
        origin = typing.get_origin(hint)
        args = typing.get_args(hint)
        if origin is typing.Annotated:
            # A declared wire range (a uint16 port, a non-negative id): a valid request keeps inside it.
            value = self.value(args[0], name, owner, api)
            bounds = next((a for a in args[1:] if isinstance(a, IntRange)), None)
            if bounds is not None and type(value) is int and value not in bounds:
                value = min(max(value, bounds.low), bounds.high)
            return value
        if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
            options = [a for a in args if a is not type(None)]
            if type(None) in args and rng.random() < 0.3:
                return None
            return self.value(options[0], name, owner, api)
        if origin is tuple:
            element = args[0]
            n = rng.choice((0, 1, 1, 2, 3))
            return tuple(self.value(element, name, owner, api) for _ in range(n))
        if hint is bool:
            return rng.random() < 0.3
        if hint is int:
            return self.integer(name, owner)
        if hint is str:
            return self.string(name, owner)
        if hint is float:
            return rng.choice((0.0, 1.0, 1024.0, 10.5, -1.0, 1e300))
        if hint is bytes:
            return batches.random_bytes(rng, rng.choice((0, 0, 10)))
        if hint is Uuid:
            ids = list(pools.topic_ids.values()) if name == "topic_id" else []
            if name == "topic_id" and owner in ("AlterPartitionTopicData", "DeleteTopicState"):
                ids = pools.scratch_ids()
            if ids and rng.random() < 0.7:
                return Uuid(rng.choice(ids))
            return Uuid.random(rng)
        if hint is SnapshotId:
            return SnapshotId(max(0, pools.raft_end_offset - rng.randrange(3)), max(0, pools.raft_epoch - 1))
        if hint is BrokerEndpoint:
            return BrokerEndpoint("PLAINTEXT", "127.0.0.1", rng.choice((9092, 1, 65535)))
        if hint is BrokerFeature:
            return BrokerFeature("metadata.version", 1, rng.choice((1, 7, 20)))
        if isinstance(hint, type) and issubclass(hint, enum.Enum):
            return rng.choice(list(hint))
        if isinstance(hint, type) and attrs.has(hint):
            return self.instance(hint, api)
        raise AssertionError(f"no value for {owner}.{name}: {hint!r}")

    def integer(self, name: str, owner: str) -> int:
        rng, pools = self.rng, self.pools
        if name in EPOCH_FIELDS:
            return max(-1, pools.raft_epoch + rng.choice((-1, 0, 0, 1)))
        if name in OFFSET_FIELDS:
            return max(0, pools.raft_end_offset + rng.choice((-5, -1, 0, 0, 1)))
        if name == "voter_id":
            return rng.choice(pools.voters)
        if name in ("candidate_id", "leader_id"):
            return rng.choice((*pools.voters, 2))
        if name == "replica_id":
            return rng.choice((OBSERVER_ID, OBSERVER_ID, pools.broker_id, 2, -1))
        if name == "broker_id":
            return rng.choice((pools.broker_id, 2, 7))
        if name == "broker_epoch":
            return rng.choice((-1, 0, 3, 10, 100))
        if name == "max_wait_ms":
            return rng.choice((0, 50, 500))
        if name == "max_bytes":
            return rng.choice((1 << 20, INT32_MAX))
        if name in ("num_partitions", "count"):
            return rng.choice((1, 2, 3, -1))
        if name == "replication_factor":
            return rng.choice((1, -1))
        if name in ("partition_index", "partition_id", "partitions"):
            return rng.choice((0, 1, -1))
        if name == "resource_type":
            return rng.choice((2, 2, 4))
        if name == "config_operation":
            return rng.choice((0, 1, 2, 3))
        if name in ("max_version_level", "min_supported_version", "max_supported_version"):
            return rng.choice((1, 7, 0))
        if name == "preferred_successors":
            return rng.choice(pools.voters)
        if name == "error_code":
            return rng.choice((0, 6, -1))
        return rng.choice((0, 1, -1, 5))

    def string(self, name: str, owner: str) -> str:
        rng, pools = self.rng, self.pools
        if name == "cluster_id":
            return pools.cluster_id if rng.random() < 0.85 else random_name(rng, "cluster")
        if name in ("name", "topic", "resource_name") and owner in (
                "CreatableTopic", "DeleteTopicState", "CreatePartitionsTopic", "TopicPartitions",
                "DescribeConfigsResource", "AlterConfigsResource"):
            if owner in ("DeleteTopicState", "AlterConfigsResource", "CreatableTopic"):
                return rng.choice([*sorted(pools.scratch), topic_name(rng, "fz-new")])
            return rng.choice([*sorted(pools.protected), *sorted(pools.scratch), topic_name(rng, "fz-unknown")])
        if name == "feature":
            return rng.choice(("metadata.version", "kraft.version", "unknown.feature"))
        if name == "name":
            return rng.choice(("retention.ms", "cleanup.policy", "segment.bytes", "x"))
        if name == "value":
            return rng.choice(("1000", "compact", "-1", "x"))
        return random_name(rng, "s")


def make_safe(pools: Pools, request: Any) -> Any:
    """Leave out operators' actions on the live broker and protected topics (see the module doc)."""
    live = pools.broker_id
    scratch = (sorted(pools.scratch) or ["fuzz-scratch"])[0]
    if isinstance(request, controller_messages.UnregisterBrokerRequest) and request.broker_id == live:
        return attrs.evolve(request, broker_id=live + 1000)
    if isinstance(request, controller_messages.BrokerHeartbeatRequest) and request.broker_id == live:
        return attrs.evolve(request, want_fence=False, want_shut_down=False)
    if isinstance(request, controller_messages.UpdateFeaturesRequest):
        return attrs.evolve(request, validate_only=True)
    if isinstance(request, controller_messages.DeleteTopicsRequest):
        protected_ids = pools.protected_ids()
        topics = tuple(controller_messages.DeleteTopicState(
            name=scratch if t.name in pools.protected else t.name,
            topic_id=None if t.topic_id is not None and t.topic_id.raw in protected_ids else t.topic_id)
            for t in request.topics)
        return attrs.evolve(request, topics=topics)
    if isinstance(request, controller_messages.IncrementalAlterConfigsRequest):
        resources = tuple(attrs.evolve(r, resource_name=scratch) if r.resource_name in pools.protected else r
                          for r in request.resources)
        validate = request.validate_only or any(r.resource_type != 2 for r in resources)
        return attrs.evolve(request, resources=resources, validate_only=validate)
    if isinstance(request, controller_messages.AlterPartitionRequest):
        protected_ids = pools.protected_ids()
        topics = tuple(t for t in request.topics if t.topic_id.raw not in protected_ids)
        return attrs.evolve(request, topics=topics)
    return request


# -- the tree: every place in an encoded request a mutation can touch --------------------------------


def _leaves(tree: Any, path: tuple = (), limit: int = 64) -> list[tuple[tuple, Any]]:
    """(path, value) of every node below the root, depth first (the first ``limit`` of a long list)."""
    out = []
    if isinstance(tree, dict):
        for k, v in tree.items():
            out.append(((*path, k), v))
            out += _leaves(v, (*path, k), limit)
    elif isinstance(tree, list):
        for i, v in enumerate(tree[:limit]):
            out.append(((*path, i), v))
            out += _leaves(v, (*path, i), limit)
    return out


def _set(tree: Any, path: tuple, value: Any) -> None:
    node = tree
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value


def _delete(tree: Any, path: tuple) -> None:
    node = tree
    for key in path[:-1]:
        node = node[key]
    del node[path[-1]]


def _show(path: tuple) -> str:
    return ".".join(str(p) for p in path)


class TreeMutator:
    def __init__(self, rng: random.Random, request: dict, pools: Pools) -> None:
        self.rng = rng
        self.request = request
        self.pools = pools
        self.tags: set[str] = set()

    def _pick(self, test) -> tuple[tuple, Any] | None:
        candidates = [(p, v) for p, v in _leaves(self.request["body"], ("body",)) if test(p, v)]
        return self.rng.choice(candidates) if candidates else None

    def int_range(self) -> str | None:
        found = self._pick(lambda p, v: type(v) is int and p[-1] != "@")
        if found is None:
            return None
        path, _ = found
        value = self.rng.choice(OUT_OF_RANGE)
        _set(self.request, path, value)
        if path[-1] in EPOCH_FIELDS and not -(2**31) <= value <= INT32_MAX:
            self.tags.add("raft-epoch-out-of-range")
        self.tags.add(f"int-range:{path[-1]}")
        return f"{_show(path)} = {value}"

    def huge_epoch(self) -> str | None:
        found = self._pick(lambda p, v: type(v) is int and p[-1] in EPOCH_FIELDS)
        if found is None:
            return None
        path, _ = found
        value = self.rng.choice((2**31 + 5, 2**31, 2**32 + 1, 2**63 - 1, 2**64 - 1))
        _set(self.request, path, value)
        self.tags.add("raft-epoch-out-of-range")
        return f"{_show(path)} = {value}"

    def non_voter(self) -> str | None:
        found = self._pick(lambda p, v: type(v) is int and p[-1] in ID_FIELDS)
        if found is None:
            return None
        path, _ = found
        value = self.rng.choice(STRANGERS)
        _set(self.request, path, value)
        return f"{_show(path)} = {value} (not a voter)"

    def type_swap(self) -> str | None:
        found = self._pick(lambda p, v: True)
        if found is None:
            return None
        path, old = found
        options = ["x", 1.5, None, [], {}, b"\x00\x01", True, -1, {"@": "Uuid", "raw": b"\x00" * 3},
                   [1, "a", None], "9" * 30]
        value = self.rng.choice([o for o in options if type(o) is not type(old)])
        _set(self.request, path, value)
        self.tags.add(f"type-swap:{path[-1]}")
        return f"{_show(path)}: {type(old).__name__} -> {value!r:.30}"

    def missing_key(self) -> str | None:
        found = self._pick(lambda p, v: isinstance(p[-1], str))
        if found is None:
            return None
        path, _ = found
        _delete(self.request, path)
        return f"{_show(path)} removed"

    def extra_key(self) -> str | None:
        found = self._pick(lambda p, v: isinstance(v, dict))
        path, node = found if found is not None else (("body",), self.request["body"])
        key = self.rng.choice(("zz", "extra", "records", "@@", 7))
        node[key] = self.rng.choice((1, "x", None, [1]))
        return f"{_show(path)}.{key} added"

    def unknown_tag(self) -> str | None:
        found = self._pick(lambda p, v: p[-1] == "@")
        if found is None:
            return None
        path, old = found
        tags = [*raft_codec.MESSAGE_TYPES, *raft_codec.STRUCT_TYPES, "NoSuchType", "", "Uuid", "ErrorCode",
                "BrokerRegistrationRequest", "ElectionType"]
        value = self.rng.choice([t for t in tags if t != old])
        _set(self.request, path, value)
        return f"{_show(path)}: {old} -> {value!r}"

    def huge_list(self) -> str | None:
        found = self._pick(lambda p, v: isinstance(v, list))
        n = self.rng.choice((10_000, 100_000))
        if found is None:
            path = ("body", "zz")
            self.request["body"]["zz"] = [0] * n
        else:
            path, value = found
            element = value[0] if value else 1
            if isinstance(element, dict | list):
                n //= 10  # ten thousand structures at most: a frame of a few MiB
            _set(self.request, path, [element] * n)
        self.tags.add("huge-list")
        return f"{_show(path)} with {n} entries"

    def envelope(self) -> str | None:
        rng, request = self.rng, self.request
        what = rng.randrange(8)
        if what == 0:
            request["id"] = rng.choice(("1", 1.5, None, -1, 2**64 - 1, [1]))
            return f"id = {request['id']!r}"
        if what == 1:
            request["api"] = rng.choice(("NoSuchApi", "", 7, None, "Raft", "raft "))
            return f"api = {request['api']!r}"
        if what == 2:
            request["body"] = rng.choice(([], None, "body", 0, {}))
            return f"body = {request['body']!r}"
        if what == 3:
            del request[rng.choice(("id", "api", "body"))]
            return "a key of the request map removed"
        if what == 4 and "source" in request["body"]:
            request["body"]["source"] = rng.choice(("1", None, 2**63, -(2**63), 1.5, OBSERVER_ID, 2))
            return f"source = {request['body']['source']!r}"
        if what == 5 and "message" in request["body"]:
            request["body"]["message"] = rng.choice((None, {}, [], "VoteRequest", {"@": "VoteRequest"}))
            return f"message = {request['body']['message']!r}"
        if what == 6:
            request["api"] = rng.choice((RAFT_API, QUORUM_STATUS_API, *CONTROLLER_APIS))
            return f"body sent under api {request['api']}"
        request["extra"] = 1
        return "an extra key in the request map"


def _msgpack_bytes(rng: random.Random, payload: bytes) -> tuple[bytes, str]:
    what = rng.randrange(7)
    if what == 0:
        cut = rng.randrange(0, max(1, len(payload)))
        return payload[:cut], f"msgpack cut to {cut} of {len(payload)} bytes"
    if what == 1:
        extra = batches.random_bytes(rng, rng.randrange(1, 16))
        return payload + extra, f"{len(extra)} bytes after the msgpack map"
    if what == 2:
        data = batches.random_bytes(rng, rng.choice((1, 5, 50)))
        return data, f"{len(data)} random bytes"
    if what == 3:
        depth = rng.choice((1000, 100_000))
        return b"\x91" * depth + b"\xc0", f"arrays nested {depth} deep"
    if what == 4:
        # An array32 header claiming 2^32-1 elements, with none following.
        return b"\xdd\xff\xff\xff\xff", "an array claiming 4,294,967,295 elements"
    if what == 5:
        return msgpack.packb({"id": 1, "api": "raft", "body": msgpack.ExtType(5, b"x")}), "an ext type as body"
    if len(payload) > 2:
        data = bytearray(payload)
        for _ in range(rng.choice((1, 2, 4))):
            pos = rng.randrange(len(data))
            data[pos] ^= 1 << rng.randrange(8)
        return bytes(data), "bits flipped in the msgpack map"
    return payload, "as generated"


def build_request(rng: random.Random, pools: Pools) -> tuple[dict, str, set[str]]:
    """A valid request map, the api name the frame reports, and tags."""
    gen = ValueGen(rng, pools)
    tags: set[str] = set()
    r = rng.random()
    if r < 0.5:
        cls = rng.choice(RAFT_REQUESTS) if rng.random() < 0.9 else rng.choice(RAFT_RESPONSES)
        message = gen.instance(cls)
        source = rng.choice((OBSERVER_ID, *pools.voters, 2)) if cls.__name__ not in VOTER_ONLY else None
        if cls.__name__ in VOTER_ONLY:
            sender = getattr(message, VOTER_ONLY[cls.__name__])
            source = sender
            if sender not in pools.voters:
                tags.add("raft-from-non-voter")
        if cls.__name__ == "VoteRequest" and message.candidate_epoch > pools.raft_epoch and message.candidate_id in pools.voters:
            tags.add("raft-self-vote")
        body = {"source": source, "message": raft_codec.encode(message)}
        return {"id": rng.randrange(1, 2**31), "api": RAFT_API, "body": body}, f"raft:{cls.__name__}", tags
    if r < 0.95:
        api = rng.choice(sorted(CONTROLLER_APIS))
        request_type, _ = CONTROLLER_APIS[api]
        request = make_safe(pools, gen.instance(request_type, api))
        return {"id": rng.randrange(1, 2**31), "api": api, "body": {"request": WIRE.encode(request)}}, api, tags
    return {"id": rng.randrange(1, 2**31), "api": QUORUM_STATUS_API, "body": {}}, QUORUM_STATUS_API, tags


def _epoch_tags(tree: Any) -> set[str]:
    for path, value in _leaves(tree):
        if path and path[-1] in EPOCH_FIELDS and type(value) is int and not -(2**31) <= value <= INT32_MAX:
            return {"raft-epoch-out-of-range"}
    return set()


def _partition_count_tags(request: dict) -> set[str]:
    """``huge-partition-count`` for CreateTopics / CreatePartitions asking for more than 10,000."""
    if request.get("api") not in ("CreateTopics", "CreatePartitions"):
        return set()
    for path, value in _leaves(request.get("body")):
        if path and path[-1] in ("num_partitions", "count") and type(value) is int and value > 10_000:
            return {"huge-partition-count"}
    return set()


def _voter_tags(request: dict, pools: Pools) -> set[str]:
    """Whether a voter-only Raft message names (or comes from) a node that is not a voter."""
    body = request.get("body")
    if request.get("api") != RAFT_API or not isinstance(body, dict) or not isinstance(body.get("message"), dict):
        return set()
    message = body["message"]
    tag = message.get("@")
    field = VOTER_ONLY.get(tag) if isinstance(tag, str) else None
    if field is None:
        return set()
    if message.get(field) not in pools.voters or body.get("source") not in pools.voters:
        return {"raft-from-non-voter"}
    return set()


def control_frame(rng: random.Random, pools: Pools, index: int, *, klass: str | None = None) -> Frame:
    klass = klass or rng.choices(CONTROL_CLASSES, _CLASS_WEIGHTS)[0]
    request, api, tags = build_request(rng, pools)
    detail = "as generated"
    half_close = False
    mutator = TreeMutator(rng, request, pools)
    method = {
        "ctl:int-range": mutator.int_range, "ctl:huge-epoch": mutator.huge_epoch,
        "ctl:non-voter": mutator.non_voter, "ctl:type-swap": mutator.type_swap,
        "ctl:missing-key": mutator.missing_key, "ctl:extra-key": mutator.extra_key,
        "ctl:unknown-tag": mutator.unknown_tag, "ctl:huge-list": mutator.huge_list,
        "ctl:envelope": mutator.envelope,
    }.get(klass)
    if method is not None:
        result = method()
        if result is None:
            klass = "ctl:valid"
        else:
            detail = result
    tags |= mutator.tags | _epoch_tags(request) | _voter_tags(request, pools) | _partition_count_tags(request)
    payload = msgpack.packb(request, use_bin_type=True)
    if klass == "ctl:msgpack":
        payload, detail = _msgpack_bytes(rng, payload)
    data = _SIZE.pack(len(payload)) + payload
    if klass == "ctl:size":
        size = rng.choice((len(payload) + 1, len(payload) + 1000, 64 * 1024 * 1024, 2**31 - 1, -1))
        data = _SIZE.pack(size) + payload
        half_close = True
        detail = f"size prefix {size} for {len(payload)} bytes, then EOF"
        if size >= 16 * 1024 * 1024:
            tags.add("huge-size-prefix")
    tags.add(klass)
    tags.add(f"api:{api}")
    if b"__cluster_metadata" in data:
        tags.add("names-cluster-metadata")
    return Frame(index=index, port=CONTROL, api=api, klass=klass, detail=detail, data=data,
                 half_close=half_close, tags=frozenset(tags))
