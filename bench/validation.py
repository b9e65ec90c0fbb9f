"""Benchmark produce validation (Kafka's LogValidator rules) against the checks it replaced; print a markdown section.

Old and new are measured in the same run, alternating, best of several rounds:

* the check alone, µs per batch: the header-and-CRC check Produce made before (a copy of its
  ``check_produced_batch`` is kept below as the baseline) against ``validate_produced_batch``
  (header, CRC, codec, decompression, and every record in one pass of the C records scan); and the
  same validation with the Python scan, which an install without a C compiler runs;
* the broker's produce path, records/s: a Produce v9 request frame handed to a running broker's
  request dispatcher (``KafkaApis.handle``: the request decoded, the check, the producer-state and
  min.insync.replicas checks, the log append, the response encoded; acks=1), one broker in this
  process, against the same broker with its check swapped for the old one. Socket I/O is left out
  and the log is on a tmpfs when there is one (its appends are memory copies, with no disk
  writeback to wait for): both cost the same on both sides, so the ratio shown is the smaller one.

Batches hold 100-byte values (text that compresses about 2x) without keys: 1,000 records per
batch, about 16 KiB per batch, and 1,000 records compressed with lz4 and with zstd.
``python bench/validation.py --rounds 3 --batches 100`` runs a shorter benchmark.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import sys
import tempfile
import time
import timeit
from pathlib import Path
from typing import Any

import trio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kraftpy.broker.apis import produce as produce_module  # noqa: E402
from kraftpy.logs import configure_logging  # noqa: E402
from kraftpy.protocol import record_validation  # noqa: E402
from kraftpy.protocol.api_keys import ApiKey  # noqa: E402
from kraftpy.protocol.batch_header import (  # noqa: E402
    BatchHeader,
    CorruptRecordError,
    UnsupportedMagicError,
    check_batch,
)
from kraftpy.protocol.compression import Compression  # noqa: E402
from kraftpy.protocol.errors import ErrorCode  # noqa: E402
from kraftpy.protocol.frames import decode_response, encode_request, join_frame  # noqa: E402
from kraftpy.protocol.record_validation import (  # noqa: E402
    Accepted,
    ProduceRules,
    Refusal,
    scan_records_py,
    validate_produced_batch,
)
from kraftpy.protocol.records import SimpleRecord, build_batch  # noqa: E402
from kraftpy.rpc.kafka_server import Connection  # noqa: E402
from tests.helpers.cluster import open_cluster  # noqa: E402
from tests.helpers.protocol import produce_request  # noqa: E402

VALUE_SIZE = 100
MAX_MESSAGE_BYTES = 4 * 1024 * 1024
SEGMENT_BYTES = 16 * 1024 * 1024
#: Requests timed together, one side at a time.
BLOCK = 20
#: Where the broker's log goes: memory, when the machine has a tmpfs there.
TMPFS = Path("/dev/shm")
RULES = ProduceRules(max_message_bytes=MAX_MESSAGE_BYTES)


# -- the baseline: Produce's check before validation (kraftpy/broker/apis/produce.py, check_produced_batch) --


def old_check_produced_batch(records: Any, max_message_bytes: int) -> tuple[BatchHeader | None, ErrorCode, str | None]:
    """The header of a Produce request's one batch, or why it is refused (before any state is touched)."""
    if records is None or not len(records):
        return None, ErrorCode.INVALID_RECORD, "Produce requests must contain a record batch"
    try:
        header = check_batch(records, 0)
    except UnsupportedMagicError as exc:
        return None, ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT, str(exc)
    except CorruptRecordError as exc:
        return None, ErrorCode.CORRUPT_MESSAGE, str(exc)
    if header.size != len(records):
        return None, ErrorCode.INVALID_RECORD, "Produce requests with version 3 or later must contain exactly one record batch"
    if header.last_offset_delta < 0 or header.record_count <= 0:
        return None, ErrorCode.CORRUPT_MESSAGE, "batch with a negative offset delta or no records"
    if header.size > max_message_bytes:
        return None, ErrorCode.MESSAGE_TOO_LARGE, (
            f"batch of {header.size} bytes is larger than max.message.bytes={max_message_bytes}")
    return header, ErrorCode.NONE, None


