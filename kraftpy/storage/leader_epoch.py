"""The leader-epoch cache: which leader epoch began at which offset, and its checkpoint file.

File ``leader-epoch-checkpoint`` in the log directory, Kafka's text form (see
:mod:`kraftpy.storage.checkpoint` for how it is written atomically)::

    0                      version
    <count>                number of entries
    <epoch> <start_offset> one line per epoch, both strictly increasing from line to line

Theory of operation. Every batch carries the leader epoch it was written in. The first batch
of a new epoch appended to the log (as leader or as follower) adds ``(epoch, base_offset)``.
A follower asks the leader "where does my epoch E end in your log?" (OffsetsForLeaderEpoch,
or the diverging-epoch answer of Fetch) and truncates there; :meth:`LeaderEpochCache.end_offset_for`
answers that question with Kafka's rules. The cache follows the log: truncation of the log's
tail drops entries at and after the new end (:meth:`truncate_from_end`); moving the log start
offset forward drops entries before it, keeping the last of them re-anchored at the new start
(:meth:`truncate_from_start`).

Changes stay in memory until :meth:`flush`, which the log calls when it flushes its data: an
entry matters after a crash only for batches below the recovery point, and recovery re-reads
the epochs of every batch above it (as Kafka does since it stopped fsyncing this file inline).

Invariant: epochs and start offsets are both strictly increasing along ``entries``.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Callable
from pathlib import Path

import attrs

from kraftpy.storage.checkpoint import (
    INT32_MAX,
    CheckpointError,
    decode_checkpoint,
    encode_checkpoint,
    parse_number,
)
from kraftpy.storage.fsutil import read_small_file, write_atomic

LEADER_EPOCH_CHECKPOINT_FILE = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


@attrs.frozen
class EpochEntry:
    epoch: int
    start_offset: int


class LeaderEpochCache:
    """In-memory epoch → start offset map; :meth:`flush` writes its checkpoint file when it changed.

    ``log_end_offset`` is a callable so the cache always answers with the log's current end.
    ``path`` may be None for a cache that is never persisted (tests, tools).
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None,
        log_end_offset: Callable[[], int],
        entries: list[EpochEntry] | None = None,
    ) -> None:
        self.path = Path(path) if path is not None else None
        self._log_end_offset = log_end_offset
        # Invariant: epochs and start offsets strictly increasing.
        self._entries: list[EpochEntry] = list(entries or [])
        #: The entries may differ from what the file holds (``_on_disk``: what it holds, as far as known).
        self._dirty = False
        self._on_disk: tuple[EpochEntry, ...] | None = None  # not known: the next flush writes

    @classmethod
    def load(cls, path: str | os.PathLike[str], log_end_offset: Callable[[], int]) -> LeaderEpochCache:
        """Read the checkpoint at ``path`` (missing means empty); a damaged file raises CheckpointError."""
        path = Path(path)
        entries: list[EpochEntry] = []
        try:
            data = read_small_file(path)
        except FileNotFoundError:
            data = None
        if data is not None:
            try:
                for number, (epoch_text, offset_text) in enumerate(decode_checkpoint(data, 2), start=3):
                    entry = EpochEntry(parse_number(epoch_text, f"line {number}: epoch", INT32_MAX),
                                       parse_number(offset_text, f"line {number}: start offset"))
                    if entries and (entry.epoch <= entries[-1].epoch
                                    or entry.start_offset <= entries[-1].start_offset):
                        raise CheckpointError(f"line {number}: epoch {entry.epoch} at {entry.start_offset} "
                                              f"does not follow epoch {entries[-1].epoch} at {entries[-1].start_offset}")
                    entries.append(entry)
            except CheckpointError as exc:
                raise CheckpointError(f"{path}: {exc}") from None
        cache = cls(path, log_end_offset, entries)
        cache._on_disk = tuple(entries)  # a missing file holds no entries
        return cache

    # -- queries ---------------------------------------------------------------------------------

    @property
    def entries(self) -> tuple[EpochEntry, ...]:
        return tuple(self._entries)

    @property
    def latest_epoch(self) -> int | None:
        return self._entries[-1].epoch if self._entries else None

    @property
    def earliest_entry(self) -> EpochEntry | None:
        return self._entries[0] if self._entries else None

    @property
    def latest_entry(self) -> EpochEntry | None:
        return self._entries[-1] if self._entries else None

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch in which ``offset`` was written, as far as the cache knows."""
        i = bisect.bisect_right([e.start_offset for e in self._entries], offset)
        return self._entries[i - 1].epoch if i else None

    def end_offset_for(self, requested_epoch: int) -> tuple[int, int]:
        """Kafka's ``endOffsetFor``: ``(epoch, end_offset)`` for a follower that last saw ``requested_epoch``.

        * the latest epoch: ``(epoch, log end offset)``;
        * an older epoch: the largest known epoch <= the requested one, and the start offset of
          the first epoch after it;
        * an epoch below every known one (the log start moved past it): ``(requested_epoch,
          start offset of the first known epoch)``, so the follower truncates to where our
          history begins;
        * UNDEFINED_EPOCH, an empty cache or an epoch above every known one:
          ``(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)``.
        """
        if requested_epoch == UNDEFINED_EPOCH or not self._entries:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if requested_epoch == self._entries[-1].epoch:
            return requested_epoch, self._log_end_offset()
        epochs = [e.epoch for e in self._entries]
        higher = bisect.bisect_right(epochs, requested_epoch)
        if higher == len(self._entries):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if higher == 0:
            return requested_epoch, self._entries[0].start_offset
        return self._entries[higher - 1].epoch, self._entries[higher].start_offset

    # -- changes ---------------------------------------------------------------------------------

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` begins at ``start_offset``; returns whether the cache changed.

        As in Kafka, an assignment that is already implied (same latest epoch, start offset not
        earlier) does nothing; otherwise every entry whose epoch or start offset is not below the
        new one is removed first, so both stay strictly increasing.
        """
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"cannot assign epoch {epoch} at offset {start_offset}")
        latest = self.latest_entry
        if latest is not None and latest.epoch == epoch and start_offset >= latest.start_offset:
            return False
        while self._entries and (
            self._entries[-1].epoch >= epoch or self._entries[-1].start_offset >= start_offset
        ):
            self._entries.pop()
        self._entries.append(EpochEntry(epoch, start_offset))
        self._dirty = True
        return True

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop entries starting at or after ``end_offset`` (the log was truncated to it)."""
        keep = len(self._entries)
        while keep and self._entries[keep - 1].start_offset >= end_offset:
            keep -= 1
        if keep != len(self._entries):
            del self._entries[keep:]
            self._dirty = True

    def truncate_from_start(self, start_offset: int) -> None:
        """Drop entries wholly before ``start_offset``; the epoch covering it is moved to begin there."""
        i = bisect.bisect_right([e.start_offset for e in self._entries], start_offset)
        if i == 0:
            return
        covering = self._entries[i - 1]
        if i == 1 and covering.start_offset == start_offset:
            return
        self._entries[: i] = [EpochEntry(covering.epoch, start_offset)]
        self._dirty = True

    def clear(self) -> None:
        if self._entries:
            self._entries.clear()
            self._dirty = True

    @property
    def dirty(self) -> bool:
        return self._dirty

    def flush(self, *, sync: bool = True) -> None:
        """Write the checkpoint file atomically if the entries changed (no-op for an unpersisted cache);
        ``sync=False`` leaves the fsyncs to the caller (see kraftpy.storage.fsutil)."""
        # Only the epochs that hold records go to the file: one that begins at the log's end (a leader's new
        # epoch, before its first append) would be dropped when the log is opened again, so an empty log
        # (most of 100,000 idle ones) writes no file at all. Entries changed and changed back leave the
        # file as it is.
        if self.path is None or not self._dirty:
            self._dirty = False
            return
        end = self._log_end_offset()
        entries = tuple(e for e in self._entries if e.start_offset < end)
        if entries != self._on_disk:
            write_atomic(self.path, encode_checkpoint((e.epoch, e.start_offset) for e in entries), sync=sync)
            self._on_disk = entries
        # An epoch left out for want of records stays to write: its first append changes no entry.
        self._dirty = len(entries) < len(self._entries)
