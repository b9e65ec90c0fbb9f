"""Tagged fields: known ones round-trip and are written only when not default; unknown ones are skipped."""

from __future__ import annotations

import pytest

from kraftpy.protocol.messages import ApiVersionsResponse, FetchRequest, FetchResponse
from kraftpy.protocol.schema import DecodeError, F, message
from kraftpy.protocol.types import write_uvarint

R = FetchResponse


def partition(**kw):
    return R(responses=[R.FetchableTopicResponse(topic="t", partitions=[R.PartitionData(**kw)])])


def test_known_tagged_fields_round_trip():
    resp = partition(partition_index=1, diverging_epoch=R.EpochEndOffset(epoch=4, end_offset=99),
                     current_leader=R.LeaderIdAndEpoch(leader_id=2, leader_epoch=5), records=b"x")
    data = R.SCHEMA.to_bytes(12, resp)
    assert R.SCHEMA.from_bytes(12, data) == resp
    # Before v12 the tagged fields do not exist: they come back as defaults.
    old = R.SCHEMA.from_bytes(11, R.SCHEMA.to_bytes(11, resp))
    assert old.responses[0].partitions[0].diverging_epoch == R.EpochEndOffset()


def test_default_tagged_fields_are_not_written():
    plain = R.SCHEMA.to_bytes(12, partition(records=b"x"))
    tagged = R.SCHEMA.to_bytes(12, partition(records=b"x", snapshot_id=R.SnapshotId(end_offset=1, epoch=1)))
    # tag 2: uvarint tag, uvarint size 12, int64 + int32, and the nested struct's own empty tag section
    assert len(tagged) == len(plain) + 1 + 1 + 12 + 1


def test_root_level_tagged_field():
    req = FetchRequest(cluster_id="cluster-a", max_wait_ms=5)
    data = FetchRequest.SCHEMA.to_bytes(12, req)
    assert data.endswith(b"\x01\x00\x0a\x0acluster-a")  # one tag: 0, size 10, compact string
    assert FetchRequest.SCHEMA.from_bytes(12, data) == req
    assert FetchRequest.SCHEMA.to_bytes(12, FetchRequest(max_wait_ms=5)).endswith(b"\x00")


def with_extra_tags(data: bytes, tags: dict[int, bytes]) -> bytes:
    """Replace the final empty tag section of ``data`` by ``tags``."""
    assert data[-1] == 0
    out = bytearray(data[:-1])
    write_uvarint(out, len(tags))
    for tag in sorted(tags):
        write_uvarint(out, tag)
        write_uvarint(out, len(tags[tag]))
        out += tags[tag]
    return bytes(out)


def test_unknown_tagged_fields_are_skipped():
    resp = ApiVersionsResponse(api_keys=[ApiVersionsResponse.ApiVersion(api_key=1, max_version=13)])
    data = ApiVersionsResponse.SCHEMA.to_bytes(3, resp)
    extended = with_extra_tags(data, {7: b"unknown", 200: bytes(300)})
    assert ApiVersionsResponse.SCHEMA.from_bytes(3, extended) == resp


def test_known_and_unknown_tags_mixed():
    resp = ApiVersionsResponse(finalized_features_epoch=12)
    data = ApiVersionsResponse.SCHEMA.to_bytes(3, resp)
    decoded = ApiVersionsResponse.SCHEMA.from_bytes(3, data)
    assert decoded.finalized_features_epoch == 12
    base = ApiVersionsResponse.SCHEMA.to_bytes(3, ApiVersionsResponse())
    epoch = (12).to_bytes(8, "big")
    mixed = with_extra_tags(base, {1: epoch, 9: b"zz"})
    assert ApiVersionsResponse.SCHEMA.from_bytes(3, mixed).finalized_features_epoch == 12


def test_truncated_tagged_field_is_an_error():
    base = ApiVersionsResponse.SCHEMA.to_bytes(3, ApiVersionsResponse())
    broken = bytearray(with_extra_tags(base, {9: b"abcdef"}))
    with pytest.raises(DecodeError):
        ApiVersionsResponse.SCHEMA.from_bytes(3, bytes(broken[:-2]))


def test_tagged_array_and_string_fields():
    cls = message("Tagged", kind="request", versions="0-1", flexible="1+", fields=[
        F("a", "int32"),
        F("names", "[]string", "1+", tag=0),
        F("note", "string", "1+", nullable="1+", default=None, tag=1),
        F("ids", "[]int64", "1+", tag=2),
    ])
    obj = cls(a=1, names=["x", "yz"], note="n", ids=[1, -2])
    assert cls.SCHEMA.from_bytes(1, cls.SCHEMA.to_bytes(1, obj)) == obj
    assert cls.SCHEMA.to_bytes(1, cls(a=1)) == b"\x00\x00\x00\x01\x00"
    assert cls.SCHEMA.from_bytes(0, cls.SCHEMA.to_bytes(0, obj)) == cls(a=1)
