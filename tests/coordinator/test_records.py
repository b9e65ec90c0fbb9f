"""`__consumer_offsets` records: the declarations match Kafka's, and the bytes are Kafka's bytes."""

from __future__ import annotations

import json
import os
import re
import struct
from pathlib import Path

import pytest

from kraftpy.coordinator import records
from kraftpy.protocol.schema import Versions, default_value

REFERENCE = Path(os.environ.get("KAFKA_COORDINATOR_RECORDS_DIR") or (
    Path(__file__).resolve().parents[3] / "shared" / "reference" / "kafka-protocol" / "coordinator-records"))


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()


def _load(name: str) -> dict:
    text = (REFERENCE / f"{name}.json").read_text()
    return json.loads(re.sub(r"^\s*//.*$", "", text, flags=re.M))


def _json_fields(fields: list[dict], common: dict[str, list[dict]], version: int) -> list[tuple]:
    out = []
    for f in fields:
        if version not in Versions.parse(f["versions"]):
            continue
        t = f["type"]
        nested = f.get("fields") or common.get(t[2:] if t.startswith("[]") else t, [])
        default = f.get("default")
        if default == "null":
            default = None
        elif default is not None and t.startswith("int"):
            default = int(default)
        out.append((_snake(f["name"]), t, version in Versions.parse(f.get("nullableVersions")), default,
                    _json_fields(nested, common, version)))
    return out


def _dsl_fields(fields, version: int) -> list[tuple]:
    out = []
    for f in fields:
        if version not in f.versions:
            continue
        default = None
        if not (f.is_array or f.is_struct):
            value = default_value(f)
            default = value if value not in (0, "", b"") else None
        out.append((f.name, f.type, version in f.nullable, default, _dsl_fields(f.fields, version)))
    return out


def _normalize_defaults(view: list[tuple]) -> list[tuple]:
    # A JSON field without a default has its type's zero value; compare only explicit non-zero defaults.
    return [(n, t, nullable, None if d in (0, "") else d, _normalize_defaults(sub)) for n, t, nullable, d, sub in view]


@pytest.mark.skipif(not REFERENCE.is_dir(), reason="reference coordinator records not present")
@pytest.mark.parametrize("cls", [records.OffsetCommitKey, records.OffsetCommitValue, records.GroupMetadataKey,
                                 records.GroupMetadataValue], ids=lambda c: c.__name__)
def test_declarations_match_kafka(cls):
    ref = _load(cls.SCHEMA.name)
    assert Versions.parse(ref["validVersions"]) == cls.SCHEMA.versions
    assert Versions.parse(ref["flexibleVersions"]) == cls.SCHEMA.flexible
    common = {s["name"]: s["fields"] for s in ref.get("commonStructs", [])}
    for version in cls.SCHEMA.versions:
        assert _dsl_fields(cls.SCHEMA.fields, version) == _normalize_defaults(
            _json_fields(ref["fields"], common, version)), f"{cls.SCHEMA.name} v{version}"


def _s(text: str | None) -> bytes:
    """A Kafka (int16-length) string; None is length -1."""
    if text is None:
        return struct.pack(">h", -1)
    data = text.encode()
    return struct.pack(">h", len(data)) + data


def _b(data: bytes) -> bytes:
    return struct.pack(">i", len(data)) + data


def test_offset_commit_key_bytes():
    expected = struct.pack(">h", 1) + _s("my-group") + _s("events") + struct.pack(">i", 7)
    assert records.offset_commit_key("my-group", "events", 7) == expected
    assert records.decode_key(expected) == records.OffsetKey("my-group", "events", 7)
    # Version 0 has the same fields (Kafka 0.8's): still an offset key.
    assert records.decode_key(struct.pack(">h", 0) + expected[2:]) == records.OffsetKey("my-group", "events", 7)


def test_group_metadata_key_bytes():
    expected = struct.pack(">h", 2) + _s("my-group")
    assert records.group_metadata_key("my-group") == expected
    assert records.decode_key(expected) == records.GroupKey("my-group")


def test_unknown_key_version_is_reported_not_guessed():
    # Version 3+ keys are KIP-848's records (ConsumerGroupMetadataKey...): loading skips them.
    assert records.decode_key(struct.pack(">h", 3) + _s("g")) == records.UnknownKey(3)


def test_offset_commit_value_v3_bytes():
    expected = (struct.pack(">h", 3) + struct.pack(">q", 1234) + struct.pack(">i", 5) + _s("meta")
                + struct.pack(">q", 1_700_000_000_000))
    assert records.offset_commit_value(1234, 5, "meta", 1_700_000_000_000) == expected
    v = records.decode_offset_value(expected)
    assert (v.offset, v.leader_epoch, v.metadata, v.commit_timestamp, v.expire_timestamp) == (
        1234, 5, "meta", 1_700_000_000_000, -1)


