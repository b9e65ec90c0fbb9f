"""`KraftNode`: one kraftpy process, whatever its roles — controller, broker, or both (as `kraftpy dev`).

Process composition, the one place that knows every part::

    KraftNode ─┬─ RaftNode (metadata log, core, driver) ─── listener: ControllerServer (controller)
               │                                         └─ listener: MetadataLoader (broker only)
               ├─ ControllerServer (controller role)
               ├─ BrokerServer + BrokerLifecycle (broker role), fed by a MetadataLoader
               └─ metrics endpoint (metrics, readiness) and the event-loop lag watcher

A controller's `RaftNode` is a voter and its `ControllerServer` listens to it. A broker needs a
metadata follower: in a broker-only process its own `RaftNode`, an observer that fetches
``__cluster_metadata`` into its own copy of the log; in a combined process the controller's loader.
Either way every committed image reaches `BrokerServer.publish` through a `MetadataLoader`.

A listener that cannot be bound (its port taken, its host not on this machine) stops the process
with one line naming the address and the setting that chose it (`kraftpy.fatal.binding`), and so
does a metadata log that cannot be opened.
"""

from __future__ import annotations

import collections
import functools
import gc
import sys
import time
from collections.abc import Callable

import trio

from kraftpy.broker.lifecycle import BrokerLifecycle
from kraftpy.broker.server import BrokerServer
from kraftpy.config import KraftConfig
from kraftpy.fatal import binding
from kraftpy.logs import get_logger
from kraftpy.metadata.controller_server import ControllerServer
from kraftpy.metadata.image import MetadataImage
from kraftpy.metadata.loader import MetadataLoader, write_metadata_snapshots
from kraftpy.metadata.rpc import ControllerClient
from kraftpy.metrics import METADATA_APPLY_LATENCY, METADATA_OFFSET, serve_metrics, watch_event_loop_lag
from kraftpy.node.metrics import Readiness, broker_ready, controller_ready, track_broker, track_controller
from kraftpy.node.raft_node import RaftNode, voter_addresses

#: The interpreter's thread switch interval in a server process (Python's default is 5 ms).
SWITCH_INTERVAL_S = 0.001
#: The garbage collector's thresholds in a process that is a node alone (Python's default is 700, 10,
#: 10): a young collection after 10,000 container objects made and not freed instead of 700. Each
#: young collection also walks every container the young objects hold, however old what they hold:
#: at 100,000 partitions one took 5-10 ms of CPU for 700 objects, 16 of them over 5 ms in 20 s of
#: steady load, and with this threshold 2 (bench/scale.py; docs/benchmarks.md).
GC_THRESHOLDS = (10_000, 10, 10)


