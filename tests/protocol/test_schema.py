"""Every declared (message, version) round-trips, with values drawn by strategies built from the DSL."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kraftpy.protocol.messages import REQUESTS, RESPONSES, RequestHeader, ResponseHeader
from kraftpy.protocol.schema import (
    FIXED_FORMATS,
    DecodeError,
    EncodeError,
    F,
    Field,
    Versions,
    message,
)

ALL_MESSAGES = [*REQUESTS.values(), *RESPONSES.values(), RequestHeader, ResponseHeader]
CASES = [pytest.param(cls, v, id=f"{cls.__name__}-v{v}") for cls in ALL_MESSAGES for v in cls.SCHEMA.versions]

_INTS = {
    "int8": (-(1 << 7), (1 << 7) - 1),
    "int16": (-(1 << 15), (1 << 15) - 1),
    "int32": (-(1 << 31), (1 << 31) - 1),
    "int64": (-(1 << 63), (1 << 63) - 1),
    "uint16": (0, (1 << 16) - 1),
    "uint32": (0, (1 << 32) - 1),
}


def _primitive(type_: str) -> st.SearchStrategy:
    if type_ in _INTS:
        lo, hi = _INTS[type_]
        return st.integers(lo, hi)
    return {
        "bool": st.booleans(),
        "float64": st.floats(allow_nan=False),
        "uuid": st.uuids(),
        "string": st.text(max_size=6),
        "bytes": st.binary(max_size=8),
        "records": st.binary(max_size=24),
    }[type_]


def struct_strategy(cls: type, fields: tuple[Field, ...], version: int) -> st.SearchStrategy:
    schema = cls.SCHEMA if hasattr(cls, "SCHEMA") else None
    classes = (schema or _owner[cls]).classes
    kwargs = {}
    for f in fields:
        if version not in f.versions:
            continue
        kwargs[f.name] = _field_strategy(f, version, classes)
    return st.builds(cls, **kwargs)


_owner: dict[type, object] = {}
for _cls in ALL_MESSAGES:
    for _child in _cls.SCHEMA.classes.values():
        _owner[_child] = _cls.SCHEMA


def _field_strategy(f: Field, version: int, classes: dict[str, type]) -> st.SearchStrategy:
    if f.is_struct:
        child = struct_strategy(classes[f.element_type], f.fields, version)
        base = st.lists(child, max_size=2) if f.is_array else child
    elif f.is_array:
        base = st.lists(_primitive(f.element_type), max_size=3)
    else:
        base = _primitive(f.type)
    if version in f.nullable:
        return st.none() | base
    return base


@pytest.mark.parametrize(("cls", "version"), CASES)
def test_round_trip(cls, version):
    schema = cls.SCHEMA

    @settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(struct_strategy(cls, schema.fields, version))
    def check(obj):
        data = schema.to_bytes(version, obj)
        decoded = schema.from_bytes(version, data)
        assert decoded == obj
        assert schema.to_bytes(version, decoded) == data
        for cut in (0, len(data) // 2, len(data) - 1):
            if 0 <= cut < len(data):
                with pytest.raises(DecodeError):
                    schema.from_bytes(version, data[:cut])

    check()


def test_absent_fields_take_their_defaults():
    req = REQUESTS[0](acks=1, timeout_ms=5, transactional_id="tx")
    decoded = REQUESTS[0].SCHEMA.from_bytes(2, REQUESTS[0].SCHEMA.to_bytes(2, req))
    assert decoded.transactional_id is None  # absent before v3, default null
    fetch = REQUESTS[1]()
    assert fetch.max_bytes == 0x7FFFFFFF and fetch.replica_id == -1 and fetch.rack_id == ""
    assert fetch.topics == [] and fetch.topics is not REQUESTS[1]().topics


def test_non_nullable_null_is_refused_both_ways():
    produce = REQUESTS[0]
    topic = produce.TopicProduceData(name=None)
    with pytest.raises(EncodeError, match="name"):
        produce.SCHEMA.to_bytes(9, produce(topic_data=[topic]))
    # A null topic name on the wire (compact length 0) is refused on decode.
    data = bytes([0, 0, 0, 0, 0, 0, 0, 2, 0, 1, 0, 0])
    with pytest.raises(DecodeError, match="not nullable"):
        produce.SCHEMA.from_bytes(9, data)


def test_out_of_range_value_is_an_encode_error():
    with pytest.raises(EncodeError):
        REQUESTS[0].SCHEMA.to_bytes(9, REQUESTS[0](acks=1 << 20))


def test_trailing_bytes_are_refused():
    data = REQUESTS[12].SCHEMA.to_bytes(4, REQUESTS[12](group_id="g", member_id="m"))
    with pytest.raises(DecodeError, match="trailing"):
        REQUESTS[12].SCHEMA.from_bytes(4, data + b"\x00")


def test_huge_array_count_fails_fast():
    # A count of 2**31-1 partitions with 4 bytes of buffer left must not loop.
    data = b"\x00\x00\x00\x00" + b"\x00\x00\x00\x00\x00\x00\x00\x01" + b"\x00\x01t" + b"\x7f\xff\xff\xff"
    with pytest.raises(DecodeError):
        REQUESTS[0].SCHEMA.from_bytes(2, data)


def test_records_decode_to_a_slice_of_the_frame():
    produce = REQUESTS[0]
    req = produce(acks=1, topic_data=[produce.TopicProduceData(
        name="t", partition_data=[produce.PartitionProduceData(index=0, records=b"batch")])])
    frame = bytearray(produce.SCHEMA.to_bytes(9, req))
    decoded = produce.SCHEMA.from_bytes(9, memoryview(frame))
    records = decoded.topic_data[0].partition_data[0].records
    assert isinstance(records, memoryview) and records == b"batch"
    frame[frame.index(b"batch")] = ord("B")
    assert records == b"Batch"  # shares the frame's memory: no copy was made


def test_versions_notation():
    assert str(Versions.parse("3+")) == "3+" and 3 in Versions.parse("3+") and 2 not in Versions.parse("3+")
    assert list(Versions.parse("0-2")) == [0, 1, 2] and not Versions.parse("none")
    assert str(Versions.parse("4")) == "4-4"


def test_dsl_rejects_bad_declarations():
    with pytest.raises(TypeError):
        F("x", "[]Thing", "0+")  # a struct type without fields
    with pytest.raises(TypeError):
        F("x", "int32", "0+", [F("y", "int8")])
    with pytest.raises(TypeError):
        message("Dup", kind="request", versions="0", flexible="none", fields=[F("a", "int8"), F("a", "int8")])
    for name in ("self", "other", "d0", "k12"):  # names the generated methods use for themselves
        with pytest.raises(TypeError, match="usable identifier"):
            message("Clash", kind="data", versions="0", flexible="none", fields=[F(name, "int8")])


def test_nullable_struct_is_a_marker_byte_then_the_struct():
    """Kafka's generated code writes -1 for a null struct, else 1 and the struct (DescribeTopicPartitions'
    Cursor)."""
    Request = REQUESTS[75]
    null = Request(topics=[], response_partition_limit=2000)
    assert Request.SCHEMA.to_bytes(0, null) == bytes.fromhex("01" "000007d0" "ff" "00")
    cursor = Request(topics=[Request.TopicRequest(name="a")], response_partition_limit=2000,
                     cursor=Request.Cursor(topic_name="a", partition_index=3))
    data = bytes.fromhex("02" "0261" "00" "000007d0" "01" "0261" "00000003" "00" "00")
    assert Request.SCHEMA.to_bytes(0, cursor) == data
    assert Request.SCHEMA.from_bytes(0, data) == cursor
    with pytest.raises(DecodeError):
        Request.SCHEMA.from_bytes(0, bytes.fromhex("01000007d0"))  # the marker cut off
    with pytest.raises(TypeError):
        F("c", "Cursor", "0+", [F("p", "int32")], nullable="0+")  # a nullable struct defaults to null


def test_every_fixed_type_in_one_message():
    cls = message(
        "AllFixed", kind="request", versions="0-1", flexible="1+",
        fields=[F(name, name, "0+") for name in FIXED_FORMATS] + [
            F("opt", "uuid", "1+", tag=3, default=uuid.UUID(int=7)),
        ],
    )
    obj = cls(bool=True, int8=-1, int16=-2, uint16=65535, int32=-4, uint32=2**32 - 1, int64=-8, float64=1.5,
              uuid=uuid.uuid4(), opt=uuid.UUID(int=7))
    for version in (0, 1):
        assert cls.SCHEMA.from_bytes(version, cls.SCHEMA.to_bytes(version, obj)) == obj
    # the tagged uuid at its default is not written: fixed part + an empty tag section
    assert len(cls.SCHEMA.to_bytes(1, obj)) == 1 + 1 + 2 + 2 + 4 + 4 + 8 + 8 + 16 + 1


def test_a_version_is_compiled_the_first_time_it_is_used_and_only_then():
    cls = message("Lazy", kind="request", versions="0-2", flexible="2+",
                  fields=[F("a", "int32"), F("b", "string", "1+")])
    schema = cls.SCHEMA
    assert dict(schema.decoders) == {} and dict(schema.encoders) == {}  # nothing compiled at declaration
    data = schema.to_bytes(1, cls(a=7, b="x"))
    assert set(dict(schema.encoders)) == {1} and dict(schema.decoders) == {}
    assert schema.from_bytes(1, data) == cls(a=7, b="x")
    encoder = schema.encoders[1]
    schema.to_bytes(1, cls(a=8, b="y"))
    assert schema.encoders[1] is encoder  # compiled once
    with pytest.raises(EncodeError, match="no version 3"):
        schema.to_bytes(3, cls())
    with pytest.raises(DecodeError, match="no version 3"):
        schema.from_bytes(3, data)
    assert 3 not in schema.decoders


def test_threads_compiling_one_version_at_once_get_the_same_codec():
    import threading

    cls = message("Raced", kind="request", versions="0-1", flexible="none", fields=[F("a", "int64")])
    barrier = threading.Barrier(8)
    got = []

    def decode():
        barrier.wait()
        got.append(cls.SCHEMA.from_bytes(1, bytes(8)))

    threads = [threading.Thread(target=decode) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == [cls(a=0)] * 8 and len(dict(cls.SCHEMA.decoders)) == 1


def test_generated_classes_behave_as_value_objects():
    """The classes `message` builds (without attrs): fields by position or keyword, declared defaults,
    a fresh list or struct per instance, equality field by field, a repr naming them, no hash, and no
    attribute outside the declaration."""
    Probe = message("Probe", kind="data", versions="0", flexible="none", fields=[
        F("count", "int32"),
        F("name", "string", nullable="0+", default=None),
        F("weight", "int16", default=7),
        F("items", "[]Item", fields=[F("key", "string")]),
        F("inner", "Inner", fields=[F("flag", "bool")]),
        F("maybe", "[]int32", nullable="0+", default=None),
    ])
    a = Probe(1, "x")
    assert (a.count, a.name, a.weight, a.items, a.inner, a.maybe) == (1, "x", 7, [], Probe.Inner(flag=False), None)
    b = Probe(count=1, name="x")
    assert a == b and not a != b
    b.items.append(Probe.Item(key="k"))
    assert a.items == [] and a != b  # each instance has its own list
    assert a.inner is not b.inner
    assert a != Probe.Inner() and Probe.Inner() == Probe.Inner()
    assert repr(b) == ("Probe(count=1, name='x', weight=7, items=[Item(key='k')], inner=Inner(flag=False), "
                       "maybe=None)")
    assert Probe.FIELDS == ("count", "name", "weight", "items", "inner", "maybe")
    with pytest.raises(TypeError):
        hash(a)
    with pytest.raises(AttributeError):
        a.typo = 1
    with pytest.raises(TypeError):
        Probe(nope=1)
    decoded, _ = Probe.SCHEMA.decode(0, memoryview(Probe.SCHEMA.to_bytes(0, b)))
    assert decoded == b
