"""The compression codecs of a RecordBatch: the records section after the 61-byte header is
compressed as one unit, with the codec named in the low three bits of the batch attributes.

==========  ====  ===========================================================================
codec       id    bytes on the wire
==========  ====  ===========================================================================
none        0     the records as they are
gzip        1     a gzip stream (RFC 1952); concatenated members are accepted on read
snappy      2     xerial framing, as the Java client writes it::

                      magic  8 bytes  82 53 4e 41 50 50 59 00   ("\\x82SNAPPY\\0")
                      version        int32  1
                      min compatible int32  1
                      blocks: length int32 (big-endian) + raw snappy of at most 32 KiB of input

                  raw snappy without framing (what librdkafka writes) is accepted on read
lz4         3     the LZ4 frame format, independent 64 KiB blocks, as Kafka's Java client writes
zstd        4     one or more zstd frames; frames without a content size are accepted
==========  ====  ===========================================================================

Every decompressor stops with :class:`DecompressedTooLargeError` (a :class:`CorruptRecordError`)
once the output would pass ``max_size`` bytes, so a small batch cannot inflate into an unbounded allocation, and on
truncated or undecodable input.
"""

from __future__ import annotations

import enum
import struct
import zlib

import cramjam
import lz4.frame
import zstandard

from kraftpy.protocol.batch_header import CorruptRecordError
from kraftpy.protocol.varint import VarintError, read_uvarint

#: Decompressed-size limit per batch, well above the 1 MiB default ``max.message.bytes``.
DEFAULT_MAX_DECOMPRESSED_SIZE = 256 * 1024 * 1024

_GZIP_WBITS = 16 + zlib.MAX_WBITS

XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = struct.Struct(">8sii")
assert _XERIAL_HEADER.size == 16
_XERIAL_VERSION = 1
_XERIAL_MIN_COMPATIBLE = 1
_XERIAL_BLOCK_SIZE = 32 * 1024
_BLOCK_LENGTH = struct.Struct(">i")

# zstd emits at most 128 KiB per block and a block takes at least 4 input bytes, so feeding the
# decompressor this much input at a time bounds the overshoot past the limit to a few MiB. A
# frame that declares its content size is fed whole when that size fits: the decoder refuses to
# write past a declared size, so the bound holds without the many small calls.
_ZSTD_MAX_RATIO = 128 * 1024 // 4
_ZSTD_MIN_FEED = 64
# The output buffer lz4 allocates is the most it is asked for: ask for this much at a time.
_LZ4_MAX_STEP = 1024 * 1024


class Compression(enum.IntEnum):
    """Codec ids of the batch attributes (bits 0-2), named as in ``compression.type``."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @classmethod
    def from_name(cls, name: str) -> Compression:
        """``'none'``, ``'gzip'``, ``'snappy'``, ``'lz4'`` or ``'zstd'`` (any case)."""
        try:
            return cls[name.strip().upper()]
        except KeyError:
            raise ValueError(
                f"unknown compression type {name!r}; expected one of none, gzip, snappy, lz4, zstd"
            ) from None

    @property
    def kafka_name(self) -> str:
        return self.name.lower()


class DecompressedTooLargeError(CorruptRecordError):
    """Data that would decompress past the limit it was given (which a caller may retry with a larger one)."""


def _too_large(codec: str, max_size: int) -> DecompressedTooLargeError:
    return DecompressedTooLargeError(f"{codec} data decompresses to more than {max_size} bytes")


def _inflate(codec: str, data: bytes, max_size: int, new_member, step, errors) -> bytes:
    """Decompress the members of ``data`` one after another (gzip members, lz4 or zstd frames).

    ``step(decompressor, pending, budget)`` feeds the member's decompressor, returns ``(output,
    input it has not taken)`` and raises CorruptRecordError when the input ends inside the member.
    ``budget`` is one more than the output still allowed, so stepping past ``max_size`` is seen.
    """
    out = bytearray()
    pending = memoryview(bytes(data))
    try:
        while True:
            decompressor = new_member()
            while not decompressor.eof:
                chunk, pending = step(decompressor, pending, max_size + 1 - len(out))
                out += chunk
                if len(out) > max_size:
                    raise _too_large(codec, max_size)
            if decompressor.unused_data:
                pending = memoryview(decompressor.unused_data + bytes(pending))
            if not pending:
                return bytes(out)
    except errors as exc:
        raise CorruptRecordError(f"invalid {codec} data: {exc}") from None


# -- gzip ------------------------------------------------------------------------------------


def gzip_compress(data: bytes, level: int = -1) -> bytes:
    compressor = zlib.compressobj(level, zlib.DEFLATED, _GZIP_WBITS)
    return compressor.compress(data) + compressor.flush()


def _gzip_step(decompressor, pending: memoryview, budget: int) -> tuple[bytes, memoryview]:
    # max_length 0 would mean "no limit": the budget is always at least 1 here.
    chunk = decompressor.decompress(pending, budget)
    tail = decompressor.unconsumed_tail
    if not chunk and not tail and not decompressor.eof:
        raise CorruptRecordError("truncated gzip data")
    return chunk, memoryview(tail)


def gzip_decompress(data: bytes, max_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE) -> bytes:
    return _inflate("gzip", data, max_size, lambda: zlib.decompressobj(_GZIP_WBITS), _gzip_step, zlib.error)


# -- snappy ----------------------------------------------------------------------------------


def _snappy_raw_length(block: bytes | memoryview) -> int:
    """The uncompressed length in a raw snappy block's preamble (an unsigned varint)."""
    try:
        return read_uvarint(block)[0]
    except VarintError as exc:
        raise CorruptRecordError(f"invalid snappy block preamble: {exc.reason}") from None


