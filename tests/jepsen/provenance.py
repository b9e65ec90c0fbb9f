"""Where a duplicated value's copies came from: the batch headers around them in the replicas' logs.

A value read at two offsets is a duplicate whoever wrote it twice. What the broker promises an
idempotent producer is narrower: within one producer session (producer id and epoch) a batch sent
again is answered with the offsets it got before, never appended twice. The batch header carries
that session and the record's sequence number, so the log itself tells the two cases apart:

- *same session*: both copies have the same producer id, epoch and sequence: the broker appended a
  resend it should have recognised (a broker fault);
- *new epoch* or *new producer*: the copies were written in different sessions (the client bumped its
  epoch, or a new producer sent the value again), which no broker can recognise.

The runner attaches this to a run's results when the checker found duplicates, read from every
broker's data directory after the cluster has stopped; the checker's verdict stays as it was.
"""

from __future__ import annotations

import mmap
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from kraftpy.protocol.batch_header import CorruptRecordError, read_header
from kraftpy.storage.segment import parse_segment_file_name


def _segments(partition_dir: Path) -> list[tuple[int, Path]]:
    out = []
    for path in partition_dir.glob("*.log"):
        base = parse_segment_file_name(path.name)
        if base is not None:
            out.append((base, path))
    return sorted(out)


def _headers(path: Path, *, whole: bool) -> Iterator[Any]:
    """The batch headers of a segment file, in order, until its end or a corrupt header (``whole``: or
    a batch that ends past the file, a torn tail)."""
    if path.stat().st_size == 0:
        return
    with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        pos = 0
        while pos < len(buf):
            try:
                header = read_header(buf, pos)
            except CorruptRecordError:
                return
            if whole and pos + header.size > len(buf):
                return
            yield header
            pos += header.size


def batch_holding(partition_dir: Path, offset: int) -> dict[str, Any] | None:
    """The header of the batch holding ``offset`` in the partition directory, or None when no
    segment there holds it (or the segment is corrupt before it)."""
    candidates = [(base, path) for base, path in _segments(partition_dir) if base <= offset]
    if not candidates:
        return None
    for header in _headers(candidates[-1][1], whole=False):
        if header.base_offset <= offset <= header.last_offset:
            sequence = -1 if header.base_sequence < 0 else header.base_sequence + offset - header.base_offset
            return {"base_offset": header.base_offset, "last_offset": header.last_offset,
                    "producer_id": header.producer_id, "producer_epoch": header.producer_epoch,
                    "sequence": sequence, "leader_epoch": header.partition_leader_epoch}
        if header.base_offset > offset:
            return None
    return None


def verdict(copies: Sequence[dict[str, Any]]) -> str:
    """``same session``, ``new epoch``, ``new producer`` or ``unknown`` (a copy not found)."""
    if not copies or any(c.get("producer_id") is None for c in copies):
        return "unknown"
    if len({c["producer_id"] for c in copies}) > 1:
        return "new producer"
    if len({c["producer_epoch"] for c in copies}) > 1:
        return "new epoch"
    return "same session"


def explain_duplicates(duplicated: Iterable[dict[str, Any]], topic: str,
                       data_dirs: dict[str, Path]) -> list[dict[str, Any]]:
    """For each of the checker's duplicated items (``{"value", "at": [{"partition", "offset"}...]}``),
    each copy's batch header as the brokers' logs hold it (the first broker that has it, and which
    brokers do), and the verdict."""
    out = []
    for item in duplicated:
        copies = []
        for place in item.get("at", ()):
            partition, offset = place["partition"], place["offset"]
            found: dict[str, Any] | None = None
            held_by = []
            for name, data_dir in sorted(data_dirs.items()):
                header = batch_holding(data_dir / f"{topic}-{partition}", offset)
                if header is not None:
                    held_by.append(name)
                    found = found or header
            copies.append({"partition": partition, "offset": offset, **(found or {}), "held_by": held_by})
        out.append({"value": item.get("value"), "verdict": verdict(copies), "copies": copies})
    return out


def attach_provenance(results: dict[str, Any], topic: str, data_dirs: dict[str, Path]) -> None:
    """Add ``details.duplicated_provenance`` to a queue or group run's results when the checker found
    duplicates (the logs read after the cluster stopped); nothing when it found none."""
    if results.get("duplicated"):
        results["details"]["duplicated_provenance"] = explain_duplicates(
            results["details"].get("duplicated") or (), topic, data_dirs)


def partition_batches(partition_dir: Path) -> list[tuple[int, int, int]]:
    """Every batch of a replica's log, in order, as (base offset, last offset, CRC); a torn or corrupt
    tail ends the list (what recovery would cut)."""
    batches: list[tuple[int, int, int]] = []
    for _, path in _segments(partition_dir):
        read = 0
        for header in _headers(path, whole=True):
            batches.append((header.base_offset, header.last_offset, header.crc))
            read += header.size
        if read < path.stat().st_size:  # the headers stopped short of the file's end
            return batches
    return batches


def replica_agreement(topic: str, data_dirs: dict[str, Path]) -> dict[str, Any]:
    """Whether the replicas of each of ``topic``'s partitions hold the same batches, read from every
    broker's data directory after the cluster stopped. A replica whose batches are neither the others'
    nor a beginning of them *diverged* (two histories: a truncation that went wrong, a follower that
    appended what its leader never wrote); one that holds only a beginning of the longest is *behind*
    (it had not fetched the last batches when the cluster stopped: a follower that stopped hearing of
    its leader's appends stays there)."""
    logs: dict[str, dict[str, list[tuple[int, int, int]]]] = {}
    for broker, data_dir in sorted(data_dirs.items()):
        for directory in Path(data_dir).glob(f"{topic}-*"):
            partition = directory.name.rsplit("-", 1)[1]
            if partition.isdigit():
                logs.setdefault(partition, {})[broker] = partition_batches(directory)
    diverged, behind = [], []
    for partition, replicas in sorted(logs.items(), key=lambda item: int(item[0])):
        longest = max(replicas.values(), key=len)
        described = {"partition": int(partition), "replicas": {
            broker: {"batches": len(batches), "last_offset": batches[-1][1] if batches else -1}
            for broker, batches in replicas.items()}}
        if any(batches != longest[:len(batches)] for batches in replicas.values()):
            diverged.append(described)
        elif any(len(batches) != len(longest) for batches in replicas.values()):
            behind.append(described)
    return {"partitions": len(logs), "replicas": sum(len(r) for r in logs.values()), "diverged": diverged,
            "behind": behind}
