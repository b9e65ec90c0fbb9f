"""`__transaction_state` records: the declarations match Kafka's, and the bytes are Kafka's bytes."""

from __future__ import annotations

import json
import os
import re
import struct
from pathlib import Path

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraftpy.coordinator import txn_records as tr
from kraftpy.coordinator.records import CoordinatorRecordError, UnknownKey
from kraftpy.protocol.schema import Versions, default_value

REFERENCE = Path(os.environ.get("KAFKA_COORDINATOR_RECORDS_DIR") or (
    Path(__file__).resolve().parents[3] / "shared" / "reference" / "kafka-protocol" / "coordinator-records"))


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()


def _load(name: str) -> dict:
    text = (REFERENCE / f"{name}.json").read_text()
    return json.loads(re.sub(r"^\s*//.*$", "", text, flags=re.M))


def _json_fields(fields: list[dict], version: int, flexible: bool) -> list[tuple]:
    out = []
    for f in fields:
        # Kafka's generator: a field without "versions" exists in its tagged versions.
        if version not in Versions.parse(f.get("versions") or f.get("taggedVersions")):
            continue
        t = f["type"]
        default = f.get("default")
        if default == "null":
            default = None
        elif default is not None and t.startswith("int"):
            default = int(default)
        tagged = flexible and "tag" in f and version in Versions.parse(f.get("taggedVersions"))
        out.append((_snake(f["name"]), t, version in Versions.parse(f.get("nullableVersions")),
                    None if default in (0, "") else default, f["tag"] if tagged else None,
                    _json_fields(f.get("fields", []), version, flexible)))
    return out


def _dsl_fields(fields, version: int, flexible: bool) -> list[tuple]:
    out = []
    for f in fields:
        if version not in f.versions:
            continue
        default = None
        if not (f.is_array or f.is_struct):
            value = default_value(f)
            default = value if value not in (0, "", b"") else None
        tag = f.tag if flexible and f.is_tagged_in(version) else None
        out.append((f.name, f.type, version in f.nullable, default, tag, _dsl_fields(f.fields, version, flexible)))
    return out


@pytest.mark.skipif(not REFERENCE.is_dir(), reason="reference coordinator records not present")
@pytest.mark.parametrize("cls", [tr.TransactionLogKey, tr.TransactionLogValue], ids=lambda c: c.__name__)
def test_declarations_match_kafka(cls):
    ref = _load(cls.SCHEMA.name)
    assert Versions.parse(ref["validVersions"]) == cls.SCHEMA.versions
    assert Versions.parse(ref["flexibleVersions"]) == cls.SCHEMA.flexible
    for version in cls.SCHEMA.versions:
        flexible = cls.SCHEMA.is_flexible(version)
        assert _dsl_fields(cls.SCHEMA.fields, version, flexible) == _json_fields(ref["fields"], version, flexible), (
            f"{cls.SCHEMA.name} v{version}")


def _s(text: str) -> bytes:
    return struct.pack(">h", len(text)) + text.encode()


def _cs(text: str) -> bytes:
    return bytes([len(text) + 1]) + text.encode()


def test_key_bytes():
    expected = struct.pack(">h", 0) + _s("payments-tx")
    assert tr.transaction_log_key("payments-tx") == expected
    assert tr.decode_transaction_log_key(expected) == tr.TransactionKey("payments-tx")


def test_unknown_key_version_is_reported_not_guessed():
    assert tr.decode_transaction_log_key(struct.pack(">h", 1) + _s("x")) == UnknownKey(1)


ONGOING = tr.TransactionLogEntry(
    producer_id=1000, producer_epoch=4, transaction_timeout_ms=60000, status=tr.TransactionStatus.ONGOING,
    partitions=[("orders", 2), ("events", 1), ("orders", 0), ("events", 1)],
    last_update_timestamp_ms=1_700_000_000_500, start_timestamp_ms=1_700_000_000_000,
)


def test_value_v0_bytes():
    expected = (struct.pack(">h", 0) + struct.pack(">qhib", 1000, 4, 60000, 1)
                + struct.pack(">i", 2)
                + _s("events") + struct.pack(">ii", 1, 1)
                + _s("orders") + struct.pack(">iii", 2, 0, 2)
                + struct.pack(">qq", 1_700_000_000_500, 1_700_000_000_000))
    assert tr.transaction_log_value(ONGOING) == expected
    decoded = tr.decode_transaction_log_value(expected)
    assert decoded == ONGOING
    assert decoded.partitions == (("events", 1), ("orders", 0), ("orders", 2))
    assert decoded.status is tr.TransactionStatus.ONGOING


