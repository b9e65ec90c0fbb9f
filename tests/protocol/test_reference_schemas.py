"""The DSL declarations agree with Kafka's message definitions, version by version.

For every declared message and version, the effective field list (snake_case name, type, nullable,
tag, default, nested fields) is computed from the reference JSON and from the DSL, and compared;
so are the api key and which versions are flexible.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from kraftpy.protocol.api_keys import API_VERSIONS, ApiKey
from kraftpy.protocol.messages import REQUESTS, RESPONSES, RequestHeader, ResponseHeader
from kraftpy.protocol.schema import Field, Versions, default_value

# The reference definitions sit in the shared workspace next to the checkout; KAFKA_MESSAGES_DIR overrides.
REFERENCE = Path(os.environ.get("KAFKA_MESSAGES_DIR") or (
    Path(__file__).resolve().parents[3] / "shared" / "reference" / "kafka-protocol" / "messages"))
pytestmark = pytest.mark.skipif(not REFERENCE.is_dir(), reason="reference message definitions not present")

ALL_MESSAGES = [*REQUESTS.values(), *RESPONSES.values(), RequestHeader, ResponseHeader]

#: Versions newer than the reference definitions: (highest version, the fields they add, by name at any
#: depth). Each such version must be the reference's last one plus exactly these fields.
NEWER_THAN_REFERENCE: dict[str, tuple[int, set[str]]] = {
    "DescribeClusterRequest": (2, {"include_fenced_brokers"}),  # Kafka 4.0, KIP-1073
    "DescribeClusterResponse": (2, {"is_fenced"}),  # Kafka 4.0, KIP-1073
}


def snake_case(name: str) -> str:
    out = []
    for i, ch in enumerate(name):
        prev_lower = i and (name[i - 1].islower() or name[i - 1].isdigit())
        acronym_end = i and name[i - 1].isupper() and i + 1 < len(name) and name[i + 1].islower()
        if ch.isupper() and (prev_lower or acronym_end):
            out.append("_")
        out.append(ch.lower())
    return "".join(out)


def load(name: str) -> dict:
    text = (REFERENCE / f"{name}.json").read_text()
    return json.loads(re.sub(r"^\s*//.*$", "", text, flags=re.M))


def _json_default(field: dict):
    t = field["type"]
    if t.startswith("[]") or t not in {
        "bool", "int8", "int16", "uint16", "int32", "uint32", "int64", "float64", "string", "bytes", "uuid", "records"
    }:
        return None
    d = field.get("default")
    if d is None:
        return default_value(Field(name="x", type=t, versions=Versions(0, 0)))
    if d == "null":
        return None
    if t == "bool":
        return d if isinstance(d, bool) else d == "true"
    if t.startswith("int") or t.startswith("uint"):
        return d if isinstance(d, int) else int(d, 0)
    if t == "float64":
        return float(d)
    return d


def json_view(fields: list[dict], version: int, flexible: bool, common: dict[str, list[dict]] | None = None
              ) -> list[tuple]:
    """``common`` maps the names of a definition's ``commonStructs`` to their fields."""
    common = common or {}
    out = []
    for f in fields:
        if version not in Versions.parse(f["versions"]):
            continue
        nested = f.get("fields") or common.get(f["type"].removeprefix("[]"), [])
        tagged = flexible and "tag" in f and version in Versions.parse(f.get("taggedVersions"))
        out.append((
            snake_case(f["name"]),
            f["type"],
            version in Versions.parse(f.get("nullableVersions")),
            f["tag"] if tagged else None,
            _json_default(f),
            json_view(nested, version, flexible, common),
            version in Versions.parse(f["flexibleVersions"]) if "flexibleVersions" in f else None,
        ))
    return out


def dsl_view(fields: tuple[Field, ...], version: int, flexible: bool) -> list[tuple]:
    out = []
    for f in fields:
        if version not in f.versions:
            continue
        tagged = flexible and f.is_tagged_in(version)
        default = None if f.is_array or f.is_struct else default_value(f)
        out.append((
            f.name,
            f.type,
            version in f.nullable,
            f.tag if tagged else None,
            default,
            dsl_view(f.fields, version, flexible),
            version in f.flexible if f.flexible is not None else None,
        ))
    return out


