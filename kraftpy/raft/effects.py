"""What the core asks its driver to do, in the order it must be done.

`RaftCore.start`, `step`, `tick`, `propose`, `unreachable`, `resign` and `create_snapshot` return
a list of effects. The driver applies them one after the other and finishes each before starting
the next: a `PersistQuorumState` or `FlushLog` must be durable before any later `Send` leaves (the
vote, the epoch and the log are what the message vouches for; Raft thesis §3.8 and KIP-595
"persistent state"), and `Commit`s come in offset order. The two durable effects are the only file
work a node does for Raft; the driver does it off the event loop.
"""

from __future__ import annotations

import attrs

from kraftpy.ids import Uuid
from kraftpy.raft.log import RecordBatch, SnapshotId
from kraftpy.raft.messages import Message


@attrs.frozen
class ElectionState:
    """What the quorum-state file holds: the epoch and, in it, the known leader or the vote given
    (with the directory id of the replica voted for, when known: KIP-853).

    At most one of `leader_id` and `voted_id` is set."""

    epoch: int
    leader_id: int | None = None
    voted_id: int | None = None
    voted_directory_id: Uuid | None = None

    def __attrs_post_init__(self) -> None:
        if self.leader_id is not None and self.voted_id is not None:
            raise ValueError("an election state names a leader or a vote, not both")
        if self.voted_directory_id is not None and self.voted_id is None:
            raise ValueError("a voted directory id without a vote")


@attrs.frozen
class PersistQuorumState:
    """Write the quorum-state file (tmp, fsync, rename, fsync the directory) before going on."""

    state: ElectionState


@attrs.frozen
class FlushLog:
    """Make the log durable below `up_to`, with every truncation, snapshot and prefix deletion the
    core made in memory (`RaftLog.flush`), before going on."""

    up_to: int


@attrs.frozen
class Send:
    """Send `message` to node `dest`. A request gets a fresh `correlation_id` from the core and its
    response must come back through `step` with the same id; a response echoes the request's id."""

    dest: int
    correlation_id: int
    message: Message


@attrs.frozen
class Commit:
    """The high watermark reached `high_watermark`; `batches` are the newly committed ones, in
    order, continuing exactly where the previous Commit (or SnapshotLoaded) ended."""

    high_watermark: int
    batches: tuple[RecordBatch, ...] = attrs.field(converter=tuple, default=())


@attrs.frozen
class LeaderChange:
    """The known leader changed: `leader_id` leads `epoch` (None: no leader known in `epoch`)."""

    epoch: int
    leader_id: int | None


@attrs.frozen
class SnapshotLoaded:
    """The state machine must reload its state from this snapshot (read it from the log); the next
    Commit continues at `snapshot_id.end_offset`."""

    snapshot_id: SnapshotId


@attrs.frozen
class VoterChangeDone:
    """The voter change (or kraft.version upgrade) the driver started as `operation` is over:
    `error_code` NONE once its record is committed, else why it was refused or given up."""

    operation: int
    error_code: int
    message: str | None = None


Effect = PersistQuorumState | FlushLog | Send | Commit | LeaderChange | SnapshotLoaded | VoterChangeDone
