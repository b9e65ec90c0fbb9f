"""`kraftpy dump-log PATH... [--deep]`: print the batches of segment files, like kafka-dump-log.sh.

``.log`` files print one line per batch (and with ``--deep`` one line per record); ``.index`` and
``.timeindex`` files print their entries; a directory (a partition's, or ``__cluster_metadata-0``)
prints its ``.log`` segments in offset order. Keys, values and headers are printed as Python byte
literals, so no byte of a record can reach the terminal unescaped. The command exits 1 after
the first corrupt batch of a file, naming its byte position.

Replicas hold their leader's bytes, the metadata log's as well: dumping the same partition on two
replicas prints the same ``baseOffset`` and ``crc`` on every line below the high watermark.
"""

from __future__ import annotations

import mmap
from pathlib import Path
from typing import Annotated

import typer

from kraftpy.protocol.batch_header import CorruptRecordError, check_batch, compute_crc, read_header
from kraftpy.protocol.compression import Compression
from kraftpy.protocol.records import decode_batch
from kraftpy.storage.index import (
    INDEX_SUFFIX,
    OFFSET_ENTRY,
    TIME_ENTRY,
    TIME_INDEX_SUFFIX,
)
from kraftpy.storage.segment import parse_segment_file_name


def _codec_name(codec: int) -> str:
    try:
        return Compression(codec).name.lower()
    except ValueError:
        return f"unknown({codec})"


def _dump_segment(path: Path, deep: bool) -> bool:
    """Print every batch of a ``.log`` file; False after a corrupt one."""
    base = parse_segment_file_name(path.name.removesuffix(".deleted"))
    if base is not None:
        typer.echo(f"Starting offset: {base}")
    size = path.stat().st_size
    if size == 0:
        return True
    with open(path, "rb") as file, mmap.mmap(file.fileno(), size, access=mmap.ACCESS_READ) as data:
        position = 0
        while position < size:
            try:
                header = read_header(data, position)
                if size - position < header.size:
                    raise CorruptRecordError(
                        f"truncated batch: {header.size} bytes announced, {size - position} present", position
                    )
            except CorruptRecordError as exc:
                typer.echo(f"Corrupt batch at byte position {position}: {exc}", err=True)
                return False
            crc_valid = compute_crc(data, position, header.size) == header.crc
            typer.echo(
                f"baseOffset: {header.base_offset} lastOffset: {header.last_offset} count: {header.record_count}"
                f" leaderEpoch: {header.partition_leader_epoch} codec: {_codec_name(header.compression)}"
                f" producerId: {header.producer_id} producerEpoch: {header.producer_epoch}"
                f" baseSequence: {header.base_sequence} isTransactional: {str(header.is_transactional).lower()}"
                f" isControl: {str(header.is_control).lower()}"
                f" {'LogAppendTime' if header.timestamp_type else 'CreateTime'}: {header.max_timestamp}"
                f" position: {position} size: {header.size} crc: {header.crc} crcValid: {str(crc_valid).lower()}"
            )
            if not crc_valid:
                try:
                    check_batch(data, position)
                except CorruptRecordError as exc:
                    typer.echo(f"Corrupt batch at byte position {position}: {exc}", err=True)
                return False
            if deep:
                try:
                    decoded = decode_batch(data, position, verify_crc=False)
                except CorruptRecordError as exc:
                    typer.echo(f"Corrupt batch at byte position {position}: {exc}", err=True)
                    return False
                for record in decoded.records:
                    headers = ", ".join(f"{key!r}: {value!r}" for key, value in record.headers)
                    typer.echo(
                        f"| offset: {record.offset} timestamp: {record.timestamp}"
                        f" key: {record.key!r} value: {record.value!r} headers: [{headers}]"
                    )
            position += header.size
    return True


def _dump_index(path: Path, time_index: bool) -> bool:
    base = parse_segment_file_name(path.name, TIME_INDEX_SUFFIX if time_index else INDEX_SUFFIX) or 0
    data = path.read_bytes()
    entry = TIME_ENTRY if time_index else OFFSET_ENTRY
    whole = len(data) - len(data) % entry.size
    for first, second in entry.iter_unpack(data[:whole]):
        if time_index:
            typer.echo(f"timestamp: {first} offset: {base + second}")
        else:
            typer.echo(f"offset: {base + first} position: {second}")
    if whole != len(data):
        typer.echo(f"Corrupt index: {len(data) - whole} trailing bytes at byte position {whole}", err=True)
        return False
    return True


def _segments_of(directory: Path) -> list[Path]:
    found = [(base, path) for path in directory.iterdir()
             if (base := parse_segment_file_name(path.name)) is not None]
    return [path for _, path in sorted(found)]


def dump_log(
    files: Annotated[list[Path], typer.Argument(
        help="Segment files (.log, .index, .timeindex) or log directories.", show_default=False)],
    deep: Annotated[bool, typer.Option("--deep", help="Also print every record of every batch.")] = False,
) -> None:
    """Print the batches of log segment files (base/last offset, epoch, codec, producer, CRC)."""
    ok = True
    paths = [segment for path in files for segment in (_segments_of(path) if path.is_dir() else [path])]
    for path in paths:
        typer.echo(f"Dumping {path}")
        if not path.is_file():
            typer.echo(f"kraftpy: {path}: no such file", err=True)
            ok = False
            continue
        try:
            if path.name.endswith(INDEX_SUFFIX):
                ok = _dump_index(path, time_index=False) and ok
            elif path.name.endswith(TIME_INDEX_SUFFIX):
                ok = _dump_index(path, time_index=True) and ok
            else:
                ok = _dump_segment(path, deep) and ok
        except OSError as exc:
            typer.echo(f"kraftpy: {path}: {exc}", err=True)
            ok = False
    if not ok:
        raise typer.Exit(1)

