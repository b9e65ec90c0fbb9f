"""Shared helpers for the storage tests: batches, a manual clock, reading a whole log back."""

from __future__ import annotations

from kraftpy.protocol.batch_header import ATTRIBUTES_OFFSET, iter_batches
from kraftpy.protocol.records import Compression, SimpleRecord, build_batch
from kraftpy.storage.log import Log


class ManualClock:
    """Milliseconds that move only when a test says so."""

    def __init__(self, now: int = 1_700_000_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


def batch(
    count: int = 1,
    *,
    timestamp: int = 1_700_000_000_000,
    value_size: int = 10,
    base_offset: int = 0,
    epoch: int = -1,
    tag: int = 0,
    compression: Compression = Compression.NONE,
) -> bytes:
    """A RecordBatch of ``count`` records, timestamps ``timestamp, timestamp+1, ...``."""
    records = [
        SimpleRecord(f"k{tag}-{i}".encode(), bytes([(tag + i) % 256]) * value_size, timestamp=timestamp + i)
        for i in range(count)
    ]
    return build_batch(records, base_offset=base_offset, partition_leader_epoch=epoch, compression=compression)


def read_all(log: Log, start: int | None = None) -> list[tuple[int, int, int, bytes]]:
    """Every batch from ``start`` (default: the log start) as (base, last, epoch, CRC-covered bytes)."""
    offset = log.log_start_offset if start is None else start
    out = []
    while offset < log.log_end_offset:
        data = log.read_bytes(offset, 64 * 1024, whole_batches=True)
        if not data:
            break
        for position, header in iter_batches(data):
            out.append((header.base_offset, header.last_offset, header.partition_leader_epoch,
                        bytes(data[position + ATTRIBUTES_OFFSET : position + header.size])))
            offset = header.next_offset
    return out
