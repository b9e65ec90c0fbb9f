"""Per-partition producer state: what makes idempotent producers exactly-once (KIP-98, KIP-360).

Theory of operation. An idempotent producer has a producer id and an epoch from InitProducerId,
and numbers its batches per partition with a sequence that starts at 0 and wraps from 2^31-1 to
0. The partition remembers, per producer id, the epoch and the metadata of the last
``max_batches`` (5) batches it appended, which is as many as a producer may have in flight. The
leader asks :meth:`ProducerStateManager.validate_append` before it appends a batch, and the
answer (an :class:`AppendCheck`) is one of:

* ``APPEND`` — the batch is the next one: no producer id, or a known producer's next sequence
  in its current epoch, or sequence 0 of a new epoch (KIP-360: the idempotent producer bumps its
  own epoch and restarts at 0), or sequence 0 of an unknown producer.
* ``DUPLICATE`` — the same producer id, epoch, first and last sequence as one of the cached
  batches: a resend of a batch already in the log. The leader appends nothing and answers the
  producer with the original first offset (:attr:`AppendCheck.duplicate`), which is what makes
  retries exactly-once.
* ``REJECT`` with Kafka's error code: an older epoch (INVALID_PRODUCER_EPOCH), a gap or an
  overlap in the sequence (OUT_OF_ORDER_SEQUENCE_NUMBER), a new epoch not starting at 0
  (OUT_OF_ORDER_SEQUENCE_NUMBER), an unknown producer not starting at 0 (UNKNOWN_PRODUCER_ID).

After the append, the leader calls :meth:`ProducerStateManager.update` with the offset it
assigned. Followers and log recovery call ``update`` for every batch they append, without
validation: the log is the truth, and replaying it rebuilds the same state on every replica,
so a follower that becomes leader deduplicates a resend exactly as the old leader would have.

Snapshots bound the replay. A snapshot at offset N holds the state made by every batch below
N; after a restart or a truncation of the log to N the state is the latest good snapshot at or
below N plus a replay of the batches from the snapshot's offset to N
(:func:`truncate_and_reload`). Kafka's snapshot keeps only each producer's last batch, so a
state loaded from a snapshot caches one batch per producer until the producer appends more. A
truncation of a live state (a follower cutting a diverging tail) does better: the batches still
cached from before the truncation that lie below the snapshot's last batch are kept, so the
state equals a fresh replay of the surviving log whenever the truncated tail did not push them
out of the cache (a short tail, the usual case); otherwise it caches a suffix of them.

Transactions (KIP-98). A transactional data batch opens its producer's transaction in this
partition at the batch's first offset, or continues the one already open; the producer's next
control batch (a COMMIT or ABORT marker, written by the transaction coordinator through
WriteTxnMarkers) closes it, and :meth:`ProducerStateManager.update` returns a
:class:`CompletedTxn` for it, which is what the aborted-transaction index records. A closed
transaction still counts as unstable until the high watermark passes its marker
(:meth:`ProducerStateManager.on_high_watermark_update`): until then a new leader may not have the
marker. The partition's last stable offset (LSO) is the smaller of the high watermark and the
first offset of the earliest open or unreplicated transaction; read_committed consumers read up
to it. The leader refuses a transactional batch from an older epoch (INVALID_PRODUCER_EPOCH), a
non-transactional batch while the producer's transaction is open (INVALID_TXN_STATE), and a
marker from an older coordinator epoch than the producer's last marker
(TRANSACTION_COORDINATOR_FENCED, :meth:`ProducerStateManager.validate_marker`). Snapshots carry
each producer's open transaction (``current txn first offset``), so a restart or a truncation
reopens it. They do not say which closed transactions had their marker above the high
watermark: after a restart from a snapshot, as in Kafka, those closed below the snapshot's offset
count as replicated (a truncation of a live state keeps knowing them).

Producers idle for ``expiration_ms`` (``producer.id.expiration.ms``) are forgotten by
:meth:`ProducerStateManager.remove_expired`; producers with an open transaction are kept. As
in Kafka, a producer's time is the max timestamp of its last batch, which is in the log, so
replicas and recovery agree on it; and, unlike Kafka, no earlier than when this replica last
appended one of its batches (``last_append_ms``, in memory only): a producer backfilling records
whose timestamps are older than ``expiration_ms`` keeps its state while it writes, instead of
being told UNKNOWN_PRODUCER_ID for each batch after its first. After a restart, only the log's
timestamps count, as in Kafka. As in Kafka since KIP-360, producer state is not dropped when
the log start offset moves past a producer's batches; it lives until it expires.

Snapshot file ``%020d.snapshot`` (the snapshot offset) in the partition directory, Kafka's
version 1 layout, big-endian::

    offset  size  field
    0       2     version                 int16, 1
    2       4     crc                     uint32, CRC-32C of every byte after this field
    6       4     entry count             int32
    10            entries, 46 bytes each, sorted by producer id:
      +0    8     producer id             int64
      +8    2     producer epoch          int16
      +10   4     last sequence           int32, -1 when no data batch is known
      +14   8     last offset             int64, -1 when no data batch is known
      +22   4     offset delta            int32, last offset - first offset of the last batch
      +26   8     timestamp               int64, the producer's last timestamp
      +34   4     coordinator epoch       int32, -1 when none
      +38   8     current txn first offset int64, -1 when no transaction is open

Files are written tmp → fsync → rename → fsync of the directory; a file whose CRC or size does
not check is skipped (:class:`CorruptSnapshotError`) and an older one used, or the log start.
"""

