"""KRaft consensus: a sans-IO core (kraftpy.raft.core) plus its log interface, messages and codec,
and the quorum-state file format. The trio driver lives elsewhere and only applies effects."""

from kraftpy.raft.config import RaftConfig
from kraftpy.raft.core import ProposeResult, RaftCore
from kraftpy.raft.effects import (
    Commit,
    Effect,
    ElectionState,
    FlushLog,
    LeaderChange,
    PersistQuorumState,
    Send,
    SnapshotLoaded,
)
from kraftpy.raft.errors import ErrorCode, NotLeaderError, RaftError
from kraftpy.raft.log import OffsetAndEpoch, RaftLog, RecordBatch, SnapshotId
from kraftpy.raft.memory_log import MemoryRaftLog
from kraftpy.raft.messages import Received

__all__ = [
    "Commit",
    "Effect",
    "ElectionState",
    "ErrorCode",
    "FlushLog",
    "LeaderChange",
    "MemoryRaftLog",
    "NotLeaderError",
    "OffsetAndEpoch",
    "PersistQuorumState",
    "ProposeResult",
    "RaftConfig",
    "RaftCore",
    "RaftError",
    "RaftLog",
    "Received",
    "RecordBatch",
    "Send",
    "SnapshotId",
    "SnapshotLoaded",
]
