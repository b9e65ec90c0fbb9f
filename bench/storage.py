"""Benchmark the segmented log against plain file I/O of the same bytes; print a markdown section.

Cases, each run in a fresh temporary directory on the same filesystem:

* append: ``Log.append_as_leader`` of 1 MiB RecordBatches (validate CRC, stamp offsets, one
  write per batch, index upkeep), against ``os.write`` of the same 1 MiB buffers to a plain file;
* read: ``Log.read`` of 1 MiB from each batch's offset then ``os.sendfile`` of the region into
  a Unix socket (offset lookup included), against ``os.sendfile`` of the same byte ranges of a
  plain file into the same socket. A forked child process drains the socket.

Nothing is fsynced (the log's default flush policy), so both sides measure the page cache
path, which is what Kafka's design relies on. Each figure is the best of several rounds.
``python bench/storage.py --total-mib 512 --rounds 5`` changes the sizes.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import socket
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kraftpy.protocol.batch_header import HEADER_SIZE  # noqa: E402
from kraftpy.protocol.records import SimpleRecord, build_batch  # noqa: E402
from kraftpy.storage.log import Log  # noqa: E402
from kraftpy.storage.log_config import LogConfig  # noqa: E402

MIB = 1024 * 1024


def one_mib_batch() -> bytes:
    """A RecordBatch of exactly 1 MiB: one record whose value fills it."""
    value_size = MIB - HEADER_SIZE - 16
    while True:
        data = build_batch([SimpleRecord(b"key", os.urandom(value_size), timestamp=1_700_000_000_000)])
        if len(data) == MIB:
            return data
        value_size += MIB - len(data)


def plain_write(directory: Path, data: bytes, count: int) -> float:
    path = directory / "plain.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    start = time.perf_counter()
    for _ in range(count):
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    elapsed = time.perf_counter() - start
    os.close(fd)
    return elapsed


def log_append(directory: Path, data: bytes, count: int, config: LogConfig,
               crc_verified: bool = False) -> tuple[float, Log]:
    log = Log.open(directory / "bench-0", config)
    start = time.perf_counter()
    for _ in range(count):
        log.append_as_leader(data, 0, crc_verified=crc_verified)
    return time.perf_counter() - start, log


def plain_sendfile(directory: Path, count: int, out_fd: int) -> float:
    fd = os.open(directory / "plain.bin", os.O_RDONLY)
    start = time.perf_counter()
    for i in range(count):
        position, remaining = i * MIB, MIB
        while remaining:
            sent = os.sendfile(out_fd, fd, position, remaining)
            position += sent
            remaining -= sent
    elapsed = time.perf_counter() - start
    os.close(fd)
    return elapsed


def log_sendfile(log: Log, count: int, out_fd: int) -> float:
    start = time.perf_counter()
    sent = 0
    for i in range(count):
        sent += log.read(i, MIB).sendfile(out_fd)
    elapsed = time.perf_counter() - start
    assert sent == count * MIB, sent
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--total-mib", type=int, default=256, help="bytes written per round, in MiB")
    parser.add_argument("--rounds", type=int, default=6, help="rounds; the best one counts")
    parser.add_argument("--dir", type=Path, default=None, help="where to write (default: the temp dir)")
    args = parser.parse_args()
    count = args.total_mib
    data = one_mib_batch()
    # 1 MiB batches are above the default max.message.bytes (1 MiB + 12 counts the log overhead only).
    config = LogConfig(max_message_bytes=2 * MIB)
    best = {"plain write": float("inf"), "log append": float("inf"), "log append verified": float("inf"),
            "plain sendfile": float("inf"), "log sendfile": float("inf")}
    segments = 0
    sink, drain = socket.socketpair()
    child = os.fork()
    if child == 0:  # the reader: discard everything until the sender closes
        sink.close()
        buffer = bytearray(4 * MIB)
        while drain.recv_into(buffer):
            pass
        os._exit(0)
    drain.close()
    out_fd = sink.fileno()
    try:
        for round_number in range(args.rounds):
            # Each side writes then reads its own fresh directory, removed before the other side
            # runs, and the order alternates: neither meets a page cache fuller than the other's.
            for side in (("plain", "log") if round_number % 2 == 0 else ("log", "plain")):
                directory = Path(tempfile.mkdtemp(prefix="kraftpy-bench-", dir=args.dir))
                try:
                    if side == "plain":
                        best["plain write"] = min(best["plain write"], plain_write(directory, data, count))
                        best["plain sendfile"] = min(best["plain sendfile"],
                                                     plain_sendfile(directory, count, out_fd))
                    else:
                        elapsed, log = log_append(directory, data, count, config)
                        best["log append"] = min(best["log append"], elapsed)
                        best["log sendfile"] = min(best["log sendfile"], log_sendfile(log, count, out_fd))
                        segments = len(log.segments)
                        log.abandon()
                        shutil.rmtree(directory / "bench-0")
                        elapsed, log = log_append(directory, data, count, config, crc_verified=True)
                        best["log append verified"] = min(best["log append verified"], elapsed)
                        log.abandon()
                finally:
                    shutil.rmtree(directory, ignore_errors=True)
    finally:
        sink.close()
        os.waitpid(child, 0)

    def rate(name: str) -> float:
        return count * MIB / best[name] / 1e6

    print("## storage\n")
    print("The segmented log (`kraftpy.storage.log`) against plain file I/O of the same bytes in the same run.")
    print("Appends are `Log.append_as_leader` of 1 MiB RecordBatches (CRC check, offset stamping, one write")
    print("each, index upkeep) against `os.write` of the same buffers; reads are `Log.read` of 1 MiB per")
    print("batch offset then `os.sendfile` of the region into a Unix socket drained by another process,")
    print("against `os.sendfile` of the same ranges of the plain file into the same socket. Nothing is")
    print("fsynced on either side (the log's default flush policy). On the produce path the broker checks")
    print("each batch's CRC once, before its idempotence checks, and the log does not check it again")
    print("(`crc_verified=True`); the first row adds that check inside the log, the second is the produce")
    print("path's cost. A CRC-32C of 1 MiB is about 80 µs with the hardware-accelerated `crc32c`.\n")
    print("| case | MB/s | plain file MB/s | ratio |")
    print("|---|---:|---:|---:|")
    print(f"| append, 1 MiB batches, CRC-32C checked by the log | {rate('log append'):.0f} | "
          f"{rate('plain write'):.0f} | {best['plain write'] / best['log append']:.2f}x |")
    print(f"| append, 1 MiB batches the broker already checked (the produce path) | "
          f"{rate('log append verified'):.0f} | {rate('plain write'):.0f} "
          f"| {best['plain write'] / best['log append verified']:.2f}x |")
    print(f"| read (sendfile), 1 MiB | {rate('log sendfile'):.0f} | {rate('plain sendfile'):.0f} "
          f"| {best['plain sendfile'] / best['log sendfile']:.2f}x |")
    print()
    print(f"Run: `python bench/storage.py --total-mib {args.total_mib} --rounds {args.rounds}` on "
          f"{os.cpu_count()} cores, {platform.system()} {platform.release()}, Python {platform.python_version()}; "
          f"{count} batches of 1 MiB ({count} MiB) per round into {segments} segment(s) of the default "
          f"1 GiB, best of {args.rounds} rounds; the goal is a ratio of at least 0.8x on both rows.")


if __name__ == "__main__":
    main()
