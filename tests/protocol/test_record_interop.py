"""Batches written by other Kafka clients, and batches of ours read by them.

The ``vectors/`` files are produce-request record sets captured from librdkafka (confluent-kafka)
by ``vectors/capture.py``, one per codec, with and without the idempotent producer; each ``.json``
sidecar lists the records the producer was given. kafka-python's own batch builder and reader
are the second independent implementation.
"""

from __future__ import annotations

import hashlib
import json
import pathlib
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraftpy.protocol.compression import XERIAL_MAGIC
from kraftpy.protocol.records import Compression, SimpleRecord, build_batch, decode_batch, iter_decoded

with warnings.catch_warnings():
    # kafka-python's import emits DeprecationWarnings of its own.
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

VECTORS = pathlib.Path(__file__).parent / "vectors"
SIDECARS = sorted(VECTORS.glob("librdkafka_*.json"))


def test_all_vectors_are_present():
    names = {p.stem for p in SIDECARS}
    for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
        assert {f"librdkafka_{codec}", f"librdkafka_{codec}_idempotent"} <= names
    for sidecar in SIDECARS:
        assert sidecar.with_suffix(".bin").is_file()


def matches(expected: str | dict | None, actual: bytes | None) -> bool:
    """Sidecar form: null, UTF-8 text, or ``{"sha256", "length"}`` for a large value."""
    if expected is None or actual is None:
        return expected is None and actual is None
    if isinstance(expected, dict):
        return len(actual) == expected["length"] and hashlib.sha256(actual).hexdigest() == expected["sha256"]
    return actual == expected.encode()


def load(sidecar: pathlib.Path) -> tuple[dict, bytes]:
    return json.loads(sidecar.read_text()), sidecar.with_suffix(".bin").read_bytes()


@pytest.mark.parametrize("sidecar", SIDECARS, ids=lambda p: p.stem)
def test_librdkafka_vector_decodes_to_the_produced_records(sidecar):
    meta, data = load(sidecar)
    batches = list(iter_decoded(data))
    assert sum(b.header.size for b in batches) == len(data)
    records = [r for b in batches for r in b.records]
    expected = meta["records"]
    assert len(records) == len(expected)
    for record, want in zip(records, expected, strict=True):
        assert record.offset == want["offset_delta"]  # a producer writes base offset 0
        assert record.timestamp == want["timestamp"]
        assert matches(want["key"], record.key)
        assert matches(want["value"], record.value)
        assert [k for k, _ in record.headers] == [k for k, _ in want["headers"]]
        assert all(matches(w, v) for (_, v), (_, w) in zip(record.headers, want["headers"], strict=True))

    for batch in batches:
        header = batch.header
        assert header.magic == 2
        assert header.compression == Compression.from_name(meta["codec"])
        assert header.timestamp_type == 0 and not header.is_transactional and not header.is_control
        assert header.producer_id == meta["producer_id"]
        if meta["idempotent"]:
            assert header.producer_epoch == 0 and header.base_sequence == batch.records[0].offset
        else:
            assert (header.producer_epoch, header.base_sequence) == (-1, -1)
        assert header.max_timestamp == max(r.timestamp for r in batch.records)
        assert header.base_timestamp == batch.records[0].timestamp


def test_librdkafka_snappy_is_raw_without_xerial_framing():
    # librdkafka writes raw snappy; the Java client writes xerial. Both must decode.
    _, data = load(VECTORS / "librdkafka_snappy.json")
    assert not data[61:].startswith(XERIAL_MAGIC)
    assert decode_batch(data).header.compression == Compression.SNAPPY


@pytest.mark.parametrize("sidecar", SIDECARS, ids=lambda p: p.stem)
def test_rebuilding_a_librdkafka_vector(sidecar):
    """Our encoder, given the same records and header fields, writes the same records section:
    byte for byte when uncompressed, and decoding to the same batch in every codec."""
    meta, data = load(sidecar)
    (original,) = iter_decoded(data)
    header = original.header
    rebuilt = build_batch(
        [SimpleRecord(r.key, r.value, r.headers, r.timestamp) for r in original.records],
        compression=header.compression,
        partition_leader_epoch=header.partition_leader_epoch,  # librdkafka writes 0, Java -1
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
    )
    again = decode_batch(rebuilt)
    assert again.records == original.records
    if header.compression == Compression.NONE:
        assert rebuilt == data
    else:
        assert again.header.max_timestamp == header.max_timestamp


# -- kafka-python ----------------------------------------------------------------------------

simple_records = st.builds(
    SimpleRecord,
    key=st.none() | st.binary(max_size=30),
    value=st.none() | st.binary(max_size=200),
    headers=st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=10)), max_size=3).map(
        tuple
    ),
    timestamp=st.integers(0, 2**45),
)


def kafka_python_build(records, codec, producer=(-1, -1, -1)) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=False,
        producer_id=producer[0],
        producer_epoch=producer[1],
        base_sequence=producer[2],
        batch_size=1 << 30,
    )
    for offset, r in enumerate(records):
        builder.append(offset, timestamp=r.timestamp, key=r.key, value=r.value, headers=list(r.headers))
    return bytes(builder.build())


def kafka_python_read(data: bytes) -> list[tuple]:
    batch = DefaultRecordBatch(data)
    assert batch.validate_crc()
    return [(r.offset, r.timestamp, r.key, r.value, tuple(tuple(h) for h in r.headers)) for r in batch]


@settings(max_examples=40)
@given(records=st.lists(simple_records, min_size=1, max_size=8), codec=st.sampled_from(list(Compression)))
def test_kafka_python_reads_our_batches(records, codec):
    data = build_batch(records, compression=codec, producer_id=77, producer_epoch=1, base_sequence=5)
    expected = [(i, r.timestamp, r.key, r.value, r.headers) for i, r in enumerate(records)]
    assert kafka_python_read(data) == expected
    batch = DefaultRecordBatch(data)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (77, 1, 5)
    assert batch.compression_type == codec


@settings(max_examples=40)
@given(records=st.lists(simple_records, min_size=1, max_size=8), codec=st.sampled_from(list(Compression)))
def test_we_read_kafka_python_batches(records, codec):
    data = kafka_python_build(records, codec, producer=(77, 1, 5))
    decoded = decode_batch(data)
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in decoded.records] == [
        (i, r.timestamp, r.key, r.value, r.headers) for i, r in enumerate(records)
    ]
    header = decoded.header
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (77, 1, 5)


@pytest.mark.parametrize("codec", list(Compression))
def test_kafka_python_compressed_batches_in_every_codec(codec):
    # Compressible enough that kafka-python keeps the codec rather than falling back to none.
    records = [SimpleRecord(b"k%d" % i, b"repeat " * 200, (("h", b"v"),), 1000 + i) for i in range(20)]
    data = kafka_python_build(records, codec)
    decoded = decode_batch(data)
    assert decoded.header.compression == codec
    assert [r.value for r in decoded.records] == [b"repeat " * 200] * 20
    assert kafka_python_read(build_batch(records, compression=codec))[5][3] == b"repeat " * 200