def test_offset_commit_value_with_expiry_is_written_as_v1():
    expected = (struct.pack(">h", 1) + struct.pack(">q", 9) + _s("") + struct.pack(">q", 100)
                + struct.pack(">q", 200))
    assert records.offset_commit_value(9, -1, "", 100, expire_timestamp=200) == expected
    v = records.decode_offset_value(expected)
    assert (v.offset, v.leader_epoch, v.metadata, v.commit_timestamp, v.expire_timestamp) == (9, -1, "", 100, 200)


@pytest.mark.parametrize("version,body,expected", [
    # v0: offset, metadata, commit timestamp (Kafka 0.8.2)
    (0, struct.pack(">q", 5) + _s("m") + struct.pack(">q", 10), (5, -1, "m", 10, -1)),
    # v2: no expire timestamp again (Kafka 2.1)
    (2, struct.pack(">q", 5) + _s("m") + struct.pack(">q", 10), (5, -1, "m", 10, -1)),
    # v4: flexible (compact string, empty tagged fields)
    (4, struct.pack(">q", 5) + struct.pack(">i", 3) + bytes([2]) + b"m" + struct.pack(">q", 10) + bytes([0]),
     (5, 3, "m", 10, -1)),
])
def test_offset_commit_value_every_version_decodes(version, body, expected):
    v = records.decode_offset_value(struct.pack(">h", version) + body)
    assert (v.offset, v.leader_epoch, v.metadata, v.commit_timestamp, v.expire_timestamp) == expected


def _member_v3(member_id, instance, client, host, rebalance, session, sub, assignment) -> bytes:
    return (_s(member_id) + _s(instance) + _s(client) + _s(host) + struct.pack(">ii", rebalance, session)
            + _b(sub) + _b(assignment))


def test_group_metadata_value_v3_bytes():
    expected = (struct.pack(">h", 3) + _s("consumer") + struct.pack(">i", 4) + _s("range") + _s("m-1")
                + struct.pack(">q", 1_700_000_000_123) + struct.pack(">i", 2)
                + _member_v3("m-1", None, "c1", "/10.0.0.1", 300000, 45000, b"sub1", b"asg1")
                + _member_v3("m-2", "pod-2", "c2", "/10.0.0.2", 300000, 45000, b"sub2", b""))
    value = records.GroupMetadataValue(
        protocol_type="consumer", generation=4, protocol="range", leader="m-1",
        current_state_timestamp=1_700_000_000_123, members=[
            records.MemberMetadata(member_id="m-1", group_instance_id=None, client_id="c1", client_host="/10.0.0.1",
                                   rebalance_timeout=300000, session_timeout=45000, subscription=b"sub1",
                                   assignment=b"asg1"),
            records.MemberMetadata(member_id="m-2", group_instance_id="pod-2", client_id="c2",
                                   client_host="/10.0.0.2", rebalance_timeout=300000, session_timeout=45000,
                                   subscription=b"sub2", assignment=b""),
        ])
    assert records.group_metadata_value(value) == expected
    assert records.decode_group_value(expected) == (3, value)


def test_empty_group_metadata_value_has_null_protocol_and_leader():
    expected = (struct.pack(">h", 3) + _s("consumer") + struct.pack(">i", 5) + _s(None) + _s(None)
                + struct.pack(">q", 42) + struct.pack(">i", 0))
    value = records.GroupMetadataValue(protocol_type="consumer", generation=5, protocol=None, leader=None,
                                       current_state_timestamp=42, members=[])
    assert records.group_metadata_value(value) == expected


def test_group_metadata_value_v0_has_no_rebalance_timeout():
    body = (_s("consumer") + struct.pack(">i", 1) + _s("range") + _s("a") + struct.pack(">i", 1)
            + _s("a") + _s("c") + _s("/h") + struct.pack(">i", 10000) + _b(b"s") + _b(b"x"))
    version, value = records.decode_group_value(struct.pack(">h", 0) + body)
    assert version == 0
    assert value.members[0].session_timeout == 10000 and value.members[0].rebalance_timeout == -1
    assert value.current_state_timestamp == -1


@pytest.mark.parametrize("data", [b"", b"\x00", struct.pack(">h", 3) + b"\x00", struct.pack(">h", 9)])
def test_garbage_values_raise_one_error(data):
    with pytest.raises(records.CoordinatorRecordError):
        records.decode_offset_value(data)
    with pytest.raises(records.CoordinatorRecordError):
        records.decode_group_value(data)


def test_truncated_key_raises():
    with pytest.raises(records.CoordinatorRecordError):
        records.decode_key(records.offset_commit_key("g", "t", 1)[:-2])
