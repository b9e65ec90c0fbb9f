"""Capture RecordBatch test vectors from librdkafka (confluent-kafka), one per codec.

Run by hand, not by the tests: ``python tests/protocol/vectors/capture.py``. It starts a
throwaway TCP server on 127.0.0.1 (ephemeral port) that speaks just enough of the Kafka protocol
for a producer to send one produce request:

* ApiVersions (any version): a v0 response advertising ApiVersions 0-0, Metadata 0-1,
  Produce 3-7, Fetch 4-10, FindCoordinator 0-0 and InitProducerId 0-1; a request above v0 gets
  UNSUPPORTED_VERSION in the same v0 body, which makes the client retry with v0, as a Kafka
  broker does. librdkafka derives its features from these ranges: it writes magic 2 only with
  Produce 3 and Fetch 4, lz4 only with FindCoordinator, and zstd only with Produce 7 and Fetch 10
  (otherwise it silently sends uncompressed); Fetch and FindCoordinator are never called;
* Metadata v0/v1: one broker (this server) and every requested topic with one partition led by it;
* InitProducerId v0/v1: producer id 4242, epoch 0 (for the idempotent producer);
* Produce v3-v7 (one layout for the request): keeps the records bytes and answers base offset 0.

For each codec, and once with the idempotent producer, it writes ``librdkafka_<codec>[_idempotent].bin``
(the records bytes of the produce requests, concatenated) and a ``.json`` sidecar naming the codec
and the records the producer was given, which the tests compare with what they decode.
"""

from __future__ import annotations

import hashlib
import json
import pathlib
import socket
import struct
import threading

import confluent_kafka

HERE = pathlib.Path(__file__).resolve().parent
TOPIC = "vectors"
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
PRODUCER_ID = 4242

API_PRODUCE = 0
API_FETCH = 1
API_METADATA = 3
API_FIND_COORDINATOR = 10
API_API_VERSIONS = 18
API_INIT_PRODUCER_ID = 22
SUPPORTED = {
    API_API_VERSIONS: (0, 0),
    API_METADATA: (0, 1),
    API_PRODUCE: (3, 7),
    API_FETCH: (4, 10),
    API_FIND_COORDINATOR: (0, 0),
    API_INIT_PRODUCER_ID: (0, 1),
}
UNSUPPORTED_VERSION = 35


class Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def unpack(self, fmt: str):
        values = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return values

    def int16(self) -> int:
        return self.unpack(">h")[0]

    def int32(self) -> int:
        return self.unpack(">i")[0]

    def string(self) -> str | None:
        n = self.int16()
        if n < 0:
            return None
        value = self.data[self.pos : self.pos + n].decode()
        self.pos += n
        return value

    def bytes_(self) -> bytes | None:
        n = self.int32()
        if n < 0:
            return None
        value = self.data[self.pos : self.pos + n]
        self.pos += n
        return value


def string(value: str | None) -> bytes:
    if value is None:
        return struct.pack(">h", -1)
    raw = value.encode()
    return struct.pack(">h", len(raw)) + raw


def array(items: list[bytes]) -> bytes:
    return struct.pack(">i", len(items)) + b"".join(items)


class FakeBroker:
    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.record_sets: list[bytes] = []
        self.lock = threading.Lock()
        self.closed = False
        threading.Thread(target=self.accept_loop, daemon=True).start()

    def close(self) -> None:
        self.closed = True
        self.listener.close()

    def accept_loop(self) -> None:
        while not self.closed:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self.serve, args=(conn,), daemon=True).start()

    def serve(self, conn: socket.socket) -> None:
        with conn:
            while True:
                size_bytes = self.read_exact(conn, 4)
                if size_bytes is None:
                    return
                request = self.read_exact(conn, struct.unpack(">i", size_bytes)[0])
                if request is None:
                    return
                response = self.handle(request)
                if response is not None:
                    conn.sendall(struct.pack(">i", len(response)) + response)

    @staticmethod
    def read_exact(conn: socket.socket, n: int) -> bytes | None:
        chunks = []
        while n:
            chunk = conn.recv(n)
            if not chunk:
                return None
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def handle(self, request: bytes) -> bytes | None:
        reader = Reader(request)
        api_key, api_version, correlation_id = reader.unpack(">hhi")
        header = struct.pack(">i", correlation_id)
        if api_key == API_API_VERSIONS:
            error = 0 if api_version == 0 else UNSUPPORTED_VERSION
            apis = [struct.pack(">hhh", key, lo, hi) for key, (lo, hi) in sorted(SUPPORTED.items())]
            return header + struct.pack(">h", error) + array(apis)
        reader.string()  # client id (request header v1)
        if api_key == API_METADATA:
            count = reader.int32()
            topics = [reader.string() for _ in range(max(count, 0))] or [TOPIC]
            return header + self.metadata(api_version, topics)
        if api_key == API_INIT_PRODUCER_ID:
            return header + struct.pack(">ihqh", 0, 0, PRODUCER_ID, 0)
        if api_key == API_PRODUCE:
            body = self.produce(reader, api_version)
            return None if body is None else header + body
        raise RuntimeError(f"unexpected request: api key {api_key} version {api_version}")

    def metadata(self, version: int, topics: list[str]) -> bytes:
        broker = struct.pack(">i", 1) + string("127.0.0.1") + struct.pack(">i", self.port)
        if version >= 1:
            broker += string(None)  # rack
        partition = struct.pack(">hiii", 0, 0, 1, 1) + struct.pack(">i", 1) + array([struct.pack(">i", 1)])
        topic_entries = []
        for name in topics:
            entry = struct.pack(">h", 0) + string(name)
            if version >= 1:
                entry += b"\x00"  # is_internal
            topic_entries.append(entry + array([partition]))
        body = array([broker])
        if version >= 1:
            body += struct.pack(">i", 1)  # controller id
        return body + array(topic_entries)

    def produce(self, reader: Reader, version: int) -> bytes | None:
        reader.string()  # transactional id
        acks, _timeout = reader.unpack(">hi")
        responses = []
        for _ in range(reader.int32()):
            name = reader.string()
            partitions = []
            for _ in range(reader.int32()):
                index = reader.int32()
                records = reader.bytes_()
                with self.lock:
                    self.record_sets.append(records or b"")
                partition = struct.pack(">ihqq", index, 0, 0, -1)
                if version >= 5:
                    partition += struct.pack(">q", 0)  # log start offset
                partitions.append(partition)
            responses.append(string(name) + array(partitions))
        if acks == 0:
            return None
        return array(responses) + struct.pack(">i", 0)


