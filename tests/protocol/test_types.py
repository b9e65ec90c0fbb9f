"""Primitive types: varints, zig-zag, length-prefixed values, tagged-field sections."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kraftpy.protocol import types as t


@pytest.mark.parametrize(
    ("value", "encoded"),
    [(0, b"\x00"), (1, b"\x01"), (127, b"\x7f"), (128, b"\x80\x01"), (300, b"\xac\x02"),
     (2**32 - 1, b"\xff\xff\xff\xff\x0f")],
)
def test_unsigned_varint_vectors(value, encoded):
    out = bytearray()
    t.write_uvarint(out, value)
    assert bytes(out) == encoded
    assert t.read_uvarint(encoded, 0) == (value, len(encoded))


@pytest.mark.parametrize(("value", "encoded"), [(0, b"\x00"), (-1, b"\x01"), (1, b"\x02"), (-64, b"\x7f"),
                                                (64, b"\x80\x01"), (-(2**31), b"\xff\xff\xff\xff\x0f")])
def test_zigzag_varint_vectors(value, encoded):
    out = bytearray()
    t.write_varint(out, value)
    assert bytes(out) == encoded
    assert t.read_varint(encoded, 0) == (value, len(encoded))


@given(st.integers(-(2**31), 2**31 - 1), st.integers(-(2**63), 2**63 - 1))
def test_varint_round_trip(small, big):
    out = bytearray()
    t.write_varint(out, small)
    t.write_varlong(out, big)
    a, pos = t.read_varint(out, 0)
    b, pos = t.read_varlong(out, pos)
    assert (a, b, pos) == (small, big, len(out))


def test_varint_errors():
    # The buffer ending inside a varint is the codec's TruncatedError; the rest are ValueErrors.
    for read in (t.read_uvarint, t.read_uvarlong, t.read_varint, t.read_varlong):
        with pytest.raises(t.TruncatedError, match=r"truncated varint \(at byte 1\)"):
            read(b"\x00\x80\x80", 1)
    with pytest.raises(ValueError, match="longer than 5"):
        t.read_uvarint(b"\x80\x80\x80\x80\x80\x01", 0)
    with pytest.raises(ValueError, match="uint32 range"):
        t.read_uvarint(b"\xff\xff\xff\xff\x1f", 0)
    with pytest.raises(ValueError):
        t.write_uvarint(bytearray(), -1)
    with pytest.raises(ValueError):
        t.write_uvarint(bytearray(), 2**32)
    with pytest.raises(ValueError):
        t.write_varint(bytearray(), 2**31)


@given(st.one_of(st.none(), st.text(max_size=20)), st.booleans())
def test_strings(value, compact):
    out = bytearray()
    t.write_string(out, value, compact=compact)
    assert t.read_string(out, 0, compact=compact) == (value, len(out))


@given(st.one_of(st.none(), st.binary(max_size=300)), st.booleans())
def test_bytes_and_records(value, compact):
    out = bytearray()
    t.write_bytes(out, value, compact=compact)
    assert t.read_bytes(out, 0, compact=compact) == (value, len(out))
    view = memoryview(bytes(out))
    records, pos = t.read_records(view, 0, compact=compact)
    assert pos == len(out) and records == value
    if value is not None:
        assert isinstance(records, memoryview) and records.obj is view.obj


def test_fixed_width_and_uuid():
    out = bytearray()
    for write, value in [(t.write_int8, -5), (t.write_int16, -300), (t.write_int32, -70000),
                         (t.write_int64, -(2**40)), (t.write_uint16, 65535), (t.write_uint32, 2**32 - 1),
                         (t.write_float64, 2.5), (t.write_bool, True)]:
        write(out, value)
    u = uuid.uuid4()
    t.write_uuid(out, u)
    pos = 0
    got = []
    for read in (t.read_int8, t.read_int16, t.read_int32, t.read_int64, t.read_uint16, t.read_uint32,
                 t.read_float64, t.read_bool, t.read_uuid):
        value, pos = read(out, pos)
        got.append(value)
    assert got == [-5, -300, -70000, -(2**40), 65535, 2**32 - 1, 2.5, True, u] and pos == len(out)
    with pytest.raises(t.TruncatedError):
        t.read_int64(b"\x00" * 7, 0)


def test_arrays_lengths():
    for compact in (False, True):
        out = bytearray()
        t.write_array_length(out, None, compact=compact)
        t.write_array_length(out, 3, compact=compact)
        n1, pos = t.read_array_length(out, 0, compact=compact)
        n2, pos = t.read_array_length(out, pos, compact=compact)
        assert (n1, n2, pos) == (-1, 3, len(out))


def test_tagged_field_sections():
    out = bytearray()
    t.write_tagged_fields(out, {5: b"five", 1: b"\x01"})
    assert bytes(out) == b"\x02\x01\x01\x01\x05\x04five"
    fields, pos = t.read_tagged_fields(out, 0)
    assert fields == {1: b"\x01", 5: b"five"} and pos == len(out)
    assert t.skip_tagged_fields(out + b"rest", 0) == len(out)
    with pytest.raises(ValueError, match="out of order"):
        t.read_tagged_fields(b"\x02\x05\x00\x01\x00", 0)
    with pytest.raises(t.TruncatedError):
        t.skip_tagged_fields(b"\x01\x00\x05ab", 0)


def test_records_lengths_never_read_files():
    region = t.FileRegion(fd=-1, offset=10, length=1000)  # not a real descriptor: it is never used
    assert t.records_length([b"ab", memoryview(b"cde"), region]) == 1005
    assert t.records_length(None) == 0 and t.part_length(bytearray(4)) == 4
    assert t.part_length(memoryview(b"\x00" * 8).cast("q")) == 8
    with pytest.raises(ValueError):
        t.FileRegion(fd=1, offset=-1, length=1)
