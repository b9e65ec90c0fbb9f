"""The replicas this broker holds: logs under the log dirs, leader and follower roles from metadata.

Theory of operation
-------------------
``apply_image`` is called with every committed ``MetadataImage`` (through ``BrokerServer.publish``)
and makes the broker's partitions match it, synchronously, so that a request handled after it
sees the new roles:

* a partition with this broker among its replicas gets a log — opened if its directory
  ``<topic>-<partition>`` exists under one of the log dirs and belongs to the same topic id
  (``partition.metadata``), created in the log dir holding the fewest partitions otherwise;
* it leads when the registration names this broker leader *and* the broker is running (a
  fenced broker takes no leadership); it follows the named leader otherwise;
* a partition that left the image (its topic was deleted) or no longer lists this broker is
  closed and its directory renamed ``<topic>-<partition>.<id>-delete``, removed in the background.

The fetchers are told which partitions to fetch from which leader (``fetch_assignments``). ISR
changes the leaders propose are queued and sent to the controller in batches by
``run_isr_changes``; ``run_isr_expiry`` looks for lagging followers, ``run_retention`` applies
retention and DeleteRecords' log start offsets, ``run_checkpoints`` writes high watermarks.

Everything here runs on the trio thread. Log calls are plain calls: appends are one ``os.write``
of a batch into the page cache, and reads return file regions without touching the data.
"""

from __future__ import annotations

import math
import os
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path

import structlog
import trio

from kraftpy.broker import producer_state as ps
from kraftpy.broker.controller_channel import ControllerChannel, ControllerUnavailable
from kraftpy.broker.partition import Partition, Role, TopicPartition
from kraftpy.broker.settings import BrokerSettings
from kraftpy.ids import Uuid
from kraftpy.metadata import configs as config_defs
from kraftpy.metadata.image import EMPTY_IMAGE, MetadataImage, PartitionRegistration
from kraftpy.metadata.messages import (
    AlterPartitionPartitionData,
    AlterPartitionRequest,
    AlterPartitionTopicData,
    BrokerState,
)
from kraftpy.metadata.records import NO_LEADER
from kraftpy.protocol.errors import ErrorCode
from kraftpy.storage.log_config import LogConfig
from kraftpy.storage.log_manager import LogManager

PARTITION_METADATA_FILE = "partition.metadata"
DELETE_SUFFIX = "-delete"

_logger = structlog.get_logger(__name__)


def log_dir_name(tp: TopicPartition) -> str:
    return f"{tp.topic}-{tp.partition}"


def write_partition_metadata(directory: Path, topic_id: Uuid) -> None:
    """Kafka's ``partition.metadata``: which topic id a log directory belongs to."""
    tmp = directory / (PARTITION_METADATA_FILE + ".tmp")
    tmp.write_text(f"version: 0\ntopic_id: {topic_id}\n")
    os.replace(tmp, directory / PARTITION_METADATA_FILE)


def read_partition_metadata(directory: Path) -> str | None:
    try:
        text = (directory / PARTITION_METADATA_FILE).read_text()
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "topic_id":
            return value.strip()
    return None


def log_config_for(image: MetadataImage, static: dict | None, topic: str) -> tuple[LogConfig, int, bool]:
    """The topic's LogConfig, min.insync.replicas and whether it stamps LogAppendTime."""
    static = static or {}

    def get(name: str) -> str:
        return config_defs.effective_topic_config(image, static, topic, name)[0]

    def number(name: str) -> int:
        return int(get(name).strip())

    config = LogConfig(
        segment_bytes=number("segment.bytes"),
        segment_ms=number("segment.ms"),
        retention_ms=number("retention.ms"),
        retention_bytes=number("retention.bytes"),
        index_interval_bytes=number("index.interval.bytes"),
        flush_interval_messages=number("flush.messages"),
        flush_interval_ms=number("flush.ms"),
        max_message_bytes=max(1, number("max.message.bytes")),
    )
    return config, number("min.insync.replicas"), get("message.timestamp.type").strip() == "LogAppendTime"


