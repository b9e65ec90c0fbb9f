"""Kafka-port inputs: valid requests of every served api and version, then mutated.

Requests are built from the project's generated message classes (`kraftpy.protocol.messages`):
the generator walks a message's schema (`cls.SCHEMA.fields`) and gives each field of the version
a random value of its wire type, plausible for its name (topic names from the pools, small partition
numbers, short timeouts) so that valid requests reach the handlers' real work. The frame is encoded
with `kraftpy.protocol.frames.encode_request`.

Mutation classes (one per frame, chosen from the frame's seed):

=====================  ===========================================================================
valid                  the request as generated
field:int-boundary     one integer field at a boundary of its width (-1, 0, max, min, ...)
field:null             one string, bytes, records or array field written as null (nullable or not)
field:long-string      one string 32,767 characters long (more in compact strings), or 1 MiB bytes
field:bad-utf8         one string that is not UTF-8
field:huge-count       one length or array count that claims more than the frame holds
field:count-lie        one count off by a little: the rest of the frame is read askew
field:many-elements    one array repeated to thousands of entries (duplicates, or distinct unknowns)
field:unknown          unknown topic ids, topic names, partitions
field:empty            one array or string empty
field:duplicates       one array element given twice
field:unknown-tags     tagged fields the message does not define (flexible versions)
header:version-skew    the body of one version under the header of another
header:api-key         an api key or version the broker does not serve
header:client-id       a client id that is null, long or not UTF-8
bytes:truncate         the frame cut short (size prefix matching)
bytes:bitflip          bits flipped after the fixed header
bytes:splice           random bytes written over or into the body
bytes:trailing         random bytes after the body
bytes:size-short       a size prefix smaller than the frame
bytes:size-long        a size prefix larger than the bytes sent, then EOF
bytes:size-huge        a size prefix of up to 100 MiB with a little body, then EOF
bytes:random           random bytes in a well-sized frame
batch:*                Produce with one batch mutated, CRC recomputed (see ``batches.py``)
=====================  ===========================================================================
"""

from __future__ import annotations

import random
import struct
import uuid
from collections.abc import Callable
from typing import Any

from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.errors import InvalidRequestError, UnsupportedVersionError
from kraftpy.protocol.frames import encode_request, join_frame, parse_request
from kraftpy.protocol.messages import REQUESTS
from kraftpy.protocol.schema import EncodeError, Field
from kraftpy.protocol.varint import encode_uvarint
from tests.fuzz import batches
from tests.fuzz.frames import KAFKA, Frame, LyingBytes, LyingList, LyingStr, Pools, random_name, topic_name

INT_RANGES = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint16": (0, 2**16 - 1),
    "uint32": (0, 2**32 - 1),
}
TOPIC_NAME_FIELDS = {
    ("TopicProduceData", "name"), ("FetchTopic", "topic"), ("ForgottenTopic", "topic"),
    ("ListOffsetsTopic", "name"), ("MetadataRequestTopic", "name"), ("OffsetCommitRequestTopic", "name"),
    ("OffsetFetchRequestTopic", "name"), ("OffsetFetchRequestTopics", "name"), ("CreatableTopic", "name"),
    ("DeleteTopicState", "name"), ("DeleteTopicsRequest", "topic_names"), ("DeleteRecordsTopic", "name"),
    ("OffsetForLeaderTopic", "topic"), ("CreatePartitionsTopic", "name"),
}
#: Where a name or id is the target of a request that deletes, truncates or reconfigures.
DESTRUCTIVE = {
    ("DeleteTopicState", "name"), ("DeleteTopicState", "topic_id"), ("DeleteTopicsRequest", "topic_names"),
    ("DeleteRecordsTopic", "name"),
}
PARTITION_FIELDS = {"index", "partition", "partition_index", "partitions", "partition_indexes"}
GROUP_FIELDS = {"group_id", "key", "groups", "groups_names", "coordinator_keys"}
TOPIC_CONFIGS = {
    "cleanup.policy": ("delete", "compact", "bogus"),
    "retention.ms": ("604800000", "-1", "1", "x"),
    "segment.bytes": ("1073741824", "14", "0", "-5"),
    "max.message.bytes": ("1048588", "1", "2147483647"),
    "message.timestamp.type": ("CreateTime", "LogAppendTime", "Other"),
    "compression.type": ("producer", "gzip", "zstd", "none", "brotli"),
    "min.insync.replicas": ("1", "2", "0", "-1"),
    "unknown.config": ("1",),
}
RESOURCE_TOPIC, RESOURCE_BROKER, RESOURCE_BROKER_LOGGER = 2, 4, 8
#: The name of the metadata log's partition (known bugs match on frames naming it).
METADATA_TOPIC = b"__cluster_metadata"
#: Partition counts from here on ask the controller for a great deal of work (known bugs match on it).
HUGE_PARTITION_COUNT = 10_000
#: Fields a request asks the broker to wait up to (milliseconds).
WAIT_FIELDS = {"timeout_ms", "max_wait_ms", "rebalance_timeout_ms", "session_timeout_ms"}


