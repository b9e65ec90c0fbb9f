"""Per-request cost: what one small request costs the server, request after request on one connection.

One server at a time, each started in a session of its own: `kraftpy dev`, Tansu (the peers section's
Rust broker, in-memory storage) and Redis (``appendonly yes``, ``appendfsync everysec``). A client in
the benchmark's process sends a request, waits for its answer and sends the next, over one connection:
no pipelining and no batching, the cost a request bears alone, which is what a follower's fetch, a
consumer's long poll that ends, or a producer at linger.ms=0 pay at a broker, and what the latency
section's brokers pay thousands of times a second. The requests, the same bytes to both Kafka brokers:
ApiVersions v3; Metadata v12 of one topic; Fetch v12 (fetch.min.bytes 1, as consumers ask) of one
partition at its end, with max_wait_ms 0 (nothing new, answered at once); Fetch v12 of the partition's last
record (one batch of one 100-byte record, answered at once); Produce v9 of one batch of
one 100-byte record, acks=1. Redis is driven by redis-benchmark with one connection and no pipelining:
``XADD`` of one 100-byte field, and ``XRANGE key - + COUNT 1``. Server CPU is the server process's
user+system time over the requests of a kind, divided by their number; the round trip is the client's,
from the request's first byte written until its answer's last byte read (for Redis, one over
redis-benchmark's requests/s). Then the same requests again, each sent 3 ms after the answer to the one
before: the server sleeps between them, as each broker of the latency section's cluster sleeps between
the hops of a produce (the leader's append, the followers' fetches, the consumer's), and the last column
is its CPU a request then (the two Kafka brokers only: redis-benchmark does not pause). Each server runs
every kind of request in every round, a fresh server a round; a cell is its median round.
"""

from __future__ import annotations

import argparse
import platform
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from broker import cpu_seconds, ensure_redis, redis_cli, redis_version  # noqa: E402
from peers import Tansu, create_topic, redis_server, tansu_binary  # noqa: E402

from kraftpy.protocol.api_keys import ApiKey  # noqa: E402
from kraftpy.protocol.errors import ErrorCode  # noqa: E402
from kraftpy.protocol.frames import decode_response, encode_request, join_frame  # noqa: E402
from kraftpy.protocol.messages import ApiVersionsRequest, FetchRequest, MetadataRequest, ProduceRequest  # noqa: E402
from kraftpy.protocol.records import SimpleRecord, build_batch  # noqa: E402
from tests.helpers.processes import DevProcess  # noqa: E402

TOPIC = "requests"
RECORD = b"r" * 100
#: Fetch by topic name (v13 names topics by id, which the two brokers need not agree on for a test topic).
FETCH_VERSION = 12
#: The pause after each request of the spaced measurement: long enough for the server to sleep between
#: requests, as each broker of a cluster at a few hundred produce requests a second does between hops.
SPACING = 0.003
KINDS = ("ApiVersions", "Metadata", "Fetch, nothing new", "Fetch, one record", "Produce, one record, acks=1")
REDIS_KINDS = {"Produce, one record, acks=1": ["XADD", "requests", "*", "f", "v" * 100],
               "Fetch, one record": ["XRANGE", "requests", "-", "+", "COUNT", "1"]}


