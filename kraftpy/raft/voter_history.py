"""`VoterHistory`: the kraft.version and voter sets a replica's log holds, by offset (Kafka's
KRaftControlRecordStateMachine and VoterSetHistory, KIP-853).

Theory of operation. The voter set a replica uses is the newest VotersRecord in its log, committed or
not (Raft thesis §4.1: "a server always uses the latest configuration in its log"), else the
snapshot's at the log start, else the static set of ``controller.quorum.voters``. The history is kept
for every offset from the log start so that

- a truncation (a follower cutting an uncommitted tail) brings back the set in force before it
  (`truncate_new`), as the log itself does;
- a snapshot taken at offset N carries the set in force at N - 1 (`voters_at`);
- a leader checks that the last change is committed before it appends the next (`latest_offset`).

It is rebuilt when a node starts (`load`: the snapshot at the log start, then every control batch of
the log) and after a snapshot download (`load` again), and followed as the log changes: every
appended control batch goes through `add_batch`. Entries from a snapshot sit at the offset before
its end (-1 for the bootstrap snapshot, so the first leader knows to write them into the log).

Pure: it reads the log it is handed (bounded reads), writes nothing.
"""

from __future__ import annotations

import bisect

from kraftpy.protocol.batch_header import CorruptRecordError
from kraftpy.protocol.records import ControlRecordType
from kraftpy.raft.log import RaftLog, RecordBatch
from kraftpy.raft.snapshot_control import read_snapshot_control
from kraftpy.raft.voters import (
    KRAFT_VERSION_STATIC,
    ControlRecordError,
    VoterSet,
    decode_kraft_version_record,
    decode_voters_record,
)

#: Bytes read at a time when a node loads its log's control records.
_LOAD_CHUNK_BYTES = 1 << 20


class VoterHistory:
    """Invariants: the entries of each list are in offset order, at most one per offset; `static`
    answers for offsets before the first voter entry."""

    def __init__(self, static: VoterSet | None) -> None:
        #: controller.quorum.voters (None: the quorum is dynamic, and a replica formatted with
        #: --no-initial-controllers knows no voter until it fetched a VotersRecord).
        self.static = static
        self._voters: list[tuple[int, VoterSet]] = []
        self._versions: list[tuple[int, int]] = []

    # -- reading ---------------------------------------------------------------------------------

    @property
    def voters(self) -> VoterSet:
        """The voter set in force at the log end (empty when none is known yet)."""
        if self._voters:
            return self._voters[-1][1]
        return self.static if self.static is not None else VoterSet(())

    @property
    def latest_offset(self) -> int | None:
        """The offset of the newest VotersRecord (-1: from the bootstrap snapshot; None: static)."""
        return self._voters[-1][0] if self._voters else None

    @property
    def kraft_version(self) -> int:
        return self._versions[-1][1] if self._versions else KRAFT_VERSION_STATIC

    @property
    def is_dynamic(self) -> bool:
        """Voters come from the log (kraft.version 1, or no static set at all)."""
        return self.kraft_version > KRAFT_VERSION_STATIC or self.static is None

    def voters_at(self, offset: int) -> VoterSet:
        """The voter set in force at `offset` (its record at or before it)."""
        i = bisect.bisect_right(self._voters, offset, key=lambda entry: entry[0]) - 1
        if i >= 0:
            return self._voters[i][1]
        return self.static if self.static is not None else VoterSet(())

    def kraft_version_at(self, offset: int) -> int:
        i = bisect.bisect_right(self._versions, offset, key=lambda entry: entry[0]) - 1
        return self._versions[i][1] if i >= 0 else KRAFT_VERSION_STATIC

    # -- following the log -----------------------------------------------------------------------

    def add_voters(self, offset: int, voters: VoterSet) -> None:
        self._drop_from(offset)
        self._voters.append((offset, voters))

    def add_kraft_version(self, offset: int, kraft_version: int) -> None:
        while self._versions and self._versions[-1][0] >= offset:
            self._versions.pop()
        self._versions.append((offset, kraft_version))

    def _drop_from(self, offset: int) -> None:
        while self._voters and self._voters[-1][0] >= offset:
            self._voters.pop()

    @staticmethod
    def decode_batch(batch: RecordBatch) -> list[tuple[int, int | VoterSet]]:
        """The kraft.version and voters records of a control batch, as (offset, value); raises
        ControlRecordError for one that cannot be read (other control records are skipped)."""
        out: list[tuple[int, int | VoterSet]] = []
        try:
            records = batch.control_records()
        except CorruptRecordError as exc:
            raise ControlRecordError(str(exc)) from None
        for i, (kind, value) in enumerate(records):
            if kind == ControlRecordType.KRAFT_VERSION:
                out.append((batch.base_offset + i, decode_kraft_version_record(value)))
            elif kind == ControlRecordType.KRAFT_VOTERS:
                out.append((batch.base_offset + i, decode_voters_record(value)))
        return out

    def add_batch(self, batch: RecordBatch) -> bool:
        """Follow one appended batch; True when it changed the voters or the kraft.version."""
        if not batch.is_control:
            return False
        changed = False
        for offset, value in self.decode_batch(batch):
            if isinstance(value, VoterSet):
                self.add_voters(offset, value)
            else:
                self.add_kraft_version(offset, value)
            changed = True
        return changed

    def truncate_new(self, end_offset: int) -> bool:
        """The log was cut to end at `end_offset`: forget the records at or past it. True if any."""
        before = (len(self._voters), len(self._versions))
        self._drop_from(end_offset)
        while self._versions and self._versions[-1][0] >= end_offset:
            self._versions.pop()
        return (len(self._voters), len(self._versions)) != before

    def truncate_old(self, start_offset: int) -> None:
        """The log now starts at `start_offset`: keep only what answers for offsets from start - 1 on."""
        for entries in (self._voters, self._versions):
            i = bisect.bisect_right(entries, start_offset - 1, key=lambda entry: entry[0]) - 1
            if i > 0:
                del entries[:i]

    def load(self, log: RaftLog) -> None:
        """Rebuild from the snapshot at the log start (if any) and every control batch of the log."""
        self._voters.clear()
        self._versions.clear()
        start = log.start_offset
        at_start = [s for s in log.snapshot_ids if s.end_offset == start]
        if at_start:
            control = read_snapshot_control(log, max(at_start))
            if control is not None:
                self._versions.append((start - 1, control.kraft_version))
                self._voters.append((start - 1, control.voters))
        offset, end = start, log.end_offset
        while offset < end:
            batches = log.read(offset, _LOAD_CHUNK_BYTES)
            if not batches:
                break
            for batch in batches:
                self.add_batch(batch)
            offset = batches[-1].next_offset
