"""The five codecs: round trips, the framings other clients write, truncation, and the size guard."""

from __future__ import annotations

import gzip
import struct
import warnings
import zlib

import cramjam
import lz4.frame
import pytest
import snappy
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from kraftpy.protocol.compression import (
    XERIAL_MAGIC,
    Compression,
    compress,
    decompress,
    gzip_decompress,
    lz4_compress,
    lz4_decompress,
    snappy_compress,
    snappy_decompress,
    zstd_decompress,
)
from kraftpy.protocol.records import Compression as RecordsCompression
from kraftpy.protocol.records import CorruptRecordError

with warnings.catch_warnings():
    # kafka-python's import emits DeprecationWarnings of its own.
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.codec import snappy_encode

CODECS = list(Compression)
COMPRESSED = [c for c in Compression if c != Compression.NONE]
SAMPLE = b"".join(b"record %05d: some text that compresses\n" % i for i in range(3000))  # ~120 KB


def test_codec_ids_and_names():
    assert RecordsCompression is Compression
    assert [(c.name, int(c)) for c in Compression] == [
        ("NONE", 0),
        ("GZIP", 1),
        ("SNAPPY", 2),
        ("LZ4", 3),
        ("ZSTD", 4),
    ]
    for name in ("none", "gzip", "snappy", "lz4", "zstd"):
        assert Compression.from_name(name).kafka_name == name
    assert Compression.from_name("ZSTD") is Compression.ZSTD
    with pytest.raises(ValueError, match="unknown compression type 'producer'"):
        Compression.from_name("producer")


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("data", [b"", b"x", SAMPLE], ids=["empty", "one", "large"])
def test_round_trip(codec, data):
    compressed = compress(codec, data)
    if codec != Compression.NONE and len(data) > 1000:
        assert len(compressed) < len(data) // 4
    assert decompress(codec, compressed) == data


@settings(max_examples=60)
@given(codec=st.sampled_from(CODECS), data=st.binary(max_size=3000))
def test_round_trip_property(codec, data):
    assert decompress(codec, compress(codec, data)) == data


def test_gzip_is_a_gzip_stream():
    compressed = compress(Compression.GZIP, SAMPLE)
    assert compressed[:2] == b"\x1f\x8b"
    assert gzip.decompress(compressed) == SAMPLE
    assert gzip_decompress(gzip.compress(SAMPLE, compresslevel=1)) == SAMPLE


def test_gzip_concatenated_members():
    assert gzip_decompress(gzip.compress(b"abc") + gzip.compress(b"def")) == b"abcdef"