def _field_default_choice(rng: random.Random, f: Field) -> Any:
    """A random type-valid value for a field without a name hint."""
    t = f.element_type
    if t in INT_RANGES:
        lo, hi = INT_RANGES[t]
        return max(lo, min(hi, rng.choice((0, 0, 1, 2, 5, -1, rng.randrange(100)))))
    if t == "bool":
        return rng.random() < 0.5
    if t == "string":
        return random_name(rng, "s")
    if t == "bytes":
        return batches.random_bytes(rng, rng.randrange(0, 16))
    if t == "uuid":
        return uuid.UUID(int=rng.getrandbits(128))
    if t == "float64":
        return rng.random()
    if t == "records":
        return batches.valid_batch(rng).encode()
    raise AssertionError(f"unhandled type {t}")


KEY_FIELDS = ("name", "topic", "topic_id", "index", "partition", "partition_index", "resource_name")


def _distinct(items: list) -> list:
    """Array elements with distinct keys (topic, partition, ...), as a client sends them; the
    ``field:duplicates`` mutation is where an element comes twice."""
    seen = set()
    out = []
    for item in items:
        key = tuple(getattr(item, k, None) for k in KEY_FIELDS)
        if key not in seen:
            seen.add(key)
            out.append(item)
    return out


class RequestGen:
    """Builds a plausible request object for (api key, version) from the pools."""

    def __init__(self, rng: random.Random, pools: Pools, api_key: int, version: int) -> None:
        self.rng = rng
        self.pools = pools
        self.api_key = api_key
        self.version = version
        self.schema = REQUESTS[api_key].SCHEMA

    def build(self) -> Any:
        return self._struct(self.schema.name, self.schema.fields)

    def _struct(self, struct_name: str, fields: tuple[Field, ...]) -> Any:
        obj = self.schema.classes[struct_name]()
        for f in fields:
            if self.version in f.versions:
                setattr(obj, f.name, self._value(struct_name, f))
        return obj

    def _topic(self, struct_name: str, field_name: str) -> str:
        rng, pools = self.rng, self.pools
        if (struct_name, field_name) in DESTRUCTIVE or struct_name == "CreatableTopic":
            names = list(pools.scratch) or ["fuzz-scratch"]
            return rng.choice(names) if rng.random() < 0.7 else topic_name(rng, "fz-new")
        r = rng.random()
        if r < 0.75 and pools.protected:
            return rng.choice(sorted(pools.protected))
        if r < 0.85 and pools.scratch:
            return rng.choice(sorted(pools.scratch))
        return topic_name(rng, "fz-unknown")

    def _value(self, struct_name: str, f: Field) -> Any:
        rng, v = self.rng, self.version
        nullable = v in f.nullable
        if f.is_array:
            if nullable and rng.random() < 0.15:
                return None
            if f.is_struct:
                n = rng.choice((1, 1, 1, 2, 2, 3)) if rng.random() < 0.95 else 0
                return _distinct([self._struct(f.element_type, f.fields) for _ in range(n)])
            n = rng.choice((0, 1, 1, 2, 3))
            element = Field(name=f.name, type=f.element_type, versions=f.versions)
            return [self._scalar(struct_name, element, False) for _ in range(n)]
        if f.is_struct:
            return self._struct(f.type, f.fields)
        return self._scalar(struct_name, f, nullable)

    def _scalar(self, struct_name: str, f: Field, nullable: bool) -> Any:
        rng, pools, name, t = self.rng, self.pools, f.name, f.type
        if nullable and t in ("string", "bytes") and rng.random() < 0.1:
            return None
        key = (struct_name, name)
        if t == "string" and key in TOPIC_NAME_FIELDS:
            return self._topic(struct_name, name)
        if t == "uuid" and name == "topic_id":
            if key in DESTRUCTIVE:
                ids = pools.scratch_ids()
            else:
                ids = list(pools.topic_ids.values())
            r = rng.random()
            if r < 0.7 and ids:
                return uuid.UUID(bytes=rng.choice(ids))
            return uuid.UUID(int=0) if r < 0.85 else uuid.UUID(int=rng.getrandbits(128))
        if t == "records":
            return batches.valid_batch(rng).encode()
        if t in INT_RANGES:
            return self._int(struct_name, name, t)
        if t == "string":
            if name in GROUP_FIELDS:
                return rng.choice(pools.groups)
            if struct_name in ("CreatableTopicConfig", "AlterableConfig") and name == "name":
                return rng.choice(sorted(TOPIC_CONFIGS))
            if struct_name in ("CreatableTopicConfig", "AlterableConfig") and name == "value":
                return rng.choice(TOPIC_CONFIGS[rng.choice(sorted(TOPIC_CONFIGS))])
            if name == "resource_name":
                return rng.choice((*sorted(pools.scratch), str(pools.broker_id), "", "7"))
            if name == "transactional_id":
                return None if nullable and rng.random() < 0.9 else random_name(rng, "txn")
            if name in ("rack_id", "client_software_version"):
                return rng.choice(("", "1.0"))
            if name == "client_software_name":
                return "kraftpy-fuzz"
            if name == "cluster_id":
                return None if nullable else pools.cluster_id
            if name in ("member_id", "group_instance_id", "protocol_type", "protocol_name"):
                return rng.choice(("", "consumer", random_name(rng, "m")))
        if t == "bool" and name == "allow_auto_topic_creation":
            return rng.random() < 0.3
        if t == "bool" and name == "validate_only":
            return rng.random() < 0.5
        return _field_default_choice(rng, f)

    def _int(self, struct_name: str, name: str, t: str) -> int:
        rng, pools = self.rng, self.pools
        if name in PARTITION_FIELDS:
            return rng.choice((0, 0, 1, 1, 2, -1)) if rng.random() < 0.95 else rng.randrange(1000)
        if name == "acks":
            return rng.choice((-1, -1, 1, 1, 0))
        if name in WAIT_FIELDS:
            return rng.choice((0, 100, 500, 1000))
        if name in ("min_bytes",):
            return rng.choice((0, 1))
        if name in ("max_bytes", "partition_max_bytes"):
            return rng.choice((1 << 20, 50 << 20, 1, 0))
        if name == "replica_id":
            return rng.choice((-1, -1, -1, -2, pools.broker_id, 2))
        if name in ("fetch_offset", "offset", "committed_offset"):
            return rng.choice((0, 0, 1, 10, 100, -1))
        if name in ("current_leader_epoch", "last_fetched_epoch", "leader_epoch", "committed_leader_epoch"):
            return rng.choice((-1, -1, 0, 1, 3))
        if name == "log_start_offset":
            return -1
        if name == "isolation_level":
            return rng.choice((0, 1))
        if name == "session_id":
            return 0
        if name == "session_epoch":
            return rng.choice((-1, 0))
        if name == "timestamp":
            return rng.choice((-1, -2, -3, batches.BASE_TIMESTAMP))
        if name == "num_partitions":
            return rng.choice((-1, 1, 2))
        if name == "replication_factor":
            return rng.choice((-1, 1))
        if name == "count":
            return rng.choice((2, 3, 4))
        if name == "resource_type":
            return rng.choice((RESOURCE_TOPIC, RESOURCE_TOPIC, RESOURCE_BROKER, RESOURCE_BROKER_LOGGER))
        if name == "config_operation":
            return rng.choice((0, 1, 2, 3))
        if name == "broker_ids":
            return pools.broker_id
        if name in ("producer_id", "producer_epoch"):
            return -1
        if name == "transaction_timeout_ms":
            return 60000
        if name == "endpoint_type":
            return rng.choice((1, 2))
        if name == "key_type":
            return rng.choice((0, 1))
        lo, hi = INT_RANGES[t]
        return max(lo, min(hi, rng.choice((0, 1, 2, -1, rng.randrange(100)))))