def _snappy_raw_decompress(block: bytes | memoryview, budget: int, max_size: int) -> bytes:
    if _snappy_raw_length(block) > budget:
        raise _too_large("snappy", max_size)
    try:
        return bytes(cramjam.snappy.decompress_raw(bytes(block)))
    except cramjam.DecompressionError as exc:
        raise CorruptRecordError(f"invalid snappy data: {exc}") from None


def snappy_compress(data: bytes) -> bytes:
    """xerial-framed snappy, the framing Kafka's Java client reads and writes."""
    view = memoryview(data)
    parts = [_XERIAL_HEADER.pack(XERIAL_MAGIC, _XERIAL_VERSION, _XERIAL_MIN_COMPATIBLE)]
    for start in range(0, len(view), _XERIAL_BLOCK_SIZE):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + _XERIAL_BLOCK_SIZE]))
        parts.append(_BLOCK_LENGTH.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def snappy_decompress(data: bytes, max_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE) -> bytes:
    """Decompress xerial-framed or raw snappy."""
    if not data.startswith(XERIAL_MAGIC):
        return _snappy_raw_decompress(data, max_size, max_size)
    if len(data) < _XERIAL_HEADER.size:
        raise CorruptRecordError("truncated xerial snappy header")
    view = memoryview(data)
    pos = _XERIAL_HEADER.size
    end = len(data)
    out = bytearray()
    while pos < end:
        if end - pos < 4:
            raise CorruptRecordError("truncated xerial snappy block length")
        (length,) = _BLOCK_LENGTH.unpack_from(data, pos)
        pos += 4
        if length < 0 or length > end - pos:
            raise CorruptRecordError(f"xerial snappy block of {length} bytes runs past the end")
        out += _snappy_raw_decompress(view[pos : pos + length], max_size - len(out), max_size)
        pos += length
    return bytes(out)


# -- lz4 -------------------------------------------------------------------------------------


def lz4_compress(data: bytes, level: int = 0) -> bytes:
    """One LZ4 frame of independent 64 KiB blocks; Java's reader refuses linked blocks."""
    return lz4.frame.compress(
        data,
        compression_level=level,
        block_size=lz4.frame.BLOCKSIZE_MAX64KB,
        block_linked=False,
        content_checksum=False,
        store_size=False,
    )


def _lz4_step(decompressor, pending: memoryview, budget: int) -> tuple[bytes, memoryview]:
    # Keeps what it does not return; max_length is also the size of the buffer it allocates.
    chunk = decompressor.decompress(pending, max_length=min(budget, _LZ4_MAX_STEP))
    if not chunk and decompressor.needs_input and not decompressor.eof:
        raise CorruptRecordError("truncated lz4 frame")
    return chunk, memoryview(b"")


def lz4_decompress(data: bytes, max_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE) -> bytes:
    return _inflate("lz4", data, max_size, lz4.frame.LZ4FrameDecompressor, _lz4_step, RuntimeError)


# -- zstd ------------------------------------------------------------------------------------

_ZSTD_COMPRESSORS: dict[int, zstandard.ZstdCompressor] = {}


def zstd_compress(data: bytes, level: int = 3) -> bytes:
    compressor = _ZSTD_COMPRESSORS.get(level)
    if compressor is None:
        compressor = _ZSTD_COMPRESSORS[level] = zstandard.ZstdCompressor(level=level)
    return compressor.compress(data)


def _zstd_step(decompressor, pending: memoryview, budget: int) -> tuple[bytes, memoryview]:
    if not pending:
        raise CorruptRecordError("truncated zstd frame")
    feed = max(_ZSTD_MIN_FEED, (budget - 1) // _ZSTD_MAX_RATIO)
    if not decompressor.started:
        decompressor.started = True
        declared = zstandard.frame_content_size(pending)
        if 0 <= declared < budget:
            feed = len(pending)
    return decompressor.inner.decompress(pending[:feed]), pending[feed:]


class _ZstdFrame:
    """One frame's decompressor, and whether it has been fed yet (its content size is read first)."""

    def __init__(self) -> None:
        self.inner = zstandard.ZstdDecompressor().decompressobj()
        self.started = False

    @property
    def eof(self) -> bool:
        return self.inner.eof

    @property
    def unused_data(self) -> bytes:
        return self.inner.unused_data


def zstd_decompress(data: bytes, max_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE) -> bytes:
    """Decompress one or more zstd frames, with or without a declared content size."""
    return _inflate("zstd", data, max_size, _ZstdFrame, _zstd_step, zstandard.ZstdError)


# -- dispatch --------------------------------------------------------------------------------


def compress(codec: int, data: bytes) -> bytes:
    """Compress a records section with ``codec`` at the codec's default level."""
    if codec == Compression.NONE:
        return bytes(data)
    if codec == Compression.GZIP:
        return gzip_compress(data)
    if codec == Compression.SNAPPY:
        return snappy_compress(data)
    if codec == Compression.LZ4:
        return lz4_compress(data)
    if codec == Compression.ZSTD:
        return zstd_compress(data)
    raise ValueError(f"unknown compression codec {codec}")


def decompress(codec: int, data: bytes, max_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE) -> bytes:
    """Decompress a records section; CorruptRecordError on bad data, an unknown codec or a bomb."""
    if codec == Compression.NONE:
        return bytes(data)
    if codec == Compression.GZIP:
        return gzip_decompress(data, max_size)
    if codec == Compression.SNAPPY:
        return snappy_decompress(data, max_size)
    if codec == Compression.LZ4:
        return lz4_decompress(data, max_size)
    if codec == Compression.ZSTD:
        return zstd_decompress(data, max_size)
    raise CorruptRecordError(f"unknown compression codec {codec}")
