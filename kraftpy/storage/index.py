"""The two sparse indexes of a log segment: ``.index`` (offset → position) and ``.timeindex``.

Both files hold fixed-size big-endian entries, nothing else (no header, no checksum), as in Kafka::

    <base>.index       8-byte entries   int32 relative_offset   int32 position
    <base>.timeindex  12-byte entries   int64 timestamp         int32 relative_offset

``relative_offset`` is ``offset - segment base offset``. One entry of each is added per
``log.index.interval.bytes`` of appended data (see :mod:`kraftpy.storage.segment`):

* offset index: ``(last offset of a batch, file position where that batch starts)``;
  offsets and positions strictly increase.
* time index: ``(largest max_timestamp so far in the segment, last offset of the first batch
  that reached it)``, added only when that timestamp grew; timestamps and offsets strictly increase.

Theory of operation. The entries live in memory (two arrays per index) and are the truth while
the log is open; the files are a cache for the next start, rewritten when a segment is rolled
and when the log closes cleanly. Nothing trusts a file blindly: :meth:`OffsetIndex.load` and
:meth:`TimeIndex.load` refuse a file whose size or ordering is wrong (the caller then rebuilds
from the log), and the segment checks each entry it uses against the batch header it points
at, rebuilding on a mismatch. A missing, short or garbled index is therefore only slower, never wrong.
"""

from __future__ import annotations

import bisect
import os
import struct
from array import array
from pathlib import Path

OFFSET_ENTRY = struct.Struct(">ii")
assert OFFSET_ENTRY.size == 8
TIME_ENTRY = struct.Struct(">qi")
assert TIME_ENTRY.size == 12

INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
INT32_MAX = 2**31 - 1


class CorruptIndexError(ValueError):
    """An index file that fails its structural checks; it is rebuilt from the log."""


class _SparseIndex:
    """Shared bookkeeping: two parallel int64 arrays plus how much of them the file already holds."""

    entry: struct.Struct

    def __init__(self, path: str | os.PathLike[str], base_offset: int) -> None:
        self.path = Path(path)
        self.base_offset = base_offset
        self._keys = array("q")
        self._values = array("q")
        # Entries [0, _persisted) are in the file as they are in memory; the rest are not yet.
        self._persisted = 0
        # The file is longer than the entries it should hold (after a truncation) or not fsynced.
        self._file_stale = True
        # The file is known not to exist (deleted, or not found when loaded): with no entries, a save
        # leaves it so, as a missing index is read as an empty one (most segments of idle logs).
        self._absent = False

    def __len__(self) -> int:
        return len(self._keys)

    def clear(self) -> None:
        del self._keys[:]
        del self._values[:]
        self._persisted = 0
        self._file_stale = True

    def truncate_entries(self, count: int) -> None:
        if count < len(self._keys):
            del self._keys[count:]
            del self._values[count:]
            self._persisted = min(self._persisted, count)
            self._file_stale = True

    def _pack(self, i: int) -> bytes:
        raise NotImplementedError

    def save(self, fsync: bool = False) -> None:
        """Bring the file in line with memory: write the missing tail, cut what is extra."""
        if self._persisted == len(self._keys) and not self._file_stale:
            return
        if self._absent and not self._keys:
            self._persisted, self._file_stale = 0, False
            return
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
        self._absent = False
        try:
            tail = b"".join(self._pack(i) for i in range(self._persisted, len(self._keys)))
            if tail:
                os.pwrite(fd, tail, self._persisted * self.entry.size)
            os.ftruncate(fd, len(self._keys) * self.entry.size)
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        self._persisted = len(self._keys)
        self._file_stale = not fsync

    def _read_file(self) -> bytes:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            self._absent = True
            raise
        if len(data) % self.entry.size:
            raise CorruptIndexError(f"{self.path.name}: size {len(data)} is not a multiple of {self.entry.size}")
        return data

    def delete_file(self) -> None:
        self.path.unlink(missing_ok=True)
        self._absent = True

    def rename(self, path: Path) -> None:
        if self.path.exists():
            os.replace(self.path, path)
        self.path = path


