"""Snapshot file names (KIP-630): ``<end offset, 20 digits>-<epoch, 10 digits>.checkpoint``.

A snapshot being written or downloaded carries the extra suffix ``.part`` until it is complete
and renamed; such files are leftovers of a crash and are deleted on start.
"""

from __future__ import annotations

import re

from kraftpy.raft.log import SnapshotId

SUFFIX = ".checkpoint"
PARTIAL_SUFFIX = ".checkpoint.part"
_NAME = re.compile(r"^(\d{20})-(\d{10})\.checkpoint(\.part)?$")


def snapshot_file_name(snapshot_id: SnapshotId) -> str:
    if snapshot_id.end_offset < 0 or snapshot_id.epoch < 0:
        raise ValueError(f"invalid snapshot id {snapshot_id}")
    return f"{snapshot_id.end_offset:020d}-{snapshot_id.epoch:010d}{SUFFIX}"


def partial_snapshot_file_name(snapshot_id: SnapshotId) -> str:
    return snapshot_file_name(snapshot_id) + ".part"


def parse_snapshot_file_name(name: str) -> tuple[SnapshotId, bool] | None:
    """(snapshot id, is_partial) for a snapshot file name, None for any other name."""
    match = _NAME.match(name)
    if match is None:
        return None
    return SnapshotId(end_offset=int(match.group(1)), epoch=int(match.group(2))), match.group(3) is not None
