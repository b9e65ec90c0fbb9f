"""The replicas this broker holds: logs under the log dirs, leader and follower roles from metadata.

Theory of operation
-------------------
``apply_delta`` is called with every committed ``MetadataImage`` and the ``MetadataDelta`` that led
to it (through the broker's metadata publisher, one at a time, in log order) and changes only what
the delta touched, as Kafka's ``ReplicaManager.applyDelta`` does with ``TopicsDelta.localChanges``:

* replicas this broker no longer hosts (their topic was deleted, or it left their replica list)
  leave the maps at once, then their logs are closed and their directories renamed
  ``<topic>-<partition>.<id>-delete`` in a worker thread, removed in the background;
* new replicas get a log — opened if its directory ``<topic>-<partition>`` exists under one of the
  log dirs and belongs to the same topic id (``partition.metadata``), created in the log dir
  holding the fewest partitions otherwise — all of one delta in one worker-thread hop;
* a changed partition leads when the registration names this broker leader *and* the broker is
  running (a fenced broker takes no leadership), follows the named leader otherwise; only the
  partitions a delta touches change roles, and only their parked requests are woken;
* topics whose configs changed (or every topic, when a broker-level default changed) get their
  log settings again.

``set_running`` re-applies roles to every local partition (once per fence or unfence).

Offline replicas and log directories (Kafka's log-dir failure handling): a replica whose log cannot
be opened (an OSError: its directory unreadable or replaced by a file, a segment that fails to open,
EIO), or whose log may lie in a log directory that failed to load, is *offline*: it has no
`Partition`, its requests are answered KAFKA_STORAGE_ERROR, and every heartbeat names it
(``offline_replicas``) so that the controller moves its leadership and ISR place to another replica.
Files that fail while the broker runs (any OSError but a full disk: ENOSPC only fails the one
append) — a replica's, or the directory's own checkpoint files — take the *whole log directory*
offline (`fail_log_dir`), as Kafka does: every replica in it goes offline and its log is closed,
nothing more is written there, and the heartbeat names the directory by its id (``offline_log_dirs``,
KIP-858) beside its replicas; the broker goes on serving its other directories. Everything stays
offline until the broker restarts (or the replica is deleted); a broker whose last log directory
fails stops, with one line naming the failures.

Log directories (KIP-858): a new replica's log is created in the directory the metadata records
for it when that is one of this broker's online directories, in the one holding the fewest
partitions otherwise (a replica recorded in one of this broker's offline directories stays
offline). Wherever a replica's log is, the broker tells the controller when the metadata records
another directory for it (AssignReplicasToDirs, batched and retried by ``_run_dir_assignments``), so
that the controller knows which replicas a failed directory takes down.

The fetchers are told which partitions to fetch from which leader (``fetch_assignments``, kept
up to date partition by partition). ISR changes the leaders propose are queued and sent to the
controller in batches (``_run_isr_changes``); the other background work of ``run``: lagging
followers (``_run_isr_expiry``), retention and due flushes (``_run_housekeeping``), the log
directories' offset checkpoints (``_run_checkpoints``), deleting what was detached, and the log
cleaner for compacted topics (:mod:`kraftpy.broker.log_cleaner`; a replica is held off the cleaner
before its log is closed).

Blocking file work never runs on the trio thread: opening and closing logs, checkpoints,
retention and flushes go to worker threads, one hop per batch of partitions where they come in
batches (see `Partition` for the per-partition discipline: appends inline, file work off the
loop). Loops over every partition yield to the scheduler every `_CHUNK` partitions.
"""

from __future__ import annotations

import contextlib
import gc
import math
import os
import shutil
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import attrs
import structlog
import trio

from kraftpy.broker import producer_state as ps
from kraftpy.broker.controller_channel import ControllerChannel, ControllerUnavailable
from kraftpy.broker.log_cleaner import LogCleaner
from kraftpy.broker.log_dir_mover import FUTURE_SUFFIX, LogDirMover, Swapped
from kraftpy.broker.partition import Partition, Role, TopicPartition
from kraftpy.broker.replication_quota import ReplicationThrottles
from kraftpy.broker.settings import BrokerSettings
from kraftpy.fatal import NO_SPACE_ERRNOS, FatalError, describe_os_error
from kraftpy.ids import Uuid
from kraftpy.metadata import configs as config_defs
from kraftpy.metadata.delta import LocalPartition, MetadataDelta
from kraftpy.metadata.image import EMPTY_IMAGE, MetadataImage, PartitionRegistration
from kraftpy.metadata.messages import (
    AlterPartitionPartitionData,
    AlterPartitionRequest,
    AlterPartitionTopicData,
    AssignReplicasToDirsDirectory,
    AssignReplicasToDirsPartition,
    AssignReplicasToDirsRequest,
    AssignReplicasToDirsTopic,
    BrokerState,
)
from kraftpy.metadata.records import DIRECTORY_UNASSIGNED, NO_LEADER, ConfigResourceType
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.record_validation import ProduceRules
from kraftpy.storage.descriptors import DESCRIPTORS, close_descriptors, configure_descriptors
from kraftpy.storage.fsutil import read_small_file
from kraftpy.storage.log import Log, LogClosedError
from kraftpy.storage.log_config import LogConfig
from kraftpy.storage.log_manager import LogManager, partition_dir_name
from kraftpy.storage.writeback import Writeback

PARTITION_METADATA_FILE = "partition.metadata"
DELETE_SUFFIX = "-delete"
#: Loops over every partition yield to other tasks after this many.
_CHUNK = 500
#: Logs are opened this many to a worker-thread hop (the hop's descriptors are trimmed after it).
_OPEN_CHUNK = 256
#: How often descriptors opened again beyond log.open.segments.max are closed (seconds).
_TRIM_INTERVAL = 1.0
#: A delta that opened at least this many logs freezes what exists into the GC's permanent generation.
_FREEZE_AFTER = 1000
@contextlib.contextmanager
def collector_paused(pause: bool) -> Iterator[None]:
    """The cyclic garbage collector off for the block when ``pause`` (and it was on)."""
    if not pause or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


