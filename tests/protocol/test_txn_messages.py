"""The transaction APIs' messages: the bytes of each shape are Kafka's, written out by hand here.

Primitive encodings: int16-length strings and int32-count arrays in the classic versions; in the
flexible ones (AddPartitionsToTxn v3+, EndTxn v3+, WriteTxnMarkers v1+) unsigned-varint lengths plus
one (compact) and an empty tagged-field section (one 0 byte) after every struct.
"""

from __future__ import annotations

import struct

import pytest

from kraftpy.protocol.api_keys import API_VERSIONS, ApiKey
from kraftpy.protocol.frames import encode_request, join_frame, parse_request
from kraftpy.protocol.messages import (
    REQUESTS,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    DescribeProducersResponse,
    EndTxnResponse,
    ListTransactionsRequest,
    WriteTxnMarkersRequest,
)
from kraftpy.protocol.schema import F, message


def _s(text: str) -> bytes:
    return struct.pack(">h", len(text)) + text.encode()


def _cs(text: str) -> bytes:
    assert len(text) < 127
    return bytes([len(text) + 1]) + text.encode()


def _i32s(*values: int) -> bytes:
    return struct.pack(">i", len(values)) + b"".join(struct.pack(">i", v) for v in values)


def _ci32s(*values: int) -> bytes:
    return bytes([len(values) + 1]) + b"".join(struct.pack(">i", v) for v in values)


Topic = AddPartitionsToTxnRequest.AddPartitionsToTxnTopic
SCHEMA = AddPartitionsToTxnRequest.SCHEMA


def test_add_partitions_v0_is_one_transaction_with_classic_encoding():
    data = (_s("tx-1") + struct.pack(">qh", 4000, 3) + struct.pack(">i", 1) + _s("events") + _i32s(0, 2))
    request = SCHEMA.from_bytes(0, data)
    assert (request.v3_and_below_transactional_id, request.v3_and_below_producer_id,
            request.v3_and_below_producer_epoch) == ("tx-1", 4000, 3)
    assert request.v3_and_below_topics == [Topic(name="events", partitions=[0, 2])]
    assert request.transactions == []
    assert SCHEMA.to_bytes(0, request) == data


def test_add_partitions_v3_is_flexible():
    request = AddPartitionsToTxnRequest(v3_and_below_transactional_id="tx-1", v3_and_below_producer_id=4000,
                                        v3_and_below_producer_epoch=3,
                                        v3_and_below_topics=[Topic(name="events", partitions=[1])])
    expected = (_cs("tx-1") + struct.pack(">qh", 4000, 3) + bytes([2]) + _cs("events") + _ci32s(1) + b"\x00"
                + b"\x00")
    assert SCHEMA.to_bytes(3, request) == expected


def test_add_partitions_v4_batches_transactions_with_verify_only():
    Txn = AddPartitionsToTxnRequest.AddPartitionsToTxnTransaction
    request = AddPartitionsToTxnRequest(transactions=[
        Txn(transactional_id="a", producer_id=7, producer_epoch=0, verify_only=True,
            topics=[Topic(name="t", partitions=[0, 1])]),
        Txn(transactional_id="b", producer_id=8, producer_epoch=2, verify_only=False, topics=[]),
    ])
    expected = (
        bytes([3])
        + _cs("a") + struct.pack(">qh?", 7, 0, True) + bytes([2]) + _cs("t") + _ci32s(0, 1) + b"\x00" + b"\x00"
        + _cs("b") + struct.pack(">qh?", 8, 2, False) + bytes([1]) + b"\x00"
        + b"\x00"
    )
    assert SCHEMA.to_bytes(4, request) == expected
    assert SCHEMA.from_bytes(4, expected) == request
    # The v3-and-below fields are not on the wire from v4: they decode to their defaults.
    assert SCHEMA.from_bytes(4, expected).v3_and_below_topics == []


def test_add_partitions_response_v4_is_keyed_by_transaction():
    R = AddPartitionsToTxnResponse
    response = R(throttle_time_ms=0, error_code=0, results_by_transaction=[
        R.AddPartitionsToTxnResult(transactional_id="a", topic_results=[
            R.AddPartitionsToTxnTopicResult(name="t", results_by_partition=[
                R.AddPartitionsToTxnPartitionResult(partition_index=1, partition_error_code=48),
            ]),
        ]),
    ])
    expected = (struct.pack(">ih", 0, 0) + bytes([2]) + _cs("a") + bytes([2]) + _cs("t") + bytes([2])
                + struct.pack(">ih", 1, 48) + b"\x00" + b"\x00" + b"\x00" + b"\x00")
    assert R.SCHEMA.to_bytes(4, response) == expected
    # The same topic-result struct serves v0-v3's single list.
    v2 = R(throttle_time_ms=5, results_by_topic_v3_and_below=response.results_by_transaction[0].topic_results)
    assert R.SCHEMA.to_bytes(2, v2) == (struct.pack(">i", 5) + struct.pack(">i", 1) + _s("t") + struct.pack(">i", 1)
                                        + struct.pack(">ih", 1, 48))


