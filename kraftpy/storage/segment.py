"""One log segment: a ``.log`` file of whole RecordBatches plus its two sparse indexes.

Files, named by the segment's base offset as 20 zero-padded decimal digits::

    00000000000000000000.log        RecordBatch v2 batches back to back, exactly as on the wire
                                    (layout in kraftpy.protocol.batch_header); nothing else
    00000000000000000000.index      see kraftpy.storage.index
    00000000000000000000.timeindex  see kraftpy.storage.index
    00000000000000000000.txnindex   aborted transactions (kraftpy.storage.txn_index); created by
                                    the first one, absent from most segments
    <any of the above>.deleted      a file being removed (retention, truncation); deleted on open
    <any of the above>.cleaned      a segment the log cleaner is writing (not yet part of the log)
    <any of the above>.swap         a cleaned segment being swapped in (see kraftpy.storage.log)

Invariants, for the batches of one segment in file order: every batch's base offset is at
least the base offset of the segment and at least the previous batch's next offset, and
``last_offset - base_offset`` fits an int32 (the relative offsets of the indexes).

Theory of operation. The segment reads and writes its ``.log`` through a read/write descriptor
(opened ``O_APPEND``) held in the process's bounded :data:`~kraftpy.storage.descriptors.DESCRIPTORS`:
each method that touches the file pins the segment for the call, opening the file again if its
descriptor was closed to stay within ``log.open.segments.max``. The segment knows its size and its next offset, and keeps the indexes up to date as batches
are appended: every ``index_interval_bytes`` of data, the batch then appended gets an offset
index entry and, if the running max timestamp grew, a time index entry. Reads turn an offset
into a file position with the offset index and a short walk over batch headers, and hand back a
:class:`FileRegion` for ``os.sendfile``. The segment remembers the last batch a walk reached, and a
read at or after it walks on from there: a consumer or a follower at the end of the log, whose next
read starts where its last one ended, reads the header of each new batch once instead of every
header since the index entry before it (``index.interval.bytes`` of them: dozens of small batches).
Each index entry used is checked against the header it points at; a mismatch rebuilds both
indexes from the log. :meth:`LogSegment.recover` re-reads every batch with its CRC and cuts the
file at the first one that fails; given a
:class:`TransactionReplay` holding the transactions open at its start, it rebuilds the ``.txnindex``.
A segment a log opens below its recovery point may be *deferred* (:meth:`LogSegment.defer_load`): its
index files are read, and its end offset and timestamps learned, on the first access to any of them.
"""

from __future__ import annotations

import functools
import mmap
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import attrs

from kraftpy.protocol.batch_header import (
    HEADER_SIZE,
    BatchHeader,
    CorruptRecordError,
    check_batch,
    read_header,
)
from kraftpy.protocol.records import decode_batch, parse_control_key
from kraftpy.protocol.types import FileRegion
from kraftpy.storage.descriptors import DESCRIPTORS
from kraftpy.storage.fsutil import reserve_blocks
from kraftpy.storage.index import (
    INDEX_SUFFIX,
    INT32_MAX,
    TIME_INDEX_SUFFIX,
    CorruptIndexError,
    OffsetIndex,
    TimeIndex,
)
from kraftpy.storage.txn_index import (
    TXN_INDEX_SUFFIX,
    TransactionIndex,
    TransactionReplay,
    TxnIndexSearchResult,
)

LOG_SUFFIX = ".log"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
NO_TIMESTAMP = -1
#: A segment opened from disk whose blocks exceed its data by more than this had blocks reserved
#: (``preallocate``); less is the file system's own rounding and extent blocks.
RESERVED_SLACK_BYTES = 64 * 1024
_IOV_MAX = os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024


_F = TypeVar("_F", bound=Callable[..., Any])
#: What a deferred segment (`LogSegment.defer_load`) reads from its index files on first use.
_LAZY = frozenset({"index", "time_index", "next_offset", "max_timestamp", "offset_of_max_timestamp",
                   "first_batch_timestamp", "_bytes_since_last_index_entry"})