class Client:
    """One blocking connection; `call` sends a pre-encoded request and reads its whole answer."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def call(self, frame: bytes) -> bytes:
        self.sock.sendall(frame)
        head = self._exactly(4)
        return self._exactly(struct.unpack(">i", head)[0])

    def _exactly(self, size: int) -> bytes:
        chunks, left = [], size
        while left:
            chunk = self.sock.recv(min(left, 1 << 20))
            if not chunk:
                raise SystemExit("the server closed the connection")
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def request(self, key: ApiKey, version: int, body) -> object:
        return decode_response(key, version, self.call(join_frame(encode_request(key, version, 1, "bench", body))))[1]

    def close(self) -> None:
        self.sock.close()


def frames_for(client: Client) -> dict[str, tuple[ApiKey, int, bytes]]:
    """The requests of each kind, encoded once (the topic exists and holds records)."""
    answer = client.request(ApiKey.FETCH, FETCH_VERSION, fetch_request(0))
    if not answer.responses:
        raise SystemExit(f"a fetch from offset 0 answered no partition: {answer}")
    end = answer.responses[0].partitions[0].high_watermark

    def encoded(key: ApiKey, version: int, body) -> tuple[ApiKey, int, bytes]:
        return key, version, join_frame(encode_request(key, version, 7, "bench", body))

    batch = build_batch([SimpleRecord(key=None, value=RECORD)])
    produce = ProduceRequest(acks=1, timeout_ms=30_000, topic_data=[ProduceRequest.TopicProduceData(
        name=TOPIC, partition_data=[ProduceRequest.PartitionProduceData(index=0, records=batch)])])
    return {
        "ApiVersions": encoded(ApiKey.API_VERSIONS, 3, ApiVersionsRequest(client_software_name="bench",
                                                                         client_software_version="1")),
        "Metadata": encoded(ApiKey.METADATA, 12, MetadataRequest(
            topics=[MetadataRequest.MetadataRequestTopic(name=TOPIC)])),
        "Fetch, nothing new": encoded(ApiKey.FETCH, FETCH_VERSION, fetch_request(end, max_wait_ms=0)),
        "Fetch, one record": encoded(ApiKey.FETCH, FETCH_VERSION, fetch_request(end - 1)),
        "Produce, one record, acks=1": encoded(ApiKey.PRODUCE, 9, produce),
    }


def fetch_request(offset: int, max_wait_ms: int = 500) -> FetchRequest:
    """A consumer's fetch of the topic's partition from ``offset`` (fetch.min.bytes 1, as consumers ask):
    answered at once when there is a record there, after ``max_wait_ms`` when there is none."""
    return FetchRequest(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                        session_id=0, session_epoch=-1, topics=[FetchRequest.FetchTopic(topic=TOPIC, partitions=[
                            FetchRequest.FetchPartition(partition=0, fetch_offset=offset,
                                                        partition_max_bytes=1 << 20)])])


def check(kind: str, key: ApiKey, version: int, answer_frame: bytes) -> None:
    """The answer is what the kind means: no error, and the one record where one is asked for."""
    answer = decode_response(key, version, answer_frame)[1]
    if key == ApiKey.FETCH:
        if kind == "Fetch, nothing new" and not answer.responses:
            return  # Tansu leaves out a partition with nothing to answer
        data = answer.responses[0].partitions[0]
        if data.error_code != ErrorCode.NONE or (kind == "Fetch, nothing new" and data.records) or (kind == "Fetch, one record" and not data.records):
            raise SystemExit(f"{kind}: error {data.error_code}, {len(data.records or b'')} bytes of records")
    elif key == ApiKey.PRODUCE:
        code = answer.responses[0].partition_responses[0].error_code
        if code != ErrorCode.NONE:
            raise SystemExit(f"{kind}: error {code}")
    elif getattr(answer, "error_code", 0):
        raise SystemExit(f"{kind}: error {answer.error_code}")


def kafka_round(port: int, pid: int, count: int, warmup: int,
                spaced: int) -> dict[str, tuple[float, float, float, float]]:
    """For each kind: server CPU µs a request, round trip p50 and p99 in µs, and server CPU µs a request
    when ``spaced`` requests are sent `SPACING` seconds apart (each finds the server idle)."""
    client = Client(port)
    try:
        frames = frames_for(client)
        out = {}
        for kind in KINDS:
            key, version, frame = frames[kind]
            check(kind, key, version, client.call(frame))
            for _ in range(warmup):
                client.call(frame)
            trips = []
            cpu = cpu_seconds(pid)
            for _ in range(count):
                started = time.perf_counter_ns()
                client.call(frame)
                trips.append(time.perf_counter_ns() - started)
            used = cpu_seconds(pid) - cpu
            trips.sort()
            cpu = cpu_seconds(pid)
            for _ in range(spaced):
                client.call(frame)
                time.sleep(SPACING)
            alone = (cpu_seconds(pid) - cpu) / spaced * 1e6 if spaced else float("nan")
            out[kind] = (used / count * 1e6, trips[len(trips) // 2] / 1000, trips[int(len(trips) * 0.99)] / 1000,
                         alone)
        return out
    finally:
        client.close()


def fill(port: int) -> None:
    """The topic, with a few records for the fetches to read."""
    bootstrap = f"127.0.0.1:{port}"
    create_topic(bootstrap, TOPIC)
    client = Client(port)
    try:
        for _ in range(100):
            metadata = client.request(ApiKey.METADATA, 12, MetadataRequest(
                topics=[MetadataRequest.MetadataRequestTopic(name=TOPIC)]))
            if metadata.topics[0].error_code == 0 and metadata.topics[0].partitions:
                break
            time.sleep(0.1)
        batch = build_batch([SimpleRecord(key=None, value=RECORD)])
        produce = ProduceRequest(acks=1, timeout_ms=30_000, topic_data=[ProduceRequest.TopicProduceData(
            name=TOPIC, partition_data=[ProduceRequest.PartitionProduceData(index=0, records=batch)])])
        for _ in range(10):
            answer = client.request(ApiKey.PRODUCE, 9, produce)
            code = answer.responses[0].partition_responses[0].error_code
            if code != ErrorCode.NONE:
                raise SystemExit(f"filling {bootstrap}: produce error {code}")
    finally:
        client.close()


def redis_round(root: Path, count: int) -> dict[str, tuple[float, float, float, float]]:
    out: dict[str, tuple[float, float, float, float]] = {}
    with redis_server(root) as (server, port):
        redis_cli(port, "XADD", "requests", "*", "f", "v" * 100)
        for kind, command in REDIS_KINDS.items():
            cpu = cpu_seconds(server.pid)
            proc = subprocess.run(["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-n", str(count), "-c", "1",
                                   "-P", "1", "--csv", *command], capture_output=True, text=True, check=True)
            used = cpu_seconds(server.pid) - cpu
            rate = float([row for row in proc.stdout.splitlines() if row and not row.startswith('"test"')][-1]
                         .split(",")[1].strip('"'))
            out[kind] = (used / count * 1e6, 1e6 / rate, float("nan"), float("nan"))
    return out


def median_round(rounds: list[dict], kind: str) -> tuple[float, float, float, float] | None:
    """The round whose CPU a request is the median, with the median of the rounds' spaced requests' CPU."""
    found = [r[kind] for r in rounds if kind in r]
    if not found:
        return None
    cell = sorted(found, key=lambda c: c[0])[len(found) // 2]
    return (*cell[:3], sorted(c[3] for c in found)[len(found) // 2])


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20_000, help="requests of each kind a round")
    parser.add_argument("--warmup", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--spaced", type=int, default=1_000,
                        help=f"requests of each kind a round sent {SPACING * 1000:g} ms apart (0: none)")
    parser.add_argument("--peers", action=argparse.BooleanOptionalAction, default=True,
                        help="run Tansu and Redis too (--no-peers: kraftpy alone, as the suite checks it runs)")
    args = parser.parse_args(argv)
    notes: list[str] = []
    if args.peers:
        ensure_redis(notes)
        tansu = tansu_binary(notes)
    runs: dict[str, list[dict]] = {"kraftpy": [], "Tansu": [], "Redis": []}
    with tempfile.TemporaryDirectory(prefix="kraftpy-bench-requests-", ignore_cleanup_errors=True) as tmp:
        work = Path(tmp)
        for round_ in range(args.rounds):
            with DevProcess(work / f"kraftpy-{round_}", session=True) as dev:
                fill(dev.port)
                runs["kraftpy"].append(kafka_round(dev.port, dev.process.pid, args.requests, args.warmup,
                                                   args.spaced))
            if not args.peers:
                continue
            with Tansu(tansu, session=True) as server:
                fill(server.port)
                runs["Tansu"].append(kafka_round(server.port, server.process.pid, args.requests, args.warmup,
                                                 args.spaced))
            runs["Redis"].append(redis_round(work / f"redis-{round_}", args.requests))

    print("## requests\n")
    for paragraph in __doc__.split("\n\n")[1:]:
        print(paragraph.replace("\n", " ").strip() + "\n")
    print("| request | server CPU a request: kraftpy / Tansu / Redis | kraftpy's CPU / Tansu's (lower is cheaper) | "
          f"round trip p50 / p99: kraftpy | Tansu | Redis (mean) | server CPU a request, {SPACING * 1000:g} ms apart: "
          "kraftpy / Tansu |")
    print("|---|---|---:|---|---|---:|---|")
    for kind in KINDS:
        cells = {name: median_round(found, kind) for name, found in runs.items()}
        cpu = " / ".join(f"{cells[name][0]:.0f} µs" if cells[name] else "-" for name in runs)
        ratio = f"{cells['kraftpy'][0] / cells['Tansu'][0]:.2f}x" if cells["Tansu"] else "-"
        trip = {name: f"{cells[name][1]:.0f} / {cells[name][2]:.0f} µs" if cells[name] else "-"
                for name in ("kraftpy", "Tansu")}
        redis = f"{cells['Redis'][1]:.0f} µs" if cells["Redis"] else "-"
        alone = " / ".join(f"{cells[name][3]:.0f} µs" if cells[name] and cells[name][3] == cells[name][3] else "-"
                           for name in ("kraftpy", "Tansu"))
        print(f"| {kind} | {cpu} | {ratio} | {trip['kraftpy']} | {trip['Tansu']} | {redis} | {alone} |")
    print()
    for note in notes:
        print(note + "\n")
    print(f"Run: `{' '.join(['python bench/requests.py', *argv])}` on 2 cores, {platform.system()} "
          f"{platform.release()}, Python {platform.python_version()}"
          f"{f', Redis {redis_version()}' if args.peers else ''}; the client shares "
          f"the cores with the server.")
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