def old_validate(records: Any, rules: ProduceRules, now: int, *, produce_version: int = 9,
                 inline_limit: int | None = None) -> Accepted | Refusal:
    """The old check in the shape of `validate_produced_batch`, which the produce handler calls."""
    header, error, message = old_check_produced_batch(records, rules.max_message_bytes)
    if header is None:
        return Refusal(error, message or "")
    return Accepted(header, records)


# -- the batches -------------------------------------------------------------------------------------


def values(count: int, rng: random.Random) -> list[SimpleRecord]:
    alphabet = b"abcdefghijklmnopqrstuvwxyz0123456789 ,:{}\""
    return [SimpleRecord(None, bytes(rng.choices(alphabet, k=VALUE_SIZE))) for _ in range(count)]


def cases() -> list[tuple[str, bytes, int]]:
    rng = random.Random(7)
    now = time.time_ns() // 1_000_000
    out = [("uncompressed, 1,000 records", build_batch(values(1000, rng), base_timestamp=now), 1000)]
    count = 1
    while len(build_batch(values(count + 1, rng), base_timestamp=now)) <= 16 * 1024:
        count += 1
    out.append(("uncompressed, 16 KiB", build_batch(values(count, rng), base_timestamp=now), count))
    for codec in (Compression.LZ4, Compression.ZSTD):
        out.append((f"{codec.kafka_name}, 1,000 records",
                    build_batch(values(1000, rng), compression=codec, base_timestamp=now), 1000))
    return out


# -- the check alone ---------------------------------------------------------------------------------


def best_us(fn, number: int, rounds: int) -> float:
    return min(timeit.repeat(fn, number=number, repeat=rounds)) / number * 1e6


def check_costs(data: bytes, rounds: int) -> dict[str, float]:
    now = time.time_ns() // 1_000_000
    assert isinstance(validate_produced_batch(data, RULES, now), Accepted)
    out = {
        "old": best_us(lambda: old_check_produced_batch(data, MAX_MESSAGE_BYTES), 200, rounds),
        "new": best_us(lambda: validate_produced_batch(data, RULES, now), 200, rounds),
    }
    scan = record_validation.scan_records
    record_validation.scan_records = scan_records_py
    try:
        out["python"] = best_us(lambda: validate_produced_batch(data, RULES, now), 5, rounds)
    finally:
        record_validation.scan_records = scan
    return out


# -- the produce path --------------------------------------------------------------------------------


