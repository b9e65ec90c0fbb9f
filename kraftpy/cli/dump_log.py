"""`kraftpy dump-log PATH... [--deep]`: print the batches of segment files, like kafka-dump-log.sh.

``.log`` files print one line per batch (and with ``--deep`` one line per record); ``.index``,
``.timeindex`` and ``.txnindex`` files print their entries, ``.snapshot`` files (producer state) one
line per producer; a directory (a partition's, or ``__cluster_metadata-0``) prints its ``.log``
segments in offset order, each followed by its ``.txnindex`` when it has one, then its producer
state snapshots. Keys, values and headers are printed as Python byte literals, so no
byte of a record can reach the terminal unescaped. The command exits 1 after the first corrupt
batch of a file, naming its byte position.

Transactions: every batch line says whether the batch is transactional and whether it is a control
batch; a transaction marker (a control batch of a transactional producer) also prints how the
transaction ended and the coordinator epoch that ended it (``endTxnMarker: COMMIT coordinatorEpoch: 3``),
and with ``--deep`` its record prints the same instead of raw bytes. A ``.txnindex`` prints one line
per aborted transaction: the producer, the transaction's first offset, its ABORT marker's offset and
the last stable offset once the marker was written. A producer state snapshot prints each producer's
epoch, last batch, coordinator epoch and where its open transaction began
(``currentTxnFirstOffset``, -1 when none is open): what a restart resumes from.

Internal topics: the records of ``__transaction_state`` (the transactional id, producer id and epoch,
timeout, state and partitions of each state change) and of ``__consumer_offsets`` (committed offsets
and group metadata) are decoded in ``--deep`` lines, for files under a directory of those topics or
when ``--transaction-log-decoder`` / ``--offsets-decoder`` (Kafka's flags, which imply ``--deep``) say so.

Replicas hold their leader's bytes, the metadata log's as well: dumping the same partition on two
replicas prints the same ``baseOffset`` and ``crc`` on every line below the high watermark.
"""

from __future__ import annotations

import mmap
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from kraftpy.broker.producer_state import SNAPSHOT_SUFFIX, CorruptSnapshotError, decode_snapshot
from kraftpy.coordinator.records import (
    CoordinatorRecordError,
    GroupKey,
    OffsetKey,
    decode_group_value,
    decode_key,
    decode_offset_value,
)
from kraftpy.coordinator.txn_records import (
    TransactionKey,
    decode_transaction_log_key,
    decode_transaction_log_value,
)
from kraftpy.protocol.batch_header import (
    BatchHeader,
    CorruptRecordError,
    check_batch,
    compute_crc,
    read_header,
)
from kraftpy.protocol.compression import Compression
from kraftpy.protocol.control_records import is_end_txn_marker_header, read_end_txn_marker
from kraftpy.protocol.records import decode_batch
from kraftpy.storage.index import (
    INDEX_SUFFIX,
    OFFSET_ENTRY,
    TIME_ENTRY,
    TIME_INDEX_SUFFIX,
)
from kraftpy.storage.segment import parse_segment_file_name
from kraftpy.storage.txn_index import ABORTED_TXN, TXN_INDEX_SUFFIX, AbortedTxn

TRANSACTION_STATE_TOPIC = "__transaction_state"
CONSUMER_OFFSETS_TOPIC = "__consumer_offsets"

#: Decodes one record of an internal topic into the text after its offset and timestamp.
RecordDecoder = Callable[[Any], str]


def _codec_name(codec: int) -> str:
    try:
        return Compression(codec).name.lower()
    except ValueError:
        return f"unknown({codec})"


def _marker_text(data: Any, position: int) -> str:
    """How the marker batch at ``position`` ended its transaction: `` endTxnMarker: COMMIT coordinatorEpoch: 3``."""
    try:
        marker = read_end_txn_marker(data, position, verify_crc=False)
    except CorruptRecordError as exc:
        return f" endTxnMarker: unreadable ({exc})"
    return f" endTxnMarker: {marker.control_type.name} coordinatorEpoch: {marker.coordinator_epoch}"


