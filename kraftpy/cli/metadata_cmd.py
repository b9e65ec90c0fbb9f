"""`kraftpy metadata dump | show`: read the metadata log and snapshots offline.

``dump`` prints every record in log order (what kafka-dump-log's metadata decoder shows); ``show``
replays them (the latest snapshot first, when the log starts above 0) and prints the resulting
image: brokers, topics with their partitions, configs, features, ACLs, SCRAM users (names, mechanisms
and iterations) and client quotas — what kafka-metadata-shell browses. Neither prints a SCRAM salt or
key (``dump --json`` shows them as ``(redacted)``, as Kafka's tools do). Run them on a stopped node, or
on a copy of its directory.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import attrs
import typer

from kraftpy.cli.common import fail
from kraftpy.ids import Uuid
from kraftpy.metadata.delta import MetadataDelta
from kraftpy.metadata.image import EMPTY_IMAGE, MetadataImage, MetadataProvenance
from kraftpy.metadata.loader import decode_snapshot_file, decode_snapshot_records
from kraftpy.metadata.records import DIRECTORY_LOST, DIRECTORY_MIGRATING, DIRECTORY_UNASSIGNED, decode_record
from kraftpy.protocol.batch_header import CorruptRecordError
from kraftpy.protocol.records import iter_decoded
from kraftpy.raft.control import (
    KRaftVersionMessage,
    LeaderChangeMessage,
    VotersMessage,
    decode_control_record,
)
from kraftpy.raft.file_log import METADATA_LOG_DIR_NAME
from kraftpy.raft.snapshot import parse_snapshot_file_name
from kraftpy.security.scram import MECHANISM_NAMES as SCRAM_MECHANISM_NAMES
from kraftpy.storage.segment import parse_segment_file_name

app = typer.Typer(help="Read the metadata log and snapshots.", no_args_is_help=True)

LogOption = Annotated[Path | None, typer.Option(
    "--log", help="The metadata log directory (metadata.log.dir, or its __cluster_metadata-0).",
    show_default=False)]
SnapshotOption = Annotated[Path | None, typer.Option(
    "--snapshot", help="A metadata snapshot file (<offset>-<epoch>.checkpoint).", show_default=False)]


def _log_dir(path: Path) -> Path:
    if (path / METADATA_LOG_DIR_NAME).is_dir():
        return path / METADATA_LOG_DIR_NAME
    return path


def _segments(directory: Path) -> list[Path]:
    found = [(parse_segment_file_name(p.name), p) for p in directory.glob("*.log")]
    return [p for base, p in sorted((b, p) for b, p in found if b is not None)]


def _latest_snapshot(directory: Path) -> Path | None:
    found = [(parse_snapshot_file_name(p.name), p) for p in directory.glob("*.checkpoint")]
    complete = [(parsed[0], p) for parsed, p in found if parsed is not None and not parsed[1]]
    return max(complete)[1] if complete else None


def iter_log(directory: Path):
    """Yield (offset, epoch, what) for every record of the log, what being a metadata record or a
    Raft control record (a leader change, a dynamic quorum's kraft.version or voters)."""
    for segment in _segments(directory):
        data = segment.read_bytes()
        try:
            for batch in iter_decoded(data):
                for record in batch.records:
                    value = record.value or b""
                    if batch.header.is_control:
                        yield record.offset, batch.header.partition_leader_epoch, decode_control_record(
                            record.key, value)
                    else:
                        yield record.offset, batch.header.partition_leader_epoch, decode_record(value)
        except CorruptRecordError as exc:
            fail(f"{segment}: {exc}")


#: Record fields that are password equivalents: never printed.
_REDACTED_FIELDS = frozenset({"salt", "stored_key", "server_key", "salted_password"})


def _fields(obj: Any) -> dict[str, Any]:
    def plain(value: Any) -> Any:
        if attrs.has(type(value)):
            return {f.name: "(redacted)" if f.name in _REDACTED_FIELDS else plain(getattr(value, f.name))
                    for f in attrs.fields(type(value))}
        if isinstance(value, tuple | list):
            return [plain(v) for v in value]
        if isinstance(value, bytes):
            return value.hex()
        if hasattr(value, "items"):
            return {str(k): plain(v) for k, v in value.items()}
        return value if isinstance(value, int | str | float | bool | type(None)) else str(value)

    return {"type": type(obj).__name__, **plain(obj)}


@app.command("dump")
def dump(
    log: LogOption = None,
    snapshot: SnapshotOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per line.")] = False,
) -> None:
    """Print the records of a metadata log or snapshot, in order."""
    if (log is None) == (snapshot is None):
        fail("give exactly one of --log DIR and --snapshot FILE")
    if snapshot is not None:
        try:
            rows = [(i, None, r) for i, r in enumerate(decode_snapshot_records(snapshot.read_bytes()))]
        except (OSError, CorruptRecordError, ValueError) as exc:
            fail(f"{snapshot}: {exc}")
    else:
        directory = _log_dir(log)
        if not directory.is_dir():
            fail(f"{log}: not a directory")
        rows = iter_log(directory)
    for offset, epoch, what in rows:
        if as_json:
            typer.echo(json.dumps({"offset": offset, "epoch": epoch, "record": _fields(what)}))
        else:
            where = f"offset={offset}" + ("" if epoch is None else f" epoch={epoch}")
            typer.echo(f"{where} {what!r}")


def load_image(directory: Path) -> MetadataImage:
    image = EMPTY_IMAGE
    snapshot = _latest_snapshot(directory)
    start = 0
    if snapshot is not None:
        parsed = parse_snapshot_file_name(snapshot.name)
        assert parsed is not None
        end, epoch = parsed[0].end_offset, parsed[0].epoch
        image = decode_snapshot_file(snapshot.read_bytes(), MetadataProvenance(end - 1, epoch))
        start = end
    delta = MetadataDelta(image)
    for offset, epoch, what in iter_log(directory):
        if offset < start or isinstance(what, LeaderChangeMessage | KRaftVersionMessage | VotersMessage):
            continue
        delta.replay(what, offset, epoch)
    return delta.apply()


def _directory_name(directory: Uuid) -> str:
    """A replica's directory id, or Kafka's name for a reserved one."""
    return {DIRECTORY_UNASSIGNED: "UNASSIGNED", DIRECTORY_LOST: "LOST", DIRECTORY_MIGRATING: "MIGRATING"}.get(
        directory, str(directory))


@app.command("show")
def show(log: LogOption = None) -> None:
    """Replay a metadata log and print the cluster it describes."""
    if log is None:
        fail("give --log DIR")
    directory = _log_dir(log)
    if not directory.is_dir():
        fail(f"{log}: not a directory")
    image = load_image(directory)
    typer.echo(f"metadata offset {image.provenance.last_offset}, epoch {image.provenance.last_epoch}")
    typer.echo(f"features: {dict(image.features.levels)}")
    typer.echo("brokers:")
    for broker_id, reg in sorted(image.cluster.brokers.items()):
        state = "fenced" if reg.fenced else "unfenced"
        endpoints = ", ".join(f"{e.name}://{e.host}:{e.port}" for e in reg.listeners)
        dirs = f" log dirs {[str(d) for d in reg.directories]}" if reg.directories else ""
        typer.echo(f"  {broker_id}: epoch {reg.epoch} {state} rack={reg.rack} {endpoints}{dirs}")
    typer.echo("topics:")
    for name, topic in sorted(image.topics.by_name.items()):
        typer.echo(f"  {name} (id {topic.id}), {len(topic.partitions)} partitions")
        for pid, part in sorted(topic.partitions.items()):
            typer.echo(f"    {pid}: leader {part.leader} epoch {part.leader_epoch} replicas {list(part.replicas)} "
                       f"isr {list(part.isr)} partition epoch {part.partition_epoch} "
                       f"directories {[_directory_name(d) for d in part.directories]}")
    if image.configs.resources:
        typer.echo("configs:")
        for resource, entries in sorted(image.configs.resources.items()):
            typer.echo(f"  {resource}: {dict(entries)}")
    if image.acls.by_id:
        typer.echo("acls:")
        for line in sorted(_acl_line(binding) for binding in image.acls.by_id.values()):
            typer.echo(f"  {line}")
    if image.scram.users:
        typer.echo("scram users:")
        for name, credentials in sorted(image.scram.users.items()):
            mechanisms = ", ".join(f"{SCRAM_MECHANISM_NAMES.get(code, code)} (iterations {record.iterations})"
                                   for code, record in sorted(credentials.items()))
            typer.echo(f"  {name}: {mechanisms}")
    if image.client_quotas.entities:
        typer.echo("client quotas:")
        for path, quotas in sorted((_quota_path(entity), quotas) for entity, quotas in
                                   image.client_quotas.entities.items()):
            typer.echo(f"  {path}: {dict(sorted(quotas.items()))}")


def _acl_line(binding: Any) -> str:
    """One ACL as Kafka's tools word it: the resource pattern, then who may (or may not) do what from where."""
    return (f"{binding.resource_type.name}:{binding.resource_name} ({binding.pattern_type.name}): "
            f"{binding.permission.name} {binding.principal} {binding.operation.name} from host {binding.host}")


def _quota_path(entity: Any) -> str:
    """Kafka's name of a client-quota entity: ``/users/alice/clients/<default>``."""
    parts = dict(entity)
    out = ""
    for kind, label in (("user", "users"), ("client-id", "clients")):
        if kind in parts:
            out += f"/{label}/{'<default>' if parts[kind] is None else parts[kind]}"
    return out
