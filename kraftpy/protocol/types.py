"""Primitive types of the Kafka wire protocol, and the record-data parts a response may carry.

Every reader takes a buffer (``bytes``, ``bytearray`` or a ``memoryview`` of unsigned bytes) and an
offset and returns ``(value, new_offset)``; every writer appends to a ``bytearray``. Integers are
big-endian and signed unless named ``uint``.

==================  ====================================================================
type                encoding
==================  ====================================================================
int8/16/32/64       1/2/4/8 bytes, two's complement
uint16/uint32       2/4 bytes, unsigned
bool                1 byte, 0 is false, anything else true
float64             8 bytes, IEEE 754
uuid                16 bytes
unsigned varint     uint32, 7 bits a byte, low group first (see :mod:`~kraftpy.protocol.varint`)
varint/varlong      int32/int64, zig-zag then as an unsigned varint
string              int16 length (-1 is null), then UTF-8
compact string      unsigned varint length + 1 (0 is null), then UTF-8
bytes               int32 length (-1 is null), then the bytes
compact bytes       unsigned varint length + 1 (0 is null), then the bytes
array               int32 count (-1 is null), then the elements
compact array       unsigned varint count + 1 (0 is null), then the elements
records             bytes / compact bytes, never decoded here (see ``records.py``)
tagged fields       unsigned varint count, then (uvarint tag, uvarint size, size bytes) each
==================  ====================================================================

Record data is the one thing the codec never copies or decodes: a decoded ``records`` field is a
``memoryview`` slice of the incoming frame, and an encoded one may be ``bytes``, a ``memoryview``,
a :class:`FileRegion` (a byte range of an open segment file that the writer sends with
``os.sendfile``), or a list of those.
"""

from __future__ import annotations

import os
import struct
import uuid
from collections.abc import Sequence

import attrs

from kraftpy.protocol import varint
from kraftpy.protocol.varint import TruncatedVarintError

INT8 = struct.Struct(">b")
INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")
INT64 = struct.Struct(">q")
UINT16 = struct.Struct(">H")
UINT32 = struct.Struct(">I")
FLOAT64 = struct.Struct(">d")
BOOL = struct.Struct(">?")

ZERO_UUID = uuid.UUID(int=0)


class TruncatedError(ValueError):
    """The buffer ended before the value did."""


@attrs.frozen(eq=False)
class FileRegion:
    """``length`` bytes of the open file ``fd`` from ``offset``: record data the writer sends with sendfile.

    The one file-region type of kraftpy: a log read returns one (``first_offset`` then names the base
    offset of its first batch, or the offset asked for when it is empty), the response codec counts
    it by ``length`` and never reads the file, and the Kafka server sends it with ``os.sendfile``.

    A region either *borrows* its descriptor (a segment's own: valid while the segment is open) or
    *owns* it (``owned``, made by :meth:`detach`): a response is sent after its handler returned, when
    retention or a truncation may have closed the segment, so a handler detaches the regions it
    answers with and the server closes each with :meth:`close` once it is sent or dropped. Nothing is
    closed by the garbage collector.

    Invariant: ``offset >= 0`` and ``length >= 0``.
    """

    fd: int
    offset: int
    length: int
    first_offset: int = -1
    owned: bool = False

    def __attrs_post_init__(self) -> None:
        if self.offset < 0 or self.length < 0:
            raise ValueError(f"bad file region offset={self.offset} length={self.length}")

    def detach(self) -> FileRegion:
        """The same bytes through a descriptor of its own (a dup), which the holder must `close`."""
        return FileRegion(os.dup(self.fd), self.offset, self.length, self.first_offset, owned=True)

    def close(self) -> None:
        """Close an owned descriptor (a borrowed one belongs to its segment: nothing happens)."""
        if self.owned:
            try:
                os.close(self.fd)
            except OSError:
                pass

    def read_bytes(self) -> bytes:
        """The region's bytes, copied into memory (``pread``: the descriptor's offset is not moved)."""
        chunks = []
        position, remaining = self.offset, self.length
        while remaining:
            chunk = os.pread(self.fd, remaining, position)
            if not chunk:
                break
            chunks.append(chunk)
            position += len(chunk)
            remaining -= len(chunk)
        return b"".join(chunks)

    def sendfile(self, out_fd: int) -> int:
        """Send the whole region to the blocking descriptor ``out_fd``, returning the bytes sent (tools
        and benchmarks; the server sends regions without blocking)."""
        sent_total, position, remaining = 0, self.offset, self.length
        while remaining:
            sent = os.sendfile(out_fd, self.fd, position, remaining)
            if sent == 0:
                break
            sent_total += sent
            position += sent
            remaining -= sent
        return sent_total