def sample_records() -> list[dict]:
    """Records with keys, a null key, a tombstone, headers (one null-valued) and explicit timestamps;
    one value is large enough to span several compression blocks."""
    large = b"".join(b"line %06d of a compressible value\n" % i for i in range(2000))
    records = [
        {"key": b"key-0", "value": b"hello", "headers": [("trace", b"abc"), ("empty", None)]},
        {"key": None, "value": b"value without a key" * 3, "headers": []},
        {"key": b"key-2", "value": None, "headers": [("tombstone", b"1")]},
        {"key": b"key-3", "value": large, "headers": [("size", b"%d" % len(large))]},
        {"key": b"", "value": b"", "headers": [("", b"")]},
    ]
    for i in range(5, 40):
        records.append(
            {"key": b"key-%d" % i, "value": b"value %d " % i * (i % 7 + 1), "headers": [("i", b"%d" % i)]}
        )
    base = 1_700_000_000_000
    for i, record in enumerate(records):
        # Not monotonic on purpose: the batch's base timestamp is not always the smallest.
        record["timestamp"] = base + (i * 37) % 11 * 1000 + i
    return records


def produce(codec: str, idempotent: bool, records: list[dict]) -> bytes:
    broker = FakeBroker()
    try:
        producer = confluent_kafka.Producer(
            {
                "bootstrap.servers": f"127.0.0.1:{broker.port}",
                "api.version.request": True,
                "log_level": 3,
                "compression.type": codec,
                "enable.idempotence": idempotent,
                "linger.ms": 200,
                "batch.num.messages": 10_000,
                "acks": "all" if idempotent else 1,
                "message.timeout.ms": 10_000,
            }
        )
        for record in records:
            producer.produce(
                TOPIC,
                value=record["value"],
                key=record["key"],
                partition=0,
                headers=record["headers"],
                timestamp=record["timestamp"],
            )
        remaining = producer.flush(15)
        if remaining:
            raise RuntimeError(f"{remaining} messages were not delivered")
        with broker.lock:
            return b"".join(broker.record_sets)
    finally:
        broker.close()


def describe(value: bytes | None) -> str | dict | None:
    """The sidecar's form of a key or value: null, the text itself, or its SHA-256 when large."""
    if value is None:
        return None
    if len(value) > 1024:
        return {"sha256": hashlib.sha256(value).hexdigest(), "length": len(value)}
    return value.decode()


def main() -> None:
    records = sample_records()
    sidecar_records = [
        {
            "offset_delta": i,
            "timestamp": r["timestamp"],
            "key": describe(r["key"]),
            "value": describe(r["value"]),
            "headers": [[k, describe(v)] for k, v in r["headers"]],
        }
        for i, r in enumerate(records)
    ]
    for idempotent in (False, True):
        for codec in CODECS:
            data = produce(codec, idempotent, records)
            name = f"librdkafka_{codec}{'_idempotent' if idempotent else ''}"
            (HERE / f"{name}.bin").write_bytes(data)
            sidecar = {
                "producer": f"librdkafka {confluent_kafka.libversion()[0]}",
                "bytes": "keys and values are null, their UTF-8 text, or the SHA-256 and length of large ones",
                "codec": codec,
                "idempotent": idempotent,
                "producer_id": PRODUCER_ID if idempotent else -1,
                "records": sidecar_records,
            }
            (HERE / f"{name}.json").write_text(json.dumps(sidecar, indent=1) + "\n")
            print(f"{name}.bin: {len(data)} bytes")


if __name__ == "__main__":
    main()
