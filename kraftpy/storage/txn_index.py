"""The aborted-transaction index of a log segment: ``<base offset>.txnindex``, in Kafka's format.

The file holds fixed-size big-endian entries back to back, nothing else (no header, no checksum)::

    offset  size  field
    0       2     version             0
    2       8     producer_id
    10      8     first_offset        the transaction's first offset (it may lie in an earlier segment)
    18      8     last_offset         the offset of its ABORT marker, which lies in this segment
    26      8     last_stable_offset  the LSO once the marker was written: the first offset of the
                                      earliest transaction of another producer still open then, or
                                      last_offset + 1 when none was
    34

One entry per aborted transaction whose marker the segment holds, in marker order: ``last_offset``
strictly increases (an out-of-order append is refused). Committed transactions leave no entry.

Theory of operation. A read_committed fetch from offset F up to U must name every aborted
transaction whose records it may return: those with ``last_offset >= F`` and ``first_offset < U``
(:meth:`TransactionIndex.collect_aborted`). Entries sit in the segment of their marker, so the
search starts at the segment holding F and moves forward; it is complete at the first entry whose
``last_stable_offset >= U``, because every transaction open below U had then ended (Kafka's
``TxnIndexSearchResult``). The entries live in memory (loaded when the log opens, so a fetch does
no file work); the file is written as entries are appended, on the caller's thread, and created
only by the first append (most segments never have one). Recovery rebuilds it from the log with a
:class:`TransactionReplay` (see :meth:`kraftpy.storage.segment.LogSegment.recover`). A torn last
entry (a crash in the middle of a write) is cut when the file is loaded; an entry of an unknown
version, out of order or outside the segment makes the file corrupt (:class:`CorruptIndexError`),
and the log then recovers the segment, which rebuilds it.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable, Mapping
from pathlib import Path

import attrs

from kraftpy.protocol.batch_header import BatchHeader
from kraftpy.protocol.records import ControlRecordType
from kraftpy.storage.index import CorruptIndexError

TXN_INDEX_SUFFIX = ".txnindex"
ABORTED_TXN = struct.Struct(">hqqqq")
assert ABORTED_TXN.size == 34
ABORTED_TXN_VERSION = 0


@attrs.frozen
class AbortedTxn:
    """One entry of a ``.txnindex`` (Kafka's ``AbortedTxn``); offsets as in the module doc."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def pack(self) -> bytes:
        return ABORTED_TXN.pack(ABORTED_TXN_VERSION, self.producer_id, self.first_offset, self.last_offset,
                                self.last_stable_offset)

    @classmethod
    def unpack(cls, data: bytes | bytearray | memoryview, position: int = 0) -> AbortedTxn:
        """The entry at ``position``; CorruptIndexError for a version this code does not know."""
        version, producer_id, first, last, lso = ABORTED_TXN.unpack_from(data, position)
        if version != ABORTED_TXN_VERSION:
            raise CorruptIndexError(f"aborted transaction entry of unknown version {version}")
        return cls(producer_id, first, last, lso)


@attrs.frozen
class TxnIndexSearchResult:
    """The aborted transactions a search found, and whether later segments may hold more."""

    aborted: tuple[AbortedTxn, ...]
    is_complete: bool


def collect_aborted(entries: Iterable[AbortedTxn], fetch_offset: int, upper_bound_offset: int) -> TxnIndexSearchResult:
    """The entries overlapping ``[fetch_offset, upper_bound_offset)``, stopping at the first whose
    last stable offset reaches ``upper_bound_offset`` (then the search is complete)."""
    found = []
    for txn in entries:
        if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound_offset:
            found.append(txn)
        if txn.last_stable_offset >= upper_bound_offset:
            return TxnIndexSearchResult(tuple(found), True)
    return TxnIndexSearchResult(tuple(found), False)


class TransactionIndex:
    """The aborted transactions whose markers one segment holds. Not thread-safe for writers (the
    owning log serialises them); readers may search while a writer appends or truncates: the entry
    list is replaced, never edited in place."""

    def __init__(self, path: str | os.PathLike[str], base_offset: int) -> None:
        self.path = Path(path)
        self.base_offset = base_offset
        #: In last_offset order. Invariant: the file holds exactly these entries (once written).
        self._entries: tuple[AbortedTxn, ...] = ()
        #: The file changed since it was last fsynced.
        self._unsynced = False
        #: The file may have been created since the last flush (its directory entry is not yet durable).
        self._created = False
        #: The caller listed the directory and found no file: the next `load` need not look for it.
        self.known_absent = False

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def entries(self) -> tuple[AbortedTxn, ...]:
        return self._entries

    @property
    def last_offset(self) -> int | None:
        """The marker offset of the last entry, or None when there is none."""
        return self._entries[-1].last_offset if self._entries else None

    def _check_order(self, previous: int | None, txn: AbortedTxn) -> None:
        if txn.last_offset < self.base_offset:
            raise ValueError(f"aborted transaction ending at {txn.last_offset} is below segment {self.base_offset}")
        if previous is not None and txn.last_offset <= previous:
            raise ValueError(f"aborted transaction ending at {txn.last_offset} is not after {previous} "
                             f"in {self.path.name}")
        if txn.first_offset > txn.last_offset:
            raise ValueError(f"aborted transaction starts at {txn.first_offset} after its marker {txn.last_offset}")

    def append(self, txn: AbortedTxn) -> None:
        self.append_all((txn,))

    def append_all(self, txns: Iterable[AbortedTxn]) -> None:
        """Append entries in last_offset order (each after the last one here), with one write."""
        txns = tuple(txns)
        if not txns:
            return
        previous = self.last_offset
        for txn in txns:
            self._check_order(previous, txn)
            previous = txn.last_offset
        if not self._entries:
            self._created = True
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.pwrite(fd, b"".join(txn.pack() for txn in txns), len(self._entries) * ABORTED_TXN.size)
        finally:
            os.close(fd)
        self._entries = self._entries + txns
        self._unsynced = True

    def collect_aborted(self, fetch_offset: int, upper_bound_offset: int) -> TxnIndexSearchResult:
        """See :func:`collect_aborted`."""
        return collect_aborted(self._entries, fetch_offset, upper_bound_offset)

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at ``offset`` or after it."""
        entries = self._entries
        keep = next((i for i, txn in enumerate(entries) if txn.last_offset >= offset), len(entries))
        if keep == len(entries):
            return
        self._entries = entries[:keep]
        self._cut_file(keep * ABORTED_TXN.size)

    def reset(self) -> None:
        """Forget every entry and remove the file (recovery rebuilds it)."""
        self._entries = ()
        self.delete_file()

    def _cut_file(self, size: int) -> None:
        try:
            fd = os.open(self.path, os.O_WRONLY)
        except FileNotFoundError:
            return
        try:
            os.ftruncate(fd, size)
        finally:
            os.close(fd)
        self._unsynced = True

    def load(self) -> int:
        """Read the file (none: no entries); returns the bytes of a torn last entry cut from it.

        Raises CorruptIndexError (memory left empty) for an entry of an unknown version, out of
        order, or whose marker lies below the segment."""
        self._entries = ()
        if self.known_absent:
            self.known_absent = False
            return 0
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return 0
        torn = len(data) % ABORTED_TXN.size
        if torn:
            self._cut_file(len(data) - torn)
        entries: list[AbortedTxn] = []
        for position in range(0, len(data) - torn, ABORTED_TXN.size):
            txn = AbortedTxn.unpack(data, position)
            try:
                self._check_order(entries[-1].last_offset if entries else None, txn)
            except ValueError as exc:
                raise CorruptIndexError(f"{self.path.name}: {exc}") from None
            entries.append(txn)
        self._entries = tuple(entries)
        return torn

    def flush(self) -> bool:
        """fsync the file if it changed since the last fsync; returns whether it may have been
        created since the last flush (the caller then fsyncs the directory)."""
        created, self._created = self._created, False
        if not self._unsynced:
            return created
        self._unsynced = False
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return created
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        return created

    def rename(self, path: Path) -> None:
        """Name the file ``path`` (a file not yet written takes that name when it is)."""
        if path != self.path and self.path.exists():
            os.replace(self.path, path)
        self.path = path

    def delete_file(self) -> None:
        self.path.unlink(missing_ok=True)
        self._unsynced = False


class TransactionReplay:
    """The transactions open at a point of a log, moved forward batch by batch in offset order;
    what recovery uses to rebuild ``.txnindex`` files (Kafka's ProducerStateManager does it there).

    A transactional data batch opens its producer's transaction unless one is open; an ABORT or
    COMMIT marker (a transactional control batch) ends it; an ABORT yields the :class:`AbortedTxn`
    to index. A marker with no open transaction, as Kafka does, ends one that starts at the marker.
    """

    def __init__(self, ongoing: Mapping[int, int] | None = None) -> None:
        #: producer id → first offset of its open transaction.
        self.ongoing: dict[int, int] = dict(ongoing or {})

    @property
    def first_unstable_offset(self) -> int | None:
        """The first offset of the earliest open transaction, or None when none is open."""
        return min(self.ongoing.values(), default=None)

    def on_batch(self, header: BatchHeader, control_type: int | None = None) -> AbortedTxn | None:
        """Move past one batch; ``control_type`` is the key type of a control batch's record (None:
        unreadable, and then the batch is no marker). Returns the aborted transaction it ends, if any."""
        if not header.is_transactional:
            return None
        producer_id = header.producer_id
        if not header.is_control:
            self.ongoing.setdefault(producer_id, header.base_offset)
            return None
        if control_type not in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
            return None
        marker = header.base_offset
        first = self.ongoing.pop(producer_id, marker)
        if control_type != ControlRecordType.ABORT:
            return None
        others = self.first_unstable_offset
        return AbortedTxn(producer_id, first, marker, marker + 1 if others is None else others)
