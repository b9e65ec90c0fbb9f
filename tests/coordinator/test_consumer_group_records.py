"""The KIP-848 records of ``__consumer_offsets``: the declarations match Kafka's, and they round-trip."""

from __future__ import annotations

import uuid

import pytest

from kraftpy.coordinator import consumer_group_records as cgr
from kraftpy.coordinator import records
from kraftpy.protocol.schema import Versions
from tests.coordinator.test_records import REFERENCE, _dsl_fields, _json_fields, _load, _normalize_defaults

DECLARED = [cls for pair in cgr.BY_KEY_VERSION.values() for cls in pair]


def _no_zero_uuid(view: list[tuple]) -> list[tuple]:
    # The uuid type's zero value is its default, as 0 is an int's: compare it as "no default".
    return [(n, t, nullable, None if d == uuid.UUID(int=0) else d, _no_zero_uuid(sub))
            for n, t, nullable, d, sub in view]


@pytest.mark.skipif(not REFERENCE.is_dir(), reason="reference coordinator records not present")
@pytest.mark.parametrize("cls", DECLARED, ids=lambda c: c.__name__)
def test_declarations_match_kafka(cls):
    ref = _load(cls.SCHEMA.name)
    assert Versions.parse(ref["validVersions"]) == cls.SCHEMA.versions
    assert Versions.parse(ref["flexibleVersions"]) == cls.SCHEMA.flexible
    common = {s["name"]: s["fields"] for s in ref.get("commonStructs", [])}
    for version in cls.SCHEMA.versions:
        assert _no_zero_uuid(_dsl_fields(cls.SCHEMA.fields, version)) == _normalize_defaults(
            _json_fields(ref["fields"], common, version)), f"{cls.SCHEMA.name} v{version}"


def test_keys_and_values_round_trip_and_the_classic_decoder_leaves_them_alone():
    k = cgr.key(cgr.CURRENT_ASSIGNMENT, "g", "m-1")
    assert records.decode_key(k) == records.UnknownKey(cgr.CURRENT_ASSIGNMENT)
    assert cgr.decode_key(cgr.CURRENT_ASSIGNMENT, k) == ("g", "m-1")
    assert cgr.decode_key(cgr.METADATA, cgr.key(cgr.METADATA, "g")) == ("g", None)
    t = uuid.UUID(int=7)
    cls = cgr.ConsumerGroupCurrentMemberAssignmentValue
    v = cls(member_epoch=5, previous_member_epoch=4, state=2,
            assigned_partitions=cgr.topic_partitions(cls.TopicPartitions, {t: frozenset({1, 0})}),
            partitions_pending_revocation=[])
    back = cgr.decode_value(cgr.CURRENT_ASSIGNMENT, cgr.value(cgr.CURRENT_ASSIGNMENT, v))
    assert (back.member_epoch, back.previous_member_epoch, back.state) == (5, 4, 2)
    assert cgr.assignment_of(back.assigned_partitions) == {t: frozenset({0, 1})}
    with pytest.raises(records.CoordinatorRecordError):
        cgr.decode_value(cgr.METADATA, b"\x00\x00")