async def produce_path(batches: list[tuple[str, bytes, int]], rounds: int, per_round: int) -> dict[str, dict[str, float]]:
    """Seconds per batch through a running broker's dispatcher, old check and new, best of ``rounds``."""
    best: dict[str, dict[str, float]] = {name: {"old": float("inf"), "new": float("inf")} for name, _, _ in batches}
    where = TMPFS if TMPFS.is_dir() and os.access(TMPFS, os.W_OK) else None
    with tempfile.TemporaryDirectory(prefix="kraftpy-bench-", dir=where) as root:
        static = {"message.max.bytes": str(MAX_MESSAGE_BYTES), "log.segment.bytes": str(SEGMENT_BYTES)}
        async with open_cluster(Path(root), brokers=1, static_configs=static) as cluster:
            await cluster.create_topic("bench")
            part = cluster.partition(1, "bench")
            apis = cluster.brokers[1].apis
            conn = Connection(None, "PLAINTEXT")
            for name, data, _ in batches:
                frame = join_frame(encode_request(ApiKey.PRODUCE, 9, 1, "bench",
                                                  produce_request("bench", 0, data, acks=1)))[4:]
                for round_number in range(rounds):
                    # Blocks of BLOCK requests, old and new by turns, each block's time per request
                    # kept: the best block of each side counts, so a pause of the machine spoils a
                    # block of one side, not the comparison.
                    for block in range(2 * (per_round // BLOCK)):
                        side = "old" if (block + round_number) % 2 == 0 else "new"
                        produce_module.validate_produced_batch = old_validate if side == "old" else validate_produced_batch
                        parts = await apis.handle(frame, conn)  # not timed: checks the answer
                        _, response = decode_response(ApiKey.PRODUCE, 9, join_frame(parts)[4:])
                        assert response.responses[0].partition_responses[0].error_code == ErrorCode.NONE, response
                        start = time.perf_counter()
                        for _ in range(BLOCK):
                            await apis.handle(frame, conn)
                        best[name][side] = min(best[name][side], (time.perf_counter() - start) / BLOCK)
                    # Not timed: drop the round's segments, so the log stays small.
                    await part.delete_records_before(part.log_end_offset)
                    await part.delete_detached_segments()
            produce_module.validate_produced_batch = validate_produced_batch
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=11, help="rounds; the best one counts")
    parser.add_argument("--batches", type=int, default=400, help="produce requests per round and side")
    args = parser.parse_args()
    configure_logging(level="warning")  # the broker's log lines are not part of the page
    batches = cases()
    checks = {name: check_costs(data, args.rounds) for name, data, _ in batches}
    path = trio.run(produce_path, batches, args.rounds, args.batches)

    log_place = "a tmpfs (appends are memory copies)" if TMPFS.is_dir() and os.access(TMPFS, os.W_OK) else \
        "the temporary directory's file system"
    print("## validation\n")
    print("What Produce's record validation (Kafka's LogValidator rules: header, CRC, codec, decompression, "
          "every record's structure, count and offset deltas, timestamps, flags) costs against the header-and-CRC "
          "check it replaced, measured in the same run, alternating, best of "
          f"{args.rounds} rounds. *Check* is one batch through the check alone. *Produce path* is a Produce v9 "
          "request frame (one partition, acks=1) handed to a running broker's request dispatcher "
          "(`KafkaApis.handle`: decoding, the check, producer-state and min.insync.replicas checks, the log append, "
          "the response encoded), against the same broker with the old check swapped in; "
          f"{args.batches} requests per round. Socket I/O is left out and the log is on {log_place}: both cost the "
          "same on both sides, so the ratio shown is the smaller one. Values are 100 bytes of text (about 2x "
          "compressible), no keys.\n")
    scan = "the C records scan (`kraftpy.protocol._record_scan`)" if record_validation.ACCELERATED else \
        "the Python records scan (the C module is not compiled here)"
    print(f"Validation ran with {scan}. The last column is the same check with the Python scan, which an "
          "install without a C compiler runs.\n")
    print("| batch | bytes | records | old check µs | new check µs | produce path, old records/s "
          "| produce path, new records/s | ratio | Python scan check µs |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    goal = []
    for name, data, count in batches:
        old, new = path[name]["old"], path[name]["new"]
        ratio = old / new
        if name.startswith("uncompressed"):
            goal.append(ratio)
        print(f"| {name} | {len(data):,} | {count:,} | {checks[name]['old']:.1f} | {checks[name]['new']:.1f} "
              f"| {count / old:,.0f} | {count / new:,.0f} | {ratio:.2f}x | {checks[name]['python']:,.0f} |")
    met = all(r >= 0.9 for r in goal)
    print()
    print(f"Goal (produce path with validation at least 0.9x of the old one, uncompressed 100 B records): "
          f"**{'met' if met else 'not met'}** ({', '.join(f'{r:.3f}x' for r in goal)}).")
    print()
    print(f"Run: `python bench/validation.py --rounds {args.rounds} --batches {args.batches}` on {os.cpu_count()} "
          f"cores, {platform.system()} {platform.release()}, Python {platform.python_version()}.")


if __name__ == "__main__":
    main()