from __future__ import annotations

import enum
import os
import struct
import types
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import attrs
import crc32c
import structlog

from kraftpy.protocol.batch_header import NO_PRODUCER_ID, NO_SEQUENCE, BatchHeader
from kraftpy.protocol.control_records import EndTxnMarker
from kraftpy.protocol.errors import ErrorCode
from kraftpy.storage.fsutil import fsync_dir, write_atomic

_logger = structlog.get_logger(__name__)

#: Kafka's max.in.flight.requests.per.connection limit for idempotence, and its cache depth.
DEFAULT_MAX_BATCHES = 5
#: Kafka's producer.id.expiration.ms default: one day.
DEFAULT_EXPIRATION_MS = 86_400_000
MAX_SEQUENCE = 0x7FFFFFFF
NO_OFFSET = -1
NO_COORDINATOR_EPOCH = -1

SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 1
SNAPSHOT_HEADER = struct.Struct(">hIi")
assert SNAPSHOT_HEADER.size == 10
#: Where the CRC-covered bytes begin: after version and crc.
SNAPSHOT_CRC_START = 6
SNAPSHOT_ENTRY = struct.Struct(">qhiqiqiq")
assert SNAPSHOT_ENTRY.size == 46
_VERSION_CRC = struct.Struct(">hI")
assert _VERSION_CRC.size == SNAPSHOT_CRC_START


def in_sequence(last_seq: int, next_seq: int) -> bool:
    """True when ``next_seq`` directly follows ``last_seq``, wrapping from 2^31-1 to 0."""
    return next_seq == (last_seq + 1) & MAX_SEQUENCE


def _seq_minus(seq: int, delta: int) -> int:
    return (seq - delta) & MAX_SEQUENCE


# ---------------------------------------------------------------------------------------------
# State


