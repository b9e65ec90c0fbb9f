"""Frame reassembly, request parsing with its errors, and response frames made of parts."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraftpy.protocol.api_keys import API_VERSIONS, ApiKey
from kraftpy.protocol.errors import (
    ErrorCode,
    FrameTooLargeError,
    InvalidRequestError,
    InvalidResponseError,
    UnsupportedVersionError,
)
from kraftpy.protocol.frames import (
    DEFAULT_MAX_FRAME_SIZE,
    FrameReader,
    decode_response,
    encode_request,
    encode_response,
    frame_size,
    join_frame,
    parse_request,
    produce_acks,
    request_header_version,
    response_header_version,
)
from kraftpy.protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    FetchResponse,
    HeartbeatRequest,
    MetadataResponse,
    ProduceRequest,
)
from kraftpy.protocol.types import FileRegion


def produce(records=b"batch-bytes") -> ProduceRequest:
    P = ProduceRequest
    return P(acks=-1, timeout_ms=1000, topic_data=[
        P.TopicProduceData(name="t", partition_data=[P.PartitionProduceData(index=3, records=records)])])


def frame_bytes(parts) -> bytes:
    return join_frame(parts)


# --- FrameReader -----------------------------------------------------------------------------------


@settings(max_examples=50, deadline=None)
@given(st.lists(st.binary(max_size=40), max_size=6), st.data())
def test_frame_reader_reassembles_any_split(payloads, data):
    stream = b"".join(struct.pack(">i", len(p)) + p for p in payloads)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=8)))
    reader = FrameReader()
    got = []
    prev = 0
    for cut in [*cuts, len(stream)]:
        chunk = stream[prev:cut]
        got += reader.feed(bytearray(chunk) if cut % 2 else chunk)
        prev = cut
    assert [bytes(f) for f in got] == payloads
    assert reader.pending == 0


def test_frame_reader_reports_partial_frames():
    reader = FrameReader()
    assert reader.feed(b"\x00\x00") == [] and reader.pending == 2
    assert reader.feed(b"\x00\x03ab") == [] and reader.pending == 6
    assert [bytes(f) for f in reader.feed(b"c")] == [b"abc"]
    assert reader.pending == 0


def test_frame_reader_refuses_oversized_frames_before_buffering():
    reader = FrameReader(max_frame_size=10)
    assert [bytes(f) for f in reader.feed(struct.pack(">i", 10) + bytes(10))] == [bytes(10)]
    with pytest.raises(FrameTooLargeError, match="socket.request.max.bytes=10") as info:
        reader.feed(struct.pack(">i", 11))
    assert info.value.size == 11 and info.value.error_code == ErrorCode.INVALID_REQUEST
    assert FrameReader().max_frame_size == DEFAULT_MAX_FRAME_SIZE == 104857600
    with pytest.raises(FrameTooLargeError, match="negative"):
        FrameReader().feed(struct.pack(">i", -1))


# --- parse_request ---------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [3, 8, 9])
def test_parse_request_returns_header_and_body(version):
    frame = frame_bytes(encode_request(0, version, 42, "client-1", produce()))
    assert struct.unpack_from(">i", frame)[0] == len(frame) - 4
    header, body = parse_request(frame[4:])
    assert (header.request_api_key, header.request_api_version) == (0, version)
    assert (header.correlation_id, header.client_id) == (42, "client-1")
    assert body == produce()
    records = body.topic_data[0].partition_data[0].records
    assert isinstance(records, memoryview) and records == b"batch-bytes"


def test_header_versions_follow_flexible_versions():
    assert request_header_version(ApiKey.PRODUCE, 8) == 1
    assert request_header_version(ApiKey.PRODUCE, 9) == 2
    assert response_header_version(ApiKey.FETCH, 11) == 0
    assert response_header_version(ApiKey.FETCH, 12) == 1
    # ApiVersions responses always use header v0, even at flexible v3.
    assert request_header_version(ApiKey.API_VERSIONS, 3) == 2
    assert response_header_version(ApiKey.API_VERSIONS, 3) == 0


def test_null_client_id_and_tagged_header_fields():
    frame = frame_bytes(encode_request(12, 4, 1, None, HeartbeatRequest(group_id="g", member_id="m")))
    header, body = parse_request(frame[4:])
    assert header.client_id is None and body.group_id == "g"
    # An unknown tagged field in a v2 header is skipped.
    head_len = 2 + 2 + 4 + 2
    raw = bytearray(frame[4:])
    assert raw[head_len] == 0
    raw[head_len : head_len + 1] = bytes([1, 7, 2, 0xAB, 0xCD])
    header2, body2 = parse_request(bytes(raw))
    assert header2 == header and body2 == body


@given(version=st.integers(0, 11), acks=st.sampled_from([0, 1, -1, 2, -32768, 32767]),
       transactional_id=st.one_of(st.none(), st.text(max_size=300)), client_id=st.one_of(st.none(), st.text(max_size=40)),
       tagged=st.booleans())
@settings(max_examples=300, deadline=None)
def test_produce_acks_reads_what_the_request_decodes_to(version, acks, transactional_id, client_id, tagged):
    """The server reads a Produce's acks off its frame to decide how to run it: the same acks as
    decoding the request gives, whatever the version, client id, transactional id and header tags."""
    if version < 3:
        transactional_id = None
    body = ProduceRequest(acks=acks, transactional_id=transactional_id, timeout_ms=1, topic_data=[])
    frame = bytearray(frame_bytes(encode_request(ApiKey.PRODUCE, version, 5, client_id, body))[4:])
    if tagged and request_header_version(ApiKey.PRODUCE, version) == 2:
        # An unknown tagged field in the v2 header (after the client id), which a decoder skips.
        at = 8 + 2 + len((client_id or "").encode())
        assert frame[at] == 0
        frame[at : at + 1] = bytes([1, 9, 3, 1, 2, 3])
    if API_VERSIONS[ApiKey.PRODUCE].accepts(version):
        assert parse_request(bytes(frame))[1].acks == acks
    assert produce_acks(bytes(frame)) == acks
    assert produce_acks(memoryview(frame)) == acks


def test_produce_acks_of_what_is_not_a_whole_produce_is_none():
    body = ProduceRequest(acks=1, transactional_id="tx", timeout_ms=1, topic_data=[])
    frame = frame_bytes(encode_request(ApiKey.PRODUCE, 9, 5, "client", body))[4:]
    acks_end = 8 + 2 + len("client") + 1 + 1 + len("tx") + 2
    assert produce_acks(frame[:acks_end]) == 1
    for cut in range(acks_end):
        assert produce_acks(frame[:cut]) is None
    heartbeat = frame_bytes(encode_request(12, 4, 1, None, HeartbeatRequest(group_id="g", member_id="m")))[4:]
    assert produce_acks(heartbeat) is None
    # A header tag that announces more bytes than the frame has.
    assert produce_acks(frame[:12 + len("client") - 2] + b"\x01\x05\xff\xff\xff\xff\x0f") is None


def test_unknown_api_key():
    with pytest.raises(InvalidRequestError, match="unknown api key 99") as info:
        parse_request(struct.pack(">hhih", 99, 0, 7, -1))
    assert (info.value.api_key, info.value.api_version, info.value.correlation_id) == (99, 0, 7)


def test_unsupported_versions():
    frame = frame_bytes(encode_request(0, 2, 5, "c", produce()))
    with pytest.raises(UnsupportedVersionError, match="PRODUCE v2") as info:
        parse_request(frame[4:])  # advertised from v0 like Kafka 4, but refused below v3
    assert info.value.error_code == ErrorCode.UNSUPPORTED_VERSION
    assert (info.value.api_key, info.value.api_version, info.value.correlation_id) == (0, 2, 5)
    # A newer ApiVersions than the broker speaks: the correlation id is known, so the broker can answer.
    with pytest.raises(UnsupportedVersionError) as info:
        parse_request(struct.pack(">hhi", 18, 5, 77) + b"\x00\x01c\x00\x00\x00\x00")
    assert info.value.correlation_id == 77 and info.value.api_version == 5


def test_malformed_requests():
    frame = frame_bytes(encode_request(0, 9, 5, "c", produce()))[4:]
    with pytest.raises(InvalidRequestError, match="shorter than a request header"):
        parse_request(frame[:5])
    with pytest.raises(InvalidRequestError, match="malformed ProduceRequest") as info:
        parse_request(frame[:-3])
    assert info.value.correlation_id == 5
    with pytest.raises(InvalidRequestError, match="2 bytes after the end of ProduceRequest"):
        parse_request(frame + b"\x00\x00")
    with pytest.raises(InvalidRequestError, match="malformed request header"):
        parse_request(frame[:9])
    bad_utf8 = bytearray(frame)
    bad_utf8[bad_utf8.index(b"\x02t") + 1] = 0xFF  # the topic name "t" becomes invalid UTF-8
    with pytest.raises(InvalidRequestError):
        parse_request(bytes(bad_utf8))


# --- encode_response / decode_response ----------------------------------------------------------------


def fetch_response(records) -> FetchResponse:
    R = FetchResponse
    return R(responses=[R.FetchableTopicResponse(topic="t", partitions=[
        R.PartitionData(partition_index=0, high_watermark=10, records=records)])])


def test_response_frame_with_file_regions_counts_their_length():
    region = FileRegion(fd=9, offset=4096, length=70000)
    parts = encode_response(11, 1, 12, fetch_response([b"head", region, b"tail"]))
    assert region in parts
    (size,) = struct.unpack_from(">i", parts[0])
    assert size == frame_size(parts) - 4
    # Replace the region by that many bytes: the frame must decode with those as the records.
    body = b"".join(bytes(p) if not isinstance(p, FileRegion) else b"r" * p.length for p in parts)
    header, resp = decode_response(1, 12, body[4:])
    assert header.correlation_id == 11
    assert resp.responses[0].partitions[0].records == b"head" + b"r" * 70000 + b"tail"
    with pytest.raises(ValueError, match="sendfile"):
        join_frame(parts)


def test_large_buffers_become_their_own_part_and_small_ones_are_copied():
    big = memoryview(bytes(range(256)) * 64)
    parts = encode_response(1, 1, 11, fetch_response(big))
    assert any(p is big for p in parts)
    small = encode_response(1, 1, 11, fetch_response(b"tiny"))
    assert len(small) == 1
    for parts in (encode_response(1, 1, 11, fetch_response(big)), small):
        _, resp = decode_response(1, 11, join_frame(parts)[4:])
        assert resp.responses[0].partitions[0].records in (big, b"tiny")
    _, resp = decode_response(1, 11, join_frame(encode_response(1, 1, 11, fetch_response(None)))[4:])
    assert resp.responses[0].partitions[0].records is None


def test_api_versions_response_uses_header_v0():
    resp = ApiVersionsResponse(error_code=0, api_keys=[ApiVersionsResponse.ApiVersion(api_key=0, max_version=9)])
    frame = join_frame(encode_response(3, 18, 3, resp))
    assert frame[4:8] == b"\x00\x00\x00\x03" and frame[8:10] == b"\x00\x00"  # no tag byte after the id
    header, decoded = decode_response(18, 3, frame[4:])
    assert header.correlation_id == 3 and decoded == resp


def test_flexible_response_header_has_tag_section():
    frame = join_frame(encode_response(3, 3, 9, MetadataResponse()))
    assert frame[4:9] == b"\x00\x00\x00\x03\x00"


def test_wrong_message_class_is_refused():
    with pytest.raises(TypeError, match="FetchResponse"):
        encode_response(1, 1, 12, MetadataResponse())
    with pytest.raises(TypeError, match="ApiVersionsRequest"):
        encode_request(18, 3, 1, "c", HeartbeatRequest())


def test_decode_response_errors():
    frame = join_frame(encode_response(1, 3, 9, MetadataResponse()))[4:]
    with pytest.raises(InvalidResponseError, match="bytes after the end"):
        decode_response(3, 9, frame + b"\x00")
    with pytest.raises(InvalidResponseError, match="malformed"):
        decode_response(3, 9, frame[:-1])


def test_request_round_trip_through_frames_for_every_supported_api():
    from kraftpy.protocol.api_keys import API_VERSIONS
    from kraftpy.protocol.messages import REQUESTS, RESPONSES

    for key, supported in API_VERSIONS.items():
        for version in range(supported.min_accepted, supported.max_version + 1):
            req = REQUESTS[key]()
            if key == ApiKey.API_VERSIONS and version >= 3:
                req.client_software_name, req.client_software_version = "kraftpy", "1"
            reader = FrameReader()
            (frame,) = reader.feed(join_frame(encode_request(key, version, version, "x", req)))
            header, body = parse_request(frame)
            assert header.correlation_id == version and type(body) is REQUESTS[key]
            resp_frame = join_frame(encode_response(9, key, version, RESPONSES[key]()))
            h, _ = decode_response(key, version, resp_frame[4:])
            assert h.correlation_id == 9
    assert ApiVersionsRequest().client_software_name == ""


def test_remaining_counts_the_bytes_a_partial_frame_still_needs():
    from kraftpy.protocol.frames import FrameReader

    reader = FrameReader()
    assert reader.remaining == 0
    assert reader.feed((10).to_bytes(4, "big") + b"abc") == []
    assert reader.remaining == 7
    assert [bytes(f) for f in reader.feed(b"defghij")] == [b"abcdefghij"]
    assert reader.remaining == 0
