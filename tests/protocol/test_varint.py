"""Varints: every kind at the edges of its range, overlong, out-of-range and truncated input."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kraftpy.protocol import varint as v
from kraftpy.protocol.varint import TruncatedVarintError, VarintError

UINT32_MAX = 2**32 - 1
UINT64_MAX = 2**64 - 1
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

#: name -> (read, encode, write, lowest, highest, most bytes)
KINDS = {
    "uvarint": (v.read_uvarint, v.encode_uvarint, v.write_uvarint, 0, UINT32_MAX, 5),
    "uvarlong": (v.read_uvarlong, v.encode_uvarlong, v.write_uvarlong, 0, UINT64_MAX, 10),
    "varint": (v.read_varint, v.encode_varint, v.write_varint, INT32_MIN, INT32_MAX, 5),
    "varlong": (v.read_varlong, v.encode_varlong, v.write_varlong, INT64_MIN, INT64_MAX, 10),
}
RANGE_NAMES = {"uvarint": "uint32", "uvarlong": "uint64", "varint": "int32", "varlong": "int64"}


def zigzag(n: int) -> int:
    return (n << 1) ^ (n >> 63)


def minimal_size(unsigned: int) -> int:
    return max(1, -(-unsigned.bit_length() // 7))


def edges(kind: str) -> list[int]:
    """The values where the encoded size changes, and the ends of the range."""
    _, _, _, lo, hi, _ = KINDS[kind]
    values = {lo, lo + 1, hi - 1, hi, 0}
    for bits in range(7, 70, 7):
        if kind.startswith("u"):
            values |= {2**bits - 1, 2**bits}
        else:
            values |= {2 ** (bits - 1) - 1, 2 ** (bits - 1), -(2 ** (bits - 1)), -(2 ** (bits - 1)) - 1}
    return sorted(x for x in values if lo <= x <= hi)


CASES = [(kind, value) for kind in KINDS for value in edges(kind)]


@pytest.mark.parametrize(
    ("kind", "value", "encoded"),
    [
        ("uvarint", 0, "00"),
        ("uvarint", 127, "7f"),
        ("uvarint", 128, "8001"),
        ("uvarint", 300, "ac02"),
        ("uvarint", UINT32_MAX, "ffffffff0f"),
        ("uvarlong", UINT32_MAX + 1, "8080808010"),
        ("uvarlong", UINT64_MAX, "ffffffffffffffffff01"),
        ("varint", 0, "00"),
        ("varint", -1, "01"),
        ("varint", 1, "02"),
        ("varint", 63, "7e"),
        ("varint", -64, "7f"),
        ("varint", 64, "8001"),
        ("varint", -65, "8101"),
        ("varint", INT32_MAX, "feffffff0f"),
        ("varint", INT32_MIN, "ffffffff0f"),
        ("varlong", INT64_MAX, "feffffffffffffffff01"),
        ("varlong", INT64_MIN, "ffffffffffffffffff01"),
    ],
)
def test_known_encodings(kind, value, encoded):
    read, encode, write, *_ = KINDS[kind]
    assert encode(value).hex() == encoded
    out = bytearray(b"\xaa")
    write(out, value)
    assert out[1:].hex() == encoded
    assert read(bytes.fromhex(encoded)) == (value, len(encoded) // 2)


@pytest.mark.parametrize(("kind", "value"), CASES)
def test_round_trip_at_the_edges(kind, value):
    read, encode, write, _, _, most = KINDS[kind]
    encoded = encode(value)
    unsigned = zigzag(value) if kind in ("varint", "varlong") else value
    assert len(encoded) == minimal_size(unsigned) <= most
    out = bytearray()
    write(out, value)
    assert out == encoded
    for buf_type in (bytes, bytearray, memoryview):
        assert read(buf_type(b"\x80\x80" + encoded + b"\xff"), 2) == (value, 2 + len(encoded))


@pytest.mark.parametrize("kind", KINDS)
def test_values_outside_the_range_are_refused(kind):
    _, encode, write, lo, hi, _ = KINDS[kind]
    for value in (lo - 1, hi + 1, lo - 2**70, hi + 2**70):
        with pytest.raises(ValueError, match=rf"does not fit .*\({RANGE_NAMES[kind]}\)"):
            encode(value)
        out = bytearray(b"x")
        with pytest.raises(ValueError, match=RANGE_NAMES[kind]):
            write(out, value)
        assert out == b"x"  # nothing half-written


@pytest.mark.parametrize("kind", KINDS)
def test_non_minimal_encodings_are_accepted(kind):
    read, *_, most = KINDS[kind]
    assert read(b"\x80\x00") == (0, 2)
    assert read(b"\x80" * (most - 1) + b"\x00") == (0, most)


@pytest.mark.parametrize("kind", KINDS)
def test_overlong_varints_are_refused_where_they_start(kind):
    read, *_, most = KINDS[kind]
    buf = b"abc" + b"\x80" * most + b"\x00"
    with pytest.raises(VarintError, match=f"longer than {most} bytes") as info:
        read(buf, 3)
    assert info.value.position == 3 and info.value.reason.endswith(f"longer than {most} bytes")
    assert str(info.value) == f"{info.value.reason} (at byte 3)"
    assert not isinstance(info.value, TruncatedVarintError)
    # The byte past the longest encoding is never looked at: a buffer ending there is overlong too.
    with pytest.raises(VarintError, match="longer than"):
        read(b"\x80" * most)


@pytest.mark.parametrize(
    ("kind", "encoded"),
    [
        ("uvarint", "ffffffff1f"),  # 2**33 - 1: five bytes carry 35 bits
        ("uvarint", "8080808010"),  # 2**32
        ("varint", "8080808010"),  # zig-zag 2**32: one past the int32 range
        ("uvarlong", "ffffffffffffffffff03"),  # 2**65 - 1: ten bytes carry 70 bits
        ("uvarlong", "80808080808080808002"),  # 2**64
        ("varlong", "80808080808080808002"),
    ],
)
def test_values_past_the_kind_are_refused(kind, encoded):
    read, *_ = KINDS[kind]
    with pytest.raises(VarintError, match=f"out of the {RANGE_NAMES[kind]} range") as info:
        read(b"\x00" + bytes.fromhex(encoded), 1)
    assert info.value.position == 1


@pytest.mark.parametrize("kind", KINDS)
def test_truncated_varints_carry_their_start(kind):
    read, *_, most = KINDS[kind]
    for cut in range(most):
        buf = b"\x01\x02" + b"\xff" * cut
        with pytest.raises(TruncatedVarintError, match="truncated varint") as info:
            read(buf, 2)
        assert info.value.position == 2
        assert isinstance(info.value, VarintError) and isinstance(info.value, ValueError)


def test_small_tables_agree_with_the_codec():
    assert sorted(v.SMALL_VARINTS) == list(range(-64, 64))
    for value, encoded in v.SMALL_VARINTS.items():
        assert encoded == v.encode_varint(value) == v.encode_varlong(value)
        assert v.SMALL_VARINT_VALUES[encoded[0]] == value
    assert len(v.SMALL_VARINT_VALUES) == 128


def test_functions_are_named_for_tracebacks():
    for name in v.__all__:
        fn = getattr(v, name)
        if callable(fn) and not isinstance(fn, type):
            assert fn.__name__ == name and fn.__doc__


@st.composite
def kind_and_value(draw):
    kind = draw(st.sampled_from(sorted(KINDS)))
    _, _, _, lo, hi, _ = KINDS[kind]
    return kind, draw(st.integers(lo, hi))


@given(kind_and_value(), st.binary(max_size=3), st.binary(max_size=3))
def test_round_trip_property(kind_value, prefix, suffix):
    kind, value = kind_value
    read, encode, write, *_ = KINDS[kind]
    encoded = encode(value)
    out = bytearray(prefix)
    write(out, value)
    assert out == prefix + encoded
    assert read(prefix + encoded + suffix, len(prefix)) == (value, len(prefix) + len(encoded))


@given(st.sampled_from(sorted(KINDS)), st.binary(max_size=12))
def test_any_bytes_read_as_a_value_in_range_or_a_varint_error(kind, data):
    read, encode, _, lo, hi, most = KINDS[kind]
    try:
        value, end = read(data)
    except VarintError as exc:
        assert exc.position == 0
        return
    assert lo <= value <= hi and 1 <= end <= most
    assert read(encode(value)) == (value, len(encode(value)))
    assert len(encode(value)) <= end  # what was read may be non-minimal, never shorter