def _partitions_text(partitions: tuple[tuple[str, int], ...]) -> str:
    return "[" + ", ".join(f"{topic!r}-{partition}" for topic, partition in partitions) + "]"


def decode_transaction_record(record: Any) -> str:
    """A ``__transaction_state`` record: the transactional id and its state (or its tombstone)."""
    if record.key is None:
        return f"key: None value: {record.value!r} (not a transaction log record: it has no key)"
    try:
        key = decode_transaction_log_key(record.key)
        if not isinstance(key, TransactionKey):
            return f"key: unknown version {key.version} value: {record.value!r}"
        entry = decode_transaction_log_value(record.value)
    except CoordinatorRecordError as exc:
        return f"key: {record.key!r} value: {record.value!r} (undecodable: {exc})"
    text = f"transactionalId: {key.transactional_id!r}"
    if entry is None:
        return text + " tombstone: the transactional id expired"
    return (f"{text} producerId: {entry.producer_id} producerEpoch: {entry.producer_epoch}"
            f" transactionTimeoutMs: {entry.transaction_timeout_ms} state: {entry.status.kafka_name}"
            f" partitions: {_partitions_text(entry.partitions)}"
            f" lastUpdateTimestampMs: {entry.last_update_timestamp_ms}"
            f" startTimestampMs: {entry.start_timestamp_ms}")


def decode_offsets_record(record: Any) -> str:
    """A ``__consumer_offsets`` record: a committed offset or a group's metadata (or their tombstone)."""
    if record.key is None:
        return f"key: None value: {record.value!r} (not an offsets record: it has no key)"
    try:
        key = decode_key(record.key)
        if isinstance(key, OffsetKey):
            text = f"offsetCommit group: {key.group!r} topic: {key.topic!r} partition: {key.partition}"
            if record.value is None:
                return text + " tombstone: the offset was deleted"
            value = decode_offset_value(record.value)
            return (f"{text} offset: {value.offset} leaderEpoch: {value.leader_epoch} metadata: {value.metadata!r}"
                    f" commitTimestamp: {value.commit_timestamp}")
        if isinstance(key, GroupKey):
            text = f"groupMetadata group: {key.group!r}"
            if record.value is None:
                return text + " tombstone: the group was deleted"
            _version, group = decode_group_value(record.value)
            members = ", ".join(repr(m.member_id) for m in group.members)
            return (f"{text} protocolType: {group.protocol_type!r} generation: {group.generation}"
                    f" protocol: {group.protocol!r} leader: {group.leader!r} members: [{members}]")
        return f"key: unknown version {key.version} value: {record.value!r}"
    except CoordinatorRecordError as exc:
        return f"key: {record.key!r} value: {record.value!r} (undecodable: {exc})"


def decoder_for(path: Path) -> RecordDecoder | None:
    """The decoder of the internal topic whose partition directory holds ``path``, if any."""
    topic = path.parent.name.rpartition("-")[0]
    if topic == TRANSACTION_STATE_TOPIC:
        return decode_transaction_record
    if topic == CONSUMER_OFFSETS_TOPIC:
        return decode_offsets_record
    return None


def _dump_segment(path: Path, deep: bool, decoder: RecordDecoder | None = None) -> bool:
    """Print every batch of a ``.log`` file; False after a corrupt one. ``decoder`` prints the
    records of a data batch in ``--deep`` lines (an internal topic's)."""
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
                + (_marker_text(data, position) if crc_valid and is_end_txn_marker_header(header) else "")
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
                    typer.echo(f"| offset: {record.offset} timestamp: {record.timestamp} "
                               + _record_text(header, record, data, position, decoder))
            position += header.size
    return True


def _record_text(header: BatchHeader, record: Any, data: Any, position: int, decoder: RecordDecoder | None) -> str:
    if is_end_txn_marker_header(header):
        return _marker_text(data, position).lstrip()
    if decoder is not None and not header.is_control:
        return decoder(record)
    headers = ", ".join(f"{key!r}: {value!r}" for key, value in record.headers)
    return f"key: {record.key!r} value: {record.value!r} headers: [{headers}]"