@pytest.mark.parametrize("cls", ALL_MESSAGES, ids=lambda c: c.__name__)
def test_declaration_matches_reference(cls):
    schema = cls.SCHEMA
    ref = load(schema.name)
    assert ref["name"] == schema.name
    assert ref.get("apiKey") == schema.api_key
    valid = Versions.parse(ref["validVersions"])
    newer = NEWER_THAN_REFERENCE.get(schema.name)
    assert valid.lo <= schema.versions.lo and schema.versions.hi <= (valid.hi if newer is None else newer[0])
    ref_flexible = Versions.parse(ref["flexibleVersions"])
    for version in schema.versions:
        if version > valid.hi:
            assert newer is not None
            assert schema.is_flexible(version) == (valid.hi in ref_flexible), f"v{version} flexibility"
            added = _names(dsl_view(schema.fields, version, True)) - _names(dsl_view(schema.fields, valid.hi, True))
            assert added == newer[1], f"{schema.name} v{version} adds {added}"
            continue
        flexible = version in ref_flexible
        assert schema.is_flexible(version) == flexible, f"v{version} flexibility"
        common = {struct["name"]: struct["fields"] for struct in ref.get("commonStructs", [])}
        assert dsl_view(schema.fields, version, flexible) == json_view(ref["fields"], version, flexible, common), (
            f"{schema.name} v{version} differs from the reference"
        )


def _names(view: list[tuple]) -> set[str]:
    return {name for entry in view for name in (entry[0], *_names(entry[5]))}


def test_tags_only_in_flexible_versions():
    def walk(schema, fields):
        for f in fields:
            if f.tag is not None:
                assert f.tagged.lo >= schema.flexible.lo, (schema.name, f.name)
            walk(schema, f.fields)

    for cls in ALL_MESSAGES:
        walk(cls.SCHEMA, cls.SCHEMA.fields)


#: Declared (they parse and encode) but not served by the broker: not in its ApiVersions. None now:
#: AddRaftVoter and RemoveRaftVoter, served by the controllers, are forwarded by the brokers too.
DECLARED_NOT_SERVED: set[ApiKey] = set()
#: Served APIs whose schemas take every version of Kafka's definition, even those not advertised.
EVERY_REFERENCE_VERSION = {
    ApiKey.ADD_PARTITIONS_TO_TXN, ApiKey.ADD_OFFSETS_TO_TXN, ApiKey.END_TXN,
    ApiKey.TXN_OFFSET_COMMIT, ApiKey.DESCRIBE_PRODUCERS, ApiKey.DESCRIBE_TRANSACTIONS, ApiKey.LIST_TRANSACTIONS,
}


def test_api_key_table_matches_schemas():
    assert set(API_VERSIONS) == set(ApiKey) - DECLARED_NOT_SERVED
    assert {int(k) for k in ApiKey} == set(REQUESTS) == set(RESPONSES)
    for key, supported in API_VERSIONS.items():
        for cls in (REQUESTS[key], RESPONSES[key]):
            assert cls.SCHEMA.versions.lo <= supported.min_version <= supported.min_accepted
            assert supported.max_version <= cls.SCHEMA.versions.hi
    for key in ApiKey:
        assert load(REQUESTS[key].SCHEMA.name)["apiKey"] == key
        expected = "".join(part.capitalize() for part in key.name.split("_")) + "Request"
        assert REQUESTS[key].__name__ == expected


@pytest.mark.parametrize("key", sorted(EVERY_REFERENCE_VERSION | DECLARED_NOT_SERVED), ids=lambda k: k.name)
def test_declared_apis_take_every_reference_version(key):
    for cls in (REQUESTS[key], RESPONSES[key]):
        assert cls.SCHEMA.versions == Versions.parse(load(cls.SCHEMA.name)["validVersions"])


def test_snake_case():
    assert snake_case("TopicId") == "topic_id"
    assert snake_case("IsrNodes") == "isr_nodes"
    assert snake_case("ZkMigrationReady") == "zk_migration_ready"
    assert snake_case("ThrottleTimeMs") == "throttle_time_ms"