_LAZY_LOCK = threading.Lock()


def _pinned(method: _F) -> _F:
    """Run ``method`` with the segment pinned: its descriptor open and not closed by a trim."""
    @functools.wraps(method)
    def wrapper(self: LogSegment, *args: Any, **kwargs: Any) -> Any:
        DESCRIPTORS.pin(self)
        try:
            return method(self, *args, **kwargs)
        finally:
            DESCRIPTORS.unpin(self)

    return wrapper  # type: ignore[return-value]


def segment_file_name(base_offset: int, suffix: str = LOG_SUFFIX) -> str:
    return f"{base_offset:020d}{suffix}"


def parse_segment_file_name(name: str, suffix: str = LOG_SUFFIX) -> int | None:
    """The base offset of a segment file name with ``suffix``, or None for any other name."""
    if not name.endswith(suffix):
        return None
    stem = name[: -len(suffix)]
    if len(stem) != 20 or not stem.isdigit():
        return None
    return int(stem)


@attrs.frozen
class BatchInfo:
    """What the segment needs to know about one batch of an append, read once by the log."""

    position: int  # within the appended buffer
    size: int
    base_offset: int
    last_offset: int
    max_timestamp: int
    leader_epoch: int
    record_count: int


class LogSegment:
    """A ``.log`` file and its indexes. Not thread-safe: the owning log serialises calls."""

    def __init__(self, directory: Path, base_offset: int, fd: int, index_interval_bytes: int, now_ms: int,
                 suffix: str = ""):
        self.directory = directory
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self._fd = fd
        self._pins = 0
        self.path = directory / (segment_file_name(base_offset) + suffix)
        self.index = OffsetIndex(directory / (segment_file_name(base_offset, INDEX_SUFFIX) + suffix), base_offset)
        self.time_index = TimeIndex(directory / (segment_file_name(base_offset, TIME_INDEX_SUFFIX) + suffix),
                                    base_offset)
        self.txn_index = TransactionIndex(directory / (segment_file_name(base_offset, TXN_INDEX_SUFFIX) + suffix),
                                          base_offset)
        self.size = 0
        #: Offset after the last batch (base_offset when empty).
        self.next_offset = base_offset
        #: Largest batch max_timestamp, and the last offset of the first batch that reached it.
        self.max_timestamp = NO_TIMESTAMP
        self.offset_of_max_timestamp = -1
        #: max_timestamp of the first batch: what log.roll.ms counts from (as in Kafka).
        self.first_batch_timestamp = NO_TIMESTAMP
        self.created_ms = now_ms
        self.last_modified_ms = now_ms
        self._bytes_since_last_index_entry = 0
        #: ``(position, header)`` of the last batch a walk reached: a walk to a later offset starts
        #: there (forgotten when the file is cut).
        self._walked: tuple[int, BatchHeader] | None = None
        self._unsynced = False
        #: The bytes before this position were handed to the write-back (kraftpy.storage.writeback),
        #: those after it not yet.
        self.writeback_from = 0
        #: Disk blocks past the data are reserved for the appends to come (``preallocate``): given back
        #: when the segment is appended to no more (`release_reserved`) or cut.
        self.reserved = False
        self._deferred = False
        if fd >= 0:
            DESCRIPTORS.opened(self)

    def _reopen(self) -> int:
        """Open the data file again (its descriptor was closed to stay within the cache's capacity)."""
        return os.open(self.path, os.O_RDWR | os.O_APPEND)

    # -- loading on first use (KIP-263) ----------------------------------------------------------

    def defer_load(self) -> None:
        """Leave the offset and time indexes unread until the segment is first used: a log opened after
        a clean stop reads its old segments' index files only when a read, a retention check or the
        cleaner needs them (as Kafka's lazy indexes, KIP-263). Until then the attributes that need them
        are absent, and the first access loads them all at once (see `__getattr__`). The ``.txnindex``
        (absent from most segments, and not rebuilt from the segment alone) is loaded now: raises
        CorruptIndexError when it is damaged, for the log to recover the segment."""
        self.txn_index.load()
        for name in _LAZY:
            self.__dict__.pop(name, None)
        self._deferred = True

    def __getattr__(self, name: str) -> Any:
        # Only called for an attribute not found: a deferred segment's lazy ones.
        if name not in _LAZY or not self.__dict__.get("_deferred"):
            raise AttributeError(name)
        self._load_deferred()
        return self.__dict__[name]

    def _load_deferred(self) -> None:
        """Load a deferred segment's indexes into a twin, then publish its attributes in one step, so
        that another thread never sees them half-built. An offset or time index that fails its checks
        is rebuilt from the log (as :meth:`load` does); a batch header that cannot be read raises
        CorruptRecordError to the caller, and the segment stays deferred."""
        with _LAZY_LOCK:
            if not self.__dict__.get("_deferred"):
                return
            twin = LogSegment(self.directory, self.base_offset, -1, self.index_interval_bytes, self.created_ms)
            twin.path, twin.size = self.path, self.size
            try:
                twin.load(trust_indexes=True, txn_index=False)
            finally:
                DESCRIPTORS.closed(twin)
            self.__dict__.update({name: twin.__dict__[name] for name in _LAZY})
            self._deferred = False

    # -- opening ---------------------------------------------------------------------------------

    @classmethod
    def create(cls, directory: Path, base_offset: int, index_interval_bytes: int, now_ms: int,
               suffix: str = "", *, reserve_bytes: int = 0) -> LogSegment:
        """A new empty segment; any file left under its name is emptied. With a ``suffix``
        (`CLEANED_SUFFIX`) its files are named ``<base>.log<suffix>``, ... until `rename_files`.

        ``reserve_bytes`` (``segment.bytes`` when the topic has ``preallocate``): the disk blocks of that
        many bytes are allocated now, the file's size staying 0 (`kraftpy.storage.fsutil.reserve_blocks`).
        The appends then write into blocks the file has, and never wait while the file system finds
        new ones: on ext4 a write that needs blocks waits for any allocation under way in the same file
        (the kernel's write-back), and an allocation that must read a block bitmap waits behind whatever
        the disk is doing. Where the blocks cannot be had, the segment is written as without."""
        path = directory / (segment_file_name(base_offset) + suffix)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        try:
            reserved = reserve_blocks(fd, reserve_bytes)
        except OSError:
            os.close(fd)
            raise
        segment = cls(directory, base_offset, fd, index_interval_bytes, now_ms, suffix)
        segment.reserved = reserved
        segment.index.delete_file()
        segment.time_index.delete_file()
        segment.txn_index.delete_file()
        segment._unsynced = True
        return segment

    @classmethod
    def open(cls, directory: Path, base_offset: int, index_interval_bytes: int, now_ms: int,
             listing: set[str] | None = None) -> LogSegment:
        """Open an existing segment file; call :meth:`load` or :meth:`recover` next. ``listing``: the
        directory's file names when the caller has them (a ``.txnindex`` not among them is not looked for)."""
        path = directory / segment_file_name(base_offset)
        # Not opened yet: the descriptor cache opens it at the first use (most of 100,000 logs opened at
        # a start are not read or written for a while); a file that cannot be opened says so then.
        stat = os.stat(path)
        segment = cls(directory, base_offset, -1, index_interval_bytes, now_ms)
        if listing is not None and segment_file_name(base_offset, TXN_INDEX_SUFFIX) not in listing:
            segment.txn_index.known_absent = True
        segment.size = stat.st_size
        segment.last_modified_ms = stat.st_mtime_ns // 1_000_000
        # Blocks well past the data: reserved when it was created (a broker stopped, or one that died).
        segment.reserved = stat.st_blocks * 512 > stat.st_size + RESERVED_SLACK_BYTES
        return segment

    def load_empty(self) -> None:
        """:meth:`load` for a segment whose file is empty (``size`` 0): no batch to index, so the index
        files are not read; they are cut to nothing at the next save should they hold anything. The
        ``.txnindex`` is loaded (raises CorruptIndexError when damaged)."""
        assert self.size == 0
        self.txn_index.load()
        self._reset_tail_state(0)
        self.index.clear()

    @_pinned
    def load(self, *, trust_indexes: bool, txn_index: bool = True) -> None:
        """Set up the indexes without checking CRCs.

        With ``trust_indexes`` the index files are loaded if they pass their checks and only the
        tail after their last entry is walked; otherwise both are rebuilt from the log.
        The ``.txnindex`` is loaded either way (it cannot be rebuilt from this segment alone), unless
        ``txn_index`` is false (a deferred segment loaded it when the log was opened). Raises CorruptRecordError when a batch header is unreadable and CorruptIndexError when the
        ``.txnindex`` is damaged (call :meth:`recover` then).
        """
        if txn_index:
            self.txn_index.load()
        kept = self._load_index_files() if trust_indexes else 0
        self._rebuild_indexes_from(kept)

    def _load_index_files(self) -> int:
        """Load both index files; the number of offset-index entries to keep (0: rebuild all)."""
        try:
            self.index.load(self.size)
            self.time_index.load(self.base_offset + INT32_MAX + 1)
        except (CorruptIndexError, OSError):
            self.index.clear()
            self.time_index.clear()
            return 0
        return len(self.index)

    # -- walking the file ------------------------------------------------------------------------

    @_pinned
    def read_header_at(self, position: int) -> BatchHeader:
        """The header of the batch at ``position``; the whole batch must lie inside the segment."""
        return self._header_at(position)

    @_pinned
    def pread(self, size: int, position: int) -> bytes:
        """``size`` bytes of the data file from ``position`` (fewer at its end)."""
        return os.pread(self._fd, size, position)

    @_pinned
    def preadv(self, buffers: list[memoryview], position: int) -> int:
        """Read into ``buffers`` from ``position``; the number of bytes read."""
        return os.preadv(self._fd, buffers, position)

    def _header_at(self, position: int) -> BatchHeader:
        data = os.pread(self._fd, HEADER_SIZE, position)
        header = read_header(data)
        if position + header.size > self.size:
            raise CorruptRecordError(f"batch of {header.size} bytes runs past the end of {self.path.name}", position)
        return header

    @_pinned
    def scan(
        self,
        start: int,
        visit: Callable[[int, BatchHeader], None],
        *,
        verify_crc: bool,
        end: int | None = None,
    ) -> CorruptRecordError | None:
        """Call ``visit(position, header)`` for each batch from ``start``, in order.

        Stops at ``end`` (default: the file size) or at the first batch that is torn, has a bad
        magic or (with ``verify_crc``) a bad CRC, or whose offsets break the segment's
        invariants; returns that error (positions absolute) or None.
        """
        end = self.size if end is None else end
        if end <= start:
            return None
        previous_next = self.base_offset
        with mmap.mmap(self._fd, end, prot=mmap.PROT_READ) as mapped:
            position = start
            while position < end:
                try:
                    header = check_batch(mapped, position) if verify_crc else read_header(mapped, position)
                    if position + header.size > end:
                        raise CorruptRecordError(
                            f"truncated batch: {header.size} bytes announced, {end - position} present", position
                        )
                    if header.last_offset_delta < 0:
                        raise CorruptRecordError(f"negative last offset delta {header.last_offset_delta}", position)
                    if header.base_offset < previous_next or header.last_offset - self.base_offset > INT32_MAX:
                        raise CorruptRecordError(
                            f"offset {header.base_offset} out of order in segment {self.base_offset}", position
                        )
                except CorruptRecordError as exc:
                    return exc
                visit(position, header)
                previous_next = header.next_offset
                position += header.size
        return None

    def _index_batch(self, position: int, size: int, last_offset: int, max_timestamp: int, may_index: bool) -> None:
        if max_timestamp > self.max_timestamp:
            self.max_timestamp = max_timestamp
            self.offset_of_max_timestamp = last_offset
        if may_index and self._bytes_since_last_index_entry > self.index_interval_bytes:
            self.index.append(last_offset, position)
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self._bytes_since_last_index_entry = 0
        self._bytes_since_last_index_entry += size
        self.next_offset = last_offset + 1
        if position == 0:
            self.first_batch_timestamp = max_timestamp

    def _reset_tail_state(self, kept: int) -> int:
        """Keep ``kept`` offset-index entries (and the time entries they cover); where to walk from."""
        self.index.truncate_entries(kept)
        self.max_timestamp, self.offset_of_max_timestamp = NO_TIMESTAMP, -1
        self._bytes_since_last_index_entry = 0
        self.next_offset = self.base_offset
        self.first_batch_timestamp = NO_TIMESTAMP
        if kept == 0:
            self.time_index.clear()
            return 0
        last_offset, position = self.index.entry_at(kept - 1)
        self.time_index.truncate_to_offset(last_offset + 1)
        if self.time_index.last_entry is not None:
            self.max_timestamp, self.offset_of_max_timestamp = self.time_index.last_entry
        if self.size:
            self.first_batch_timestamp = self._header_at(0).max_timestamp
        return position

    def _rebuild_indexes_from(self, kept: int) -> None:
        """Keep the first ``kept`` index entries and re-index the file after them.

        The kept entry must point at a batch ending at its offset, else everything is rebuilt.
        Raises CorruptRecordError if a batch header after it is unreadable.
        """
        start = self._reset_tail_state(kept)
        if kept:
            entry_offset = self.index.entry_at(kept - 1)[0]
            try:
                valid = self._header_at(start).last_offset == entry_offset
            except CorruptRecordError:
                valid = False
            if not valid:
                start = self._reset_tail_state(0)
        first = [start > 0]

        def visit(position: int, header: BatchHeader) -> None:
            # The batch at a kept entry's position is already indexed: count it, do not add it.
            self._index_batch(position, header.size, header.last_offset, header.max_timestamp, not first[0])
            first[0] = False

        error = self.scan(start, visit, verify_crc=False)
        if error is not None:
            raise error

    @_pinned
    def rebuild_indexes(self) -> None:
        self._rebuild_indexes_from(0)

    @_pinned
    def control_type_at(self, position: int, header: BatchHeader) -> int | None:
        """The key type of the record of the control batch at ``position`` (None: unreadable)."""
        try:
            decoded = decode_batch(os.pread(self._fd, header.size, position), 0, verify_crc=False)
            if not decoded.records:
                return None
            return parse_control_key(decoded.records[0].key)[1]
        except CorruptRecordError:
            return None

    def replay_transactions(self, replay: TransactionReplay) -> None:
        """Move ``replay`` past every batch of the segment (headers only, no CRC; the control
        batches' records read): how recovery learns what was open where it starts."""
        for position, header in self.batches_from(0):
            if header.is_transactional:
                replay.on_batch(header, self.control_type_at(position, header) if header.is_control else None)

    @_pinned
    def recover(self, on_batch: Callable[[BatchHeader], None] | None = None,
                replay: TransactionReplay | None = None) -> int:
        """Check every batch (size, magic, CRC, offsets), rebuild the indexes, cut at the first bad one.

        With ``replay`` (the transactions open at the segment's start, moved on to its end) the
        ``.txnindex`` is rebuilt too; without it, only its entries past the cut are dropped.
        Returns the number of bytes cut off (0 when the segment was whole).
        """
        self._reset_tail_state(0)
        if replay is None:
            try:
                self.txn_index.load()
            except CorruptIndexError:
                self.txn_index.reset()
        aborted = []

        def visit(position: int, header: BatchHeader) -> None:
            self._index_batch(position, header.size, header.last_offset, header.max_timestamp, True)
            if replay is not None and header.is_transactional:
                control_type = self.control_type_at(position, header) if header.is_control else None
                txn = replay.on_batch(header, control_type)
                if txn is not None:
                    aborted.append(txn)
            if on_batch is not None:
                on_batch(header)

        error = self.scan(0, visit, verify_crc=True)
        if replay is not None:
            self.txn_index.reset()
            self.txn_index.append_all(aborted)
        if error is None:
            self.txn_index.truncate_to(self.next_offset)
            return 0
        self.txn_index.truncate_to(self.next_offset)
        valid = error.position or 0
        cut = self.size - valid
        os.ftruncate(self._fd, valid)
        self.size = valid
        self.reserved = False  # a cut gives back every block past it
        self._walked = None
        self._unsynced = True
        return cut

    # -- appending -------------------------------------------------------------------------------

    @_pinned
    def append(self, parts: Sequence[bytes | bytearray | memoryview], batches: Sequence[BatchInfo],
               now_ms: int) -> None:
        """Write the whole batches described by ``batches``, given as ``parts`` to be written
        back to back, with one ``os.writev`` call, then index them."""
        if batches and batches[0].base_offset < self.next_offset:
            raise ValueError(f"offset {batches[0].base_offset} is below segment end {self.next_offset}")
        start = self.size
        views = [memoryview(part) for part in parts]
        total = sum(view.nbytes for view in views)
        try:
            written = os.writev(self._fd, views) if len(views) <= _IOV_MAX else 0
            if written < total:
                # Rare: a short write, or more parts than one writev takes; finish with plain writes.
                rest = memoryview(b"".join(views))[written:]
                while rest:
                    rest = rest[os.write(self._fd, rest):]
        except BaseException:
            os.ftruncate(self._fd, start)
            self.reserved = False
            raise
        self.size = start + total
        self._unsynced = True
        self.last_modified_ms = now_ms
        for batch in batches:
            self._index_batch(start + batch.position, batch.size, batch.last_offset, batch.max_timestamp, True)

    # -- reading ---------------------------------------------------------------------------------

    def _walk_to(self, position: int, offset: int) -> tuple[int, BatchHeader] | None:
        while position < self.size:
            header = self._header_at(position)
            self._walked = (position, header)
            if header.last_offset >= offset:
                return position, header
            position += header.size
        return None

    def batches_from(self, position: int) -> Iterator[tuple[int, BatchHeader]]:
        """``(position, header)`` of each batch from ``position`` to the end (headers only, no CRC);
        the segment stays pinned until the iterator is exhausted or closed."""
        DESCRIPTORS.pin(self)
        try:
            while position < self.size:
                header = self._header_at(position)
                yield position, header
                position += header.size
        finally:
            DESCRIPTORS.unpin(self)

    @_pinned
    def translate_offset(self, offset: int) -> tuple[int, BatchHeader] | None:
        """Position and header of the first batch whose last offset is >= ``offset``, or None."""
        for attempt in range(2):
            entry, entry_offset, position = self.index.lookup(offset)
            walked = self._walked
            if walked is not None and walked[0] >= position and walked[1].base_offset <= offset:
                # Every batch before the one last walked to ends before its base offset, so before
                # ``offset``: the answer is that batch or one after it, and nearer than the entry's.
                walked_at, header = walked
                if header.last_offset >= offset:
                    return walked
                return self._walk_to(walked_at + header.size, offset)
            if entry < 0:
                return self._walk_to(position, offset)
            try:
                header = self._header_at(position)
            except CorruptRecordError:
                header = None
            if header is not None and header.last_offset == entry_offset:
                # The entry's batch ends at entry_offset <= offset: it is the answer when equal.
                if entry_offset == offset:
                    self._walked = (position, header)
                    return position, header
                return self._walk_to(position + header.size, offset)
            if attempt == 0:
                self.rebuild_indexes()
        raise AssertionError("unreachable: a rebuilt index always matches its log")

    @_pinned
    def read(
        self,
        start_offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        min_one_batch: bool = True,
        whole_batches: bool = False,
    ) -> FileRegion | None:
        """The region starting at the batch holding ``start_offset``, or None if it is past this segment.

        ``max_bytes`` bounds the length, except that with ``min_one_batch`` a first batch larger
        than it is returned whole. Only batches whose last offset is below ``max_offset`` are
        included. Like Kafka, the region may end inside a batch unless ``whole_batches``.
        """
        found = self.translate_offset(start_offset)
        if found is None:
            return None
        position, first = found
        end = self.size
        if max_offset is not None:
            bound = self.translate_offset(max_offset)
            if bound is not None:
                end = bound[0]
        limit = max(max_bytes, first.size) if min_one_batch else max_bytes
        length = max(0, min(end - position, limit))
        if whole_batches and length:
            whole, cursor = 0, position
            while cursor < position + length:
                header = first if cursor == position else self._header_at(cursor)
                if whole + header.size > length:
                    break
                whole += header.size
                cursor += header.size
            length = whole
        return FileRegion(self._fd, position, length, first.base_offset if length else start_offset)

    @_pinned
    def find_by_timestamp(self, timestamp: int) -> tuple[int, BatchHeader] | None:
        """The first batch whose max_timestamp is >= ``timestamp``, or None."""
        if self.max_timestamp < timestamp:
            return None
        for attempt in range(2):
            result = self._find_by_timestamp(timestamp)
            if result is not False:
                return result
            if attempt == 0:
                self.rebuild_indexes()
        raise AssertionError("unreachable: a rebuilt index always matches its log")

    def _find_by_timestamp(self, timestamp: int) -> tuple[int, BatchHeader] | None | bool:
        """As find_by_timestamp, or False when an index entry used does not match the log."""
        entry = self.time_index.lookup(timestamp)
        position, verified = 0, True
        if entry is not None:
            entry_ts, entry_offset = entry
            index_entry, index_offset, position = self.index.lookup(entry_offset)
            verified = False
            if index_entry >= 0:
                try:
                    if self._header_at(position).last_offset != index_offset:
                        return False
                except CorruptRecordError:
                    return False
        while position < self.size:
            header = self._header_at(position)
            if not verified:
                if header.last_offset == entry_offset:
                    if header.max_timestamp != entry_ts:
                        return False
                    verified = True
                elif header.last_offset > entry_offset:
                    return False
            if header.max_timestamp >= timestamp:
                return (position, header) if verified else False
            position += header.size
        return None if verified else False

    # -- truncation, durability, deletion --------------------------------------------------------

    @_pinned
    def truncate_to(self, offset: int) -> int:
        """Drop the batch holding ``offset`` and everything after it; returns the bytes removed."""
        self.txn_index.truncate_to(offset)
        found = self.translate_offset(offset)
        if found is None:
            return 0
        position, _ = found
        removed = self.size - position
        os.ftruncate(self._fd, position)
        self.size = position
        self.reserved = False
        self._walked = None
        self.writeback_from = min(self.writeback_from, position)
        self._unsynced = True
        self.index.truncate_to_position(position)
        self._rebuild_indexes_from(len(self.index))
        self.index.save()
        self.time_index.save()
        return removed

    def flush(self) -> bool:
        """fsync the data file and the ``.txnindex`` if anything changed since the last fsync;
        returns whether the ``.txnindex`` file may be new (its directory needs an fsync)."""
        if self._deferred:  # its data untouched since it was opened
            return self.txn_index.flush()
        if self._unsynced:
            with DESCRIPTORS.pinned(self) as fd:
                os.fsync(fd)
            self._unsynced = False
        return self.txn_index.flush()

    def release_reserved(self) -> None:
        """Give back the disk blocks reserved past the data (``preallocate``): the segment is appended to no
        more. Cutting a file at its own size frees every block past its end."""
        if self.reserved:
            with DESCRIPTORS.pinned(self) as fd:
                os.ftruncate(fd, self.size)
            self.reserved = False

    def save_indexes(self, fsync: bool = False) -> None:
        if self._deferred:  # its index files are as they were when the log was opened
            return
        self.index.save(fsync)
        self.time_index.save(fsync)

    def close(self) -> None:
        DESCRIPTORS.closed(self)

    def rename_files(self, suffix: str, *, log: bool = True, indexes: bool = True) -> None:
        """Name the log file and/or the index files (``.txnindex`` included) ``<base>.<kind><suffix>``
        ("" for the final names); the descriptor stays open. An index file not yet written is
        renamed when it is."""
        if log:
            new_path = self.directory / (segment_file_name(self.base_offset) + suffix)
            os.replace(self.path, new_path)
            self.path = new_path
        if indexes:
            self.index.rename(self.directory / (segment_file_name(self.base_offset, INDEX_SUFFIX) + suffix))
            self.time_index.rename(self.directory / (segment_file_name(self.base_offset, TIME_INDEX_SUFFIX) + suffix))
            self.rename_txn_index(suffix)

    def rename_txn_index(self, suffix: str) -> None:
        """Name the ``.txnindex`` ``<base>.txnindex<suffix>`` (a cleaner swap renames it before the log)."""
        self.txn_index.rename(self.directory / (segment_file_name(self.base_offset, TXN_INDEX_SUFFIX) + suffix))

    @_pinned
    def set_last_modified(self, ms: int) -> None:
        """Set the data file's modification time (a cleaned segment keeps the one of what it replaces)."""
        ns = ms * 1_000_000
        os.utime(self._fd, ns=(ns, ns))
        self.last_modified_ms = ms

    def rename_to_deleted(self) -> None:
        """Mark the files for deletion (the descriptor stays open); a crash leaves them for open to remove."""
        new_path = self.path.with_name(self.path.name + DELETED_SUFFIX)
        os.replace(self.path, new_path)
        self.path = new_path
        self.index.rename(self.index.path.with_name(self.index.path.name + DELETED_SUFFIX))
        self.time_index.rename(self.time_index.path.with_name(self.time_index.path.name + DELETED_SUFFIX))
        self.txn_index.rename(self.txn_index.path.with_name(self.txn_index.path.name + DELETED_SUFFIX))

    def delete(self) -> None:
        """Close and remove the files (whatever their current names)."""
        self.close()
        self.path.unlink(missing_ok=True)
        self.index.delete_file()
        self.time_index.delete_file()
        self.txn_index.delete_file()

    @property
    def fd(self) -> int:
        """The data file's descriptor, opened again if it was closed. Unpinned: for the event loop's
        thread, to be used (or duplicated) before its next ``await`` (see kraftpy.storage.descriptors)."""
        DESCRIPTORS.pin(self)
        DESCRIPTORS.unpin(self)
        return self._fd

    def collect_aborted(self, fetch_offset: int, upper_bound_offset: int) -> TxnIndexSearchResult:
        """The aborted transactions of this segment's ``.txnindex`` overlapping the range (see
        :func:`kraftpy.storage.txn_index.collect_aborted`)."""
        return self.txn_index.collect_aborted(fetch_offset, upper_bound_offset)

    @property
    def is_empty(self) -> bool:
        return self.size == 0

    @property
    def largest_timestamp(self) -> int:
        """What log.retention.ms compares with: the max timestamp, else the last modification time."""
        return self.max_timestamp if self.max_timestamp >= 0 else self.last_modified_ms

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size={self.size}, next_offset={self.next_offset})"