def _dump_txn_index(path: Path) -> bool:
    """Print each AbortedTxn of a ``.txnindex``; False for a torn last entry or an unknown version."""
    data = path.read_bytes()
    whole = len(data) - len(data) % ABORTED_TXN.size
    for position in range(0, whole, ABORTED_TXN.size):
        version = int.from_bytes(data[position:position + 2], "big", signed=True)
        if version != 0:
            typer.echo(f"Corrupt index: an aborted transaction of unknown version {version} "
                       f"at byte position {position}", err=True)
            return False
        txn = AbortedTxn.unpack(data, position)
        typer.echo(f"version: {version} producerId: {txn.producer_id} firstOffset: {txn.first_offset}"
                   f" lastOffset: {txn.last_offset} lastStableOffset: {txn.last_stable_offset}")
    if whole != len(data):
        typer.echo(f"Corrupt index: {len(data) - whole} trailing bytes at byte position {whole}", err=True)
        return False
    return True


def _dump_producer_snapshot(path: Path) -> bool:
    """Print each producer of a producer state snapshot; False for a corrupt file."""
    try:
        entries = decode_snapshot(path.read_bytes())
    except CorruptSnapshotError as exc:
        typer.echo(f"Corrupt snapshot: {exc}", err=True)
        return False
    for e in entries:
        typer.echo(f"producerId: {e.producer_id} producerEpoch: {e.producer_epoch}"
                   f" coordinatorEpoch: {e.coordinator_epoch} currentTxnFirstOffset: {e.current_txn_first_offset}"
                   f" lastSequence: {e.last_sequence} lastOffset: {e.last_offset} offsetDelta: {e.offset_delta}"
                   f" lastTimestamp: {e.timestamp}")
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
    """The directory's ``.log`` segments in offset order, each followed by its ``.txnindex`` if any,
    then its producer state snapshots in offset order."""
    found = [(0, base, 0, path) for path in directory.iterdir()
             if (base := parse_segment_file_name(path.name)) is not None]
    found += [(0, base, 1, path) for path in directory.iterdir()
              if (base := parse_segment_file_name(path.name, TXN_INDEX_SUFFIX)) is not None]
    found += [(1, base, 0, path) for path in directory.iterdir()
              if (base := parse_segment_file_name(path.name, SNAPSHOT_SUFFIX)) is not None]
    return [path for *_, path in sorted(found)]


def dump_log(
    files: Annotated[list[Path], typer.Argument(
        help="Segment files (.log, .index, .timeindex, .txnindex), producer state snapshots (.snapshot) "
        "or log directories.", show_default=False)],
    deep: Annotated[bool, typer.Option("--deep", help="Also print every record of every batch.")] = False,
    transaction_log_decoder: Annotated[bool, typer.Option(
        "--transaction-log-decoder", help="Decode the records as __transaction_state's (implies --deep; "
        "automatic under a __transaction_state-N directory).")] = False,
    offsets_decoder: Annotated[bool, typer.Option(
        "--offsets-decoder", help="Decode the records as __consumer_offsets' (implies --deep; automatic under "
        "a __consumer_offsets-N directory).")] = False,
) -> None:
    """Print the batches of log segment files (base/last offset, epoch, codec, producer, transaction
    markers, CRC), and the entries of their index files."""
    if transaction_log_decoder and offsets_decoder:
        typer.echo("kraftpy: --transaction-log-decoder and --offsets-decoder cannot be used together", err=True)
        raise typer.Exit(2)
    forced: RecordDecoder | None = (decode_transaction_record if transaction_log_decoder
                                    else decode_offsets_record if offsets_decoder else None)
    deep = deep or forced is not None
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
            elif path.name.endswith(TXN_INDEX_SUFFIX):
                ok = _dump_txn_index(path) and ok
            elif path.name.endswith(SNAPSHOT_SUFFIX):
                ok = _dump_producer_snapshot(path) and ok
            else:
                ok = _dump_segment(path, deep, forced or decoder_for(path)) and ok
        except OSError as exc:
            typer.echo(f"kraftpy: {path}: {exc}", err=True)
            ok = False
    if not ok:
        raise typer.Exit(1)