class ReplicaManager:
    def __init__(
        self,
        settings: BrokerSettings,
        channel: ControllerChannel,
        clock: Callable[[], int],
    ) -> None:
        self.settings = settings
        self.node_id = settings.node_id
        self.channel = channel
        self.clock = clock
        self._log = _logger.bind(node_id=self.node_id)
        self.image: MetadataImage = EMPTY_IMAGE
        self.running = False
        self.partitions: dict[TopicPartition, Partition] = {}
        self._by_id: dict[tuple[Uuid, int], Partition] = {}
        #: What the fetchers should do: leader id -> partitions to fetch from it.
        self.fetch_assignments: dict[int, set[TopicPartition]] = {}
        #: Notified whenever the assignments or any partition's role changes.
        self.assignments_changed = trio.Event()
        self._isr_send, self._isr_receive = trio.open_memory_channel[Partition](math.inf)
        self._delete_send, self._delete_receive = trio.open_memory_channel[Path](math.inf)
        self.log_manager = LogManager(settings.log_dirs, clock=clock)
        self.log_manager.load()
        for directory in settings.log_dirs:
            for child in directory.iterdir():
                if child.is_dir() and child.name.endswith(DELETE_SUFFIX):
                    self._delete_send.send_nowait(child)

    # -- lookups ----------------------------------------------------------------------------------

    def get(self, topic: str, partition: int) -> Partition | None:
        return self.partitions.get(TopicPartition(topic, partition))

    def get_by_id(self, topic_id: Uuid, partition: int) -> Partition | None:
        return self._by_id.get((topic_id, partition))

    def leader_endpoint(self, broker_id: int) -> tuple[str, int] | None:
        reg = self.image.cluster.broker(broker_id)
        if reg is None:
            return None
        for endpoint in reg.listeners:
            if endpoint.name == self.settings.inter_broker_listener_name:
                return endpoint.host, endpoint.port
        return None

    # -- metadata ---------------------------------------------------------------------------------

    def set_running(self, running: bool) -> None:
        if running != self.running:
            self.running = running
            self.apply_image(self.image)

    def apply_image(self, image: MetadataImage) -> None:
        """Make the local replicas match ``image`` (see the module docstring)."""
        previous = self.image
        self.image = image
        wanted: dict[TopicPartition, tuple[Uuid, PartitionRegistration]] = {}
        for topic, pid, reg in image.topics.partitions():
            if self.node_id in reg.replicas:
                wanted[TopicPartition(topic.name, pid)] = (topic.id, reg)

        for tp in [tp for tp, part in self.partitions.items() if tp not in wanted or wanted[tp][0] != part.topic_id]:
            self._remove(tp)

        configs_changed = previous.configs is not image.configs
        assignments: dict[int, set[TopicPartition]] = {}
        for tp, (topic_id, reg) in wanted.items():
            part = self.partitions.get(tp)
            try:
                if part is None:
                    part = self._open(tp, topic_id, image)
                elif configs_changed:
                    self._apply_topic_config(part, image)
            except OSError as exc:
                self._log.error("cannot open the log", partition=str(tp), error=str(exc))
                continue
            if reg.leader == self.node_id and self.running:
                part.make_leader(reg)
            elif reg.leader == self.node_id:
                part.make_offline()
            else:
                part.make_follower(reg)
                if reg.leader != NO_LEADER:
                    assignments.setdefault(reg.leader, set()).add(tp)
        self.fetch_assignments = assignments
        self._signal_assignments()

    def _signal_assignments(self) -> None:
        event, self.assignments_changed = self.assignments_changed, trio.Event()
        event.set()

    def _apply_topic_config(self, part: Partition, image: MetadataImage) -> None:
        config, min_isr, append_time = log_config_for(image, dict(self.settings.static_broker_configs), part.tp.topic)
        if config != part.log.config:
            part.log.config = config
        part.min_insync_replicas = min_isr
        part.log_append_time = append_time

    def _choose_log_dir(self) -> Path:
        counts = {d: 0 for d in self.settings.log_dirs}
        for part in self.partitions.values():
            parent = part.log.directory.parent
            if parent in counts:
                counts[parent] += 1
        return min(self.settings.log_dirs, key=lambda d: (counts[d], str(d)))

    def _open(self, tp: TopicPartition, topic_id: Uuid, image: MetadataImage) -> Partition:
        directory = None
        for log_dir in self.settings.log_dirs:
            candidate = log_dir / log_dir_name(tp)
            if candidate.is_dir():
                on_disk = read_partition_metadata(candidate)
                if on_disk is not None and on_disk != str(topic_id):
                    # A topic of the same name deleted while this broker was away: its log is stale.
                    self._log.info("removing the log of a deleted topic", partition=str(tp), topic_id=on_disk)
                    self._schedule_delete(candidate, on_disk)
                    continue
                directory = candidate
                break
        if directory is None:
            directory = self._choose_log_dir() / log_dir_name(tp)
        config, min_isr, append_time = log_config_for(image, dict(self.settings.static_broker_configs), tp.topic)
        log = self.log_manager.open_log(directory, config)
        write_partition_metadata(directory, topic_id)
        state = ps.ProducerStateManager(expiration_ms=self.settings.producer_id_expiration_ms)
        part = Partition(tp, topic_id, log, self.node_id, self.clock, state)
        part.min_insync_replicas = min_isr
        part.log_append_time = append_time
        part.reload_producer_state()
        self.partitions[tp] = part
        self._by_id[(topic_id, tp.partition)] = part
        self._log.info("opened log", partition=str(tp), directory=str(directory),
                       log_end_offset=log.log_end_offset, high_watermark=log.high_watermark)
        return part

    def _remove(self, tp: TopicPartition) -> None:
        part = self.partitions.pop(tp)
        self._by_id.pop((part.topic_id, tp.partition), None)
        part.make_offline()
        part.log.close()
        self.log_manager.forget(part.log.directory)
        self._log.info("deleting log", partition=str(tp))
        self._schedule_delete(part.log.directory, str(part.topic_id))

    def _schedule_delete(self, directory: Path, topic_id: str) -> None:
        doomed = directory.with_name(f"{directory.name}.{topic_id}{DELETE_SUFFIX}")
        os.replace(directory, doomed)
        self._delete_send.send_nowait(doomed)

    async def run_deletions(self) -> None:
        async for directory in self._delete_receive:
            await trio.to_thread.run_sync(shutil.rmtree, directory, True)

    # -- ISR changes ------------------------------------------------------------------------------

    def maybe_expand_isr(self, part: Partition, replica_id: int) -> None:
        if not self.image.cluster.is_active(replica_id):
            return
        new_isr = part.isr_to_expand(replica_id)
        if new_isr is not None:
            part.propose_isr(new_isr)
            self._isr_send.send_nowait(part)

    def maybe_shrink_isrs(self) -> None:
        lag = self.settings.replica_lag_time_max_ms
        for part in self.partitions.values():
            new_isr = part.isr_to_shrink(lag)
            if new_isr is not None:
                part.propose_isr(new_isr)
                self._isr_send.send_nowait(part)

    async def run_isr_expiry(self) -> None:
        interval = max(self.settings.replica_lag_time_max_ms / 2, 1) / 1000
        while True:
            await trio.sleep(interval)
            self.maybe_shrink_isrs()

    async def run_isr_changes(self) -> None:
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

    def apply_retention(self) -> int:
        deleted = 0
        now = self.clock()
        for part in list(self.partitions.values()):
            try:
                gone = part.log.delete_old_segments()
                if gone:
                    self._log.info("retention deleted segments", partition=str(part.tp), segments=gone,
                                   log_start_offset=part.log.log_start_offset)
                deleted += gone
                part.log.flush_if_due()
                part.producer_state.remove_expired(now)
                # Snapshots below the log start are superseded, except the newest: producer state
                # outlives the data it was built from.
                offsets = ps.snapshot_offsets(part.log.directory)
                if len(offsets) > 1:
                    ps.delete_snapshots_below(part.log.directory, min(offsets[-1], part.log.log_start_offset))
            except (OSError, ValueError) as exc:
                self._log.warning("retention failed", partition=str(part.tp), error=str(exc))
        return deleted

    async def run_retention(self) -> None:
        while True:
            await trio.sleep(self.settings.log_retention_check_interval_ms / 1000)
            self.apply_retention()

    async def run_checkpoints(self) -> None:
        while True:
            await trio.sleep(self.settings.high_watermark_checkpoint_interval_ms / 1000)
            logs = [part.log for part in self.partitions.values()]
            try:
                await trio.to_thread.run_sync(self.log_manager.checkpoint, logs)
            except OSError as exc:
                self._log.warning("offset checkpoint failed", error=str(exc))

    def close(self) -> None:
        for part in self.partitions.values():
            part.make_offline()
            try:
                part.snapshot_producer_state()
            except (OSError, ValueError) as exc:
                self._log.warning("producer state snapshot failed", partition=str(part.tp), error=str(exc))
        for log, exc in self.log_manager.close_all([part.log for part in self.partitions.values()]):
            self._log.warning("closing a log failed", log=log.directory.name, error=str(exc))
        self.partitions.clear()
        self._by_id.clear()