#: A delta changing more local partitions than this logs one summary line at info level, and each
#: partition's role and ISR change at debug: 33,000 lines at a broker's restart cost seconds.
ROLE_LINES_MAX = 100

_logger = structlog.get_logger(__name__)


def log_dir_name(tp: TopicPartition) -> str:
    return partition_dir_name(tp.topic, tp.partition)


def write_partition_metadata(directory: Path, topic_id: Uuid) -> None:
    """Kafka's ``partition.metadata``: which topic id a log directory belongs to."""
    tmp = directory / (PARTITION_METADATA_FILE + ".tmp")
    tmp.write_text(f"version: 0\ntopic_id: {topic_id}\n")
    os.replace(tmp, directory / PARTITION_METADATA_FILE)


def read_partition_metadata(directory: Path) -> str | None:
    try:
        text = read_small_file(directory / PARTITION_METADATA_FILE).decode(errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "topic_id":
            return value.strip()
    return None


@attrs.frozen
class TopicLogSettings:
    """What a topic's configs mean for one of its logs."""

    config: LogConfig
    min_insync_replicas: int
    log_append_time: bool
    produce_rules: ProduceRules = ProduceRules()


def log_settings_for(image: MetadataImage, static: dict | None, topic: str,
                     broker: int | None = None) -> TopicLogSettings:
    """The topic's LogConfig, min.insync.replicas and whether it stamps LogAppendTime, on broker
    ``broker`` (whose own dynamic overrides count) when given."""
    static = static or {}

    def get(name: str) -> str:
        return config_defs.effective_topic_config(image, static, topic, name, broker)[0]

    def number(name: str) -> int:
        return int(get(name).strip())

    policies = {policy.strip() for policy in get("cleanup.policy").split(",")}
    compact = "compact" in policies
    max_compaction_lag_ms = number("max.compaction.lag.ms")
    segment_ms = number("segment.ms")
    if compact:
        # Kafka's LogConfig.maxSegmentMs: the active segment is rolled in time to be compacted.
        segment_ms = min(segment_ms, max_compaction_lag_ms)
    config = LogConfig(
        segment_bytes=number("segment.bytes"),
        segment_ms=segment_ms,
        retention_ms=number("retention.ms"),
        retention_bytes=number("retention.bytes"),
        index_interval_bytes=number("index.interval.bytes"),
        flush_interval_messages=number("flush.messages"),
        flush_interval_ms=number("flush.ms"),
        file_delete_delay_ms=number("file.delete.delay.ms"),
        max_message_bytes=max(1, number("max.message.bytes")),
        delete="delete" in policies,
        compact=compact,
        delete_retention_ms=number("delete.retention.ms"),
        min_compaction_lag_ms=number("min.compaction.lag.ms"),
        max_compaction_lag_ms=max_compaction_lag_ms,
        min_cleanable_ratio=float(get("min.cleanable.dirty.ratio").strip()),
        preallocate=get("preallocate").strip().lower() == "true",
    )
    log_append_time = get("message.timestamp.type").strip() == "LogAppendTime"
    rules = ProduceRules(
        max_message_bytes=config.max_message_bytes,
        log_append_time=log_append_time,
        timestamp_before_max_ms=number("message.timestamp.before.max.ms"),
        timestamp_after_max_ms=number("message.timestamp.after.max.ms"),
        compacted=compact,
    )
    return TopicLogSettings(config, number("min.insync.replicas"), log_append_time, rules)


@attrs.frozen
class OfflineReplica:
    """A replica this broker holds but cannot serve (see the module doc)."""

    topic_id: Uuid
    #: What failed: ``<file or directory>: <reason> (<errno>)``.
    reason: str


@attrs.frozen
class _OpenRequest:
    tp: TopicPartition
    topic_id: Uuid
    settings: TopicLogSettings
    #: The directory the metadata records for this broker's replica (DIRECTORY_UNASSIGNED: none yet).
    directory: Uuid = DIRECTORY_UNASSIGNED


class ReplicaManager:
    def __init__(self, settings: BrokerSettings, channel: ControllerChannel, clock: Callable[[], int]) -> None:
        """``clock`` returns wall-clock milliseconds (record timestamps, retention, follower lag)."""
        self.settings = settings
        self.node_id = settings.node_id
        self.channel = channel
        self.clock = clock
        self._log = _logger.bind(node_id=self.node_id)
        #: Steady write-back of appended data (log.writeback.interval.bytes), run in `run`.
        self.writeback = Writeback(settings.log_writeback_interval_bytes)
        self.log_manager = LogManager(settings.log_dirs, clock=clock, writeback=self.writeback)
        #: Held around every worker-thread call into the log manager, which is not thread-safe.
        self._log_manager_lock = trio.Lock()
        #: No log opened yet since the start (the first opening is where a clean stop is trusted).
        self._first_open = True
        #: The image the replicas reflect.
        self.image: MetadataImage = EMPTY_IMAGE
        self.running = False
        self.partitions: dict[TopicPartition, Partition] = {}
        #: Moved on whenever a replica joins or leaves `partitions`: a follower's fetch session that has
        #: not looked at all of its partitions since does so once (kraftpy.broker.apis.fetch).
        self.partitions_version = 0
        self._by_id: dict[tuple[Uuid, int], Partition] = {}
        #: What the fetchers should do: leader id -> partitions to fetch from it.
        self.fetch_assignments: dict[int, set[TopicPartition]] = {}
        #: The other way round: partition -> the leader it is fetched from.
        self._fetched_from: dict[TopicPartition, int] = {}
        #: Notified whenever the assignments or any partition's role changes.
        self.assignments_changed = trio.Event()
        self._isr_send, self._isr_receive = trio.open_memory_channel[Partition](math.inf)
        self._delete_send, self._delete_receive = trio.open_memory_channel[Path](math.inf)
        #: Set (and replaced) after each directory removed in the background.
        self.deleted = trio.Event()
        self._nursery: trio.Nursery | None = None
        self._loaded = False
        #: Replicas this broker holds but cannot serve (see the module doc), with why.
        self.offline: dict[TopicPartition, OfflineReplica] = {}
        #: Told (on the trio thread) when a replica went offline: the heartbeat says so at once.
        self.on_offline: Callable[[], None] | None = None
        #: The replication throttles (bounds on moving replicas' fetch traffic), from the metadata.
        self.throttles = ReplicationThrottles(self.node_id, trio.current_time)
        #: Compacts the replicas of compacted topics (a task of `run`).
        self.log_cleaner = LogCleaner(settings, lambda: list(self.partitions.values()), clock)
        #: Moves of replicas between this broker's log directories (AlterReplicaLogDirs).
        self.mover = LogDirMover(self.log_manager, self._log_manager_lock, self.node_id)
        self.mover.on_swapped = self._replica_moved
        self.mover.on_target_failed = self.fail_log_dir
        self.mover.on_removable = self._delete_send.send_nowait
        #: Directory assignments the controller has yet to record: (topic id, partition) -> directory id.
        self.pending_dir_assignments: dict[tuple[Uuid, int], Uuid] = {}
        self._dir_assignments_queued = trio.Event()

    # -- running ----------------------------------------------------------------------------------

    async def load(self) -> None:
        """Read the log directories' checkpoints and markers, and find directories left to delete."""
        if self._loaded:
            return
        async with self._log_manager_lock:
            doomed = await trio.to_thread.run_sync(self._load_dirs)
        for path in doomed:
            self._delete_send.send_nowait(path)
        self._loaded = True

    def _load_dirs(self) -> list[Path]:
        capacity, limit = configure_descriptors(self.settings.log_open_segments_max)
        self._log.info("open segment files bounded", log_open_segments_max=capacity, open_file_limit=limit)
        self.log_manager.load()
        if not self.log_manager.online_dirs:
            failures = "; ".join(self.log_manager.offline_dirs.values())
            raise FatalError(f"no log directory can be used (log.dirs): {failures}")
        # Directories left to delete, and future logs of moves a restart ended (they are asked again).
        return [child for directory in self.log_manager.online_dirs for child in directory.iterdir()
                if child.is_dir() and child.name.endswith((DELETE_SUFFIX, FUTURE_SUFFIX))]

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """The background work, until cancelled. The owner calls `close` once nothing else runs."""
        await self.load()
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._run_isr_changes)
                nursery.start_soon(self._run_isr_expiry)
                nursery.start_soon(self._run_housekeeping)
                nursery.start_soon(self._run_checkpoints)
                nursery.start_soon(self._run_deletions)
                nursery.start_soon(self._run_dir_assignments)
                nursery.start_soon(self._run_descriptor_trim)
                await nursery.start(self.writeback.run)
                await nursery.start(self.log_cleaner.run)
                task_status.started()
        finally:
            self._nursery = None

    async def close(self) -> None:
        """A clean shutdown: snapshot producer state, close every log, checkpoint, leave the markers."""
        parts = list(self.partitions.values())
        for part in parts:
            part.make_offline()
        self.partitions.clear()
        self.partitions_version += 1
        self._by_id.clear()
        if parts:
            async with self._log_manager_lock:
                await trio.to_thread.run_sync(self._close_all, parts)

    def _close_all(self, parts: list[Partition]) -> None:
        for part in parts:
            try:
                part.snapshot_producer_state(sync=False)  # made durable with the logs, at once
            except (OSError, ValueError) as exc:
                self._log.warning("producer state snapshot failed", partition=str(part.tp), error=str(exc))
        for log, exc in self.log_manager.close_all([part.log for part in parts]):
            if log is None:
                self._log.warning("the clean shutdown could not be recorded; the next start recovers the logs",
                                  error=str(exc))
            else:
                self._log.warning("closing a log failed", log=log.directory.name, error=str(exc))
        self._log.info("logs closed", partitions=len(parts))

    # -- lookups ----------------------------------------------------------------------------------

    def get(self, topic: str, partition: int) -> Partition | None:
        return self.partitions.get(TopicPartition(topic, partition))

    def get_by_id(self, topic_id: Uuid, partition: int) -> Partition | None:
        return self._by_id.get((topic_id, partition))

    def is_offline(self, topic: str, partition: int) -> bool:
        return bool(self.offline) and TopicPartition(topic, partition) in self.offline

    def offline_replicas(self) -> dict[Uuid, list[int]]:
        """The offline replicas by topic id, partitions in order (what a heartbeat reports)."""
        out: dict[Uuid, list[int]] = {}
        for tp, replica in sorted(self.offline.items()):
            out.setdefault(replica.topic_id, []).append(tp.partition)
        return out

    def leader_endpoint(self, broker_id: int) -> tuple[str, int] | None:
        reg = self.image.cluster.broker(broker_id)
        if reg is None:
            return None
        for endpoint in reg.listeners:
            if endpoint.name == self.settings.inter_broker_listener_name:
                return endpoint.host, endpoint.port
        return None

    # -- metadata ---------------------------------------------------------------------------------

    async def apply_delta(self, image: MetadataImage, delta: MetadataDelta) -> None:
        """Make the local replicas match ``image``, touching only what ``delta`` changed (see the module
        docstring). The caller applies deltas one at a time, in log order."""
        changes = delta.local_changes(self.node_id)
        self.image = image
        closing = []
        for local in changes.deletes:
            tp = TopicPartition(local.topic_name, local.partition)
            part = self.partitions.get(tp)
            if part is not None and part.topic_id == local.topic_id:
                closing.append(self._detach_partition(tp))
            offline = self.offline.get(tp)
            if offline is not None and offline.topic_id == local.topic_id:
                del self.offline[tp]
        if closing:
            for part in closing:
                await part.pause_cleaning()  # for good: its log is closed next
            async with self._log_manager_lock:
                renamed = await trio.to_thread.run_sync(self._delete_logs, closing)
            for doomed in renamed:
                self._delete_send.send_nowait(doomed)
        wanted = [*changes.leaders, *changes.followers]
        new = [local for local in wanted if self._needs_open(local)]
        if new:
            await self._open(image, new)
        quiet = len(wanted) > ROLE_LINES_MAX
        for i, local in enumerate(wanted):
            if i and not i % _CHUNK:
                await trio.lowlevel.checkpoint()  # a big delta (a topic of thousands) in slices
            await self._apply_role(local.topic_name, local.partition, local.registration, quiet)
            self._check_directory(local.topic_id, local.topic_name, local.partition, local.registration)
            if self.offline and TopicPartition(local.topic_name, local.partition) in self.offline:
                reg = local.registration
                self._log.info("partition of an offline replica changed", partition=f"{local.topic_name}-{local.partition}",
                               leader=reg.leader, isr=list(reg.isr))
        if quiet:
            self._log.info("partitions changed", leaders=len(changes.leaders), followers=len(changes.followers),
                           detail="each partition's line at debug level")
        if self._configs_changed(delta):
            self._apply_topic_configs(image, delta)
            every_topic = any(r.type is ConfigResourceType.BROKER for r in delta.changed_configs)
            self.throttles.update(image, self.settings.static_broker_configs,
                                  None if every_topic else set(delta.changed_topic_configs))
        if wanted or closing:
            self._signal_assignments()
        if len(new) >= _FREEZE_AFTER:
            # Thousands of long-lived objects just made (partitions, logs, segments): move them out
            # of the garbage collector's way, or every full collection walks them all (a pause of
            # tens of milliseconds on the event loop at 10k partitions).
            gc.freeze()

    def _needs_open(self, local: LocalPartition) -> bool:
        tp = TopicPartition(local.topic_name, local.partition)
        offline = self.offline.get(tp)
        if offline is not None and offline.topic_id == local.topic_id:
            return False  # until a restart
        part = self.partitions.get(tp)
        return part is None or part.topic_id != local.topic_id

    async def set_running(self, running: bool) -> None:
        """True once the controller has unfenced this broker; False when it is fenced or stopping.
        Re-applies the role of every local partition."""
        if running == self.running:
            return
        self.running = running
        quiet = len(self.partitions) > ROLE_LINES_MAX
        for part in list(self.partitions.values()):
            topic = self.image.topics.get_by_id(part.topic_id)
            reg = topic.partitions.get(part.tp.partition) if topic is not None else None
            if reg is not None:
                await self._apply_role(part.tp.topic, part.tp.partition, reg, quiet)
        self._signal_assignments()

    async def _apply_role(self, topic: str, index: int, reg: PartitionRegistration, quiet: bool = False) -> None:
        tp = TopicPartition(topic, index)
        part = self.partitions.get(tp)
        if part is None:
            return  # its log could not be opened
        # A role change never races log work in a worker thread (a follower's truncation, a roll):
        # it waits for it (no wait at all when none runs).
        await part.wait_idle()
        if self.partitions.get(tp) is not part:
            return
        if reg.leader == self.node_id and self.running:
            part.make_leader(reg, quiet=quiet)
        elif reg.leader == self.node_id:
            part.make_offline()
        else:
            part.make_follower(reg, quiet=quiet)
        leader = reg.leader if part.role is Role.FOLLOWER and reg.leader != NO_LEADER else None
        self._assign_fetch(tp, leader)

    def _assign_fetch(self, tp: TopicPartition, leader: int | None) -> None:
        old = self._fetched_from.get(tp)
        if old == leader:
            return
        if old is not None:
            parts = self.fetch_assignments.get(old)
            if parts is not None:
                parts.discard(tp)
                if not parts:
                    del self.fetch_assignments[old]
            del self._fetched_from[tp]
        if leader is not None:
            self.fetch_assignments.setdefault(leader, set()).add(tp)
            self._fetched_from[tp] = leader

    def _signal_assignments(self) -> None:
        event, self.assignments_changed = self.assignments_changed, trio.Event()
        event.set()

    @staticmethod
    def _configs_changed(delta: MetadataDelta) -> bool:
        return bool(delta.changed_configs)

    def _apply_topic_configs(self, image: MetadataImage, delta: MetadataDelta) -> None:
        every_topic = any(r.type is ConfigResourceType.BROKER for r in delta.changed_configs)
        topics = delta.changed_topic_configs
        static = dict(self.settings.static_broker_configs)
        for part in self.partitions.values():
            if every_topic or part.tp.topic in topics:
                self._configure(part, log_settings_for(image, static, part.tp.topic, self.settings.node_id))

    @staticmethod
    def _configure(part: Partition, settings: TopicLogSettings) -> None:
        if settings.config != part.log.config:
            part.log.config = settings.config
        part.min_insync_replicas = settings.min_insync_replicas
        part.log_append_time = settings.log_append_time
        part.produce_rules = settings.produce_rules

    # -- opening and deleting logs ----------------------------------------------------------------

    async def _open(self, image: MetadataImage, new: list[LocalPartition]) -> None:
        """Open the logs of new replicas, all in one worker-thread hop, then register them."""
        static = dict(self.settings.static_broker_configs)
        settings_of: dict[str, TopicLogSettings] = {}
        requests = []
        for local in new:
            topic_settings = settings_of.get(local.topic_name)
            if topic_settings is None:
                topic_settings = settings_of[local.topic_name] = log_settings_for(image, static, local.topic_name,
                                                                                   self.settings.node_id)
            directory = local.registration.directory_of(self.node_id) or DIRECTORY_UNASSIGNED
            requests.append(_OpenRequest(TopicPartition(local.topic_name, local.partition), local.topic_id,
                                         topic_settings, directory))
        # New replicas go to the log directory holding the fewest (JBOD); with one directory there is
        # nothing to count, and counting walked every replica of the broker at each new one.
        counts = Counter(part.log.directory.parent for part in self.partitions.values()) \
            if len(self.log_manager.online_dirs) > 1 else Counter()
        opened: list[Partition] = []
        stale: list[Path] = []
        failed: list[tuple[TopicPartition, OfflineReplica]] = []
        # In chunks, num.recovery.threads.per.data.dir worker threads per log directory at a time; each
        # chunk's descriptors beyond log.open.segments.max are closed on this thread once it is done.
        placing = threading.Lock()
        listings: dict[Path, frozenset[str]] = {}  # each log directory's entries, listed once per call
        # After a clean stop nothing is recovered: opening a log is a few small system calls and Python
        # objects, which one thread (for every directory) does faster than several taking turns at the interpreter lock
        # (33,000 logs: 6.3 s with one, 9.6 s with two). Recovery, reading and checking batches, uses
        # num.recovery.threads.per.data.dir threads per directory, as Kafka does.
        clean = self._first_open and self.log_manager.cleanly_stopped
        self._first_open = False
        threads = trio.CapacityLimiter(1 if clean else max(1, self.settings.recovery_threads_per_data_dir
                                                                 * len(self.log_manager.online_dirs)))

        async def open_chunk(chunk: list[_OpenRequest]) -> None:
            result = await trio.to_thread.run_sync(self._open_logs, chunk, counts, placing, listings,
                                                   limiter=threads)
            DESCRIPTORS.trim()
            opened.extend(result[0])
            stale.extend(result[1])
            failed.extend(result[2])

        # Thousands of long-lived objects in the making: the cyclic collector would walk the growing heap
        # again and again (a third of the time at 33,000 logs); they are frozen once registered.
        with collector_paused(len(requests) >= _FREEZE_AFTER):
            async with self._log_manager_lock, trio.open_nursery() as nursery:
                for start in range(0, len(requests), _OPEN_CHUNK):
                    nursery.start_soon(open_chunk, requests[start:start + _OPEN_CHUNK])
        if opened:
            self._log.info("opened logs", partitions=len(opened))
        for path in stale:
            self._delete_send.send_nowait(path)
        for part in opened:
            old = self.partitions.get(part.tp)
            if old is not None:  # an older topic of the same name still registered: it is gone
                self._detach_partition(part.tp)
            self.offline.pop(part.tp, None)
            self.partitions[part.tp] = part
            self.partitions_version += 1
            self._by_id[(part.topic_id, part.tp.partition)] = part
        for tp, replica in failed:
            if tp in self.partitions:  # an older topic of the same name: it is gone
                self._detach_partition(tp)
            self._went_offline(tp, replica)

    def _open_logs(self, requests: list[_OpenRequest], counts: Counter, placing: threading.Lock,
                   listings: dict[Path, frozenset[str]]
                   ) -> tuple[list[Partition], list[Path], list[tuple[TopicPartition, OfflineReplica]]]:
        """Blocking: open (or create) each log and load its producer state; returns the partitions,
        the stale directories (of deleted topics of the same name) it renamed for deletion, and the
        replicas that are offline (their log could not be opened, or may be in an offline log dir).
        ``listings``: each log directory's entries, listed by the first chunk that needs them and
        shared (under ``placing``) by the chunks of one call, instead of one lookup per replica."""
        opened: list[Partition] = []
        stale: list[Path] = []
        failed: list[tuple[TopicPartition, OfflineReplica]] = []
        online = self.log_manager.online_dirs
        offline_dirs = self.log_manager.offline_dirs
        by_id = {dir_id: path for path, dir_id in self.log_manager.directory_ids().items()}
        for request in requests:
            tp = request.tp
            log = None
            directory = None
            try:
                known = False
                for log_dir in online:
                    name = log_dir_name(tp)
                    with placing:
                        entries = listings.get(log_dir)
                        if entries is None:
                            entries = listings[log_dir] = frozenset(os.listdir(log_dir))
                    if name not in entries:
                        continue
                    candidate = log_dir / name
                    on_disk = read_partition_metadata(candidate)
                    if on_disk is not None and on_disk != str(request.topic_id):
                        # A topic of the same name deleted while this broker was away: its log is stale.
                        self._log.info("removing the log of a deleted topic", partition=str(tp), topic_id=on_disk)
                        stale.append(self._rename_for_deletion(candidate, on_disk))
                        continue
                    directory = candidate
                    known = on_disk is not None
                    break
                assigned = by_id.get(request.directory)
                if directory is None and assigned is not None and assigned in offline_dirs:
                    reason = f"its log directory is offline ({offline_dirs[assigned]})"
                    failed.append((tp, OfflineReplica(request.topic_id, reason)))
                    continue
                if directory is None and assigned is not None:
                    directory = assigned / log_dir_name(tp)  # where the controller recorded it
                if directory is None and offline_dirs:
                    # Not in a usable log dir: it may be in the offline one. A new empty log here would
                    # hide that one's records when it is back (Kafka keeps such a replica offline too).
                    reason = f"its log may be in an offline log directory ({'; '.join(offline_dirs.values())})"
                    failed.append((tp, OfflineReplica(request.topic_id, reason)))
                    continue
                with placing:  # the chunks' threads share the counts
                    if directory is None:
                        parent = min(online, key=lambda d: (counts[d], str(d)))
                        directory = parent / log_dir_name(tp)
                    counts[directory.parent] += 1
                log = self.log_manager.open_log(directory, request.settings.config)
                if not known:
                    write_partition_metadata(directory, request.topic_id)
                state = ps.ProducerStateManager(expiration_ms=self.settings.producer_id_expiration_ms)
                part = Partition(tp, request.topic_id, log, self.node_id, self.clock, state)
                part.on_segments_detached = self._delete_segments_later
                part.on_storage_error = self.mark_offline
                part.min_insync_replicas = request.settings.min_insync_replicas
                part.log_append_time = request.settings.log_append_time
                part.produce_rules = request.settings.produce_rules
                # The listing Log.open took (dropped from the log: 100,000 of them would stay in memory).
                listing, log.listing_at_open = log.listing_at_open, None
                part.reload_producer_state(listing)
            except OSError as exc:
                if log is not None:
                    log.abandon()
                where = exc.filename or directory or log_dir_name(tp)
                failed.append((tp, OfflineReplica(request.topic_id, f"{where}: {describe_os_error(exc)}")))
                continue
            opened.append(part)
            self._log.debug("opened log", partition=str(tp), directory=str(directory),
                            log_end_offset=log.log_end_offset, high_watermark=log.high_watermark)
        return opened, stale, failed

    def _went_offline(self, tp: TopicPartition, replica: OfflineReplica) -> None:
        """Trio thread: ``tp`` (with no `Partition` any more) is offline; tell the heartbeat."""
        self.offline[tp] = replica
        self._log.error("replica offline: KAFKA_STORAGE_ERROR until a restart", partition=str(tp),
                        reason=replica.reason)
        if self.on_offline is not None:
            self.on_offline()

    def mark_offline(self, part: Partition, exc: OSError) -> None:
        """Trio thread: ``part``'s files failed (``exc``, not a full disk): the log directory holding
        it goes offline with every replica in it (`fail_log_dir`)."""
        if self.partitions.get(part.tp) is not part:
            return
        where = exc.filename or part.log.directory
        reason = f"{where}: {describe_os_error(exc)}"
        log_dir = self.log_manager.log_dir_of(part.log.directory)
        if log_dir is None:  # not under a log directory of this broker: the replica alone
            self._take_offline([part], reason)
            return
        self.fail_log_dir(log_dir, reason)

    def fail_log_dir(self, log_dir: Path, reason: str) -> None:
        """Trio thread: the log directory ``log_dir`` failed (``reason``: ``<file>: <why> (<errno>)``).
        Every replica in it goes offline and its log is closed (in a worker thread, once no log work
        runs, as a crash would leave it); nothing more is written there; the heartbeat that follows
        names the directory. The broker stops when no log directory is left."""
        if not self.log_manager.fail_dir(log_dir, reason):
            return
        self.mover.cancel_in(log_dir)
        in_dir = [part for part in self.partitions.values() if self.log_manager.log_dir_of(part.log.directory) == log_dir]
        self._log.error("log directory offline: its replicas answer KAFKA_STORAGE_ERROR until a restart",
                        log_dir=str(log_dir), reason=reason, replicas=len(in_dir))
        self._take_offline(in_dir, f"log directory {log_dir} offline: {reason}")
        if not self.log_manager.online_dirs:
            failures = "; ".join(self.log_manager.offline_dirs.values())
            fatal = FatalError(f"every log directory failed; stopping the broker (log.dirs): {failures}")

            async def stop() -> None:
                raise fatal

            if self._nursery is None:
                raise fatal
            self._nursery.start_soon(stop)

    def _take_offline(self, parts: list[Partition], reason: str) -> None:
        """Trio thread: detach ``parts``, report them offline and close their logs in the background."""
        for part in parts:
            self._detach_partition(part.tp)
            self.offline[part.tp] = OfflineReplica(part.topic_id, reason)
            self._log.error("replica offline: KAFKA_STORAGE_ERROR until a restart", partition=str(part.tp),
                            reason=reason)
        if parts and self.on_offline is not None:
            self.on_offline()
        self._signal_assignments()

        async def abandon(part: Partition) -> None:
            await part.pause_cleaning()  # for good
            await part.wait_idle()
            await trio.to_thread.run_sync(part.log.abandon)

        if self._nursery is not None:
            for part in parts:
                self._nursery.start_soon(abandon, part)

    def offline_log_dir_ids(self) -> list[Uuid]:
        """The ids of the offline log directories (what a heartbeat reports as OfflineLogDirs)."""
        ids = self.log_manager.directory_ids()
        return [ids[path] for path in self.log_manager.offline_dirs if path in ids]

    def _detach_partition(self, tp: TopicPartition) -> Partition:
        """Take a replica out of the maps and stop its roles (trio thread); its log is closed apart."""
        part = self.partitions.pop(tp)
        self.partitions_version += 1
        self._by_id.pop((part.topic_id, tp.partition), None)
        self.mover.cancel_soon(tp)
        part.make_offline()
        self._assign_fetch(tp, None)
        return part

    def _delete_logs(self, parts: list[Partition]) -> list[Path]:
        """Blocking: close the logs of replicas that are gone and rename their directories for deletion;
        returns the renamed directories."""
        renamed = []
        for part in parts:
            try:
                part.log.close()
            except OSError as exc:
                self._log.warning("closing a deleted log failed", partition=str(part.tp), error=str(exc))
            self.log_manager.forget(part.log.directory)
            try:
                doomed = self._rename_for_deletion(part.log.directory, str(part.topic_id))
            except OSError as exc:
                self._log.warning("cannot rename a deleted log", partition=str(part.tp), error=str(exc))
                continue
            renamed.append(doomed)
            # Logged once the directory is renamed: from here the log is gone under its own name.
            self._log.info("deleting log", partition=str(part.tp), directory=doomed.name)
        return renamed

    @staticmethod
    def _rename_for_deletion(directory: Path, topic_id: str) -> Path:
        doomed = directory.with_name(f"{directory.name}.{topic_id}{DELETE_SUFFIX}")
        os.replace(directory, doomed)
        return doomed

    async def _run_deletions(self) -> None:
        async for directory in self._delete_receive:
            await trio.to_thread.run_sync(shutil.rmtree, directory, True)
            event, self.deleted = self.deleted, trio.Event()
            event.set()

    # -- moving replicas between log directories ------------------------------------------------

    async def alter_replica_log_dir(self, tp: TopicPartition, path: Path) -> ErrorCode:
        """Move this broker's replica ``tp`` to its log directory ``path`` (AlterReplicaLogDirs): answered
        at once, the copy runs in the background (see kraftpy.broker.log_dir_mover). Kafka's errors:
        LOG_DIR_NOT_FOUND (not a log directory of this broker), KAFKA_STORAGE_ERROR (that directory or
        the replica is offline), REPLICA_NOT_AVAILABLE (no replica of it here)."""
        if path not in self.log_manager.dirs:
            return ErrorCode.LOG_DIR_NOT_FOUND
        if path in self.log_manager.offline_dirs or tp in self.offline:
            return ErrorCode.KAFKA_STORAGE_ERROR
        part = self.partitions.get(tp)
        if part is None or self._nursery is None:
            return ErrorCode.REPLICA_NOT_AVAILABLE
        if part.log.directory.parent == path:
            await self.mover.cancel(tp)  # already there: a move elsewhere stops
            return ErrorCode.NONE
        if (path / log_dir_name(tp)).exists():
            self._log.warning("cannot move a replica: its directory name is taken in the target",
                              partition=str(tp), target=str(path))
            return ErrorCode.KAFKA_STORAGE_ERROR
        try:
            await self.mover.start(self._nursery, part, path)
        except OSError as exc:
            self.fail_log_dir(path, f"{exc.filename or path}: {describe_os_error(exc)}")
            return ErrorCode.KAFKA_STORAGE_ERROR
        return ErrorCode.NONE

    def _replica_moved(self, part: Partition, old_directory: Path, swapped: Swapped) -> None:
        """Trio thread: ``part`` now serves from its log in another directory. The old log closes and its
        directory goes once no fetch can still be sending from it; the controller learns the new directory."""
        delay = part.log.config.file_delete_delay_ms / 1000
        ids = self.log_manager.directory_ids()
        new_id = ids.get(part.log.directory.parent)
        if new_id is not None:
            self.report_directory(part.topic_id, part.tp.partition, new_id)

        async def retire() -> None:
            try:
                await part.run_exclusive(part.snapshot_producer_state)
            except (OSError, ValueError, LogClosedError) as exc:
                self._log.warning("producer state snapshot after a move failed", partition=str(part.tp),
                                  error=str(exc))
            await trio.sleep(delay)
            await trio.to_thread.run_sync(swapped.old_log.abandon)
            self._delete_send.send_nowait(swapped.doomed)

        if self._nursery is not None:
            self._nursery.start_soon(retire)

    # -- log directory assignments (KIP-858) -------------------------------------------------------

    def _check_directory(self, topic_id: Uuid, topic: str, index: int, reg: PartitionRegistration) -> None:
        """Queue an AssignReplicasToDirs entry when the metadata records another directory for this
        broker's replica than the one holding its log (and drop one the metadata now agrees with)."""
        part = self.partitions.get(TopicPartition(topic, index))
        if part is None or part.topic_id != topic_id:
            return
        log_dir = self.log_manager.log_dir_of(part.log.directory)
        actual = self.log_manager.directory_ids().get(log_dir) if log_dir is not None else None
        if actual is None:
            return  # a directory without an id (never formatted): nothing to report
        key = (topic_id, index)
        if reg.directory_of(self.node_id) == actual:
            if self.pending_dir_assignments.get(key) == actual:
                del self.pending_dir_assignments[key]
            return
        self.report_directory(topic_id, index, actual)

    def report_directory(self, topic_id: Uuid, index: int, directory: Uuid) -> None:
        """Tell the controller (soon, batched) that this broker's replica is in ``directory``."""
        self.pending_dir_assignments[(topic_id, index)] = directory
        self._dir_assignments_queued.set()

    async def _run_dir_assignments(self) -> None:
        """Send the queued directory assignments, as many at a time as are queued, until the
        controller has recorded each (retried after ``replica.fetch.backoff.ms`` on failure)."""
        backoff = max(self.settings.replica_fetch_backoff_ms, 1) / 1000
        while True:
            await self._dir_assignments_queued.wait()
            self._dir_assignments_queued = trio.Event()
            while self.pending_dir_assignments:
                batch = dict(self.pending_dir_assignments)
                if not await self._send_dir_assignments(batch):
                    await trio.sleep(backoff)
                    continue
                for key, directory in batch.items():
                    if self.pending_dir_assignments.get(key) == directory:
                        del self.pending_dir_assignments[key]

    async def _send_dir_assignments(self, batch: dict[tuple[Uuid, int], Uuid]) -> bool:
        """One AssignReplicasToDirs; whether the controller answered it (entries of partitions it no
        longer knows, or this broker no longer holds, are dropped: there is nothing to record)."""
        reg = self.image.cluster.broker(self.node_id)
        if reg is None:
            return False
        by_dir: dict[Uuid, dict[Uuid, list[int]]] = {}
        for (topic_id, index), directory in sorted(batch.items(), key=lambda item: (str(item[0][0]), item[0][1])):
            by_dir.setdefault(directory, {}).setdefault(topic_id, []).append(index)
        request = AssignReplicasToDirsRequest(self.node_id, reg.epoch, tuple(
            AssignReplicasToDirsDirectory(directory, tuple(
                AssignReplicasToDirsTopic(topic_id, tuple(AssignReplicasToDirsPartition(i) for i in indexes))
                for topic_id, indexes in topics.items()))
            for directory, topics in by_dir.items()))
        try:
            response = await self.channel.assign_replicas_to_dirs(request)
        except ControllerUnavailable as exc:
            self._log.warning("AssignReplicasToDirs failed: no controller", error=str(exc))
            return False
        if response.error_code != ErrorCode.NONE:
            self._log.warning("AssignReplicasToDirs refused", error=ErrorCode(response.error_code).name)
            return False
        refused = [(str(t.topic_id), p.partition_index, ErrorCode(p.error_code).name)
                   for d in response.directories for t in d.topics for p in t.partitions if p.error_code]
        if refused:
            self._log.info("directory assignments not recorded", refused=refused)
        self._log.info("log directories assigned", replicas=len(batch))
        return True

    # -- ISR changes ------------------------------------------------------------------------------

    def maybe_expand_isr(self, part: Partition, replica_id: int, broker_epoch: int = -1) -> None:
        """Propose ``replica_id`` for the ISR of ``part`` once it caught up. ``broker_epoch``: the epoch a
        Fetch v15+ names (KIP-903); a follower fetching under another epoch than its registration's (a
        process of an earlier registration, or metadata that has not caught up) joins no ISR."""
        if not self.image.cluster.is_active(replica_id):
            return
        if broker_epoch >= 0:
            reg = self.image.cluster.broker(replica_id)
            if reg is None or reg.epoch != broker_epoch:
                return
        new_isr = part.isr_to_expand(replica_id)
        if new_isr is not None:
            part.propose_isr(new_isr)
            self._isr_send.send_nowait(part)

    async def maybe_shrink_isrs(self) -> None:
        lag = self.settings.replica_lag_time_max_ms
        # A copy of the replicas (one C-level pass), walked in chunks: at 100,000 replicas, picking the
        # leaders out in one go held the event loop for tens of milliseconds.
        for i, part in enumerate(list(self.partitions.values())):
            if i and not i % _CHUNK:
                await trio.lowlevel.checkpoint()
            if not part.is_leader:
                continue
            new_isr = part.isr_to_shrink(lag)
            if new_isr is not None:
                part.propose_isr(new_isr)
                self._isr_send.send_nowait(part)

    async def _run_isr_expiry(self) -> None:
        interval = max(self.settings.replica_lag_time_max_ms / 2, 1) / 1000
        while True:
            await trio.sleep(interval)
            await self.maybe_shrink_isrs()

    async def _run_isr_changes(self) -> None:
        """Send proposed ISR changes to the controller, as many at a time as are queued."""
        while True:
            batch = [await self._isr_receive.receive()]
            while True:
                try:
                    batch.append(self._isr_receive.receive_nowait())
                except trio.WouldBlock:
                    break
            await self._send_isr_changes(batch)

    async def _send_isr_changes(self, parts: Iterable[Partition]) -> None:
        reg = self.image.cluster.broker(self.node_id)
        broker_epoch = reg.epoch if reg is not None else -1
        by_topic: dict[Uuid, list[AlterPartitionPartitionData]] = {}
        sent: list[tuple[Partition, int]] = []
        for part in parts:
            if part.pending_isr is None or part.role is not Role.LEADER:
                continue
            states = []
            for r in part.pending_isr:
                broker = self.image.cluster.broker(r)
                states.append(BrokerState(r, broker.epoch if broker is not None else -1))
            by_topic.setdefault(part.topic_id, []).append(
                AlterPartitionPartitionData(part.tp.partition, part.leader_epoch, tuple(states), part.partition_epoch)
            )
            sent.append((part, part.leader_epoch))
        if not sent:
            return
        request = AlterPartitionRequest(
            self.node_id, broker_epoch, tuple(AlterPartitionTopicData(tid, tuple(ps_)) for tid, ps_ in by_topic.items())
        )
        try:
            response = await self.channel.alter_partition(request)
        except ControllerUnavailable as exc:
            self._log.warning("AlterPartition failed: no controller", error=str(exc))
            for part, _ in sent:
                part.isr_proposal_failed()
            return
        if response.error_code != ErrorCode.NONE:
            self._log.warning("AlterPartition refused", error=ErrorCode(response.error_code).name)
            for part, _ in sent:
                part.isr_proposal_failed()
            return
        for part, epoch in sent:
            if part.leader_epoch != epoch:
                continue  # leadership moved on while the request was out
            try:
                result = response.partition(part.topic_id, part.tp.partition)
            except StopIteration:
                part.isr_proposal_failed()
                continue
            if result.error_code == ErrorCode.NONE:
                part.isr_change_committed(result.leader_epoch, result.partition_epoch, tuple(result.isr))
            else:
                self._log.info("ISR change refused", partition=str(part.tp),
                               error=ErrorCode(result.error_code).name)
                part.isr_proposal_failed()

    # -- housekeeping -----------------------------------------------------------------------------

    async def housekeeping(self) -> int:
        """Retention and due flushes for every partition that has any (file work in worker threads),
        producer expiry; returns how many segments were deleted."""
        deleted = 0
        now = self.clock()
        for i, part in enumerate(list(self.partitions.values())):
            if i and not i % _CHUNK:
                await trio.lowlevel.checkpoint()
            part.producer_state.remove_expired(now)
            if part.log.closed or not part.housekeeping_due():
                continue
            try:
                gone = await part.run_housekeeping()
            except (OSError, ValueError) as exc:
                self._log.warning("retention failed", partition=str(part.tp), error=str(exc))
                continue
            deleted += gone
        return deleted

    def _delete_segments_later(self, part: Partition) -> None:
        """Remove the files of the segments ``part`` detached once no reader can still hold them
        (after file.delete.delay.ms, as Kafka does)."""
        async def later() -> None:
            await trio.sleep(part.log.config.file_delete_delay_ms / 1000)
            try:
                await part.delete_detached_segments()
            except OSError as exc:  # a failing disk: the files stay; open removes ".deleted" leftovers
                self._log.warning("cannot remove deleted segments", partition=str(part.tp),
                                  error=describe_os_error(exc))

        if self._nursery is not None:
            self._nursery.start_soon(later)

    @staticmethod
    async def _run_descriptor_trim() -> None:
        """Close the segment descriptors opened again beyond log.open.segments.max: taken from their
        segments on this thread (see kraftpy.storage.descriptors), closed in a worker thread."""
        while True:
            await trio.sleep(_TRIM_INTERVAL)
            detached = DESCRIPTORS.evict()
            if detached:
                await trio.to_thread.run_sync(close_descriptors, detached)

    async def _run_housekeeping(self) -> None:
        while True:
            await trio.sleep(self.settings.log_retention_check_interval_ms / 1000)
            await self.housekeeping()

    async def checkpoint_now(self) -> None:
        """Write the log directories' offset checkpoints (one worker-thread hop for all of them); a
        directory whose files cannot be written (not for a full disk) goes offline."""
        async with self._log_manager_lock:
            parts = list(self.partitions.values())  # taken under the lock: none forgotten since
            failed = await trio.to_thread.run_sync(lambda: self.log_manager.checkpoint(p.log for p in parts))
        for path, exc in failed.items():
            where = exc.filename or path
            if exc.errno in NO_SPACE_ERRNOS:
                self._log.warning("offset checkpoint failed", log_dir=str(path), error=describe_os_error(exc))
                continue
            self.fail_log_dir(path, f"{where}: {describe_os_error(exc)}")

    async def _run_checkpoints(self) -> None:
        while True:
            await trio.sleep(self.settings.high_watermark_checkpoint_interval_ms / 1000)
            await self.checkpoint_now()

    def logs(self) -> list[Log]:
        return [part.log for part in self.partitions.values()]
