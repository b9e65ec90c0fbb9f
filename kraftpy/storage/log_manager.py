"""The log directories of a broker: their offset checkpoints and clean-shutdown markers.

Each entry of ``log.dirs`` holds one subdirectory per partition replica (``<topic>-<partition>``,
a `Log`) and, as in Kafka, files that speak for every partition in it::

    recovery-point-offset-checkpoint   <topic> <partition> <offset>: fsynced below this
    replication-offset-checkpoint      ... the high watermark
    log-start-offset-checkpoint        ... the log start offset (retention, DeleteRecords)
    .kraftpy_cleanshutdown             present only between a clean shutdown and the next start

(the line format is :mod:`kraftpy.storage.checkpoint`'s). One write of the three files covers
every partition of the directory: at ``replica.high.watermark.checkpoint.interval.ms`` that is
three small files however many partitions there are, where one file per partition would be
thousands of fsyncs.

Theory of operation. `LogManager.load` reads the three files of every directory and notes which
directories were shut down cleanly, removing their markers before anything is written (a crash
from then on is not clean). `open_log` opens a partition's log with the offsets recorded for it:
a cleanly shut down directory's logs are trusted whole, the others are recovered from their
recovery point. `checkpoint` writes the three files of every directory from the offsets of the
open logs, keeping the recorded entries of partitions not open (yet) until `forget` says their
log is gone, so a checkpoint taken while logs are still being opened loses no log start offset.
`write_clean_shutdown_markers` runs after every log was closed and the last checkpoint written.
A directory that cannot be loaded (an OSError: unreadable, EIO) is *offline*: its files are left
as they are, nothing is written to it, and no log is opened in it until a restart finds it well.
A directory also goes offline while the broker runs (`fail_dir`): when a replica's files in it fail,
or its own checkpoint files cannot be written (`checkpoint` reports which), as Kafka's
``LogDirFailureChannel`` takes a whole directory out on one I/O error.

Each directory's ``directory.id`` (its ``meta.properties``, written by ``kraftpy storage format``) is
read at load: it is the name the controller knows the directory by (KIP-858).

Every method blocks on the file system: the broker calls them in a worker thread, one hop for a
whole batch of logs, never one per partition. The manager is not thread-safe: its owner
serialises the calls.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import attrs
import structlog

from kraftpy.fatal import describe_os_error
from kraftpy.ids import Uuid
from kraftpy.storage.checkpoint import (
    CHECKPOINT_VERSION,
    LEGACY_OFFSETS_FILE,
    CheckpointError,
    LogOffsets,
    read_legacy_offsets,
    read_offsets,
)
from kraftpy.storage.fsutil import fsync_dir, sync_filesystem, write_atomic
from kraftpy.storage.log import Log, wall_clock_ms
from kraftpy.storage.log_config import LogConfig
from kraftpy.storage.meta_properties import MetaPropertiesError, read_meta_properties

if TYPE_CHECKING:  # the write-back's runner is a trio task; the rest of storage blocks and imports no trio
    from kraftpy.storage.writeback import Writeback

RECOVERY_POINT_CHECKPOINT_FILE = "recovery-point-offset-checkpoint"
REPLICATION_CHECKPOINT_FILE = "replication-offset-checkpoint"
LOG_START_CHECKPOINT_FILE = "log-start-offset-checkpoint"
CLEAN_SHUTDOWN_FILE = ".kraftpy_cleanshutdown"
#: The Raft metadata log's directory (``__cluster_metadata-0``) may share a log directory; it is
#: not one of the broker's partitions.
METADATA_TOPIC_PREFIX = "__cluster_metadata-"
#: A clean-shutdown marker of an earlier version, inside each partition directory.
_LEGACY_MARKER = ".kraftpy_cleanshutdown"

TopicPartitionKey = tuple[str, int]

_logger = structlog.get_logger(__name__)


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


@attrs.define
class LogDirectory:
    """One entry of ``log.dirs`` as loaded: the offsets it recorded and whether it was shut down cleanly."""

    path: Path
    clean_shutdown: bool = False
    #: The offsets last recorded for each partition (updated by every checkpoint; add and drop
    #: partitions with `record` and `drop`, which keep `sorted_keys` right).
    recorded: dict[TopicPartitionKey, LogOffsets] = attrs.Factory(dict)
    #: The keys of ``recorded`` in the checkpoint files' order, kept between checkpoints while no
    #: partition comes or goes (None: to be sorted again).
    sorted_keys: list[TopicPartitionKey] | None = None
    #: Partitions whose directory still holds an earlier version's per-partition offsets file.
    legacy: set[TopicPartitionKey] = attrs.Factory(set)
    #: The bytes last written to each offset checkpoint file (an unchanged file is not rewritten).
    written: dict[str, bytes] = attrs.Factory(dict)
    #: Why the directory could not be loaded (``<dir>: <reason> (<errno>)``); None while it is usable.
    #: An offline directory is left alone: no checkpoint, no marker, no log opened in it.
    failure: str | None = None
    #: The ``directory.id`` of its meta.properties (None in a directory never formatted).
    directory_id: Uuid | None = None

    def record(self, key: TopicPartitionKey, offsets: LogOffsets) -> None:
        if key not in self.recorded:
            self.sorted_keys = None
        self.recorded[key] = offsets

    def drop(self, key: TopicPartitionKey) -> None:
        if self.recorded.pop(key, None) is not None:
            self.sorted_keys = None


class LogManager:
    def __init__(self, log_dirs: Sequence[Path], *, clock: Callable[[], int] = wall_clock_ms,
                 writeback: Writeback | None = None) -> None:
        self.clock = clock
        self.dirs = {Path(d): LogDirectory(Path(d)) for d in log_dirs}
        #: Given to every log opened (log.writeback.interval.bytes); None: the kernel's write-back alone.
        self.writeback = writeback
        self._log = _logger
        #: Parsed partition directory names and checkpoint line prefixes, made once per partition.
        self._locations: dict[str, tuple[str, TopicPartitionKey] | None] = {}
        self._prefixes: dict[TopicPartitionKey, str] = {}

    # -- start ----------------------------------------------------------------------------------

    def load(self) -> None:
        """Create missing directories, read their checkpoints and consume their clean-shutdown markers.
        A directory the file system refuses (an OSError: unreadable, EIO, a file in its place) is
        marked offline (`LogDirectory.failure`) and the others are loaded."""
        for log_dir in self.dirs.values():
            try:
                self._load_dir(log_dir)
            except OSError as exc:
                log_dir.failure = f"{log_dir.path}: {describe_os_error(exc)}"
                self._log.error("log directory offline", log_dir=str(log_dir.path), error=describe_os_error(exc))

    def _load_dir(self, log_dir: LogDirectory) -> None:
        log_dir.path.mkdir(parents=True, exist_ok=True)
        try:
            meta = read_meta_properties(log_dir.path)
        except MetaPropertiesError:
            meta = None  # the start checks refuse such a directory before the broker loads it
        if meta is not None:
            log_dir.directory_id = Uuid.from_base64(meta.directory_id)
        marker = log_dir.path / CLEAN_SHUTDOWN_FILE
        log_dir.clean_shutdown = marker.exists()
        try:
            log_dir.recorded = self._read_recorded(log_dir.path)
        except CheckpointError as exc:
            self._log.warning("offset checkpoints unreadable; recovering every log of the directory",
                              log_dir=str(log_dir.path), error=str(exc))
            log_dir.recorded, log_dir.clean_shutdown = {}, False
        log_dir.sorted_keys = None
        if marker.exists():
            marker.unlink()
            fsync_dir(log_dir.path)

    @staticmethod
    def _read_recorded(path: Path) -> dict[TopicPartitionKey, LogOffsets]:
        recovery = read_offsets(path / RECOVERY_POINT_CHECKPOINT_FILE) or {}
        replication = read_offsets(path / REPLICATION_CHECKPOINT_FILE) or {}
        starts = read_offsets(path / LOG_START_CHECKPOINT_FILE) or {}
        out = {}
        for key in recovery.keys() | replication.keys() | starts.keys():
            out[key] = LogOffsets(log_start_offset=starts.get(key, 0), recovery_point=recovery.get(key, 0),
                                  high_watermark=replication.get(key, 0))
        return out

    @property
    def online_dirs(self) -> list[Path]:
        """The log directories that loaded, in ``log.dirs`` order."""
        return [path for path, log_dir in self.dirs.items() if log_dir.failure is None]

    @property
    def cleanly_stopped(self) -> bool:
        """Every online log directory was stopped cleanly before this start (its marker was there and
        its checkpoints readable): no log needs recovery."""
        return all(log_dir.clean_shutdown for log_dir in self.dirs.values() if log_dir.failure is None)

    @property
    def offline_dirs(self) -> dict[Path, str]:
        """The log directories that failed to load, with why."""
        return {path: log_dir.failure for path, log_dir in self.dirs.items() if log_dir.failure is not None}

    def fail_dir(self, path: Path, reason: str) -> bool:
        """The log directory ``path`` failed while the broker runs (``reason``: ``<file>: <why> (<errno>)``):
        from now on nothing is written to it and no log is opened in it. Returns whether it was online."""
        log_dir = self.dirs.get(path)
        if log_dir is None or log_dir.failure is not None:
            return False
        log_dir.failure = reason
        self._log.error("log directory offline", log_dir=str(path), error=reason)
        return True

    def log_dir_of(self, directory: Path) -> Path | None:
        """The log directory holding the partition (or future) directory ``directory``, if it is one of them."""
        parent = Path(directory).parent
        return parent if parent in self.dirs else None

    def directory_ids(self) -> dict[Path, Uuid]:
        """The ``directory.id`` of each log directory that has one, in ``log.dirs`` order."""
        return {path: d.directory_id for path, d in self.dirs.items() if d.directory_id is not None}

    def existing_partition_dirs(self) -> list[Path]:
        """Every ``<topic>-<partition>`` directory in the online log directories (deleted ones excluded)."""
        out = []
        for log_dir in self.online_dirs:
            for child in sorted(log_dir.iterdir()):
                if child.is_dir() and _parse_partition_dir(child.name) is not None \
                        and not child.name.startswith(METADATA_TOPIC_PREFIX):
                    out.append(child)
        return out

    # -- logs -------------------------------------------------------------------------------------

    def open_log(self, directory: Path, config: LogConfig) -> Log:
        """Open (creating if needed) the partition log in ``directory``, one of the log directories' children."""
        log_dir = self.dirs.get(directory.parent)
        if log_dir is None:
            raise ValueError(f"{directory} is not in a log directory of this broker")
        key = _parse_partition_dir(directory.name)
        if key is None:
            raise ValueError(f"{directory.name} is not a partition directory name")
        offsets = log_dir.recorded.get(key)
        clean = log_dir.clean_shutdown and offsets is not None
        if offsets is None and (directory / LEGACY_OFFSETS_FILE).exists():
            try:
                offsets = read_legacy_offsets(directory)
            except CheckpointError as exc:
                self._log.warning("old offsets checkpoint unreadable", partition=directory.name, error=str(exc))
            clean = (directory / _LEGACY_MARKER).exists() and offsets is not None
            log_dir.legacy.add(key)
        log = Log.open(directory, config, clock=self.clock, offsets=offsets, clean_shutdown=clean)
        log.writeback = self.writeback
        if offsets is None:
            # A new log (or one never checkpointed): record where it starts from now on.
            log_dir.record(key, log.offsets)
        return log

    def adopt_log(self, directory: Path, config: LogConfig, offsets: LogOffsets) -> Log:
        """Open the log just closed cleanly and moved into ``directory`` (a replica moved from another log
        directory), trusting ``offsets``, and record them for the directory's next checkpoint."""
        log_dir = self.dirs.get(directory.parent)
        key = _parse_partition_dir(directory.name)
        if log_dir is None or key is None:
            raise ValueError(f"{directory} is not a partition directory of this broker")
        log = Log.open(directory, config, clock=self.clock, offsets=offsets, clean_shutdown=True)
        log.writeback = self.writeback
        log_dir.record(key, log.offsets)
        log_dir.legacy.discard(key)
        return log

    def forget(self, directory: Path) -> None:
        """The partition log in ``directory`` is gone (deleted): drop its recorded offsets."""
        log_dir = self.dirs.get(directory.parent)
        key = _parse_partition_dir(directory.name)
        if log_dir is not None and key is not None:
            log_dir.drop(key)
            log_dir.legacy.discard(key)

    # -- checkpoints -------------------------------------------------------------------------------

    def checkpoint(self, logs: Iterable[Log]) -> dict[Path, OSError]:
        """Write the three offset files of every log directory from ``logs`` (the open ones);
        partitions recorded before and not among them keep their recorded offsets. Returns the
        directories whose files could not be written, with the error (the others are written all
        the same); the caller takes them offline.

        Runs in a worker thread, where Python work holds the GIL away from the event loop: the
        entries' ``<topic> <partition> `` prefixes are made once per partition, the partitions are
        sorted again only when one came or went, and a file whose content did not change since the
        last write is not written again. Nor does a checkpoint keep an object per partition alive
        beyond those whose offsets changed: 100,000 new objects every checkpoint survived the young
        generations of the garbage collector, and the full collections they brought about (45-117 ms
        each, nothing collected) held the interpreter lock, and with it the event loop."""
        usable = {os.fspath(path): log_dir for path, log_dir in self.dirs.items() if log_dir.failure is None}
        for log in logs:
            where = self._where(log.directory)
            if where is None:
                continue
            log_dir = usable.get(where[0])
            if log_dir is not None:
                offsets = log.offsets
                if log_dir.recorded.get(where[1]) != offsets:
                    log_dir.record(where[1], offsets)
        failed: dict[Path, OSError] = {}
        for path, log_dir in self.dirs.items():
            if log_dir.failure is not None:
                continue
            try:
                self._checkpoint_dir(path, log_dir)
            except OSError as exc:
                failed[path] = exc
        return failed

    def _checkpoint_dir(self, path: Path, log_dir: LogDirectory) -> None:
        recorded = log_dir.recorded
        keys = log_dir.sorted_keys
        if keys is None:
            keys = log_dir.sorted_keys = sorted(recorded)
        prefixes = [self._prefix_of(key) for key in keys]
        entries = [recorded[key] for key in keys]
        header = f"{CHECKPOINT_VERSION}\n{len(keys)}\n"
        for name, field in ((RECOVERY_POINT_CHECKPOINT_FILE, "recovery_point"),
                            (REPLICATION_CHECKPOINT_FILE, "high_watermark"),
                            (LOG_START_CHECKPOINT_FILE, "log_start_offset")):
            data = (header + "".join([f"{prefix}{getattr(o, field)}\n"
                                      for prefix, o in zip(prefixes, entries, strict=True)])).encode()
            if log_dir.written.get(name) != data:
                write_atomic(path / name, data)
                log_dir.written[name] = data
        for key in list(log_dir.legacy):
            if key in recorded:
                directory = path / partition_dir_name(*key)
                (directory / LEGACY_OFFSETS_FILE).unlink(missing_ok=True)
                (directory / _LEGACY_MARKER).unlink(missing_ok=True)
                log_dir.legacy.discard(key)

    def _where(self, directory: Path) -> tuple[str, TopicPartitionKey] | None:
        """The log directory (as text) and partition of a partition directory (None if it is not one)."""
        text = os.fspath(directory)
        try:
            return self._locations[text]
        except KeyError:
            key = _parse_partition_dir(directory.name)
            where = self._locations[text] = (os.fspath(directory.parent), key) if key is not None else None
            return where

    def _prefix_of(self, key: TopicPartitionKey) -> str:
        prefix = self._prefixes.get(key)
        if prefix is None:
            prefix = self._prefixes[key] = f"{key[0]} {key[1]} "
        return prefix

    def write_clean_shutdown_markers(self) -> None:
        """After every log was closed and the last checkpoint written: the next start trusts the logs."""
        for path in self.online_dirs:
            fd = os.open(path / CLEAN_SHUTDOWN_FILE, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            fsync_dir(path)

    def close_all(self, logs: Iterable[Log]) -> list[tuple[Log | None, Exception]]:
        """A clean shutdown: close every log without fsyncing each file, make them all durable with
        one ``syncfs`` per file system, then write the checkpoints and the markers.

        Returns what failed: the logs that failed to close, with their errors, and a failure of the
        sync, the checkpoints or the markers (with no log). The markers are written only when nothing
        failed before them: the next start recovers the directories otherwise. Nothing is raised, so
        that a full disk at shutdown still closes every file."""
        logs = list(logs)
        failed: list[tuple[Log | None, Exception]] = []
        for log in logs:
            try:
                log.close(sync=False)
            except OSError as exc:
                failed.append((log, exc))
        try:
            self.sync()
            unclean = {id(log) for log, _ in failed}
            for exc in self.checkpoint(log for log in logs if log.closed and id(log) not in unclean).values():
                failed.append((None, exc))
            if not failed:
                self.write_clean_shutdown_markers()
        except OSError as exc:
            failed.append((None, exc))
        return failed

    def sync(self) -> None:
        """Make everything written under the log directories durable: one ``syncfs`` per file system."""
        seen: set[int] = set()
        for path in self.online_dirs:
            device = path.stat().st_dev
            if device not in seen:
                seen.add(device)
                sync_filesystem(path)


def _parse_partition_dir(name: str) -> TopicPartitionKey | None:
    topic, sep, partition = name.rpartition("-")
    if not sep or not topic or not partition.isdigit() or "." in partition:
        return None
    return topic, int(partition)