# -- sites: every place in a request a mutation can touch ---------------------------------------------


class Site:
    """One field of one struct (or one element of a primitive array) in a request object."""

    __slots__ = ("container", "attr", "index", "field", "path", "struct_name")

    def __init__(self, container: Any, attr: str | None, index: int | None, field: Field, path: str,
                 struct_name: str) -> None:
        self.container, self.attr, self.index, self.field, self.path = container, attr, index, field, path
        self.struct_name = struct_name

    def get(self) -> Any:
        return getattr(self.container, self.attr) if self.attr is not None else self.container[self.index]

    def set(self, value: Any) -> None:
        if self.attr is not None:
            setattr(self.container, self.attr, value)
        else:
            self.container[self.index] = value


def sites_of(obj: Any, struct_name: str, fields: tuple[Field, ...], version: int, path: str = "") -> list[Site]:
    out: list[Site] = []
    for f in fields:
        if version not in f.versions:
            continue
        value = getattr(obj, f.name)
        out.append(Site(obj, f.name, None, f, path + f.name, struct_name))
        if f.is_array and value:
            for i, element in enumerate(value):
                if f.is_struct:
                    out += sites_of(element, f.element_type, f.fields, version, f"{path}{f.name}[{i}].")
                else:
                    element_field = Field(name=f.name, type=f.element_type, versions=f.versions)
                    out.append(Site(value, None, i, element_field, f"{path}{f.name}[{i}]", struct_name))
        elif f.is_struct and not f.is_array:
            out += sites_of(value, f.type, f.fields, version, f"{path}{f.name}.")
    return out


def _pick(rng: random.Random, sites: list[Site], test: Callable[[Site], bool]) -> Site | None:
    candidates = [s for s in sites if test(s)]
    return rng.choice(candidates) if candidates else None


