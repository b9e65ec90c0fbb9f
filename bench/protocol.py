"""Benchmark the Kafka request/response codec on the Produce and Fetch paths; print a markdown section.

Cases: decoding a Produce v9 request body (1 partition with 1 MiB of record bytes, and 100
partitions of 1 KiB each) and encoding a Fetch v12 response body (the same two shapes). The
kraftpy figures are the compiled per-version functions of ``kraftpy.protocol.schema``; when the
``kio`` package is installed the same bodies go through its reader and writer for comparison (kio
encodes into a file-like object and returns record fields as ``bytes`` copies). Each figure is the
best of several timed loops, in microseconds per message.
"""

from __future__ import annotations

import io
import sys
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kraftpy.protocol.frames import encode_response, parse_request  # noqa: E402
from kraftpy.protocol.messages import FetchResponse, ProduceRequest  # noqa: E402

P = ProduceRequest
F = FetchResponse


def produce_request(partitions: int, size: int):
    return P(
        transactional_id=None,
        acks=-1,
        timeout_ms=30000,
        topic_data=[
            P.TopicProduceData(
                name="bench-topic",
                partition_data=[P.PartitionProduceData(index=i, records=bytes(size)) for i in range(partitions)],
            )
        ],
    )


def fetch_response(partitions: int, size: int):
    return F(
        throttle_time_ms=0,
        error_code=0,
        session_id=0,
        responses=[
            F.FetchableTopicResponse(
                topic="bench-topic",
                partitions=[
                    F.PartitionData(partition_index=i, high_watermark=1000, last_stable_offset=1000,
                                    log_start_offset=0, aborted_transactions=None, records=bytes(size))
                    for i in range(partitions)
                ],
            )
        ],
    )


def best_us(fn, number: int) -> float:
    return min(timeit.repeat(fn, number=number, repeat=5)) / number * 1e6


def kio_cases():
    try:
        from kio.schema.errors import ErrorCode as KioErrorCode
        from kio.schema.fetch.v12 import response as kf
        from kio.schema.produce.v9.request import ProduceRequest as KioProduce
        from kio.serial import entity_reader, entity_writer
    except ImportError:
        return None
    reader = entity_reader(KioProduce)
    writer = entity_writer(kf.FetchResponse)

    def decode(body: bytes):
        return reader(body, 0)

    def to_kio(resp):
        import datetime

        return kf.FetchResponse(
            throttle_time=datetime.timedelta(0),
            error_code=KioErrorCode(0),
            session_id=0,
            responses=tuple(
                kf.FetchableTopicResponse(
                    topic=t.topic,
                    partitions=tuple(
                        kf.PartitionData(partition_index=p.partition_index, error_code=KioErrorCode(p.error_code),
                                         high_watermark=p.high_watermark,
                                         last_stable_offset=p.last_stable_offset,
                                         log_start_offset=p.log_start_offset, aborted_transactions=None,
                                         records=p.records)
                        for p in t.partitions
                    ),
                )
                for t in resp.responses
            ),
        )

    def encode(kresp):
        out = io.BytesIO()
        writer(out, kresp)
        return out.getvalue()

    return decode, to_kio, encode


def main() -> None:
    kio = kio_cases()
    rows = []
    shapes = [("1 × 1 MiB", 1, 1 << 20, 2000), ("100 × 1 KiB", 100, 1024, 500)]
    for label, parts, size, number in shapes:
        req = produce_request(parts, size)
        body = P.SCHEMA.to_bytes(9, req)
        view = memoryview(body)
        ours = best_us(lambda view=view: P.SCHEMA.decode(9, view, 0), number)
        frame = b"".join(bytes(p) for p in _request_frame(body))[4:]  # without the size prefix
        ours_frame = best_us(lambda frame=frame: parse_request(frame), number)
        theirs = "n/a"
        if kio is not None:
            decode, _, _ = kio
            decoded, _size = decode(body)
            assert decoded.topic_data[0].partition_data[-1].records == bytes(size)
            theirs = f"{best_us(lambda body=body, decode=decode: decode(body), number):.1f}"
        rows.append((f"Produce v9 request decode, {label}", f"{ours:.1f}", f"{ours_frame:.1f}", theirs))

        resp = fetch_response(parts, size)
        ours = best_us(lambda resp=resp: F.SCHEMA.encode(12, resp, bytearray(), []), number)
        ours_frame = best_us(lambda resp=resp: encode_response(1, 1, 12, resp), number)
        theirs = "n/a"
        if kio is not None:
            _, to_kio, encode = kio
            kresp = to_kio(resp)
            assert encode(kresp) == F.SCHEMA.to_bytes(12, resp), "kio and kraftpy disagree on the bytes"
            theirs = f"{best_us(lambda kresp=kresp, encode=encode: encode(kresp), number):.1f}"
        rows.append((f"Fetch v12 response encode, {label}", f"{ours:.1f}", f"{ours_frame:.1f}", theirs))

    print("## protocol\n")
    print("Kafka request/response codec (`kraftpy.protocol`), µs per message, best of 5 loops.")
    print("*body* is the compiled schema function alone; *frame* adds the header and size prefix")
    print("(`parse_request` / `encode_response`). kio " + ("is installed" if kio else "is not installed") + ".\n")
    print("| case | kraftpy body | kraftpy frame | kio body |")
    print("|---|---:|---:|---:|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    print()
    print("kraftpy's decoded `records` are memoryview slices of the frame and a large encoded `records`")
    print("value becomes its own frame part (or a file region for sendfile), so neither side copies")
    print("record data; kio copies record bytes on decode and writes everything into one buffer.")


def _request_frame(body: bytes):
    from kraftpy.protocol.frames import encode_request

    # Re-encode through the framing path so the header matches the body's version.
    return encode_request(0, 9, 1, "bench", P.SCHEMA.from_bytes(9, body))


if __name__ == "__main__":
    main()