#: What a response's ``records`` field may hold when it is encoded.
RecordsPart = bytes | bytearray | memoryview | FileRegion
Records = RecordsPart | Sequence[RecordsPart] | None
#: One piece of an encoded frame: a buffer to write, or a file region to sendfile.
FramePart = bytes | bytearray | memoryview | FileRegion


def part_length(part: FramePart) -> int:
    """The number of bytes ``part`` puts on the wire."""
    if isinstance(part, FileRegion):
        return part.length
    if isinstance(part, memoryview):
        return part.nbytes
    return len(part)


def records_length(records: Records) -> int:
    """The size of a records field's data, without touching any file."""
    if records is None:
        return 0
    if isinstance(records, bytes | bytearray | memoryview | FileRegion):
        return part_length(records)
    return sum(part_length(p) for p in records)


# --- varints (see :mod:`kraftpy.protocol.varint`) -------------------------------------------------


def _wire_reader(read):
    """``read`` with a varint that the buffer ends inside reported as :class:`TruncatedError`."""

    def read_wire(buf, pos: int) -> tuple[int, int]:
        try:
            return read(buf, pos)
        except TruncatedVarintError as exc:
            raise TruncatedError(str(exc)) from None

    read_wire.__name__ = read_wire.__qualname__ = read.__name__
    read_wire.__doc__ = read.__doc__
    return read_wire


# The other varint errors are VarintError, a ValueError: the schema reports them as DecodeError.
read_uvarint = _wire_reader(varint.read_uvarint)
read_uvarlong = _wire_reader(varint.read_uvarlong)
read_varint = _wire_reader(varint.read_varint)
read_varlong = _wire_reader(varint.read_varlong)
write_uvarint = varint.write_uvarint
write_varint = varint.write_varint
write_varlong = varint.write_varlong


# --- fixed-width numbers --------------------------------------------------------------------------


def _fixed_reader(st: struct.Struct):
    size = st.size
    unpack_from = st.unpack_from

    def read(buf, pos: int):
        if pos + size > len(buf):
            raise TruncatedError(f"need {size} bytes at offset {pos}, have {len(buf) - pos}")
        return unpack_from(buf, pos)[0], pos + size

    return read


def _fixed_writer(st: struct.Struct):
    pack = st.pack

    def write(out: bytearray, value) -> None:
        out += pack(value)

    return write


read_int8, write_int8 = _fixed_reader(INT8), _fixed_writer(INT8)
read_int16, write_int16 = _fixed_reader(INT16), _fixed_writer(INT16)
read_int32, write_int32 = _fixed_reader(INT32), _fixed_writer(INT32)
read_int64, write_int64 = _fixed_reader(INT64), _fixed_writer(INT64)
read_uint16, write_uint16 = _fixed_reader(UINT16), _fixed_writer(UINT16)
read_uint32, write_uint32 = _fixed_reader(UINT32), _fixed_writer(UINT32)
read_float64, write_float64 = _fixed_reader(FLOAT64), _fixed_writer(FLOAT64)
read_bool, write_bool = _fixed_reader(BOOL), _fixed_writer(BOOL)


def read_uuid(buf, pos: int) -> tuple[uuid.UUID, int]:
    if pos + 16 > len(buf):
        raise TruncatedError("buffer ends inside a uuid")
    return uuid.UUID(bytes=bytes(buf[pos : pos + 16])), pos + 16