class KraftNode:
    def __init__(self, config: KraftConfig, cluster_id: str, *, freeze_gc_when_ready: bool = False) -> None:
        """``freeze_gc_when_ready``: once the node is ready, move every object the process has made so
        far (its modules, its configuration, the metadata it loaded) out of the cyclic garbage
        collector's reach (`gc.freeze`), for a process that is this node alone (`kraftpy broker`,
        `kraftpy controller`, `kraftpy dev`, a test cluster's node): a full collection walked them all,
        a pause of 50-80 ms on the event loop every few seconds under load, the largest part of the
        produce latency's p99.9. Such a process also collects its young objects less often
        (`GC_THRESHOLDS`). Not for a process embedding nodes among other work (a test run)."""
        self.config = config
        self._freeze_gc_when_ready = freeze_gc_when_ready
        self.cluster_id = cluster_id
        self.log = get_logger("node", node_id=config.node_id, role=config.role_name)
        self.raft: RaftNode | None = None
        self.controller: ControllerServer | None = None
        self.broker: BrokerServer | None = None
        self.lifecycle: BrokerLifecycle | None = None
        self.loader: MetadataLoader | None = None
        self.ready = trio.Event()
        self.metrics_port: int | None = None
        #: What ``GET /ready`` answers: the checks of this node's roles.
        self.readiness = Readiness()
        #: Called when the node stops: its metrics leave the process's collector.
        self._untrack: list[Callable[[], None]] = []

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        # A worker thread doing Python work (opening logs, checkpoints) holds the GIL for up to the
        # switch interval at a time: 1 ms instead of 5 keeps the event loop's lag low beside it.
        sys.setswitchinterval(SWITCH_INTERVAL_S)
        if self._freeze_gc_when_ready:
            gc.set_threshold(*GC_THRESHOLDS)
        try:
            async with trio.open_nursery() as nursery:
                if self._freeze_gc_when_ready:
                    nursery.start_soon(self._freeze_gc_once_ready)
                await self._run(nursery)
                task_status.started()
        finally:
            for stop_reporting in self._untrack:
                stop_reporting()

    async def _run(self, nursery: trio.Nursery) -> None:
        config = self.config
        await nursery.start(watch_event_loop_lag)
        if config["metrics.port"] is not None:
            port, host = config["metrics.port"], config["metrics.host"]
            with binding(host, port, f"metrics.host={host}, metrics.port={port}"):
                self.metrics_port = await nursery.start(
                    functools.partial(serve_metrics, port, host, ready=self.readiness))
        self.raft = await RaftNode.open(config, self.cluster_id)
        if self.raft.client_tls is not None:
            await nursery.start(self.raft.client_tls.watch, config["ssl.reload.check.interval.ms"] / 1000, self.log)
        if config.is_controller:
            self.controller = ControllerServer(config, self.cluster_id, self.raft)
            self.loader = self.controller.loader
            listener = config.controller_listener
            assert listener is not None
            tracked, stop = track_controller(config.node_id, self.controller)
            self._untrack.append(stop)
            self.readiness.add(lambda: controller_ready(tracked))
            with binding(listener.host, listener.port, self._listeners_setting()):
                await nursery.start(self.controller.run)
        else:
            await nursery.start(self._observe_metadata, self.raft)
        if config.is_broker:
            await self._run_broker(nursery)
        else:
            assert self.loader is not None
            self.loader.subscribe(CommitLatency(self.loader, config.node_id).published_now)
            self.ready.set()

    async def _freeze_gc_once_ready(self) -> None:
        await self.ready.wait()
        gc.collect()  # what is garbage now is not frozen with the rest
        gc.freeze()
        self.log.info("objects made at start frozen out of the garbage collector's reach",
                      frozen=gc.get_freeze_count(), gc_thresholds=list(gc.get_threshold()))

    def _listeners_setting(self) -> str:
        return "listeners=" + ",".join(str(listener) for listener in self.config.listeners)

    async def _observe_metadata(self, raft: RaftNode, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """A broker-only process follows the metadata log as a Raft observer, bounded by snapshots."""
        loader = self.loader = MetadataLoader(raft.log)
        async with trio.open_nursery() as nursery:
            await nursery.start(loader.run)
            driver = await nursery.start(raft.run, loader.listener)
            nursery.start_soon(write_metadata_snapshots, loader, driver,
                               self.config["metadata.log.max.record.bytes.between.snapshots"], self.log)
            task_status.started()

    async def _run_broker(self, nursery: trio.Nursery) -> None:
        config = self.config
        raft = self.raft
        # A dynamic quorum's voters are in the metadata log: the client asks for them as they are now.
        voters = (lambda: raft.voters) if raft is not None else voter_addresses(config)
        client = ControllerClient(nursery, voters, node_id=config.node_id,
                                  bootstrap=config.quorum_bootstrap_servers,
                                  request_timeout=config["controller.quorum.request.timeout.ms"] / 1000,
                                  tls=self.raft.client_tls if self.raft is not None else None,
                                  sasl=self.raft.client_sasl if self.raft is not None else None,
                                  listener_name=(config.controller_listener_names or ["CONTROLLER"])[0])
        self.broker = BrokerServer.from_config(config, client, cluster_id=self.cluster_id)
        # A broker listener that cannot be bound stops the process naming its own address (BrokerServer).
        await nursery.start(self.broker.run)
        loader = self.loader
        assert loader is not None
        loader.subscribe(self.broker.publish)
        node_id = config.node_id
        loader.subscribe(lambda image, _delta: METADATA_OFFSET.labels(node_id).set(image.provenance.last_offset))
        broker = self.broker
        lifecycle = self.lifecycle = BrokerLifecycle(config, self.cluster_id, broker, client,
                                                     metadata_offset=lambda: broker.published_offset)
        self.readiness.add(lambda: broker_ready(node_id, lifecycle))
        self._untrack.append(track_broker(node_id, self.broker, lifecycle, loader))
        # Each commit's apply latency is observed when the broker's publisher has applied it.
        commits = CommitLatency(loader, node_id)
        loader.subscribe(commits.noted)

        def published() -> None:
            commits.published_up_to(broker.published_offset)
            lifecycle.metadata_advanced()

        broker.on_published = published
        await nursery.start(lifecycle.run)
        nursery.start_soon(self._ready_when_running)

    async def _ready_when_running(self) -> None:
        assert self.lifecycle is not None
        await self.lifecycle.unfenced.wait()
        self.log.info("broker running", port=self.broker.port if self.broker else None)
        self.ready.set()

    async def stop_gracefully(self) -> None:
        """Controlled shutdown of the broker, then the controller hands over its leadership."""
        if self.lifecycle is not None:
            await self.lifecycle.shut_down()
        if self.controller is not None:
            await self.controller.resign()


class CommitLatency:
    """Observes each metadata commit's apply latency (`METADATA_APPLY_LATENCY`) on one node: on a
    controller when its loader publishes the commit (`published_now`); on a broker when its publisher
    has applied it (`noted`, then `published_up_to`). Images loaded from a snapshot, and the image a new
    subscriber is shown first, are not commits and are not observed."""

    def __init__(self, loader: MetadataLoader, node_id: int) -> None:
        self.loader = loader
        self.histogram = METADATA_APPLY_LATENCY.labels(node_id)
        self._after = loader.image.provenance.last_offset  # already applied when subscribed
        self._pending: collections.deque[tuple[int, int]] = collections.deque()

    def _fresh(self, image: MetadataImage) -> bool:
        offset = image.provenance.last_offset
        if offset <= self._after or self.loader.commit_timestamp_ms < 0:
            return False
        self._after = offset
        return True

    def published_now(self, image: MetadataImage, _delta: object) -> None:
        if self._fresh(image):
            self._observe(self.loader.commit_timestamp_ms)

    def noted(self, image: MetadataImage, _delta: object) -> None:
        if self._fresh(image):
            self._pending.append((image.provenance.last_offset, self.loader.commit_timestamp_ms))

    def published_up_to(self, offset: int) -> None:
        while self._pending and self._pending[0][0] <= offset:
            self._observe(self._pending.popleft()[1])

    def _observe(self, stamp_ms: int) -> None:
        self.histogram.observe(max(time.time() * 1000 - stamp_ms, 0.0) / 1000)