#: Marker lengths written by the encoder and replaced after encoding (unlikely anywhere else).
MAGIC_WIDE = 0x7E5A5A5A
MAGIC_SHORT = 0x7E5A


def apply_patches(data: bytes, patches: list[tuple[bytes, bytes]]) -> bytes | None:
    """Replace each marker in the frame (whose size prefix is then fixed); None when one is not unique."""
    body = data[4:]
    for pattern, replacement in patches:
        if body.count(pattern) != 1:
            return None
        body = body.replace(pattern, replacement)
    return _resize(body)


def _is_int(s: Site) -> bool:
    return s.field.type in INT_RANGES


def _is_variable(s: Site) -> bool:
    return s.field.is_array or s.field.type in ("string", "bytes", "records")


def _compact(schema: Any, version: int, f: Field) -> bool:
    return version in f.flexible if f.flexible is not None else schema.is_flexible(version)


class Mutator:
    """Field-level mutations of a request object; each returns a detail line or None (not applicable)."""

    def __init__(self, rng: random.Random, pools: Pools, schema: Any, version: int, obj: Any) -> None:
        self.rng, self.pools, self.schema, self.version, self.obj = rng, pools, schema, version, obj
        self.sites = sites_of(obj, schema.name, schema.fields, version)
        #: Tags for known bugs to match.
        self.tags: set[str] = set()
        #: (bytes the encoder wrote, bytes to put in their place) in the encoded frame.
        self.patches: list[tuple[bytes, bytes]] = []

    def int_boundary(self) -> str | None:
        site = _pick(self.rng, self.sites, _is_int)
        if site is None:
            return None
        lo, hi = INT_RANGES[site.field.type]
        value = self.rng.choice((lo, hi, -1, 0, hi - 1, lo + 1, 1))
        site.set(value)
        self.tags.add(f"int:{site.field.name}")
        return f"{site.path} = {value}"

    def null(self) -> str | None:
        """A null (or another negative length) where the encoder would refuse one: the field is
        written with a marker length, which `apply_patches` replaces in the encoded frame."""
        site = _pick(self.rng, self.sites, _is_variable)
        if site is None:
            return None
        f = site.field
        compact = _compact(self.schema, self.version, f)
        wide = f.is_array or f.type != "string"
        magic = MAGIC_WIDE if wide or compact else MAGIC_SHORT
        if compact:
            pattern, replacement = encode_uvarint(magic + 1), b"\x00"
            length = -1
        else:
            length = self.rng.choice((-1, -1, -2))
            pattern = struct.pack(">i" if wide else ">h", magic)
            replacement = struct.pack(">i" if wide else ">h", length)
        if f.is_array:
            site.set(LyingList([], magic))
        elif f.type == "string":
            site.set(LyingStr(b"", magic))
        else:
            site.set(LyingBytes(b"", magic))
        self.patches.append((pattern, replacement))
        nullable = self.version in f.nullable
        return f"{site.path} length {length} ({'nullable' if nullable else 'not nullable'})"

    def long_string(self) -> str | None:
        site = _pick(self.rng, self.sites, lambda s: s.field.type in ("string", "bytes") and not s.field.is_array)
        if site is None:
            return None
        if site.field.type == "string":
            compact = _compact(self.schema, self.version, site.field)
            n = self.rng.choice((32767, 100_000)) if compact else 32767
            site.set("x" * n)
            if not compact:
                self.tags.add("long-string-int16")
        else:
            n = self.rng.choice((65536, 1 << 20))
            site.set(b"\x00" * n)
        return f"{site.path} of {n} {'characters' if site.field.type == 'string' else 'bytes'}"

    def bad_utf8(self) -> str | None:
        site = _pick(self.rng, self.sites, lambda s: s.field.type == "string" and not s.field.is_array)
        if site is None:
            return None
        raw = self.rng.choice((b"\xff\xfe", b"\xc3\x28", b"a\x80b", b"\xed\xa0\x80", b"\x00\x00"))
        site.set(LyingStr(raw))
        return f"{site.path} = {raw!r}"

    def huge_count(self) -> str | None:
        site = _pick(self.rng, self.sites, _is_variable)
        if site is None:
            return None
        compact = _compact(self.schema, self.version, site.field)
        wide = site.field.is_array or site.field.type != "string"
        if wide:
            claimed = self.rng.choice((2**31 - 2, 10**6, 2**24)) if compact else self.rng.choice((2**31 - 1, 10**6))
        else:
            claimed = 2**15 - 1 if not compact else self.rng.choice((2**31 - 2, 10**6))
        self._lie(site, claimed)
        return f"{site.path} claims {claimed} {'elements' if site.field.is_array else 'bytes'}"

    def count_lie(self) -> str | None:
        site = _pick(self.rng, self.sites, _is_variable)
        if site is None:
            return None
        value = site.get()
        actual = 0 if value is None else (len(value.encode()) if isinstance(value, str) else len(value))
        claimed = max(0, actual + self.rng.choice((1, 2, -1, 7)))
        self._lie(site, claimed)
        return f"{site.path} claims {claimed} for {actual}"

    def _lie(self, site: Site, claimed: int) -> None:
        value = site.get()
        f = site.field
        if f.is_array:
            site.set(LyingList(list(value or []), claimed))
        elif f.type == "string":
            site.set(LyingStr((value or "").encode(), claimed))
        else:
            site.set(LyingBytes(bytes(value or b""), claimed))

    def many_elements(self) -> str | None:
        site = _pick(self.rng, self.sites, lambda s: s.field.is_array and s.attr is not None)
        if site is None:
            return None
        n = self.rng.choice((1000, 5000, 20000))
        value = list(site.get() or [])
        api = self.schema.api_key
        read_only = api in (ApiKey.METADATA, ApiKey.LIST_OFFSETS, ApiKey.DESCRIBE_CONFIGS, ApiKey.FETCH,
                            ApiKey.OFFSET_FOR_LEADER_EPOCH)
        # Metadata below v4 always auto-creates what it names: distinct names only where that can be off.
        can_name_unknowns = read_only and not (api == ApiKey.METADATA and self.version < 4)
        if site.field.is_struct and can_name_unknowns and site.field.name in ("topics", "resources") \
                and self.rng.random() < 0.5:
            # Distinct names nobody created (auto-creation off), as a client listing unknown topics would.
            if api == ApiKey.METADATA:
                self.obj.allow_auto_topic_creation = False
            element_cls = self.schema.classes[site.field.element_type]
            items = []
            for i in range(n):
                gen = RequestGen(self.rng, self.pools, api, self.version)
                item = gen._struct(site.field.element_type, site.field.fields)
                for attr in ("name", "topic", "resource_name"):
                    if hasattr(item, attr) and isinstance(getattr(item, attr), str):
                        setattr(item, attr, f"fz-many-{i}")
                items.append(item)
            assert all(isinstance(x, element_cls) for x in items)
            site.set(items)
            self.tags.add("many-distinct")
            return f"{site.path} with {n} distinct unknown entries"
        if not value:
            if site.field.is_struct:
                value = [RequestGen(self.rng, self.pools, api, self.version)._struct(site.field.element_type,
                                                                                    site.field.fields)]
            else:
                value = [_field_default_choice(self.rng, Field(name=site.field.name, type=site.field.element_type,
                                                               versions=site.field.versions))]
        if api == ApiKey.PRODUCE and site.field.name == "partition_data":
            n = min(n, 1000)
        site.set([value[i % len(value)] for i in range(n)])
        self.tags.add("many-duplicates")
        return f"{site.path} repeated to {n} entries"

    def unknown(self) -> str | None:
        rng = self.rng
        site = _pick(rng, self.sites, lambda s: s.field.type == "uuid" or (s.struct_name, s.field.name) in
                     TOPIC_NAME_FIELDS or (s.field.name in PARTITION_FIELDS and _is_int(s)))
        if site is None:
            return None
        if site.field.type == "uuid":
            site.set(uuid.UUID(int=rng.getrandbits(128)))
            return f"{site.path} = an unknown topic id"
        if site.field.type == "string" or site.field.element_type == "string":
            value = rng.choice((topic_name(rng, "fz-unknown"), "", ".", "..", "__cluster_metadata",
                                "a" * 250, "bad/name", "__consumer_offsets"))
            if (site.struct_name, site.field.name) in DESTRUCTIVE and value in self.pools.protected:
                value = topic_name(rng, "fz-unknown")
            if site.field.is_array:
                site.set([value])
            else:
                site.set(value)
            return f"{site.path} = {value!r:.40}"
        value = rng.choice((-1, 2**31 - 1, 1000, -(2**31), 3))
        site.set([value] if site.field.is_array else value)
        return f"{site.path} = partition {value}"

    def empty(self) -> str | None:
        site = _pick(self.rng, self.sites, lambda s: (s.field.is_array or s.field.type in ("string", "bytes"))
                     and s.attr is not None)
        if site is None:
            return None
        f = site.field
        site.set([] if f.is_array else ("" if f.type == "string" else b""))
        return f"{site.path} empty"

    def duplicates(self) -> str | None:
        site = _pick(self.rng, self.sites, lambda s: s.field.is_array and s.attr is not None and bool(s.get()))
        if site is None:
            return None
        value = list(site.get())
        site.set(value + [value[self.rng.randrange(len(value))]])
        return f"{site.path}: one element twice"


