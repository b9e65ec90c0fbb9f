"""Error codes carried by the KRaft RPCs and the exceptions the core raises.

The codes are Kafka's own (kraftpy.protocol.errors), so that a response means the same thing
on both planes.
"""

from __future__ import annotations

from kraftpy.protocol.errors import ErrorCode

__all__ = ["ErrorCode", "IllegalTransitionError", "NotLeaderError", "RaftError", "RaftInvariantError"]


class RaftError(Exception):
    """Base class of the errors raised by kraftpy.raft."""


class NotLeaderError(RaftError):
    """`propose` was called on a node that is not the leader of the current epoch.

    `leader_id` is the leader this node knows of (None when it knows none) and `epoch` its current
    epoch, so that a caller can redirect the write.
    """

    def __init__(self, leader_id: int | None, epoch: int) -> None:
        super().__init__(f"not the leader: leader is {leader_id} in epoch {epoch}")
        self.leader_id = leader_id
        self.epoch = epoch


class IllegalTransitionError(RaftError):
    """A state transition outside the graph in `quorum_state`: always a bug, never a network event."""


class RaftInvariantError(RaftError):
    """A safety invariant would be broken (e.g. truncating committed entries): always a bug."""