def test_snappy_writes_xerial_framing_in_32k_blocks():
    compressed = snappy_compress(SAMPLE)
    assert compressed[:8] == XERIAL_MAGIC == b"\x82SNAPPY\x00"
    assert struct.unpack_from(">ii", compressed, 8) == (1, 1)
    pos, blocks, out = 16, 0, b""
    while pos < len(compressed):
        (length,) = struct.unpack_from(">i", compressed, pos)
        out += bytes(cramjam.snappy.decompress_raw(compressed[pos + 4 : pos + 4 + length]))
        pos += 4 + length
        blocks += 1
    assert out == SAMPLE
    assert blocks == -(-len(SAMPLE) // 32768)


def test_snappy_reads_raw_and_python_snappy_forms():
    # librdkafka writes raw snappy without framing; python-snappy's raw form is the same thing.
    assert snappy_decompress(bytes(cramjam.snappy.compress_raw(SAMPLE))) == SAMPLE
    assert snappy_decompress(snappy.compress(SAMPLE)) == SAMPLE


@pytest.mark.parametrize(
    ("block", "message"),
    [
        (b"\x80\x80", "invalid snappy block preamble: truncated varint"),
        (b"\x80\x80\x80\x80\x80\x01\x00", "invalid snappy block preamble: unsigned varint longer than 5 bytes"),
        (b"\xff\xff\xff\xff\x1f\x00", "invalid snappy block preamble: unsigned varint out of the uint32 range"),
        (b"\x81\x08\x00", "decompresses to more than 1000 bytes"),  # announces 1025 bytes
    ],
)
def test_snappy_block_preamble_is_checked_before_decompressing(block, message):
    with pytest.raises(CorruptRecordError, match=message):
        snappy_decompress(block, max_size=1000)
    framed = XERIAL_MAGIC + struct.pack(">iii", 1, 1, len(block)) + block
    with pytest.raises(CorruptRecordError, match=message):
        snappy_decompress(framed, max_size=1000)


def test_snappy_reads_xerial_written_by_kafka_python():
    assert snappy_decompress(snappy_encode(SAMPLE, xerial_compatible=True)) == SAMPLE
    assert snappy_decompress(snappy_encode(SAMPLE, xerial_compatible=False)) == SAMPLE


def test_lz4_frame_is_what_kafka_java_reads():
    compressed = lz4_compress(SAMPLE)
    assert compressed[:4] == b"\x04\x22\x4d\x18"
    flg, bd = compressed[4], compressed[5]
    assert flg >> 6 == 1  # version 01
    assert flg & 0x20  # independent blocks: Kafka's Java reader refuses linked ones
    assert not flg & 0x08  # no content size
    assert (bd >> 4) & 0x7 == 4  # 64 KiB blocks
    assert lz4.frame.decompress(compressed) == SAMPLE


@pytest.mark.parametrize("block_linked", [True, False])
@pytest.mark.parametrize("store_size", [True, False])
def test_lz4_reads_other_frame_options(block_linked, store_size):
    compressed = lz4.frame.compress(
        SAMPLE, block_linked=block_linked, store_size=store_size, content_checksum=True
    )
    assert lz4_decompress(compressed) == SAMPLE


def test_zstd_reads_frames_without_content_size():
    compressor = zstandard.ZstdCompressor(write_content_size=False)
    compressed = compressor.compress(SAMPLE)
    assert zstandard.get_frame_parameters(compressed).content_size == zstandard.CONTENTSIZE_UNKNOWN
    assert zstd_decompress(compressed) == SAMPLE
    chunker = zstandard.ZstdCompressor().chunker(chunk_size=1000)
    streamed = b"".join([*chunker.compress(SAMPLE), *chunker.finish()])
    assert zstd_decompress(streamed) == SAMPLE


def test_zstd_concatenated_frames():
    a = zstandard.ZstdCompressor().compress(b"first ")
    b = zstandard.ZstdCompressor(write_content_size=False).compress(b"second")
    assert zstd_decompress(a + b) == b"first second"


@pytest.mark.parametrize("codec", COMPRESSED)
@pytest.mark.parametrize("cut", [1, 7, "half", -1, -4])
def test_truncated_input_is_corrupt(codec, cut):
    compressed = compress(codec, SAMPLE)
    cut_at = len(compressed) // 2 if cut == "half" else cut
    with pytest.raises(CorruptRecordError):
        decompress(codec, compressed[:cut_at])


@pytest.mark.parametrize("codec", COMPRESSED)
def test_empty_input_is_corrupt(codec):
    with pytest.raises(CorruptRecordError):
        decompress(codec, b"")


@pytest.mark.parametrize("codec", COMPRESSED)
def test_garbage_is_corrupt(codec):
    with pytest.raises(CorruptRecordError):
        decompress(codec, b"\x00\x01\x02 this is not compressed data at all \xff" * 3)


@settings(max_examples=150)
@given(codec=st.sampled_from(COMPRESSED), data=st.binary(max_size=200))
def test_random_bytes_only_ever_raise_corrupt_record_error(codec, data):
    try:
        out = decompress(codec, data, max_size=1 << 20)
    except CorruptRecordError:
        return
    assert isinstance(out, bytes) and len(out) <= 1 << 20


@settings(max_examples=100)
@given(codec=st.sampled_from(COMPRESSED), data=st.data())
def test_damaged_streams_only_ever_raise_corrupt_record_error(codec, data):
    compressed = bytearray(compress(codec, SAMPLE[:5000]))
    index = data.draw(st.integers(0, len(compressed) - 1))
    compressed[index] ^= data.draw(st.integers(1, 255))
    try:
        out = decompress(codec, bytes(compressed), max_size=1 << 20)
    except CorruptRecordError:
        return
    assert isinstance(out, bytes) and len(out) <= 1 << 20


@pytest.mark.parametrize("codec", COMPRESSED)
def test_size_guard_refuses_one_byte_over(codec):
    data = b"\x00" * 100_000
    compressed = compress(codec, data)
    assert decompress(codec, compressed, max_size=len(data)) == data
    with pytest.raises(CorruptRecordError, match="more than 99999 bytes"):
        decompress(codec, compressed, max_size=len(data) - 1)


BOMB = 8 * 1024 * 1024  # 8 MiB of zeros: a few KiB compressed at most


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda: zlib.compress(b"\0" * BOMB, wbits=31), id="gzip"),
        pytest.param(lambda: snappy_compress(b"\0" * BOMB), id="snappy-xerial"),
        pytest.param(lambda: bytes(cramjam.snappy.compress_raw(b"\0" * BOMB)), id="snappy-raw"),
        pytest.param(lambda: lz4.frame.compress(b"\0" * BOMB), id="lz4"),
        pytest.param(lambda: zstandard.ZstdCompressor().compress(b"\0" * BOMB), id="zstd-sized"),
        pytest.param(
            lambda: zstandard.ZstdCompressor(write_content_size=False).compress(b"\0" * BOMB), id="zstd"
        ),
    ],
)
def test_decompression_bomb_is_refused(make):
    bomb = make()
    codec = {0x1F: Compression.GZIP, 0x82: Compression.SNAPPY, 0x04: Compression.LZ4, 0x28: Compression.ZSTD}
    codec = codec.get(bomb[0], Compression.SNAPPY)
    assert len(bomb) < BOMB // 20
    with pytest.raises(CorruptRecordError, match="decompresses to more than"):
        decompress(codec, bomb, max_size=1024 * 1024)


def test_unknown_codec():
    with pytest.raises(CorruptRecordError, match="unknown compression codec 5"):
        decompress(5, b"abc")
    with pytest.raises(ValueError, match="unknown compression codec 7"):
        compress(7, b"abc")


def test_a_zstd_frame_that_understates_its_content_size_is_corrupt():
    # A declared size within the limit lets the frame be fed whole; the decoder then refuses to
    # write past that size, so a frame that lies about it is refused, not decompressed past the limit.
    frame = bytearray(zstandard.ZstdCompressor(write_checksum=False).compress(b"\0" * BOMB))
    declared = zstandard.frame_content_size(bytes(frame))
    at = frame.index(declared.to_bytes(4, "little"), 4)
    frame[at : at + 4] = (1000).to_bytes(4, "little")
    assert zstandard.frame_content_size(bytes(frame)) == 1000
    with pytest.raises(CorruptRecordError):
        decompress(Compression.ZSTD, bytes(frame), max_size=1024 * 1024)