FIELD_MUTATIONS = {
    "field:int-boundary": Mutator.int_boundary,
    "field:null": Mutator.null,
    "field:long-string": Mutator.long_string,
    "field:bad-utf8": Mutator.bad_utf8,
    "field:huge-count": Mutator.huge_count,
    "field:count-lie": Mutator.count_lie,
    "field:many-elements": Mutator.many_elements,
    "field:unknown": Mutator.unknown,
    "field:empty": Mutator.empty,
    "field:duplicates": Mutator.duplicates,
}


def _items(value: Any) -> Any:
    """The elements of an array field (a lying list included; none for null)."""
    return () if value is None else iter(value)


def make_safe(pools: Pools, api_key: int, obj: Any) -> None:
    """Keep the protected topics' acknowledged data checkable: requests that delete, truncate or
    reconfigure are pointed at scratch topics, and broker-wide config changes only validated."""
    scratch = sorted(pools.scratch) or ["fuzz-scratch"]
    protected_ids = pools.protected_ids()
    if api_key == ApiKey.DELETE_TOPICS:
        names = obj.topic_names
        if isinstance(names, LyingList):
            obj.topic_names = LyingList([scratch[0] if n in pools.protected else n for n in names], names.claimed)
        elif names is not None:
            obj.topic_names = [scratch[0] if n in pools.protected else n for n in names]
        for state in _items(obj.topics):
            if state.name in pools.protected:
                state.name = scratch[0]
            if isinstance(state.topic_id, uuid.UUID) and state.topic_id.bytes in protected_ids:
                state.topic_id = uuid.UUID(int=0)
    elif api_key == ApiKey.DELETE_RECORDS:
        for topic in _items(obj.topics):
            if topic.name in pools.protected:
                topic.name = scratch[0]
    elif api_key in (ApiKey.INCREMENTAL_ALTER_CONFIGS, ApiKey.ALTER_CONFIGS):
        for resource in _items(obj.resources):
            if resource.resource_type == RESOURCE_TOPIC and resource.resource_name in pools.protected:
                resource.resource_name = scratch[0]
            elif resource.resource_type != RESOURCE_TOPIC:
                obj.validate_only = True


