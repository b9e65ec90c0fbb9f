"""Varints: Kafka's variable-length integers, for the wire protocol, batch records and snappy.

The wire protocol uses unsigned varints for compact lengths and tagged fields, the records of a
batch use zig-zag varints for their lengths and deltas, and a raw snappy block starts with its
uncompressed length as an unsigned varint. All of them are read and written here.

Byte layout
-----------
An unsigned varint writes the value 7 bits a byte, least significant group first, with the high
bit (0x80) set on every byte but the last::

    value         bytes
    0             00
    127           7f
    128           80 01
    300           ac 02
    2**32 - 1     ff ff ff ff 0f

A signed value is first zig-zag mapped, ``(n << 1) ^ (n >> 63)``, so that small magnitudes of
either sign stay short (0 -> 0, -1 -> 1, 1 -> 2, -2 -> 3, ...), then written as above::

    value         bytes
    0             00
    -1            01
    1             02
    63            7e
    -64           7f
    64            80 01
    2**31 - 1     fe ff ff ff 0f
    -(2**31)      ff ff ff ff 0f

================  ======  =====  ====================================================
kind              range   bytes  functions
================  ======  =====  ====================================================
unsigned varint   uint32  1-5    ``read_uvarint``, ``encode_uvarint``, ``write_uvarint``
unsigned varlong  uint64  1-10   ``read_uvarlong``, ``encode_uvarlong``, ``write_uvarlong``
varint            int32   1-5    ``read_varint``, ``encode_varint``, ``write_varint``
varlong           int64   1-10   ``read_varlong``, ``encode_varlong``, ``write_varlong``
================  ======  =====  ====================================================

Every reader takes a buffer (``bytes``, ``bytearray`` or a ``memoryview`` of unsigned bytes) and
the position of the varint, and returns ``(value, position after it)``. It accepts a non-minimal
encoding (``80 00`` for 0), as Kafka does, and raises :class:`VarintError`, carrying the varint's
position and the reason, for a varint longer than its kind allows, one whose value does not fit
its kind (five bytes carry 35 bits, ten bytes 70), or one the buffer ends inside
(:class:`TruncatedVarintError`). ``encode_*`` returns the bytes; ``write_*`` appends them to a
``bytearray``. Both raise ValueError for a value outside the kind's range.

Values of one or two bytes are the common case (most lengths and deltas) and take a short path.
A loop over many varints may save the call for one-byte zig-zag varints: a byte ``b < 0x80`` is
the whole varint of ``SMALL_VARINT_VALUES[b]``, and ``SMALL_VARINTS.get(n)`` is the encoding
of ``n`` when it takes one byte.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

__all__ = [
    "SMALL_VARINTS",
    "SMALL_VARINT_VALUES",
    "TruncatedVarintError",
    "VarintError",
    "encode_uvarint",
    "encode_uvarlong",
    "encode_varint",
    "encode_varlong",
    "read_uvarint",
    "read_uvarlong",
    "read_varint",
    "read_varlong",
    "write_uvarint",
    "write_uvarlong",
    "write_varint",
    "write_varlong",
]


class VarintError(ValueError):
    """A varint that cannot be read: ``reason`` says why, ``position`` is where the varint starts."""

    def __init__(self, reason: str, position: int) -> None:
        super().__init__(f"{reason} (at byte {position})")
        self.reason = reason
        self.position = position


class TruncatedVarintError(VarintError):
    """The buffer ends inside the varint."""


#: The one-byte zig-zag varints of -64..63, by value.
SMALL_VARINTS: dict[int, bytes] = {n: bytes(((n << 1) ^ (n >> 63),)) for n in range(-64, 64)}
#: The value of each one-byte zig-zag varint, by its byte 0x00..0x7f.
SMALL_VARINT_VALUES: tuple[int, ...] = tuple((b >> 1) ^ -(b & 1) for b in range(0x80))
#: The one-byte unsigned varints, 0..127, by value.
_SMALL_UNSIGNED: dict[int, bytes] = {n: bytes((n,)) for n in range(128)}


class _Kind(NamedTuple):
    name: str  # in function names: "uvarint", "varlong"
    noun: str  # in messages: "unsigned varint", "varlong"
    type_name: str  # the range it holds: "uint32", "int64"
    bits: int
    signed: bool  # zig-zag


_UINT32 = _Kind("uvarint", "unsigned varint", "uint32", 32, False)
_UINT64 = _Kind("uvarlong", "unsigned varlong", "uint64", 64, False)
_INT32 = _Kind("varint", "varint", "int32", 32, True)
_INT64 = _Kind("varlong", "varlong", "int64", 64, True)


def _reader(kind: _Kind) -> Callable[..., tuple[int, int]]:
    """The reader of one kind. A closure rather than a shared helper: a read of one or two bytes
    is a single call, which matters to loops over many varints."""
    name, noun, type_name, bits, signed = kind
    max_bytes = (bits + 6) // 7  # 5 for 32 bits, 10 for 64

    def read(buf, pos: int = 0) -> tuple[int, int]:
        try:
            raw = buf[pos]
            if raw < 0x80:
                end = pos + 1
            else:
                byte = buf[pos + 1]
                raw = (raw & 0x7F) | (byte << 7)
                end = pos + 2
                if byte >= 0x80:
                    raw, end = read_long(buf, pos, raw ^ (0x80 << 7))
        except IndexError:
            raise TruncatedVarintError("truncated varint", pos) from None
        if signed:
            return (raw >> 1) ^ -(raw & 1), end
        return raw, end

    def read_long(buf, pos: int, raw: int) -> tuple[int, int]:
        """Three bytes or more: ``raw`` holds the first two's 14 bits."""
        end = pos + 2
        shift = 14
        while True:
            if end - pos == max_bytes:
                raise VarintError(f"{noun} longer than {max_bytes} bytes", pos)
            byte = buf[end]
            raw |= (byte & 0x7F) << shift
            end += 1
            if byte < 0x80:
                break
            shift += 7
        if raw >> bits:
            raise VarintError(f"{noun} out of the {type_name} range", pos)
        return raw, end

    read.__name__ = read.__qualname__ = f"read_{name}"
    read.__doc__ = f"Read the {noun} ({type_name}, 1-{max_bytes} bytes) at ``pos``: ``(value, position after it)``."
    return read


