"""Metadata records: every type round-trips, unknown types and versions are refused, and each class
carries the fields of Kafka's schema for it (except the documented omissions)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import attrs
import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kraftpy.ids import ZERO_UUID, Uuid
from kraftpy.metadata.records import (
    OMITTED_KAFKA_FIELDS,
    RECORD_TYPES,
    AccessControlEntryRecord,
    BrokerEndpoint,
    BrokerFeature,
    BrokerRegistrationChangeRecord,
    ClientQuotaEntityData,
    ClientQuotaRecord,
    ConfigRecord,
    CorruptMetadataRecordError,
    FeatureLevelRecord,
    FenceBrokerRecord,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RegisterControllerRecord,
    RemoveAccessControlEntryRecord,
    RemoveTopicRecord,
    RemoveUserScramCredentialRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UnknownMetadataRecordError,
    UnregisterBrokerRecord,
    UnsupportedMetadataRecordVersionError,
    UserScramCredentialRecord,
    decode_record,
    encode_record,
)

int8 = st.integers(-(2**7), 2**7 - 1)
int16 = st.integers(-(2**15), 2**15 - 1)
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)
uint16 = st.integers(0, 2**16 - 1)
text = st.text(max_size=20)
uuids = st.binary(min_size=16, max_size=16).map(Uuid)
ids = st.lists(int32, max_size=6).map(tuple)
endpoints = st.lists(st.builds(BrokerEndpoint, text, text, uint16, int16), max_size=3).map(tuple)
features = st.lists(st.builds(BrokerFeature, text, int16, int16), max_size=3).map(tuple)

STRATEGIES = {
    UserScramCredentialRecord: st.builds(
        UserScramCredentialRecord, text, int8, st.binary(max_size=64), st.binary(max_size=64), st.binary(max_size=64), int32
    ),
    RemoveUserScramCredentialRecord: st.builds(RemoveUserScramCredentialRecord, text, int8),
    RegisterBrokerRecord: st.builds(
        RegisterBrokerRecord, int32, uuids, int64, endpoints, features, st.none() | text, st.booleans(), st.booleans(),
        st.lists(uuids, max_size=3).map(tuple),
    ),
    UnregisterBrokerRecord: st.builds(UnregisterBrokerRecord, int32, int64),
    TopicRecord: st.builds(TopicRecord, text, uuids),
    PartitionRecord: st.builds(PartitionRecord, int32, uuids, ids, ids, ids, ids, int32, int8, int32, int32,
                               st.lists(uuids, max_size=6).map(tuple)),
    ConfigRecord: st.builds(ConfigRecord, int8, text, text, st.none() | text),
    PartitionChangeRecord: st.builds(
        PartitionChangeRecord, int32, uuids, st.none() | ids, int32, st.none() | ids, st.none() | ids,
        st.none() | ids, int8, st.none() | st.lists(uuids, max_size=6).map(tuple),
    ),
    FenceBrokerRecord: st.builds(FenceBrokerRecord, int32, int64),
    UnfenceBrokerRecord: st.builds(UnfenceBrokerRecord, int32, int64),
    RemoveTopicRecord: st.builds(RemoveTopicRecord, uuids),
    FeatureLevelRecord: st.builds(FeatureLevelRecord, text, int16),
    ProducerIdsRecord: st.builds(ProducerIdsRecord, int32, int64, int64),
    BrokerRegistrationChangeRecord: st.builds(BrokerRegistrationChangeRecord, int32, int64, int8, int8),
    NoOpRecord: st.just(NoOpRecord()),
    RegisterControllerRecord: st.builds(RegisterControllerRecord, int32, uuids, endpoints, features),
    AccessControlEntryRecord: st.builds(AccessControlEntryRecord, uuids, int8, text, int8, text, text, int8, int8),
    RemoveAccessControlEntryRecord: st.builds(RemoveAccessControlEntryRecord, uuids),
    ClientQuotaRecord: st.builds(
        ClientQuotaRecord, st.lists(st.builds(ClientQuotaEntityData, text, st.none() | text), max_size=2).map(tuple),
        text, st.floats(allow_nan=False), st.booleans(),
    ),
}


def test_every_record_type_has_a_strategy():
    assert set(STRATEGIES) == set(RECORD_TYPES.values())


@pytest.mark.parametrize("cls", sorted(STRATEGIES, key=lambda c: c.RECORD_TYPE), ids=lambda c: c.__name__)
def test_record_round_trips(cls):
    @given(STRATEGIES[cls])
    def check(record):
        assert decode_record(encode_record(record)) == record

    check()


def test_unknown_record_type_is_refused():
    with pytest.raises(UnknownMetadataRecordError, match="unknown metadata record type 99"):
        decode_record(msgpack.packb([99, 0, []]))


def test_unknown_record_version_is_refused():
    with pytest.raises(UnsupportedMetadataRecordVersionError, match="RegisterBrokerRecord .* version 4 is not supported"):
        decode_record(msgpack.packb([RegisterBrokerRecord.RECORD_TYPE, 4, []]))


def test_records_written_before_directories_existed_still_load():
    """PartitionRecord v0, PartitionChangeRecord v0 and RegisterBrokerRecord v1 (a log written before
    KIP-858 directories) decode with the later fields at their defaults; one field too many is refused."""
    topic = Uuid(bytes(range(16)))
    old = msgpack.packb([3, 0, [0, topic.raw, [1, 2], [1, 2], [], [], 1, 0, 0, 0]])
    assert decode_record(old) == PartitionRecord(0, topic, (1, 2), (1, 2), leader=1)
    old_change = msgpack.packb([5, 0, [0, topic.raw, [1], -2, None, None, None, -1]])
    assert decode_record(old_change).directories is None
    old_broker = msgpack.packb([0, 1, [1, topic.raw, 5, [], [], None, True, False]])
    assert decode_record(old_broker).log_dirs == ()
    with pytest.raises(CorruptMetadataRecordError, match="too many fields"):
        decode_record(msgpack.packb([3, 0, [0, topic.raw, [1], [1], [], [], 1, 0, 0, 0, [topic.raw]]]))


def test_directories_are_sixteen_raw_bytes_per_replica():
    a, b = Uuid(b"a" * 16), Uuid(b"b" * 16)
    record = PartitionRecord(0, Uuid(bytes(16)), (1, 2), (1, 2), directories=(a, b))
    frame = msgpack.unpackb(encode_record(record))
    assert frame[:2] == [3, 1] and frame[2][-1] == [b"a" * 16, b"b" * 16]
    assert decode_record(encode_record(record)) == record


@pytest.mark.parametrize(
    "value",
    [
        b"\xc1",  # never used in msgpack
        msgpack.packb({"a": 1}),
        msgpack.packb([2, 0]),
        msgpack.packb([TopicRecord.RECORD_TYPE, 0, ["name"]]),  # a field missing
        msgpack.packb([TopicRecord.RECORD_TYPE, 0, ["name", b"short"]]),  # not a 16-byte id
        msgpack.packb([FenceBrokerRecord.RECORD_TYPE, 0, ["one", 2]]),  # wrong type
        msgpack.packb([2, 0, ["x", bytes(16)]]) + b"\x00",  # trailing bytes
    ],
)
def test_malformed_record_is_refused(value):
    with pytest.raises(CorruptMetadataRecordError):
        decode_record(value)


def test_encoding_a_non_record_is_refused():
    with pytest.raises(TypeError):
        encode_record(BrokerEndpoint("a", "b", 1, 0))  # type: ignore[arg-type]


def test_topic_id_base64_form_matches_kafka():
    assert str(ZERO_UUID) == "AAAAAAAAAAAAAAAAAAAAAA"
    topic_id = Uuid(bytes(range(16)))
    assert topic_id.to_base64() == "AAECAwQFBgcICQoLDA0ODw"
    assert Uuid.from_base64("AAECAwQFBgcICQoLDA0ODw") == topic_id
    with pytest.raises(ValueError):
        Uuid.from_base64("AAEC")


# -- cross-check with Kafka's schemas --------------------------------------------------------------


def _reference_dir() -> Path:
    configured = os.environ.get("KRAFTPY_KAFKA_REFERENCE")
    if configured:
        return Path(configured)
    return Path(__file__).resolve().parents[3] / "shared" / "reference" / "kafka-protocol"


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


def _load_schema(path: Path) -> dict:
    """Kafka's schema files are JSON with whole-line ``//`` comments."""
    return json.loads("\n".join(line for line in path.read_text().splitlines() if not line.lstrip().startswith("//")))