def test_write_txn_markers_v0_bytes():
    M = WriteTxnMarkersRequest
    request = M(markers=[M.WritableTxnMarker(producer_id=42, producer_epoch=5, transaction_result=True,
                                            topics=[M.WritableTxnMarkerTopic(name="t", partition_indexes=[3])],
                                            coordinator_epoch=9)])
    expected = (struct.pack(">i", 1) + struct.pack(">qh?", 42, 5, True) + struct.pack(">i", 1) + _s("t") + _i32s(3)
                + struct.pack(">i", 9))
    assert M.SCHEMA.to_bytes(0, request) == expected
    assert M.SCHEMA.from_bytes(0, expected) == request


def test_end_txn_v5_answers_the_next_producer_id_and_epoch():
    response = EndTxnResponse(throttle_time_ms=0, error_code=0, producer_id=77, producer_epoch=1)
    assert EndTxnResponse.SCHEMA.to_bytes(5, response) == struct.pack(">ihqh", 0, 0, 77, 1) + b"\x00"
    assert EndTxnResponse.SCHEMA.to_bytes(4, response) == struct.pack(">ih", 0, 0) + b"\x00"
    assert EndTxnResponse.SCHEMA.from_bytes(4, struct.pack(">ih", 0, 0) + b"\x00").producer_id == -1


def test_list_transactions_duration_filter_from_v1():
    request = ListTransactionsRequest(state_filters=["Ongoing"], producer_id_filters=[5], duration_filter=60000)
    v0 = bytes([2]) + _cs("Ongoing") + bytes([2]) + struct.pack(">q", 5) + b"\x00"
    assert ListTransactionsRequest.SCHEMA.to_bytes(0, request) == v0
    assert ListTransactionsRequest.SCHEMA.to_bytes(1, request) == v0[:-1] + struct.pack(">q", 60000) + b"\x00"
    assert ListTransactionsRequest.SCHEMA.from_bytes(0, v0).duration_filter == -1


def test_describe_producers_defaults_are_kafkas():
    state = DescribeProducersResponse.ProducerState()
    assert (state.last_sequence, state.last_timestamp, state.current_txn_start_offset) == (-1, -1, -1)
    assert DescribeProducersResponse.PartitionResponse().error_message is None


@pytest.mark.parametrize(("key", "newest"), [(ApiKey.ADD_PARTITIONS_TO_TXN, 4), (ApiKey.END_TXN, 4),
                                             (ApiKey.LIST_TRANSACTIONS, 1)])
def test_transaction_apis_are_served_up_to_the_versions_kraftpy_runs(key, newest):
    """EndTxn v5 is KIP-890 part 2 (not run); AddPartitionsToTxn v5 adds an error kraftpy never sends."""
    assert API_VERSIONS[key].max_version == newest
    frame = join_frame(encode_request(key, 0, 1, "c", REQUESTS[key]()))[4:]
    assert parse_request(frame) is not None


def test_common_struct_is_one_class_and_must_be_declared_identically():
    Txn = AddPartitionsToTxnRequest.AddPartitionsToTxnTransaction
    assert type(SCHEMA.from_bytes(4, SCHEMA.to_bytes(4, AddPartitionsToTxnRequest(
        transactions=[Txn(topics=[Topic(name="x")])]))).transactions[0].topics[0]) is Topic
    same = [F("a", "int8")]
    cls = message("Twice", kind="data", versions="0", flexible="none", fields=[
        F("x", "[]Common", "0+", same), F("y", "[]Common", "0+", same)])
    one = struct.pack(">i", 1)
    assert cls.SCHEMA.to_bytes(0, cls(x=[cls.Common(a=1)], y=[cls.Common(a=2)])) == one + b"\x01" + one + b"\x02"
    with pytest.raises(TypeError, match="declared twice"):
        message("Clash", kind="data", versions="0", flexible="none", fields=[
            F("x", "[]Common", "0+", [F("a", "int8")]), F("y", "[]Common", "0+", [F("b", "int8")])])