def _encoder(kind: _Kind) -> tuple[Callable[[int], bytes], Callable[[bytearray, int], None]]:
    """The encoder and the writer of one kind; both check the range."""
    name, noun, type_name, bits, signed = kind
    if signed:
        lo, hi, small = -(1 << (bits - 1)), (1 << (bits - 1)) - 1, SMALL_VARINTS
    else:
        lo, hi, small = 0, (1 << bits) - 1, _SMALL_UNSIGNED

    def write(out: bytearray, value: int) -> None:
        if not lo <= value <= hi:
            raise ValueError(f"{value} does not fit a {noun} ({type_name})")
        z = (value << 1) ^ (value >> 63) if signed else value
        while z >= 0x80:
            out.append((z & 0x7F) | 0x80)
            z >>= 7
        out.append(z)

    def encode(value: int) -> bytes:
        one = small.get(value)
        if one is not None:
            return one
        if lo <= value <= hi:
            z = (value << 1) ^ (value >> 63) if signed else value
            if z < 0x4000:  # two bytes: past the table, z is at least 0x80
                return bytes(((z & 0x7F) | 0x80, z >> 7))
        out = bytearray()
        write(out, value)
        return bytes(out)

    encode.__name__ = encode.__qualname__ = f"encode_{name}"
    encode.__doc__ = f"The {noun} of ``value`` ({type_name}); ValueError outside that range."
    write.__name__ = write.__qualname__ = f"write_{name}"
    write.__doc__ = f"Append the {noun} of ``value`` ({type_name}) to ``out``; ValueError outside that range."
    return encode, write


read_uvarint = _reader(_UINT32)
read_uvarlong = _reader(_UINT64)
read_varint = _reader(_INT32)
read_varlong = _reader(_INT64)
encode_uvarint, write_uvarint = _encoder(_UINT32)
encode_uvarlong, write_uvarlong = _encoder(_UINT64)
encode_varint, write_varint = _encoder(_INT32)
encode_varlong, write_varlong = _encoder(_INT64)
