"""What a running node reports at scrape time, and whether it is ready.

Theory of operation. Most of what an operator watches is state that already exists: the broker's
replicas (`ReplicaManager.partitions`), the committed metadata image, the group coordinator's
loaded shards. Nothing here is counted on the data path: one collector (`NodeCollector`,
registered once in the process's `kraftpy.metrics.REGISTRY`) walks the nodes this process runs
each time Prometheus scrapes ``/metrics`` and reports what it finds, labelled ``node_id``. The
per-partition series (`PARTITION_SERIES`, four a replica) are written as exposition text directly
(`NodeCollector.partition_text`, a `kraftpy.metrics.add_text_section`): at 100,000 partitions they
are most of a scrape, and prometheus_client's sample objects cost ten times as much. The few
counters that must be counted as things happen (requests and their latency, bytes and messages
per topic, ISR shrinks and expands) live in `kraftpy.metrics`.

A node joins the collector while it runs (`track_broker`, `track_controller`) and leaves it when
it stops; a process running both roles (``kraftpy dev``) reports both sets.

Readiness (``GET /ready``, `Readiness`): a broker is ready while it is Running (registered,
caught up, unfenced); a controller while it knows the quorum's leader and has applied metadata
the quorum committed since it started (so it has heard from that leader, or is it); a combined
process needs both. ``GET /healthz`` only says the process answers.

The names, Kafka's JMX names they stand for, and what to alert on are in docs/operations.md.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import attrs
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from kraftpy.broker.lifecycle import BrokerLifecycle, BrokerState
from kraftpy.broker.partition import TopicPartition
from kraftpy.broker.server import BrokerServer
from kraftpy.metadata.controller_server import ControllerServer
from kraftpy.metadata.delta import MetadataDelta
from kraftpy.metadata.image import MetadataImage
from kraftpy.metadata.loader import MetadataLoader
from kraftpy.metrics import ISR_EXPANDS, ISR_SHRINKS, REGISTRY, add_text_section, help_line, label_value
from kraftpy.storage.descriptors import DESCRIPTORS

#: Kafka's BrokerState values (kafka.server:type=KafkaServer,name=BrokerState).
KAFKA_BROKER_STATE = {
    BrokerState.OFFLINE: 0,  # NOT_RUNNING
    BrokerState.FENCED: 2,  # RECOVERY: registered, catching up with the metadata log
    BrokerState.RUNNING: 3,  # RUNNING
    BrokerState.STOPPING: 6,  # PENDING_CONTROLLED_SHUTDOWN
}


#: The series of each partition replica a broker holds, name and help, in the order
#: `NodeCollector.partition_text` writes them.
PARTITION_SERIES: tuple[tuple[str, str], ...] = (
    ("kraftpy_log_size_bytes", "Bytes of a partition replica's log on disk."),
    ("kraftpy_log_end_offset", "A partition replica's log end offset."),
    ("kraftpy_log_start_offset", "A partition replica's log start offset."),
    ("kraftpy_log_high_watermark", "A partition replica's high watermark (what consumers may read)."),
)


@attrs.define(eq=False)
class TrackedBroker:
    node_id: int
    server: BrokerServer
    lifecycle: BrokerLifecycle
    loader: MetadataLoader


@attrs.define(eq=False)
class TrackedController:
    node_id: int
    server: ControllerServer
    #: Set once metadata the quorum committed was applied after the node started.
    applied_since_start: bool = False


class NodeCollector(Collector):
    """The scrape-time metrics of every node this process runs (see the module doc)."""

    def __init__(self) -> None:
        self.brokers: dict[int, TrackedBroker] = {}
        self.controllers: dict[int, TrackedController] = {}

    def describe(self) -> Iterator[GaugeMetricFamily]:
        return iter(self._families())

    def collect(self) -> Iterator[GaugeMetricFamily]:
        families = self._families()
        by_name = {f.name: f for f in families}
        for broker in list(self.brokers.values()):
            self._collect_broker(broker, by_name)
        loaders: dict[int, MetadataLoader] = {b.node_id: b.loader for b in list(self.brokers.values())}
        for controller in list(self.controllers.values()):
            self._collect_controller(controller, by_name)
            loaders.setdefault(controller.node_id, controller.server.loader)
        now = time.time()
        for node_id, loader in loaders.items():
            self._collect_loader(str(node_id), loader, now, by_name)
        return iter(families)

    def partition_text(self) -> str:
        """The `PARTITION_SERIES` of every replica of every broker, as exposition text."""
        brokers = list(self.brokers.values())
        lines: list[list[str]] = [[help_line(name, "gauge", doc)] for name, doc in PARTITION_SERIES]
        size, end, start, high = lines
        for broker in brokers:
            node = label_value(str(broker.node_id))
            topics: dict[str, str] = {}
            for tp, part in list(broker.server.replicas.partitions.items()):
                prefix = topics.get(tp.topic)
                if prefix is None:
                    prefix = topics[tp.topic] = f'{{node_id="{node}",topic="{label_value(tp.topic)}",partition="'
                labels = f'{prefix}{tp.partition}"}} '
                log = part.log
                size.append(f"kraftpy_log_size_bytes{labels}{log.size_in_bytes}\n")
                end.append(f"kraftpy_log_end_offset{labels}{log.log_end_offset}\n")
                start.append(f"kraftpy_log_start_offset{labels}{log.log_start_offset}\n")
                high.append(f"kraftpy_log_high_watermark{labels}{log.high_watermark}\n")
        return "".join("".join(family) for family in lines)

    @staticmethod
    def _families() -> list[GaugeMetricFamily]:
        node = ["node_id"]
        group = ["node_id", "group", "topic", "partition"]
        specs: list[tuple[str, str, list[str]]] = [
            # broker: replicas
            ("kraftpy_under_replicated_partitions",
             "Partitions this broker leads whose ISR is smaller than their replica set.", node),
            ("kraftpy_under_min_isr_partitions",
             "Partitions this broker leads whose ISR is smaller than min.insync.replicas (acks=all "
             "produce is refused).", node),
            ("kraftpy_at_min_isr_partitions",
             "Partitions this broker leads whose ISR is exactly min.insync.replicas (one more loss refuses "
             "acks=all).", node),
            ("kraftpy_leader_count", "Partitions this broker leads.", node),
            ("kraftpy_partition_count", "Partition replicas this broker holds (leader or follower).", node),
            ("kraftpy_offline_replicas", "Replicas this broker holds but cannot serve (their log failed).", node),
            ("kraftpy_offline_log_dirs", "Log directories of this broker that are offline (they failed to load "
             "or failed while it ran; Kafka's OfflineLogDirectoryCount).", node),
            ("kraftpy_broker_state", "The broker's state as Kafka numbers it: 0 not running, 2 fenced "
             "(catching up), 3 running, 6 controlled shutdown.", node),
            ("kraftpy_log_open_segment_files", "Segment files this process holds open (at most "
             "log.open.segments.max; the least recently used beyond it are closed).", node),
            ("kraftpy_log_open_segment_files_max", "log.open.segments.max as this process applies it.", node),
            ("kraftpy_log_segment_file_reopens", "Segment files opened again since the process started, their "
             "descriptors having been closed to stay within log.open.segments.max (monotonic).", node),
            ("kraftpy_log_writeback_bytes", "Bytes of appended log data this broker asked the kernel to start "
             "writing to disk since it started (log.writeback.interval.bytes; monotonic).", node),
            ("kraftpy_log_writeback_errors", "Requests to start the write-back of log data that the kernel refused "
             "(monotonic; the data stays in the page cache for the kernel's own write-back).", node),
            # broker: groups
            ("kraftpy_consumer_group_committed_offset",
             "A group's committed offset of a partition, reported by the group's coordinator.", group),
            ("kraftpy_consumer_group_lag",
             "A partition's high watermark minus the group's committed offset, reported by the group's "
             "coordinator for the partitions it holds a replica of.", group),
            ("kraftpy_consumer_groups", "Groups this broker coordinates, by state.", ["node_id", "state"]),
            # controller: the committed cluster state
            ("kraftpy_offline_partitions", "Partitions without a leader (the controller's view).", node),
            ("kraftpy_fenced_brokers", "Registered brokers that are fenced (the controller's view).", node),
            ("kraftpy_active_brokers", "Registered brokers that are unfenced (the controller's view).", node),
            ("kraftpy_global_topics", "Topics in the cluster (the controller's view).", node),
            ("kraftpy_global_partitions", "Partitions in the cluster (the controller's view).", node),
            ("kraftpy_preferred_replica_imbalance",
             "Partitions whose leader is not their preferred (first) replica.", node),
            ("kraftpy_controller_ready", "1 while the controller knows the quorum's leader and has applied "
             "its committed metadata since starting, else 0.", node),
            # every node: the metadata log
            ("kraftpy_last_applied_record_offset", "Offset of the last metadata record this node applied.", node),
            ("kraftpy_last_applied_record_timestamp_seconds",
             "When the leader appended the last metadata batch this node applied (Unix seconds).", node),
            ("kraftpy_last_applied_record_lag_seconds",
             "Now minus kraftpy_last_applied_record_timestamp_seconds: how stale this node's metadata is "
             "(grows in an idle cluster too, until the next write).", node),
            ("kraftpy_metadata_leader", "The metadata quorum leader this node knows (-1: none).", node),
        ]
        return [GaugeMetricFamily(name, doc, labels=labels) for name, doc, labels in specs]

    # -- brokers ---------------------------------------------------------------------------------

    @staticmethod
    def _collect_broker(broker: TrackedBroker, out: dict[str, GaugeMetricFamily]) -> None:
        node = str(broker.node_id)
        replicas = broker.server.replicas
        under = under_min = at_min = leaders = 0
        partitions = dict(replicas.partitions)
        for part in partitions.values():
            if part.is_leader:
                leaders += 1
                isr = len(part.isr)
                under += isr < len(part.replicas)
                under_min += isr < part.min_insync_replicas
                at_min += isr == part.min_insync_replicas
        out["kraftpy_under_replicated_partitions"].add_metric([node], under)
        out["kraftpy_under_min_isr_partitions"].add_metric([node], under_min)
        out["kraftpy_at_min_isr_partitions"].add_metric([node], at_min)
        out["kraftpy_leader_count"].add_metric([node], leaders)
        out["kraftpy_partition_count"].add_metric([node], len(partitions))
        out["kraftpy_offline_replicas"].add_metric([node], len(replicas.offline))
        out["kraftpy_offline_log_dirs"].add_metric([node], len(replicas.log_manager.offline_dirs))
        out["kraftpy_log_open_segment_files"].add_metric([node], len(DESCRIPTORS))
        out["kraftpy_log_open_segment_files_max"].add_metric([node], DESCRIPTORS.capacity)
        out["kraftpy_log_segment_file_reopens"].add_metric([node], DESCRIPTORS.reopens)
        out["kraftpy_log_writeback_bytes"].add_metric([node], replicas.writeback.requested_bytes)
        out["kraftpy_log_writeback_errors"].add_metric([node], replicas.writeback.errors)
        out["kraftpy_broker_state"].add_metric([node], KAFKA_BROKER_STATE[broker.lifecycle.state])
        states: dict[str, int] = {}
        for shard in broker.server.coordinator.runtime.active_shards():
            machine = shard.machine
            if machine is None:
                continue
            for group_id, group in list(machine.groups.items()):
                states[group.state.value] = states.get(group.state.value, 0) + 1
                for (topic, partition), committed in list(group.offsets.items()):
                    labels = [node, group_id, topic, str(partition)]
                    offset = committed.value.offset
                    out["kraftpy_consumer_group_committed_offset"].add_metric(labels, offset)
                    replica = partitions.get(TopicPartition(topic, partition))
                    if replica is not None:
                        lag = replica.log.high_watermark - offset
                        out["kraftpy_consumer_group_lag"].add_metric(labels, max(lag, 0))
        for state, count in sorted(states.items()):
            out["kraftpy_consumer_groups"].add_metric([node, state], count)

    # -- controllers -----------------------------------------------------------------------------

    @staticmethod
    def _collect_controller(controller: TrackedController, out: dict[str, GaugeMetricFamily]) -> None:
        node = [str(controller.node_id)]
        image = controller.server.loader.image
        brokers = list(image.cluster.brokers.values())
        fenced = sum(1 for b in brokers if b.fenced)
        offline = partitions = imbalance = 0
        for _topic, _index, reg in image.topics.partitions():
            partitions += 1
            offline += not reg.has_leader
            imbalance += reg.has_leader and reg.leader != reg.preferred_leader
        out["kraftpy_offline_partitions"].add_metric(node, offline)
        out["kraftpy_fenced_brokers"].add_metric(node, fenced)
        out["kraftpy_active_brokers"].add_metric(node, len(brokers) - fenced)
        out["kraftpy_global_topics"].add_metric(node, len(image.topics.by_name))
        out["kraftpy_global_partitions"].add_metric(node, partitions)
        out["kraftpy_preferred_replica_imbalance"].add_metric(node, imbalance)
        out["kraftpy_controller_ready"].add_metric(node, 1 if controller_ready(controller) is None else 0)

    @staticmethod
    def _collect_loader(node: str, loader: MetadataLoader, now: float, out: dict[str, GaugeMetricFamily]) -> None:
        out["kraftpy_last_applied_record_offset"].add_metric([node], loader.image.provenance.last_offset)
        stamp = loader.last_applied_timestamp_ms
        if stamp >= 0:
            out["kraftpy_last_applied_record_timestamp_seconds"].add_metric([node], stamp / 1000)
            out["kraftpy_last_applied_record_lag_seconds"].add_metric([node], max(now - stamp / 1000, 0.0))
        out["kraftpy_metadata_leader"].add_metric([node], -1 if loader.leader_id is None else loader.leader_id)


#: The collector of this process's nodes, registered once.
NODES = NodeCollector()
REGISTRY.register(NODES)
add_text_section(NODES.partition_text)


def track_broker(node_id: int, server: BrokerServer, lifecycle: BrokerLifecycle,
                 loader: MetadataLoader) -> Callable[[], None]:
    """Report this broker until the returned function is called. Also counts its ISR shrinks and
    expands from the committed metadata (`count_isr_changes`)."""
    tracked = TrackedBroker(node_id, server, lifecycle, loader)
    NODES.brokers[node_id] = tracked
    active = [True]

    def isr_changes(_image: MetadataImage, delta: MetadataDelta) -> None:
        if active[0]:
            count_isr_changes(node_id, delta)

    loader.subscribers.append(isr_changes)

    def untrack() -> None:
        active[0] = False
        if NODES.brokers.get(node_id) is tracked:
            del NODES.brokers[node_id]

    return untrack


def count_isr_changes(node_id: int, delta: MetadataDelta) -> None:
    """Count the ISR changes of partitions ``node_id`` leads on both sides of a change (Kafka's
    IsrShrinksPerSec and IsrExpandsPerSec, counted on the leader)."""
    shrinks = expands = 0
    for change in delta.changed_partitions:
        old, new = change.old, change.new
        if old is None or old.leader != node_id or new.leader != node_id:
            continue
        before, after = set(old.isr), set(new.isr)
        shrinks += bool(before - after)
        expands += bool(after - before)
    if shrinks:
        ISR_SHRINKS.labels(str(node_id)).inc(shrinks)
    if expands:
        ISR_EXPANDS.labels(str(node_id)).inc(expands)


def track_controller(node_id: int, server: ControllerServer) -> tuple[TrackedController, Callable[[], None]]:
    """Report this controller until the returned function is called. Call it before the controller
    runs: what it applies from then on, but for the snapshot its Raft core reloads first from its
    own files, is metadata the quorum committed."""
    tracked = TrackedController(node_id, server)
    NODES.controllers[node_id] = tracked
    loader = server.loader
    # The call `subscribe` makes at once, and the local snapshot's reload (the core's first effect).
    skip = [1 + (server.raft.log.latest_snapshot_id is not None)]

    def applied(_image: MetadataImage, _delta: MetadataDelta) -> None:
        if skip[0] > 0:
            skip[0] -= 1
        else:
            tracked.applied_since_start = True

    loader.subscribe(applied)

    def untrack() -> None:
        skip[0] = 1 << 30
        if NODES.controllers.get(node_id) is tracked:
            del NODES.controllers[node_id]

    return tracked, untrack


def controller_ready(controller: TrackedController) -> str | None:
    """None when the controller is ready (see the module doc), else why not."""
    leader = controller.server.loader.leader_id
    if leader is None:
        return f"controller {controller.node_id}: no known quorum leader"
    if not controller.applied_since_start:
        return f"controller {controller.node_id}: has not applied committed metadata from leader {leader} yet"
    return None


def broker_ready(node_id: int, lifecycle: BrokerLifecycle | None) -> str | None:
    """None when the broker is Running, else its state."""
    if lifecycle is None:
        return f"broker {node_id}: not started"
    if lifecycle.state is not BrokerState.RUNNING:
        return f"broker {node_id}: {lifecycle.state.value}"
    return None


class Readiness:
    """The checks ``GET /ready`` runs: each returns None when fine, else a one-line reason."""

    def __init__(self) -> None:
        self.checks: list[Callable[[], str | None]] = []

    def add(self, check: Callable[[], str | None]) -> None:
        self.checks.append(check)

    def __call__(self) -> tuple[bool, str]:
        if not self.checks:
            return False, "starting"
        reasons = [reason for check in self.checks if (reason := check()) is not None]
        if reasons:
            return False, "; ".join(reasons)
        return True, "ready"