# -- byte-level mutations of an encoded frame ---------------------------------------------------------

_SIZE = struct.Struct(">i")
#: Size prefixes from here on ask the server for a buffer that matters (known bugs match on it).
HUGE_FRAME = 16 * 1024 * 1024
HEADER_FIXED = 8  # api key, api version, correlation id


def _resize(body: bytes) -> bytes:
    return _SIZE.pack(len(body)) + body


def _bytes_truncate(rng: random.Random, body: bytearray) -> tuple[bytes, str, bool]:
    cut = rng.randrange(0, len(body))
    return _resize(bytes(body[:cut])), f"frame cut to {cut} of {len(body)} bytes", True


def _bytes_bitflip(rng: random.Random, body: bytearray) -> tuple[bytes, str, bool]:
    if len(body) <= HEADER_FIXED:
        return _resize(bytes(body)), "frame too short to flip", True
    positions = []
    for _ in range(rng.choice((1, 1, 2, 3, 8))):
        pos = rng.randrange(HEADER_FIXED, len(body))
        body[pos] ^= 1 << rng.randrange(8)
        positions.append(pos)
    return _resize(bytes(body)), f"bits flipped at {positions}", True


def _bytes_splice(rng: random.Random, body: bytearray) -> tuple[bytes, str, bool]:
    pos = rng.randrange(min(HEADER_FIXED, len(body)), len(body) + 1)
    chunk = batches.random_bytes(rng, rng.randrange(1, 16))
    if rng.random() < 0.5:
        body[pos:pos + len(chunk)] = chunk
        how = "over"
    else:
        body[pos:pos] = chunk
        how = "into"
    return _resize(bytes(body)), f"{len(chunk)} random bytes written {how} the body at {pos}", True


def _bytes_trailing(rng: random.Random, body: bytearray) -> tuple[bytes, str, bool]:
    extra = batches.random_bytes(rng, rng.randrange(1, 64))
    return _resize(bytes(body) + extra), f"{len(extra)} bytes after the body", True


def _bytes_size_short(rng: random.Random, body: bytearray) -> tuple[bytes, str, bool]:
    size = rng.randrange(0, len(body))
    return _SIZE.pack(size) + bytes(body), f"size prefix {size} for {len(body)} bytes", True


def _bytes_size_long(rng: random.Random, body: bytearray) -> tuple[bytes, str, bool]:
    size = len(body) + rng.choice((1, 10, 1000))
    return _SIZE.pack(size) + bytes(body), f"size prefix {size} for {len(body)} bytes, then EOF", True


def _bytes_size_huge(rng: random.Random, body: bytearray) -> tuple[bytes, str, bool]:
    size = rng.choice((100 * 1024 * 1024, 64 * 1024 * 1024, 100 * 1024 * 1024 + 1, 2**31 - 1, -1, -(2**31)))
    return _SIZE.pack(size) + bytes(body[:4096]), f"size prefix {size}, {min(len(body), 4096)} bytes, EOF", True


def _bytes_random(rng: random.Random, body: bytearray) -> tuple[bytes, str, bool]:
    data = batches.random_bytes(rng, rng.choice((0, 1, 7, 8, 30, 300)))
    return _resize(data), f"{len(data)} random bytes", True


