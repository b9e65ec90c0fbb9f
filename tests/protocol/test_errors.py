"""Error codes: Kafka's numbers and names, the retriable flag, lookup by code."""

from __future__ import annotations

import pytest

from kraftpy.protocol.errors import ErrorCode, InvalidRequestError, ProtocolError, is_retriable


def test_well_known_codes():
    assert ErrorCode.NONE == 0 and ErrorCode.UNKNOWN_SERVER_ERROR == -1
    assert ErrorCode.OFFSET_OUT_OF_RANGE == 1 and ErrorCode.CORRUPT_MESSAGE == 2
    assert ErrorCode.UNKNOWN_TOPIC_OR_PARTITION == 3 and ErrorCode.NOT_LEADER_OR_FOLLOWER == 6
    assert ErrorCode.UNSUPPORTED_VERSION == 35 and ErrorCode.INVALID_REQUEST == 42
    assert ErrorCode.UNKNOWN_TOPIC_ID == 100 and ErrorCode.TRANSACTION_ABORTABLE == 120


def test_codes_are_contiguous_up_to_the_last():
    codes = sorted(int(c) for c in ErrorCode)
    assert codes == list(range(-1, codes[-1] + 1)) and codes[-1] >= 120


def test_lookup_by_code():
    assert ErrorCode.for_code(3) is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert ErrorCode.for_code(31999) is ErrorCode.UNKNOWN_SERVER_ERROR


@pytest.mark.parametrize(
    ("code", "retriable"),
    [(ErrorCode.NONE, False), (ErrorCode.OFFSET_OUT_OF_RANGE, False), (ErrorCode.CORRUPT_MESSAGE, True),
     (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, True), (ErrorCode.NOT_LEADER_OR_FOLLOWER, True),
     (ErrorCode.REQUEST_TIMED_OUT, True), (ErrorCode.NOT_ENOUGH_REPLICAS, True),
     (ErrorCode.NOT_COORDINATOR, True), (ErrorCode.REBALANCE_IN_PROGRESS, False),
     (ErrorCode.FENCED_LEADER_EPOCH, True), (ErrorCode.TOPIC_ALREADY_EXISTS, False),
     (ErrorCode.UNKNOWN_SERVER_ERROR, False), (ErrorCode.KAFKA_STORAGE_ERROR, True)],
)
def test_retriable(code, retriable):
    assert code.retriable is retriable
    assert is_retriable(int(code)) is retriable


def test_names_agree_with_kafka_python():
    errors = pytest.importorskip("kafka.errors")
    renamed = {-1: "UNKNOWN", 0: "NO_ERROR", 6: "NOT_LEADER_FOR_PARTITION", 10: "MESSAGE_SIZE_TOO_LARGE",
               17: "INVALID_TOPIC", 39: "INVALID_REPLICATION_ASSIGNMENT"}
    theirs = {c.errno: c.message for c in vars(errors).values()
              if isinstance(c, type) and issubclass(c, errors.BrokerResponseError) and c.errno is not None}
    assert len(theirs) > 100
    for code, name in theirs.items():
        if code in ErrorCode._value2member_map_:
            assert renamed.get(code, ErrorCode(code).name) == name, code


def test_protocol_errors_name_what_they_know():
    exc = InvalidRequestError("bad", api_key=0, api_version=9, correlation_id=4)
    assert str(exc) == "bad (api_key=0, api_version=9, correlation_id=4)"
    assert isinstance(exc, ProtocolError) and exc.error_code is ErrorCode.INVALID_REQUEST
    assert str(ProtocolError("plain")) == "plain"
