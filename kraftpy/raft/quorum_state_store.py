"""Reading and atomically replacing the quorum-state file: the only file I/O in kraftpy.raft.

The driver calls `write_quorum_state_file` for every PersistQuorumState effect and waits for it
before applying the next effect: write a temporary file, fsync it, rename it over the old one,
fsync the directory, so that after a crash the file holds either the old or the new state, whole.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from kraftpy.raft.effects import ElectionState
from kraftpy.raft.quorum_state_file import CorruptQuorumStateError, decode_quorum_state, encode_quorum_state
from kraftpy.storage.fsutil import write_atomic

FILE_NAME = "quorum-state"


def write_quorum_state_file(path: Path, state: ElectionState, voters: Iterable[int] | None) -> None:
    """`voters`: the static voter ids (version 0), None for a dynamic quorum (version 1)."""
    write_atomic(path, encode_quorum_state(state, voters))


def read_quorum_state_file(path: Path, voters: Iterable[int] | None = None) -> ElectionState | None:
    """The persisted election state, None if the file does not exist (a fresh node). A leftover
    temporary file from a crash mid-write is ignored: the rename never happened. A file that does
    not hold a valid state raises CorruptQuorumStateError with one line naming the file and the
    field (`str(error)`), e.g. ``/data/__cluster_metadata-0/quorum-state: leaderEpoch 2147483653 is
    out of range (-1 to 2147483647)``."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        return decode_quorum_state(raw, voters)
    except CorruptQuorumStateError as exc:
        raise CorruptQuorumStateError(f"{path}: {exc}") from None