def _kafka_fields(fields: list[dict], omitted: set[str]) -> dict[str, list[dict] | None]:
    return {f["name"]: f.get("fields") for f in fields if f["name"] not in omitted}


@pytest.mark.parametrize("cls", sorted(RECORD_TYPES.values(), key=lambda c: c.RECORD_TYPE), ids=lambda c: c.__name__)
def test_record_fields_match_kafka_schema(cls):
    path = _reference_dir() / "metadata-records" / f"{cls.__name__}.json"
    if not path.exists():
        pytest.skip("Kafka's schema files are not available here")
    schema = _load_schema(path)
    assert schema["apiKey"] == cls.RECORD_TYPE
    low, _, high = schema["validVersions"].partition("-")
    assert int(low) <= cls.VERSION <= int(high or low)
    omitted = set(OMITTED_KAFKA_FIELDS.get(cls.__name__, {}))
    expected = _kafka_fields(schema["fields"], omitted)
    ours = {f.name: f for f in attrs.fields(cls)}
    assert [_snake(n) for n in expected] == list(ours), "fields (in Kafka's order) differ"
    for name, nested in expected.items():
        if nested:
            element = {"EndPoints": BrokerEndpoint, "Features": BrokerFeature, "Entity": ClientQuotaEntityData}[name]
            assert [_snake(f["name"]) for f in nested] == [f.name for f in attrs.fields(element)]


def test_omitted_fields_exist_in_kafka_schema():
    """The documented omissions name real fields, so the list cannot silently go stale."""
    for record_name, omitted in OMITTED_KAFKA_FIELDS.items():
        path = _reference_dir() / "metadata-records" / f"{record_name}.json"
        if not path.exists():
            pytest.skip("Kafka's schema files are not available here")
        names = {f["name"] for f in _load_schema(path)["fields"]}
        assert set(omitted) <= names, record_name