BYTE_MUTATIONS = {
    "bytes:truncate": _bytes_truncate,
    "bytes:bitflip": _bytes_bitflip,
    "bytes:splice": _bytes_splice,
    "bytes:trailing": _bytes_trailing,
    "bytes:size-short": _bytes_size_short,
    "bytes:size-long": _bytes_size_long,
    "bytes:size-huge": _bytes_size_huge,
    "bytes:random": _bytes_random,
}
HEADER_MUTATIONS = ("header:version-skew", "header:api-key", "header:client-id")


def _unknown_tags(rng: random.Random, frame: bytes) -> tuple[bytes, str] | None:
    """Replace the top-level empty tagged-field section (the frame's last byte) with unknown tags."""
    if not frame or frame[-1] != 0:
        return None
    tags = bytearray()
    count = rng.choice((1, 2, 5))
    for _ in range(count):
        tag = rng.choice((0, 1, 7, 99, 2**31 - 1))
        data = batches.random_bytes(rng, rng.choice((0, 1, 8, 40)))
        tags += encode_uvarint(tag) + encode_uvarint(len(data)) + data
    body = frame[4:-1] + encode_uvarint(count) + bytes(tags)
    return _resize(body), f"{count} unknown tagged fields at the end of the body"


def touches_protected(pools: Pools, api_key: int, request: Any) -> bool:
    """Whether a request, as the broker parses it, deletes, truncates or reconfigures a protected topic
    (or changes broker configs for good): what `make_safe` prevents, after mutations that change how
    the bytes are read."""
    if api_key == ApiKey.DELETE_TOPICS:
        return bool(set(request.topic_names or ()) & set(pools.protected)) or any(
            t.name in pools.protected or t.topic_id.bytes in pools.protected_ids() for t in request.topics or ())
    if api_key == ApiKey.DELETE_RECORDS:
        return any(t.name in pools.protected for t in request.topics)
    if api_key in (ApiKey.INCREMENTAL_ALTER_CONFIGS, ApiKey.ALTER_CONFIGS) and not request.validate_only:
        return any(r.resource_type != RESOURCE_TOPIC or r.resource_name in pools.protected for r in request.resources)
    return False


def _server_view_tags(data: bytes, pools: Pools) -> set[str]:
    """Tags for what the broker will parse out of the frame: ``produce-duplicate-partition`` and
    ``fetch-duplicate-partition`` (one partition twice), ``metadata-null-name-before-v12`` (a topic without a name in
    Metadata below v12), ``huge-partition-count``, and ``touches-protected`` (see `touches_protected`:
    the campaign does not send these)."""
    try:
        if int.from_bytes(data[:4], "big") != len(data) - 4:
            return set()
        header, request = parse_request(data[4:], allow_trailing_bytes=True)
    except (InvalidRequestError, UnsupportedVersionError):
        return set()
    tags = set()
    if touches_protected(pools, header.request_api_key, request):
        tags.add("touches-protected")
    if header.request_api_key == ApiKey.PRODUCE:
        seen = set()
        for topic in request.topic_data:
            for partition in topic.partition_data:
                key = (topic.name, partition.index)
                if key in seen:
                    tags.add("produce-duplicate-partition")
                seen.add(key)
    elif header.request_api_key == ApiKey.METADATA and header.request_api_version < 12:
        if any(t.name is None for t in request.topics or ()):
            tags.add("metadata-null-name-before-v12")
    elif header.request_api_key == ApiKey.FETCH:
        named = [(t.topic, t.topic_id, p.partition) for t in request.topics for p in t.partitions]
        if len(named) != len(set(named)):
            tags.add("fetch-duplicate-partition")
    elif header.request_api_key == ApiKey.CREATE_TOPICS:
        if any(t.num_partitions > HUGE_PARTITION_COUNT for t in request.topics):
            tags.add("huge-partition-count")
    elif header.request_api_key == ApiKey.CREATE_PARTITIONS:
        if any(t.count > HUGE_PARTITION_COUNT for t in request.topics):
            tags.add("huge-partition-count")
    return tags


def _encode(api_key: int, version: int, correlation_id: int, client_id: Any, obj: Any) -> bytes:
    return join_frame(encode_request(api_key, version, correlation_id, client_id, obj))


KAFKA_CLASS_WEIGHTS = (
    ("valid", 12),
    *((name, 3) for name in FIELD_MUTATIONS),
    *((name, 2) for name in BYTE_MUTATIONS),
    *((name, 2) for name in HEADER_MUTATIONS),
    ("field:unknown-tags", 2),
)
KAFKA_CLASSES = tuple(name for name, _ in KAFKA_CLASS_WEIGHTS) + batches.MUTATION_CLASSES


