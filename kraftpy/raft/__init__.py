"""KRaft consensus: a sans-IO core (kraftpy.raft.core, with one module per role) plus its log
interface and batches, messages and codec, and the quorum-state file format. The trio driver
(kraftpy.raft.driver) only applies effects."""

from kraftpy.raft.config import RaftConfig
from kraftpy.raft.core import ProposeResult, RaftCore, SnapshotResult
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
    "SnapshotResult",
]
