"""The voters a dynamic quorum is formatted with: its bootstrap snapshot, and parsing what names them.

`kraftpy storage format --standalone` (this controller alone) or ``--initial-controllers
id@host:port:directory-id,...`` (several) writes ``<metadata.log.dir>/__cluster_metadata-0/
00000000000000000000-0000000000.checkpoint``, a snapshot ending at offset 0 that holds nothing but the
control batch of kraftpy.raft.snapshot_control: kraft.version 1 and the voter set, as Kafka's
storage tool does. A controller formatted with ``--no-initial-controllers`` has no such file: it
starts as an observer that learns the voters from the log, and votes once it is added.

The file is written tmp, fsync, rename, fsync the directory (kraftpy.storage.fsutil.write_atomic).
"""

from __future__ import annotations

from pathlib import Path

from kraftpy.ids import Uuid
from kraftpy.raft.file_log import METADATA_LOG_DIR_NAME
from kraftpy.raft.snapshot import snapshot_file_name
from kraftpy.raft.snapshot_control import BOOTSTRAP_SNAPSHOT_ID, control_batch
from kraftpy.raft.voters import KRAFT_VERSION_DYNAMIC, Endpoint, ReplicaKey, VoterNode, VoterSet
from kraftpy.storage.fsutil import write_atomic


class InitialControllersError(ValueError):
    """An --initial-controllers value that does not name a voter set."""


def parse_initial_controllers(text: str, listener_name: str) -> VoterSet:
    """``id@host:port:directory-id[,...]`` (Kafka's --initial-controllers) as a voter set whose
    endpoints are on `listener_name`; raises InitialControllersError naming the entry at fault."""
    nodes = []
    for item in [part.strip() for part in text.split(",") if part.strip()]:
        voter, at, rest = item.partition("@")
        address, colon, directory = rest.rpartition(":")
        host, colon2, port = address.rpartition(":")
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        if not at or not colon or not colon2 or not voter.isdigit() or not port.isdigit() or not host:
            raise InitialControllersError(f"{item!r} is not id@host:port:directory-id")
        if not 0 < int(port) < 65536:
            raise InitialControllersError(f"{item!r}: port {port} is out of range")
        try:
            directory_id = Uuid.from_base64(directory)
        except ValueError as exc:
            raise InitialControllersError(f"{item!r}: directory id {exc} (make one with kraftpy storage "
                                          "random-uuid)") from None
        nodes.append(VoterNode(ReplicaKey(int(voter), directory_id), (Endpoint(listener_name, host, int(port)),)))
    if not nodes:
        raise InitialControllersError("no controller given")
    try:
        return VoterSet(tuple(nodes))
    except ValueError as exc:
        raise InitialControllersError(str(exc)) from None


def bootstrap_snapshot_path(metadata_log_dir: Path) -> Path:
    return Path(metadata_log_dir) / METADATA_LOG_DIR_NAME / snapshot_file_name(BOOTSTRAP_SNAPSHOT_ID)


def write_bootstrap_snapshot(metadata_log_dir: Path, voters: VoterSet) -> Path:
    """Write the bootstrap snapshot of a dynamic quorum formatted with `voters` (kraft.version 1)."""
    path = bootstrap_snapshot_path(metadata_log_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, control_batch(KRAFT_VERSION_DYNAMIC, voters, BOOTSTRAP_SNAPSHOT_ID))
    return path
