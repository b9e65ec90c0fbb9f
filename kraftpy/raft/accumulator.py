"""`BatchAccumulator`: the leader's proposals gathered into batches (Kafka's BatchAccumulator).

Theory of operation. Every batch the leader appends costs one flush (an fsync) before it counts,
so appending each proposal on its own caps the write rate at the disk's fsync rate. With
controller.quorum.append.linger.ms > 0 the first proposal after a drain opens a batch and starts
the linger timer; later proposals join it; the batch is closed when the timer fires or when the next
proposal would take it past the batch size limit (or its record limit), and the leader appends every closed batch when it
drains. With a linger of 0 the leader drains at once, so each proposal is its own batch.

`append` answers at once with the offsets the records will take. Nothing else is appended in the
epoch meanwhile (the accumulator lives in the leader's state, where Kafka keeps it, and the leader's
own control record comes before it), so the promise holds until the epoch ends; a leader change
drops the accumulator and those offsets then never commit.

One proposal always stays in one batch: a controller write is atomic. Pure: no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from kraftpy.protocol.batch_header import HEADER_SIZE
from kraftpy.raft.batch import encoded_size_bound

INF = float("inf")


@attrs.define
class BatchAccumulator:
    """Proposals of one leader epoch not yet appended. Invariant: the accumulated records take the
    offsets ``[next_offset - pending_records, next_offset)``, closed batches first."""

    epoch: int
    #: The offset the next proposed record will take.
    next_offset: int
    #: Seconds to hold an open batch for more proposals (0: drain at once).
    linger: float
    #: The largest batch to build (an upper bound of its encoded size).
    max_batch_bytes: int
    #: The most records a batch gathers from several proposals (None: no limit).
    max_batch_records: int | None = None
    _closed: list[list[bytes]] = attrs.Factory(list)
    _open: list[bytes] = attrs.Factory(list)
    _open_bytes: int = 0
    _drain_at: float = INF

    def append(self, records: Sequence[bytes], now: float) -> int:
        """Add one proposal; return the offset of its first record. Raises ValueError when the
        proposal alone would exceed the batch size limit."""
        if not records:
            raise ValueError("nothing to propose")
        size = encoded_size_bound(records)
        if size > self.max_batch_bytes:
            raise ValueError(f"a proposal of {size} bytes exceeds the batch limit of {self.max_batch_bytes}")
        if self._open and (self._open_bytes + size - HEADER_SIZE > self.max_batch_bytes or (
                self.max_batch_records is not None and len(self._open) + len(records) > self.max_batch_records)):
            self._close()
        if not self._open:
            self._drain_at = now + self.linger
            self._open_bytes = HEADER_SIZE
        base = self.next_offset
        self._open.extend(records)
        self._open_bytes += size - HEADER_SIZE
        self.next_offset += len(records)
        return base

    @property
    def pending_records(self) -> int:
        return sum(len(batch) for batch in self._closed) + len(self._open)

    def next_deadline(self) -> float:
        """When `drain` has something to hand out (inf: nothing accumulated)."""
        return -INF if self._closed else self._drain_at

    def due(self, now: float) -> bool:
        return now >= self.next_deadline()

    def drain(self, now: float, everything: bool = False) -> list[tuple[int, list[bytes]]]:
        """The batches ready at `now` (`everything`: the open one too, its linger cut short), as
        (base offset, records), in offset order."""
        if self._open and (everything or now >= self._drain_at):
            self._close()
        closed, self._closed = self._closed, []
        base = self.next_offset - self.pending_records - sum(len(batch) for batch in closed)
        out = []
        for records in closed:
            out.append((base, records))
            base += len(records)
        return out

    def _close(self) -> None:
        self._closed.append(self._open)
        self._open = []
        self._open_bytes = 0
        self._drain_at = INF