def choose_api(rng: random.Random, pools: Pools) -> tuple[int, int]:
    served = sorted(pools.served) or sorted(REQUESTS)
    weights = [4 if k == ApiKey.PRODUCE else 1 for k in served]
    api_key = rng.choices(served, weights)[0]
    lo, hi = pools.served.get(api_key, (REQUESTS[api_key].SCHEMA.versions.lo, REQUESTS[api_key].SCHEMA.versions.hi))
    if api_key == ApiKey.PRODUCE:
        lo = max(lo, 3)
    return api_key, rng.randint(lo, hi)


def kafka_frame(rng: random.Random, pools: Pools, index: int, *, klass: str | None = None,
                api: tuple[int, int] | None = None) -> Frame:
    """One Kafka-port frame drawn from ``rng``: an api and version the target serves, then a class."""
    api_key, version = api or choose_api(rng, pools)
    if klass is None:
        names = [name for name, _ in KAFKA_CLASS_WEIGHTS]
        weights = [w for _, w in KAFKA_CLASS_WEIGHTS]
        if api_key == ApiKey.PRODUCE and rng.random() < 0.5:
            klass = rng.choice(batches.MUTATION_CLASSES)
        else:
            klass = rng.choices(names, weights)[0]
    obj = RequestGen(rng, pools, api_key, version).build()
    name = f"{ApiKey(api_key).name.title().replace('_', '')} v{version}"
    correlation_id = rng.randrange(2**31)
    client_id: Any = "kraftpy-fuzz"
    tags: set[str] = {f"api:{api_key}"}
    detail = "as generated"
    patches: list[tuple[bytes, bytes]] = []
    if klass.startswith("batch:"):
        if api_key != ApiKey.PRODUCE:
            klass = "valid"
        else:
            partitions = [p for t in obj.topic_data for p in t.partition_data]
            if partitions:
                data, klass, detail = batches.mutated_batch(rng, klass)
                target = rng.choice(partitions)
                target.records = data
            else:
                klass = "valid"
    elif klass in FIELD_MUTATIONS:
        mutator = Mutator(rng, pools, REQUESTS[api_key].SCHEMA, version, obj)
        result = FIELD_MUTATIONS[klass](mutator)
        tags |= mutator.tags
        patches = mutator.patches
        if result is None:
            klass, detail = "valid", "as generated (no field for the mutation)"
        else:
            detail = result
    make_safe(pools, api_key, obj)
    if klass == "header:client-id":
        client_id = rng.choice((None, "c" * 32767, LyingStr(b"\xff\xfe\xfd"), LyingStr(b"", 2**15 - 1)))
        detail = f"client id {client_id!r:.30}"
    try:
        data = _encode(api_key, version, correlation_id, client_id, obj)
        if patches:
            patched = apply_patches(data, patches)
            if patched is None:
                raise EncodeError("marker length not unique in the frame")
            data = patched
    except (EncodeError, ValueError, OverflowError, TypeError, struct.error) as exc:
        # A lie the encoder cannot write (e.g. a lying count of fixed-width elements): send it valid.
        obj = RequestGen(rng, pools, api_key, version).build()
        make_safe(pools, api_key, obj)
        data = _encode(api_key, version, correlation_id, "kraftpy-fuzz", obj)
        klass, detail = "valid", f"as generated (mutation not encodable: {exc})"
    if klass == "header:version-skew":
        lo, hi = pools.served.get(api_key, (version, version))
        other = rng.choice([v for v in range(lo, hi + 1) if v != version] or [hi + 1])
        body = bytearray(data[4:])
        struct.pack_into(">h", body, 2, other)
        data = _resize(bytes(body))
        detail = f"v{version} body under a v{other} header"
    elif klass == "header:api-key":
        body = bytearray(data[4:])
        if rng.random() < 0.5:
            key = rng.choice([k for k in (*range(0, 75), 1000, -1, 32767) if k not in pools.served])
            struct.pack_into(">h", body, 0, key)
            detail = f"api key {key}"
        else:
            bad_version = rng.choice((-1, 32767, pools.served.get(api_key, (0, 0))[1] + 1))
            struct.pack_into(">h", body, 2, bad_version)
            detail = f"{name.split()[0]} version {bad_version}"
        data = _resize(bytes(body))
    elif klass == "field:unknown-tags":
        mutated = _unknown_tags(rng, data) if REQUESTS[api_key].SCHEMA.is_flexible(version) else None
        if mutated is None:
            klass, detail = "valid", "as generated (version without tagged fields)"
        else:
            data, detail = mutated
    elif klass in BYTE_MUTATIONS:
        data, detail, _ = BYTE_MUTATIONS[klass](rng, bytearray(data[4:]))
        if HUGE_FRAME <= int.from_bytes(data[:4], "big", signed=True):
            tags.add("huge-size-prefix")
    tags.add(klass)
    tags |= _server_view_tags(data, pools)
    if METADATA_TOPIC in data:
        tags.add("names-cluster-metadata")
    return Frame(index=index, port=KAFKA, api=name, klass=klass, detail=detail, data=data, half_close=True,
                 tags=frozenset(tags))