def test_value_v1_bytes_carry_the_tagged_fields():
    entry = tr.TransactionLogEntry(
        producer_id=1000, producer_epoch=5, transaction_timeout_ms=60000, status=tr.TransactionStatus.PREPARE_COMMIT,
        partitions=[("t", 0)], last_update_timestamp_ms=20, start_timestamp_ms=10,
        previous_producer_id=999, next_producer_id=-1, client_transaction_version=2,
    )
    expected = (struct.pack(">h", 1) + struct.pack(">qhib", 1000, 5, 60000, 2)
                + bytes([2]) + _cs("t") + bytes([2]) + struct.pack(">i", 0) + b"\x00"
                + struct.pack(">qq", 20, 10)
                # two tagged fields: tag 0 (8 bytes) previous producer id, tag 2 (2 bytes) client version;
                # next_producer_id is at its default, so absent.
                + bytes([2]) + bytes([0, 8]) + struct.pack(">q", 999) + bytes([2, 2]) + struct.pack(">h", 2))
    assert tr.transaction_log_value(entry, version=1) == expected
    assert tr.decode_transaction_log_value(expected) == entry


def test_v0_drops_the_tagged_fields_as_kafka_does():
    entry = attrs.evolve(ONGOING, previous_producer_id=7, client_transaction_version=2)
    decoded = tr.decode_transaction_log_value(tr.transaction_log_value(entry, version=0))
    assert (decoded.previous_producer_id, decoded.client_transaction_version) == (-1, 0)


def test_empty_state_writes_null_partitions_and_refuses_partitions():
    empty = tr.TransactionLogEntry(producer_id=5, producer_epoch=0, transaction_timeout_ms=1000,
                                   status=tr.TransactionStatus.EMPTY, partitions=[], last_update_timestamp_ms=3,
                                   start_timestamp_ms=-1)
    data = tr.transaction_log_value(empty)
    assert data == struct.pack(">h", 0) + struct.pack(">qhib", 5, 0, 1000, 0) + struct.pack(">i", -1) + struct.pack(
        ">qq", 3, -1)
    assert tr.decode_transaction_log_value(data) == empty
    with pytest.raises(ValueError, match="Empty"):
        tr.transaction_log_value(tr.TransactionLogEntry(
            producer_id=5, producer_epoch=0, transaction_timeout_ms=1000, status=tr.TransactionStatus.EMPTY,
            partitions=[("t", 0)], last_update_timestamp_ms=3, start_timestamp_ms=-1))
    # A reader ignores partitions listed in state Empty, like Kafka's.
    listed = (struct.pack(">h", 0) + struct.pack(">qhib", 5, 0, 1000, 0) + struct.pack(">i", 1) + _s("t")
              + struct.pack(">ii", 1, 0) + struct.pack(">qq", 3, -1))
    assert tr.decode_transaction_log_value(listed).partitions == ()


def test_tombstone_is_none():
    assert tr.decode_transaction_log_value(None) is None


@pytest.mark.parametrize("data, match", [
    (b"\x00", "no version"),
    (struct.pack(">h", 2) + b"\x00" * 30, "unknown version 2"),
    (struct.pack(">h", 0) + struct.pack(">qhib", 1, 0, 1, 9) + struct.pack(">i", -1) + struct.pack(">qq", 0, 0),
     "unknown transaction status 9"),
    (struct.pack(">h", 0) + struct.pack(">qhib", 1, 0, 1, 1) + struct.pack(">i", 3), "TransactionLogValue v0"),
])
def test_bad_values_raise_one_error(data, match):
    with pytest.raises(CoordinatorRecordError, match=match):
        tr.decode_transaction_log_value(data)


def test_status_names_are_kafkas():
    assert [s.kafka_name for s in tr.TransactionStatus] == [
        "Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort", "Dead",
        "PrepareEpochFence"]


_entries = st.builds(
    tr.TransactionLogEntry,
    producer_id=st.integers(-1, 2**63 - 1), producer_epoch=st.integers(-1, 2**15 - 1),
    transaction_timeout_ms=st.integers(0, 2**31 - 1),
    status=st.sampled_from([s for s in tr.TransactionStatus if s is not tr.TransactionStatus.EMPTY]),
    partitions=st.lists(st.tuples(st.text(min_size=1, max_size=5), st.integers(0, 2**31 - 1)), max_size=6),
    last_update_timestamp_ms=st.integers(-1, 2**62), start_timestamp_ms=st.integers(-1, 2**62),
    previous_producer_id=st.integers(-1, 2**62), next_producer_id=st.integers(-1, 2**62),
    client_transaction_version=st.integers(0, 2),
)


@settings(max_examples=60, deadline=None, database=None)
@given(_entries)
def test_v1_round_trips_every_entry(entry):
    assert tr.decode_transaction_log_value(tr.transaction_log_value(entry, version=1)) == entry