@attrs.frozen
class BatchMetadata:
    """What the partition remembers of one appended batch."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    max_timestamp: int

    @property
    def offset_delta(self) -> int:
        return self.last_offset - self.first_offset


@attrs.define
class ProducerStateEntry:
    """The state of one producer id in one partition.

    Invariants: every cached batch was written in ``producer_epoch``; the cached batches are
    the producer's last ones in log order, with consecutive sequences and increasing offsets;
    there are at most ``max_batches`` of them.
    """

    producer_id: int
    producer_epoch: int
    batches: deque[BatchMetadata] = attrs.field(factory=deque)
    last_timestamp: int = -1
    #: When this replica last appended one of its batches (its clock; -1: not since it started).
    last_append_ms: int = -1
    coordinator_epoch: int = NO_COORDINATOR_EPOCH
    current_txn_first_offset: int = NO_OFFSET

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else NO_OFFSET

    def find_duplicate(self, header: BatchHeader) -> BatchMetadata | None:
        """The cached batch with the same epoch, first and last sequence as ``header``, if any."""
        if header.producer_epoch != self.producer_epoch:
            return None
        first, last = header.base_sequence, header.last_sequence
        for batch in self.batches:
            if batch.first_seq == first and batch.last_seq == last:
                return batch
        return None

    def copy(self) -> ProducerStateEntry:
        return attrs.evolve(self, batches=deque(self.batches))


class AppendOutcome(enum.Enum):
    APPEND = "append"
    DUPLICATE = "duplicate"
    REJECT = "reject"


@attrs.frozen
class AppendCheck:
    """The leader's answer for one batch, before it appends.

    ``error`` is what goes into the produce response: NONE for APPEND and for DUPLICATE (Kafka
    answers a duplicate with success and the original offsets), Kafka's code for REJECT.
    """

    outcome: AppendOutcome
    error: ErrorCode = ErrorCode.NONE
    #: For DUPLICATE: the batch already in the log; answer with its ``first_offset``.
    duplicate: BatchMetadata | None = None
    message: str = ""

    @property
    def should_append(self) -> bool:
        return self.outcome is AppendOutcome.APPEND

    @property
    def is_duplicate(self) -> bool:
        return self.outcome is AppendOutcome.DUPLICATE


_APPEND = AppendCheck(AppendOutcome.APPEND)


def _reject(error: ErrorCode, message: str) -> AppendCheck:
    return AppendCheck(AppendOutcome.REJECT, error, None, message)


#: One batch of a replay: its header, or its header and marker when it is a control batch.
ReplayBatch = BatchHeader | tuple[BatchHeader, EndTxnMarker | None]


@attrs.frozen
class CompletedTxn:
    """A transaction a marker closed in this partition (Kafka's CompletedTxn).

    ``first_offset`` is the first offset of the producer's first transactional batch of it,
    ``last_offset`` the marker's offset. ``last_stable_offset`` is what the aborted-transaction
    index stores with it: the first offset of the earliest transaction of another producer still
    open when the marker was applied, or ``last_offset + 1`` when none is.
    """

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool
    last_stable_offset: int


@attrs.frozen
class SnapshotEntry:
    """One producer as a snapshot stores it (Kafka's layout; see the module docstring)."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp: int
    coordinator_epoch: int
    current_txn_first_offset: int


@attrs.frozen
class LoadedSnapshot:
    """A snapshot read back: the state made by every batch below ``offset``."""

    offset: int
    entries: tuple[SnapshotEntry, ...]


class ProducerStateManager:
    """The producer state of one partition. Pure: no files, no clock; time is passed in.

    ``map_end_offset`` is the offset up to which the state reflects the log: every batch below
    it has been applied (or carried no producer id).

    Invariants: ``_ongoing`` maps the first offset of every open transaction to its producer,
    and holds exactly the entries whose ``current_txn_first_offset`` is set; ``_unreplicated``
    maps the first offset of every closed transaction whose marker is at or above
    ``_high_watermark`` to ``(producer id, marker offset)``.
    """

    def __init__(self, max_batches: int = DEFAULT_MAX_BATCHES, expiration_ms: int = DEFAULT_EXPIRATION_MS):
        if max_batches < 1:
            raise ValueError(f"max_batches must be at least 1, not {max_batches}")
        if expiration_ms < 0:
            raise ValueError(f"expiration_ms must not be negative, not {expiration_ms}")
        self.max_batches = max_batches
        self.expiration_ms = expiration_ms
        self._producers: dict[int, ProducerStateEntry] = {}
        self._map_end_offset = 0
        self._ongoing: dict[int, int] = {}
        self._unreplicated: dict[int, tuple[int, int]] = {}
        self._high_watermark = 0

    # -- reading -----------------------------------------------------------------------------

    @property
    def map_end_offset(self) -> int:
        return self._map_end_offset

    @property
    def producers(self) -> Mapping[int, ProducerStateEntry]:
        """Producer id → entry; a read-only view, whose entries must not be mutated either."""
        return types.MappingProxyType(self._producers)

    def entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self._producers.get(producer_id)

    @property
    def high_watermark(self) -> int:
        """The high watermark last given to :meth:`on_high_watermark_update`."""
        return self._high_watermark

    def open_transactions(self) -> list[tuple[int, int]]:
        """``(first offset, producer id)`` of every open transaction, by first offset."""
        return sorted(self._ongoing.items())

    def first_undecided_offset(self) -> int | None:
        """The first offset of the earliest open transaction (its outcome not yet known)."""
        return min(self._ongoing, default=None)

    def first_unstable_offset(self) -> int | None:
        """The first offset of the earliest transaction that is open, or closed by a marker the
        high watermark has not passed yet; None when there is none."""
        return min(self._ongoing.keys() | self._unreplicated.keys(), default=None)

    @property
    def last_stable_offset(self) -> int:
        """The partition's LSO: the high watermark, or the first unstable offset when lower."""
        first_unstable = self.first_unstable_offset()
        if first_unstable is None:
            return self._high_watermark
        return min(first_unstable, self._high_watermark)

    @property
    def last_stable_offset_lag(self) -> int:
        """High watermark minus LSO (Kafka's LastStableOffsetLag metric)."""
        return self._high_watermark - self.last_stable_offset

    def is_expired(self, entry: ProducerStateEntry, now_ms: int) -> bool:
        """Idle for ``expiration_ms`` and no transaction open (Kafka's isProducerExpired), idle counted
        from its last batch's timestamp or this replica's last append of it, whichever is later."""
        return (
            entry.current_txn_first_offset == NO_OFFSET
            and now_ms - max(entry.last_timestamp, entry.last_append_ms) >= self.expiration_ms
        )

    # -- the leader's check ------------------------------------------------------------------

    def validate_append(self, header: BatchHeader, now_ms: int) -> AppendCheck:
        """Decide whether the leader may append ``header``'s batch; changes nothing.

        A producer that has expired at ``now_ms`` counts as unknown even before
        :meth:`remove_expired` has run, so the answer does not depend on when that runs.
        """
        producer_id = header.producer_id
        if producer_id == NO_PRODUCER_ID:
            return _APPEND
        epoch = header.producer_epoch
        if epoch < 0:
            return _reject(ErrorCode.INVALID_RECORD, f"producer {producer_id} sent epoch {epoch}")
        entry = self._producers.get(producer_id)
        if entry is not None and self.is_expired(entry, now_ms):
            entry = None

        if header.is_control:
            # Transaction markers carry no sequence; only the epoch is checked here.
            if entry is not None and epoch < entry.producer_epoch:
                return _reject(ErrorCode.INVALID_PRODUCER_EPOCH, self._old_epoch(header, entry))
            return _APPEND

        first_seq = header.base_sequence
        if first_seq < 0:
            return _reject(
                ErrorCode.INVALID_RECORD, f"producer {producer_id} sent a batch without a sequence number"
            )

        if entry is None:
            if first_seq != 0:
                # Kafka before KIP-360 (2.4 and older) answers so. Since KIP-360 Kafka accepts
                # any sequence from a producer it does not know, because the state may have been
                # dropped with the log's data; here producer state outlives the data (it only
                # expires), so an unknown producer not starting at 0 lost its state to expiry,
                # and UNKNOWN_PRODUCER_ID tells it to bump its epoch and restart at 0.
                return _reject(
                    ErrorCode.UNKNOWN_PRODUCER_ID,
                    f"no state for producer {producer_id}; its first batch has sequence {first_seq}, not 0",
                )
            return _APPEND

        duplicate = entry.find_duplicate(header)
        if duplicate is not None:
            return AppendCheck(
                AppendOutcome.DUPLICATE, ErrorCode.NONE, duplicate, "duplicate of a cached batch"
            )

        if epoch < entry.producer_epoch:
            return _reject(ErrorCode.INVALID_PRODUCER_EPOCH, self._old_epoch(header, entry))
        if epoch > entry.producer_epoch:
            if first_seq != 0:
                return _reject(
                    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                    f"producer {producer_id} started epoch {epoch} at sequence {first_seq}, not 0",
                )
        elif not in_sequence(entry.last_seq, first_seq):
            return _reject(
                ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                f"producer {producer_id} epoch {epoch}: sequence {first_seq} after {entry.last_seq}",
            )
        if entry.current_txn_first_offset != NO_OFFSET and not header.is_transactional:
            # Kafka's ProducerAppendInfo: only transactional writes while a transaction is open.
            return _reject(
                ErrorCode.INVALID_TXN_STATE,
                f"producer {producer_id} sent a non-transactional batch while its transaction opened at "
                f"offset {entry.current_txn_first_offset} is open",
            )
        return _APPEND

    def validate_marker(self, header: BatchHeader, marker: EndTxnMarker, now_ms: int) -> AppendCheck:
        """Decide whether the leader may append the marker ``header`` and ``marker`` describe.

        Refused as in Kafka: a producer epoch older than the producer's (INVALID_PRODUCER_EPOCH),
        a coordinator epoch older than the one of the producer's last marker
        (TRANSACTION_COORDINATOR_FENCED: a coordinator that lost its partition of
        ``__transaction_state`` still sending markers). A marker for a producer without an open
        transaction here is accepted: the coordinator writes markers to every partition of the
        transaction, also those that got no data.
        """
        if not header.is_control:
            raise ValueError(f"batch at offset {header.base_offset} is not a control batch")
        check = self.validate_append(header, now_ms)
        if not check.should_append:
            return check
        entry = self._producers.get(header.producer_id)
        if entry is not None and self.is_expired(entry, now_ms):
            entry = None
        if entry is not None and marker.coordinator_epoch < entry.coordinator_epoch:
            return _reject(
                ErrorCode.TRANSACTION_COORDINATOR_FENCED,
                f"producer {header.producer_id}: marker from coordinator epoch {marker.coordinator_epoch}, "
                f"older than the current {entry.coordinator_epoch}",
            )
        return _APPEND

    @staticmethod
    def _old_epoch(header: BatchHeader, entry: ProducerStateEntry) -> str:
        return (
            f"producer {header.producer_id} sent epoch {header.producer_epoch}, "
            f"older than the current epoch {entry.producer_epoch}"
        )

    # -- applying the log --------------------------------------------------------------------

    def update(
        self,
        header: BatchHeader,
        first_offset: int | None = None,
        *,
        marker: EndTxnMarker | None = None,
        coordinator_epoch: int | None = None,
        now_ms: int | None = None,
    ) -> CompletedTxn | None:
        """Apply one batch that is now in the log at ``first_offset`` (default: its base offset).
        ``now_ms``: when it was appended here (a leader's or follower's append; recovery gives none).

        No validation: the leader calls this after :meth:`validate_append` (or
        :meth:`validate_marker`) said APPEND; a follower and log recovery call it for every batch
        they append. A transactional data batch opens its producer's transaction if none is open.
        A control batch closes the producer's open transaction; with its ``marker``
        (:func:`~kraftpy.protocol.control_records.read_end_txn_marker`) the answer is the :class:`CompletedTxn` to record in the
        aborted-transaction index when ``is_aborted``, and None when no transaction was open
        (Kafka emits nothing for a transaction without data here). Without ``marker`` (a replay
        of batch headers alone) the state is the same but the answer is None, since commit and
        abort cannot be told apart; ``coordinator_epoch`` then gives the marker's coordinator
        epoch if the caller knows it.
        """
        if first_offset is None:
            first_offset = header.base_offset
        last_offset = first_offset + header.last_offset_delta
        if first_offset < self._map_end_offset:
            raise ValueError(
                f"batch at offsets {first_offset}..{last_offset} is below the state's end {self._map_end_offset}"
            )
        self._map_end_offset = last_offset + 1
        producer_id = header.producer_id
        if producer_id == NO_PRODUCER_ID:
            return None
        entry = self._producers.get(producer_id)
        if entry is None:
            entry = self._producers[producer_id] = ProducerStateEntry(producer_id, header.producer_epoch)
        if header.producer_epoch != entry.producer_epoch:
            entry.producer_epoch = header.producer_epoch
            entry.batches.clear()
        entry.last_timestamp = header.max_timestamp
        if now_ms is not None:
            entry.last_append_ms = now_ms

        if header.is_control:
            if marker is not None:
                coordinator_epoch = marker.coordinator_epoch
            if coordinator_epoch is not None:
                entry.coordinator_epoch = coordinator_epoch
            return self._end_txn(entry, last_offset, marker)
        if header.is_transactional and entry.current_txn_first_offset == NO_OFFSET:
            entry.current_txn_first_offset = first_offset
            self._ongoing[first_offset] = producer_id
        if header.base_sequence < 0:
            return None
        if entry.batches and not in_sequence(entry.last_seq, header.base_sequence):
            # A restart at 0 after expiry, in the same epoch: older batches are no longer a run.
            entry.batches.clear()
        entry.batches.append(
            BatchMetadata(
                header.base_sequence, header.last_sequence, first_offset, last_offset, header.max_timestamp
            )
        )
        while len(entry.batches) > self.max_batches:
            entry.batches.popleft()
        return None

    def _end_txn(self, entry: ProducerStateEntry, marker_offset: int, marker: EndTxnMarker | None) -> CompletedTxn | None:
        """Close ``entry``'s open transaction with the marker at ``marker_offset``."""
        first = entry.current_txn_first_offset
        if first == NO_OFFSET:
            return None
        entry.current_txn_first_offset = NO_OFFSET
        del self._ongoing[first]
        if marker_offset >= self._high_watermark:
            self._unreplicated[first] = (entry.producer_id, marker_offset)
        if marker is None:
            return None
        # Kafka's lastStableOffset(completedTxn): the earliest transaction of another producer
        # still open, which is every open one now that this one is closed.
        next_open = min(self._ongoing, default=marker_offset + 1)
        return CompletedTxn(entry.producer_id, first, marker_offset, not marker.committed, next_open)

    def on_high_watermark_update(self, high_watermark: int) -> None:
        """The high watermark is now ``high_watermark``: transactions whose marker is below it are
        replicated to every ISR member and no longer hold the LSO back (Kafka's
        onHighWatermarkUpdated)."""
        self._high_watermark = high_watermark
        self._drop_replicated()

    def _drop_replicated(self) -> None:
        hw = self._high_watermark
        for first in [f for f, (_, marker_offset) in self._unreplicated.items() if marker_offset < hw]:
            del self._unreplicated[first]

    def remove_expired(self, now_ms: int) -> list[int]:
        """Forget producers idle for ``expiration_ms`` without an open transaction; their ids."""
        expired = [pid for pid, entry in self._producers.items() if self.is_expired(entry, now_ms)]
        for pid in expired:
            del self._producers[pid]
        return expired

    # -- snapshots, rebuild, truncation ------------------------------------------------------

    def snapshot_entries(self) -> tuple[SnapshotEntry, ...]:
        """The state as a snapshot stores it (each producer's last batch only), by producer id."""
        out = []
        for pid in sorted(self._producers):
            entry = self._producers[pid]
            last = entry.batches[-1] if entry.batches else None
            out.append(
                SnapshotEntry(
                    producer_id=pid,
                    producer_epoch=entry.producer_epoch,
                    last_sequence=last.last_seq if last else NO_SEQUENCE,
                    last_offset=last.last_offset if last else NO_OFFSET,
                    offset_delta=last.offset_delta if last else 0,
                    timestamp=entry.last_timestamp,
                    coordinator_epoch=entry.coordinator_epoch,
                    current_txn_first_offset=entry.current_txn_first_offset,
                )
            )
        return tuple(out)

    def reset(self, start_offset: int = 0) -> None:
        """Forget everything; the state is now that of an empty log starting at ``start_offset``."""
        self._producers = {}
        self._map_end_offset = start_offset
        self._ongoing = {}
        self._unreplicated = {}

    def load_snapshot(self, snapshot: LoadedSnapshot) -> None:
        """Replace the state by ``snapshot``'s."""
        self.reset(snapshot.offset)
        for item in snapshot.entries:
            entry = ProducerStateEntry(
                item.producer_id,
                item.producer_epoch,
                last_timestamp=item.timestamp,
                coordinator_epoch=item.coordinator_epoch,
                current_txn_first_offset=item.current_txn_first_offset,
            )
            if item.current_txn_first_offset != NO_OFFSET:
                self._ongoing[item.current_txn_first_offset] = item.producer_id
            if item.last_offset >= 0 and item.last_sequence >= 0:
                entry.batches.append(
                    BatchMetadata(
                        first_seq=_seq_minus(item.last_sequence, item.offset_delta),
                        last_seq=item.last_sequence,
                        first_offset=item.last_offset - item.offset_delta,
                        last_offset=item.last_offset,
                        max_timestamp=item.timestamp,
                    )
                )
            self._producers[item.producer_id] = entry

    def rebuild(
        self,
        snapshot: LoadedSnapshot | None,
        batches_after: Iterable[ReplayBatch],
        *,
        start_offset: int = 0,
        end_offset: int | None = None,
        now_ms: int | None = None,
    ) -> None:
        """Rebuild from ``snapshot`` (or from nothing at ``start_offset``) plus a replay of the log.

        ``batches_after`` are the log's batch headers from the snapshot's offset (or the log
        start) on, each alone or paired with its marker when it is a control batch (the
        marker's coordinator epoch is then restored too); batches wholly below the snapshot's
        offset are skipped, so a reader may start at a segment or index boundary before it.
        Batches at or after ``end_offset`` are not applied. With ``now_ms``, producers already
        expired are dropped, as Kafka does on load. Transactions closed by a replayed marker
        count as unreplicated until the high watermark passes it.
        """
        if snapshot is not None:
            self.load_snapshot(snapshot)
        else:
            self.reset(start_offset)
        begin = self._map_end_offset
        for item in batches_after:
            header, marker = item if isinstance(item, tuple) else (item, None)
            if end_offset is not None and header.base_offset >= end_offset:
                break
            if header.last_offset < begin:
                continue
            self.update(header, marker=marker)
        if end_offset is not None:
            self._map_end_offset = max(self._map_end_offset, end_offset)
        self._drop_replicated()
        if now_ms is not None:
            self.remove_expired(now_ms)

    def truncate_to(
        self,
        offset: int,
        snapshot: LoadedSnapshot | None,
        batches_after: Iterable[ReplayBatch],
        *,
        start_offset: int = 0,
        now_ms: int | None = None,
    ) -> None:
        """The log was cut at ``offset``: rebuild from ``snapshot`` (at or below it) and the log.

        Unlike a cold :meth:`rebuild`, cached batches of the state before the truncation that lie
        below the rebuilt state's oldest cached batch, in the same epoch and sequence run, are
        kept: they are still in the log, and the snapshot cannot carry them. The result equals a
        fresh replay of the surviving log for every producer whose surviving cached batches were
        all still cached before the truncation; for the others it caches a suffix of them (at
        least the last batch below the snapshot offset and every batch after it).

        Transactions opened at or above ``offset`` are gone; those whose marker was cut are open
        again. The high watermark is lowered to ``offset`` if above it, and closed transactions
        whose marker survives and is not yet below the high watermark stay unreplicated, also
        when the snapshot is above their marker.
        """
        if snapshot is not None and snapshot.offset > offset:
            raise ValueError(f"snapshot at {snapshot.offset} is above the truncation offset {offset}")
        before = self._producers
        unreplicated_before = self._unreplicated
        self._high_watermark = min(self._high_watermark, offset)
        self.rebuild(snapshot, batches_after, start_offset=start_offset, end_offset=offset)
        for first, (pid, marker_offset) in unreplicated_before.items():
            if self._high_watermark <= marker_offset < offset:
                self._unreplicated.setdefault(first, (pid, marker_offset))
        for pid, entry in self._producers.items():
            old = before.get(pid)
            if old is None or old.producer_epoch != entry.producer_epoch or not entry.batches:
                continue
            self._prepend_older(entry, old)
        if now_ms is not None:
            self.remove_expired(now_ms)

    def _prepend_older(self, entry: ProducerStateEntry, old: ProducerStateEntry) -> None:
        oldest = entry.batches[0]
        cached = list(old.batches)
        try:
            position = cached.index(oldest)
        except ValueError:
            return
        following = oldest
        for batch in reversed(cached[:position]):
            if len(entry.batches) >= self.max_batches or not in_sequence(batch.last_seq, following.first_seq):
                break
            entry.batches.appendleft(batch)
            following = batch


# ---------------------------------------------------------------------------------------------
# Snapshot format: pure encode/decode


class CorruptSnapshotError(ValueError):
    """A snapshot file that cannot be trusted: bad size, version or CRC."""


def encode_snapshot(entries: Iterable[SnapshotEntry]) -> bytes:
    items = sorted(entries, key=lambda e: e.producer_id)
    body = bytearray(SNAPSHOT_HEADER.size + SNAPSHOT_ENTRY.size * len(items))
    SNAPSHOT_HEADER.pack_into(body, 0, SNAPSHOT_VERSION, 0, len(items))
    pos = SNAPSHOT_HEADER.size
    for e in items:
        SNAPSHOT_ENTRY.pack_into(
            body,
            pos,
            e.producer_id,
            e.producer_epoch,
            e.last_sequence,
            e.last_offset,
            e.offset_delta,
            e.timestamp,
            e.coordinator_epoch,
            e.current_txn_first_offset,
        )
        pos += SNAPSHOT_ENTRY.size
    crc = crc32c.crc32c(memoryview(body)[SNAPSHOT_CRC_START:])
    _VERSION_CRC.pack_into(body, 0, SNAPSHOT_VERSION, crc)
    return bytes(body)


def decode_snapshot(data: bytes | bytearray | memoryview) -> tuple[SnapshotEntry, ...]:
    if len(data) < SNAPSHOT_HEADER.size:
        raise CorruptSnapshotError(f"snapshot of {len(data)} bytes is shorter than its header")
    version, crc, count = SNAPSHOT_HEADER.unpack_from(data, 0)
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"snapshot version {version} is not {SNAPSHOT_VERSION}")
    actual = crc32c.crc32c(memoryview(data)[SNAPSHOT_CRC_START:])
    if actual != crc:
        raise CorruptSnapshotError(f"snapshot CRC mismatch: stored {crc:#010x}, computed {actual:#010x}")
    expected = SNAPSHOT_HEADER.size + SNAPSHOT_ENTRY.size * count
    if count < 0 or len(data) != expected:
        raise CorruptSnapshotError(f"snapshot of {len(data)} bytes does not hold {count} entries")
    return tuple(
        SnapshotEntry(*SNAPSHOT_ENTRY.unpack_from(data, SNAPSHOT_HEADER.size + i * SNAPSHOT_ENTRY.size))
        for i in range(count)
    )


# ---------------------------------------------------------------------------------------------
# Snapshot files


def snapshot_path(directory: str | os.PathLike[str], offset: int) -> Path:
    return Path(directory) / f"{offset:020d}{SNAPSHOT_SUFFIX}"


def snapshot_offsets(directory: str | os.PathLike[str], names: Iterable[str] | None = None) -> list[int]:
    """Offsets of the snapshot files in ``directory``, ascending; other files are ignored. ``names``: the
    directory's listing when the caller has just read it (a log being opened), else it is listed here."""
    offsets = []
    for name in os.listdir(directory) if names is None else names:
        stem, suffix = name[: -len(SNAPSHOT_SUFFIX)], name[-len(SNAPSHOT_SUFFIX) :]
        if suffix == SNAPSHOT_SUFFIX and len(stem) == 20 and stem.isdigit():
            offsets.append(int(stem))
    offsets.sort()
    return offsets


def write_snapshot(directory: str | os.PathLike[str], offset: int, entries: Iterable[SnapshotEntry], *,
                   sync: bool = True) -> Path:
    """``sync=False``: the caller makes it durable later (see kraftpy.storage.fsutil)."""
    path = snapshot_path(directory, offset)
    write_atomic(path, encode_snapshot(entries), sync=sync)
    return path


def read_snapshot(directory: str | os.PathLike[str], offset: int) -> LoadedSnapshot:
    return LoadedSnapshot(offset, decode_snapshot(snapshot_path(directory, offset).read_bytes()))


def take_snapshot(
    directory: str | os.PathLike[str], state: ProducerStateManager, offset: int | None = None, *,
    sync: bool = True,
) -> Path:
    """Write ``state`` as the snapshot at ``offset`` (default: its map end offset).

    The offset must not be below the state's map end offset: the state must not hold batches
    at or after it. It may be above when the batches in between had no producer id.
    """
    if offset is None:
        offset = state.map_end_offset
    if offset < state.map_end_offset:
        raise ValueError(f"snapshot offset {offset} is below the state's end {state.map_end_offset}")
    return write_snapshot(directory, offset, state.snapshot_entries(), sync=sync)


def load_latest(directory: str | os.PathLike[str], up_to_offset: int,
                offsets: list[int] | None = None) -> LoadedSnapshot | None:
    """The newest snapshot at or below ``up_to_offset`` that checks; corrupt ones are skipped.
    ``offsets``: the snapshots' offsets when the caller has them (`snapshot_offsets`)."""
    for offset in reversed(snapshot_offsets(directory) if offsets is None else offsets):
        if offset > up_to_offset:
            continue
        try:
            return read_snapshot(directory, offset)
        except CorruptSnapshotError as exc:
            _logger.warning("corrupt producer snapshot skipped", offset=offset, error=str(exc))
    return None


def _delete_snapshots(directory: str | os.PathLike[str], doomed: list[int]) -> list[int]:
    for offset in doomed:
        snapshot_path(directory, offset).unlink(missing_ok=True)
    if doomed:
        fsync_dir(directory)
    return doomed


def delete_snapshots_above(directory: str | os.PathLike[str], offset: int) -> list[int]:
    """Delete the snapshots above ``offset`` (they describe a truncated tail); their offsets."""
    return _delete_snapshots(directory, [o for o in snapshot_offsets(directory) if o > offset])


def delete_snapshots_below(directory: str | os.PathLike[str], offset: int) -> list[int]:
    """Delete the snapshots below ``offset`` (retention, after the log start moved); their offsets."""
    return _delete_snapshots(directory, [o for o in snapshot_offsets(directory) if o < offset])


def truncate_and_reload(
    state: ProducerStateManager,
    directory: str | os.PathLike[str],
    offset: int,
    read_batches: Callable[[int], Iterable[ReplayBatch]],
    *,
    log_start_offset: int = 0,
    now_ms: int | None = None,
    names: Iterable[str] | None = None,
) -> LoadedSnapshot | None:
    """Bring ``state`` in line with a log that now ends at ``offset``; the snapshot used, if any.

    Used at start (``offset`` = the recovered log end) and after a truncation. Snapshots above
    ``offset`` are deleted, the latest good one at or below it is loaded, and
    ``read_batches(from_offset)`` supplies the log's batch headers from that offset on. ``names``:
    the directory's listing when the caller has just read it (one listing, not three, per log opened).
    """
    offsets = snapshot_offsets(directory, names)
    _delete_snapshots(directory, [o for o in offsets if o > offset])
    snapshot = load_latest(directory, offset, [o for o in offsets if o <= offset])
    # A snapshot below the log start still describes the deleted data rightly (producer state
    # outlives the data, KIP-360); the replay starts where the log does.
    from_offset = max(snapshot.offset, log_start_offset) if snapshot is not None else log_start_offset
    state.truncate_to(
        offset, snapshot, read_batches(from_offset), start_offset=log_start_offset, now_ms=now_ms
    )
    return snapshot
