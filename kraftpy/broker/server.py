"""`BrokerServer`: the data plane of one broker — replicas, fetchers and the Kafka listener.

What it owns, and what it is told::

    lifecycle / metadata observer ──publish(image, delta)──▶ BrokerServer
                                  ──set_running(bool)─────▶   ├─ ReplicaManager (logs, roles, ISR, HW)
    clients, other brokers ──Kafka protocol──▶ KafkaServer ──▶ ├─ KafkaApis (request handlers)
                                                               ├─ FetcherManager (one fetcher per leader)
    ControllerChannel ◀── CreateTopics, AlterPartition, ... ──┘─ ProducerIdManager

``publish`` is called on the trio thread with every committed metadata image; it applies it at
once (new logs, leaderships, followers, deleted topics), so a request handled afterwards sees the
new state. A broker is *fenced* until ``set_running(True)``: it follows (so it can catch up) but
takes no leadership, and clients get NOT_LEADER_OR_FOLLOWER from it. ``run`` serves until it is
cancelled, then closes every log cleanly.
"""

from __future__ import annotations

from collections.abc import Callable

import structlog
import trio

from kraftpy.broker.apis import KafkaApis
from kraftpy.broker.controller_channel import ControllerChannel
from kraftpy.broker.fetcher import FetcherManager
from kraftpy.broker.producer_ids import ProducerIdManager
from kraftpy.broker.replica_manager import ReplicaManager
from kraftpy.broker.settings import BrokerSettings
from kraftpy.metadata.delta import MetadataDelta
from kraftpy.metadata.image import MetadataImage
from kraftpy.rpc.kafka_server import KafkaServer
from kraftpy.storage.log import wall_clock_ms

_logger = structlog.get_logger(__name__)


class BrokerServer:
    def __init__(
        self,
        settings: BrokerSettings,
        channel: ControllerChannel,
        *,
        clock: Callable[[], int] = wall_clock_ms,
    ) -> None:
        """``clock`` returns wall-clock milliseconds: record timestamps, retention, follower lag."""
        self.settings = settings
        self.node_id = settings.node_id
        self.channel = channel
        self.clock = clock
        self._log = _logger.bind(node_id=self.node_id)
        self.replicas = ReplicaManager(settings, channel, clock)
        self.fetchers = FetcherManager(self.replicas)
        self.producer_ids = ProducerIdManager(self.node_id, channel, self._broker_epoch)
        self.apis = KafkaApis(self)
        self.kafka_server = KafkaServer(self.apis.handle, max_frame_bytes=settings.socket_request_max_bytes,
                                        listener=settings.listener_name, log=self._log)
        #: The port the Kafka listener is bound to, once ``run`` has started.
        self.port: int | None = None
        #: Set (and replaced) on every publish: handlers wait on it for their change to arrive.
        self.metadata_changed = trio.Event()

    @classmethod
    def from_config(cls, config, channel: ControllerChannel, *, cluster_id: str,
                    clock: Callable[[], int] = wall_clock_ms, **overrides) -> BrokerServer:
        return cls(BrokerSettings.from_config(config, cluster_id=cluster_id, **overrides), channel, clock=clock)

    def _broker_epoch(self) -> int:
        reg = self.replicas.image.cluster.broker(self.node_id)
        return reg.epoch if reg is not None else -1

    # -- what the control plane tells the broker ---------------------------------------------------

    @property
    def image(self) -> MetadataImage:
        return self.replicas.image

    @property
    def running(self) -> bool:
        return self.replicas.running

    def set_running(self, running: bool) -> None:
        """True once the controller has unfenced this broker; False when it is fenced or stopping."""
        self._log.info("broker state", running=running)
        self.replicas.set_running(running)

    def publish(self, image: MetadataImage, delta: MetadataDelta | None = None) -> None:
        """Apply newly committed metadata. ``delta`` is accepted for the observer's convenience; the
        broker compares images itself, so None is fine."""
        self.replicas.apply_image(image)
        event, self.metadata_changed = self.metadata_changed, trio.Event()
        event.set()

    # -- serving ----------------------------------------------------------------------------------

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Serve until cancelled; ``task_status.started`` gets the bound port."""
        try:
            async with trio.open_nursery() as nursery:
                self.port = await nursery.start(self.kafka_server.serve, self.settings.host, self.settings.port)
                await nursery.start(self.fetchers.run)
                nursery.start_soon(self.replicas.run_isr_changes)
                nursery.start_soon(self.replicas.run_isr_expiry)
                nursery.start_soon(self.replicas.run_retention)
                nursery.start_soon(self.replicas.run_checkpoints)
                nursery.start_soon(self.replicas.run_deletions)
                self._log.info("broker serving", port=self.port)
                task_status.started(self.port)
        finally:
            self.replicas.close()
            self._log.info("broker stopped")