class OffsetIndex(_SparseIndex):
    """Sparse map from a batch's last offset to the position where the batch starts."""

    entry = OFFSET_ENTRY

    def _pack(self, i: int) -> bytes:
        return OFFSET_ENTRY.pack(self._keys[i] - self.base_offset, self._values[i])

    @property
    def last_entry(self) -> tuple[int, int] | None:
        return (self._keys[-1], self._values[-1]) if self._keys else None

    def entry_at(self, i: int) -> tuple[int, int]:
        return self._keys[i], self._values[i]

    def append(self, offset: int, position: int) -> None:
        if self._keys and (offset <= self._keys[-1] or position <= self._values[-1]):
            raise ValueError(f"index entry ({offset}, {position}) is not after {self.last_entry}")
        if not 0 <= offset - self.base_offset <= INT32_MAX:
            raise ValueError(f"offset {offset} does not fit segment {self.base_offset}")
        self._keys.append(offset)
        self._values.append(position)

    def lookup(self, offset: int) -> tuple[int, int, int]:
        """``(entry number or -1, offset, position)`` of the largest entry with offset <= ``offset``.

        With no such entry: ``(-1, base_offset, 0)``, the start of the segment.
        """
        i = bisect.bisect_right(self._keys, offset) - 1
        if i < 0:
            return -1, self.base_offset, 0
        return i, self._keys[i], self._values[i]

    def truncate_to_offset(self, offset: int) -> None:
        """Drop entries whose offset is >= ``offset``."""
        self.truncate_entries(bisect.bisect_left(self._keys, offset))

    def truncate_to_position(self, position: int) -> None:
        """Drop entries pointing at ``position`` or after it."""
        self.truncate_entries(bisect.bisect_left(self._values, position))

    def load(self, log_size: int) -> None:
        """Read the file; raises CorruptIndexError (memory left empty) when it cannot be right."""
        self.clear()
        data = self._read_file()
        keys, values = array("q"), array("q")
        for rel, pos in OFFSET_ENTRY.iter_unpack(data):
            if rel < 0 or pos < 0 or pos >= log_size or (keys and (rel + self.base_offset <= keys[-1]
                                                                     or pos <= values[-1])):
                raise CorruptIndexError(f"{self.path.name}: entry ({rel}, {pos}) out of order or out of range")
            keys.append(rel + self.base_offset)
            values.append(pos)
        self._keys, self._values = keys, values
        self._persisted = len(keys)
        self._file_stale = False


class TimeIndex(_SparseIndex):
    """Sparse map from the segment's running max timestamp to the offset that reached it."""

    entry = TIME_ENTRY

    def _pack(self, i: int) -> bytes:
        return TIME_ENTRY.pack(self._keys[i], self._values[i] - self.base_offset)

    @property
    def last_entry(self) -> tuple[int, int] | None:
        """``(timestamp, offset)`` of the last entry."""
        return (self._keys[-1], self._values[-1]) if self._keys else None

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Add ``(timestamp, offset)`` if the timestamp grew since the last entry."""
        if self._keys and timestamp <= self._keys[-1]:
            return
        if self._values and offset <= self._values[-1]:
            raise ValueError(f"time index offset {offset} is not after {self._values[-1]}")
        self._keys.append(timestamp)
        self._values.append(offset)

    def lookup(self, timestamp: int) -> tuple[int, int] | None:
        """``(timestamp, offset)`` of the largest entry with timestamp <= ``timestamp``, or None."""
        i = bisect.bisect_right(self._keys, timestamp) - 1
        return (self._keys[i], self._values[i]) if i >= 0 else None

    def truncate_to_offset(self, offset: int) -> None:
        """Drop entries whose offset is >= ``offset``."""
        self.truncate_entries(bisect.bisect_left(self._values, offset))

    def load(self, next_offset: int) -> None:
        """Read the file; raises CorruptIndexError (memory left empty) when it cannot be right."""
        self.clear()
        data = self._read_file()
        keys, values = array("q"), array("q")
        for ts, rel in TIME_ENTRY.iter_unpack(data):
            offset = rel + self.base_offset
            if rel < 0 or offset >= next_offset or (keys and (ts <= keys[-1] or offset <= values[-1])):
                raise CorruptIndexError(f"{self.path.name}: entry ({ts}, {rel}) out of order or out of range")
            keys.append(ts)
            values.append(offset)
        self._keys, self._values = keys, values
        self._persisted = len(keys)
        self._file_stale = False