def write_uuid(out: bytearray, value: uuid.UUID) -> None:
    out += value.bytes


# --- length-prefixed values -----------------------------------------------------------------------


def _read_length(buf, pos: int, compact: bool, wide: bool) -> tuple[int, int]:
    """A length or count, -1 for null: uvarint ``n + 1`` when compact, else int32 (``wide``) or int16."""
    if compact:
        n, pos = read_uvarint(buf, pos)
        return n - 1, pos
    return (read_int32 if wide else read_int16)(buf, pos)


def _write_length(out: bytearray, n: int, compact: bool, wide: bool) -> None:
    """The inverse of :func:`_read_length`."""
    if compact:
        write_uvarint(out, n + 1)
    else:
        out += (INT32 if wide else INT16).pack(n)


def _take(buf, pos: int, n: int):
    end = pos + n
    if end > len(buf):
        raise TruncatedError(f"need {n} bytes at offset {pos}, have {len(buf) - pos}")
    return buf[pos:end], end


def read_string(buf, pos: int, *, compact: bool = False) -> tuple[str | None, int]:
    """A (compact) nullable string; a non-nullable field rejects ``None`` itself."""
    n, pos = _read_length(buf, pos, compact, False)
    if n < 0:
        return None, pos
    raw, pos = _take(buf, pos, n)
    return str(raw, "utf-8"), pos


def write_string(out: bytearray, value: str | None, *, compact: bool = False) -> None:
    if value is None:
        _write_length(out, -1, compact, False)
        return
    data = value.encode("utf-8")
    _write_length(out, len(data), compact, False)
    out += data


def read_records(buf, pos: int, *, compact: bool = False):
    """(Compact) nullable records: a slice of ``buf`` (zero-copy when ``buf`` is a memoryview)."""
    n, pos = _read_length(buf, pos, compact, True)
    if n < 0:
        return None, pos
    return _take(buf, pos, n)


def read_bytes(buf, pos: int, *, compact: bool = False) -> tuple[bytes | None, int]:
    """(Compact) nullable bytes, copied out of the buffer."""
    raw, pos = read_records(buf, pos, compact=compact)
    return (None if raw is None else bytes(raw)), pos


def write_bytes(out: bytearray, value: bytes | bytearray | memoryview | None, *, compact: bool = False) -> None:
    if value is None:
        _write_length(out, -1, compact, True)
        return
    _write_length(out, value.nbytes if isinstance(value, memoryview) else len(value), compact, True)
    out += value


def read_array_length(buf, pos: int, *, compact: bool = False) -> tuple[int, int]:
    """An array's element count; -1 means null."""
    return _read_length(buf, pos, compact, True)


def write_array_length(out: bytearray, count: int | None, *, compact: bool = False) -> None:
    _write_length(out, -1 if count is None else count, compact, True)


def skip_tagged_fields(buf, pos: int) -> int:
    """Skip a tagged-field section, every field unknown; return the offset after it."""
    count, pos = read_uvarint(buf, pos)
    for _ in range(count):
        _tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        _raw, pos = _take(buf, pos, size)
    return pos


def read_tagged_fields(buf, pos: int) -> tuple[dict[int, memoryview | bytes], int]:
    """A tagged-field section as ``{tag: raw value bytes}``."""
    count, pos = read_uvarint(buf, pos)
    fields: dict[int, memoryview | bytes] = {}
    last = -1
    for _ in range(count):
        tag, pos = read_uvarint(buf, pos)
        if tag <= last:
            raise ValueError(f"tagged fields out of order: {tag} after {last}")
        last = tag
        size, pos = read_uvarint(buf, pos)
        fields[tag], pos = _take(buf, pos, size)
    return fields, pos


def write_tagged_fields(out: bytearray, fields: dict[int, bytes]) -> None:
    """Write a tagged-field section from ``{tag: raw value bytes}``, tags ascending."""
    write_uvarint(out, len(fields))
    for tag in sorted(fields):
        data = fields[tag]
        write_uvarint(out, tag)
        write_uvarint(out, len(data))
        out += data
