"""Error codes carried by the KRaft RPCs and the exceptions the core raises.

The numeric codes are Kafka's, so that a response read by a Kafka tool means the same thing.
"""

from __future__ import annotations

import enum


class ErrorCode(enum.IntEnum):
    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    NOT_LEADER_OR_FOLLOWER = 6
    BROKER_NOT_AVAILABLE = 8
    INVALID_REQUEST = 42
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    INCONSISTENT_VOTER_SET = 94
    SNAPSHOT_NOT_FOUND = 98
    POSITION_OUT_OF_RANGE = 99
    INCONSISTENT_CLUSTER_ID = 104


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
