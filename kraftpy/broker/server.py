"""`BrokerServer`: the data plane of one broker — replicas, fetchers, handlers and the Kafka listener.

What it owns, and what it is told::

    metadata loader ──publish(image, delta)──▶ publisher ──▶ ReplicaManager.apply_delta ──▶ MetadataCache
    lifecycle ───────set_running(bool)──────▶   (one task, in log order)
    clients, other brokers ──Kafka protocol──▶ KafkaServer ──▶ KafkaApis ──▶ one handler module per area
    ControllerChannel ◀── CreateTopics, AlterPartition, AllocateProducerIds, ... ──┘

The Kafka listener is bound at once (its port is what the broker registers with) but, as in Kafka,
requests are only processed once the broker has caught up with the metadata log up to its own
registration (`registered`): before that the cache may be empty, and a client told "no brokers, no
topics" gives up (librdkafka's "Partial response").

``publish`` and ``set_running`` are called on the trio thread (the metadata loader calls ``publish``
from inside the Raft driver) and only queue: one publisher task applies each delta to the replicas
(opening new logs in a worker thread) and only then shows the new image to the handlers through
the `MetadataCache`, so a handler that sees a topic finds its partitions served. A broker is
*fenced* until ``set_running(True)``: it follows (so it can catch up) but takes no leadership,
and clients get NOT_LEADER_OR_FOLLOWER from it. ``run`` serves until it is cancelled, then closes
every log cleanly (in a worker thread, shielded from the cancellation).

After each update the group coordinator (kraftpy.coordinator) is told which ``__consumer_offsets``
partitions this broker now leads and which it no longer does (`OffsetsLeadership`, in
kraftpy.broker.group_support), and the transaction coordinator the same of ``__transaction_state``;
they run their timers and loads in the broker's nursery. The transaction coordinator's markers reach
the partition leaders through `TxnMarkerSender`, and leaders verify a producer's first transactional
batch with it through `TxnVerifier` (kraftpy.broker.txn_support); a replicated marker in a
``__consumer_offsets`` partition decides the producer's pending transactional offsets there.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import attrs
import structlog
import trio

from kraftpy.broker.apis import KafkaApis
from kraftpy.broker.apis.acls import AclsApi
from kraftpy.broker.apis.brokers import BrokersApi
from kraftpy.broker.apis.configs import ConfigsApi
from kraftpy.broker.apis.describe_topic_partitions import DescribeTopicPartitionsApi
from kraftpy.broker.apis.features import FeaturesApi
from kraftpy.broker.apis.fetch import FetchApi
from kraftpy.broker.apis.groups import GroupsApi
from kraftpy.broker.apis.log_dirs import LogDirsApi
from kraftpy.broker.apis.metadata import MetadataApi
from kraftpy.broker.apis.offsets import OffsetsApi
from kraftpy.broker.apis.produce import ProduceApi
from kraftpy.broker.apis.quorum import QuorumApi
from kraftpy.broker.apis.quotas import QuotasApi
from kraftpy.broker.apis.reassignments import ReassignmentsApi
from kraftpy.broker.apis.sasl import SaslApi, SaslSettings
from kraftpy.broker.apis.scram_credentials import ScramCredentialsApi
from kraftpy.broker.apis.topics import TopicsApi
from kraftpy.broker.apis.txn import TxnApi
from kraftpy.broker.apis.txn_markers import TxnMarkersApi
from kraftpy.broker.authorization import BrokerAuthorizer
from kraftpy.broker.controller_channel import ControllerChannel
from kraftpy.broker.fetcher import FetcherManager
from kraftpy.broker.group_support import OffsetsLeadership, group_config
from kraftpy.broker.metadata_cache import MetadataCache
from kraftpy.broker.producer_ids import ProducerIdManager
from kraftpy.broker.quotas import ClientQuotas
from kraftpy.broker.replica_manager import ReplicaManager
from kraftpy.broker.settings import BrokerSettings
from kraftpy.broker.txn_support import BrokerConnections, TxnMarkerSender, TxnVerifier
from kraftpy.coordinator.group_coordinator import GroupCoordinator
from kraftpy.coordinator.txn_coordinator import TxnCoordinator
from kraftpy.ids import Uuid
from kraftpy.metadata import metadata_version
from kraftpy.metadata.delta import MetadataDelta
from kraftpy.metadata.image import BrokerRegistration, MetadataImage
from kraftpy.metadata.messages import OfflineReplicaTopic
from kraftpy.metadata.topic_names import GROUP_METADATA_TOPIC_NAME, TRANSACTION_STATE_TOPIC_NAME
from kraftpy.rpc.kafka_server import KafkaServer
from kraftpy.storage.log import wall_clock_ms

_logger = structlog.get_logger(__name__)

_Update = tuple[MetadataImage, MetadataDelta] | bool


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
        self.node_id = node_id = settings.node_id
        self.channel = channel
        self.clock = clock
        self._log = _logger.bind(node_id=node_id)
        self.metadata = MetadataCache()
        self.replicas = ReplicaManager(settings, channel, clock)
        self.replicas.on_offline = self._replicas_went_offline
        #: Told when a replica went offline (the lifecycle heartbeats at once to report it).
        self.on_offline_replicas: Callable[[], None] | None = None
        #: Called once the handlers see a new image (its logs open, its roles applied): what the broker
        #: heartbeats as its metadata offset has moved (`published_offset`).
        self.on_published: Callable[[], None] | None = None
        self.fetchers = FetcherManager(self.replicas)
        self.producer_ids = ProducerIdManager(node_id, channel, lambda: self.metadata.broker_epoch(node_id))
        #: Set once the metadata cache holds this broker's registration (see `registered`).
        self.caught_up_with_registration = trio.Event()
        self._registered_epoch: int | None = None
        #: The group coordinator of the __consumer_offsets partitions this broker leads (``leadership``
        #: tells it which, after every metadata change and fence or unfence).
        self.coordinator = GroupCoordinator(group_config(settings), clock=clock, node_id=node_id,
                                            partition_exists=self._partition_exists)
        self.leadership = OffsetsLeadership(self.replicas, self.coordinator, settings, clock)
        #: The transaction coordinator of the __transaction_state partitions this broker leads; its
        #: markers go to the partition leaders over ``connections``, and leaders verify with it.
        self.connections = BrokerConnections(self.replicas, client_id=f"broker-{node_id}-txn")
        self.txn_coordinator = TxnCoordinator(
            settings.transaction, clock=clock, allocate_producer_id=self.producer_ids.generate,
            marker_sender=TxnMarkerSender(self.metadata, self.connections, node_id=node_id),
            offsets_topic_num_partitions=settings.offsets_topic_num_partitions, node_id=node_id)
        self.txn_leadership = OffsetsLeadership(self.replicas, self.txn_coordinator, settings, clock,
                                                topic=TRANSACTION_STATE_TOPIC_NAME, role="transaction coordinator")
        self.txn_verifier = TxnVerifier(self.metadata, self.connections, self.txn_coordinator, node_id=node_id)
        verify = self.txn_verifier.verify if settings.transaction_partition_verification_enable else None
        self.apis = KafkaApis(self.metadata, node_id=node_id, ready=self.caught_up_with_registration)
        #: authorizer.class.name: the ACLs of the metadata log, checked by every handler (kraftpy.broker.authorization).
        self.authorizer = BrokerAuthorizer.from_settings(settings)
        #: Client quotas (byte rates, request percentage, controller mutations) of this broker's clients,
        #: from the metadata image.
        self.quotas = ClientQuotas(lambda: self.metadata.image, window_num=settings.quota_window_num,
                                   window_size_s=settings.quota_window_size_seconds)
        topics = TopicsApi(self.metadata, channel, settings)
        topics.quotas = self.quotas
        fetch = FetchApi(self.replicas, self.metadata)
        fetch.quotas = self.quotas
        for area in (
            ProduceApi(self.replicas, self.metadata, clock, node_id=node_id, verify=verify),
            TxnApi(self.txn_coordinator, self.replicas, self.metadata, self.producer_ids.generate, node_id=node_id),
            fetch,
            OffsetsApi(self.replicas, self.metadata),
            LogDirsApi(self.replicas),
            MetadataApi(self.metadata, channel, settings, self.replicas.is_offline),
            DescribeTopicPartitionsApi(self.metadata, partition_limit=settings.max_request_partition_size_limit,
                                       node_id=node_id, offline_here=self.replicas.is_offline),
            topics,
            ReassignmentsApi(self.metadata, channel),
            BrokersApi(self.metadata, channel),
            FeaturesApi(self.metadata, channel),
            QuorumApi(channel, cluster_id=settings.cluster_id),
            ConfigsApi(self.metadata, channel, settings),
            GroupsApi(self.coordinator, self.metadata, channel, settings),
            TxnMarkersApi(self.replicas, self.metadata, clock, on_markers_written=self._markers_written),
            AclsApi(self.metadata, channel),
        ):
            area.authz = self.authorizer
            self.apis.register_all(area.handlers())
        #: SASL_PLAINTEXT and SASL_SSL listeners: the authentication gate and its handlers (PLAIN users
        #: from the JAAS config, SCRAM credentials from the metadata image).
        self.sasl = SaslApi(settings.sasl or SaslSettings(),
                            lambda name, mechanism: self.metadata.image.scram.credential(name, mechanism),
                            node_id=node_id)
        self.apis.gate = self.sasl
        self.apis.register_all(self.sasl.handlers())
        for area in (ScramCredentialsApi(self.metadata, channel), QuotasApi(self.metadata, channel)):
            area.authz = self.authorizer
            self.apis.register_all(area.handlers())
        self.apis.quotas = self.quotas
        self.kafka_server = KafkaServer(self.apis.handle, max_frame_bytes=settings.socket_request_max_bytes,
                                        listener=settings.listener_name, log=self._log,
                                        queued_max_request_bytes=settings.queued_max_request_bytes,
                                        connections_max_idle_ms=settings.connections_max_idle_ms,
                                        sasl_max_receive_bytes=settings.sasl_server_max_receive_size)
        if settings.connection_limits is not None:
            settings.connection_limits.log = self._log
            self.kafka_server.acceptor.limits = settings.connection_limits
        self._updates_send, self._updates_receive = trio.open_memory_channel[_Update](math.inf)
        self._queued = self._applied = 0
        self._caught_up = trio.Event()
        #: The port the inter-broker listener is bound to, once ``run`` has started.
        self.port: int | None = None
        #: The bound port of every listener, by name, once ``run`` has started.
        self.ports: dict[str, int] = {}

    @classmethod
    def from_config(cls, config, channel: ControllerChannel, *, cluster_id: str,
                    clock: Callable[[], int] = wall_clock_ms, **overrides) -> BrokerServer:
        return cls(BrokerSettings.from_config(config, cluster_id=cluster_id, **overrides), channel, clock=clock)

    # -- what the control plane tells the broker ---------------------------------------------------

    @property
    def image(self) -> MetadataImage:
        """The image the handlers answer from."""
        return self.metadata.image

    @property
    def running(self) -> bool:
        return self.replicas.running

    def set_running(self, running: bool) -> None:
        """True once the controller has unfenced this broker; False when it is fenced or stopping."""
        self._log.info("broker state", running=running)
        self._queue(running)

    def registered(self, broker_epoch: int) -> None:
        """The controller accepted this broker's registration at ``broker_epoch`` (the registration
        record's offset): requests are processed once the metadata cache has caught up to it."""
        self._registered_epoch = broker_epoch
        self._check_caught_up()

    def _check_caught_up(self) -> None:
        if self.caught_up_with_registration.is_set() or self._registered_epoch is None:
            return
        reg = self.metadata.image.cluster.broker(self.node_id)
        if reg is not None and reg.epoch >= self._registered_epoch:
            self._log.info("caught up with the metadata log: serving requests", broker_epoch=reg.epoch)
            self.caught_up_with_registration.set()

    def offline_replicas(self) -> tuple[OfflineReplicaTopic, ...]:
        """The replicas this broker holds but cannot serve, as a heartbeat reports them."""
        return tuple(OfflineReplicaTopic(topic_id, tuple(partitions))
                     for topic_id, partitions in self.replicas.offline_replicas().items())

    def log_dir_ids(self) -> tuple[Uuid, ...]:
        """The ids of this broker's online log directories, as its registration names them (KIP-858)."""
        ids = self.replicas.log_manager.directory_ids()
        return tuple(ids[path] for path in self.replicas.log_manager.online_dirs if path in ids)

    def offline_log_dirs(self) -> tuple[Uuid, ...]:
        """The ids of this broker's offline log directories, as a heartbeat reports them (KIP-858)."""
        return tuple(self.replicas.offline_log_dir_ids())

    def _replicas_went_offline(self) -> None:
        # An offline __consumer_offsets or __transaction_state replica leads no more.
        self.leadership.sync(self.replicas.image)
        self.txn_leadership.sync(self.replicas.image)
        if self.on_offline_replicas is not None:
            self.on_offline_replicas()

    def _follow_offsets_topic(self, image: MetadataImage) -> None:
        """Place groups by the partitions ``__consumer_offsets`` has, as Kafka does, when that differs
        from offsets.topic.num.partitions (the topic was made under another setting): FindCoordinator
        and the coordinator must agree on a group's partition."""
        topic = image.topics.get_by_name(GROUP_METADATA_TOPIC_NAME)
        config = self.coordinator.config
        if topic is not None and topic.partitions and len(topic.partitions) != config.offsets_topic_num_partitions:
            self._log.warning("__consumer_offsets has another partition count than offsets.topic.num.partitions: "
                              "groups are placed by the topic's", partitions=len(topic.partitions),
                              configured=self.settings.offsets_topic_num_partitions)
            self.coordinator.config = attrs.evolve(config, offsets_topic_num_partitions=len(topic.partitions))
            self.txn_coordinator.offsets_topic_num_partitions = len(topic.partitions)
        topic = image.topics.get_by_name(TRANSACTION_STATE_TOPIC_NAME)
        txn_config = self.txn_coordinator.config
        if topic is not None and topic.partitions and len(topic.partitions) != txn_config.state_log_num_partitions:
            self._log.warning("__transaction_state has another partition count than "
                              "transaction.state.log.num.partitions: transactional ids are placed by the topic's",
                              partitions=len(topic.partitions), configured=txn_config.state_log_num_partitions)
            self.txn_coordinator.config = attrs.evolve(txn_config, state_log_num_partitions=len(topic.partitions))

    def _markers_written(self, producer_id: int, committed: bool, ended: list) -> None:
        """A producer's transaction markers are replicated: the group coordinator decides its pending
        transactional offset commits in the __consumer_offsets partitions among them."""
        for tp, marker_offset in ended:
            if tp.topic == GROUP_METADATA_TOPIC_NAME:
                self.coordinator.complete_transaction(tp.partition, producer_id, committed, marker_offset)

    def _partition_exists(self, topic: str, partition: int) -> bool:
        topic_image = self.metadata.image.topics.get_by_name(topic)
        return topic_image is not None and partition in topic_image.partitions

    @property
    def published_offset(self) -> int:
        """The metadata offset of the image the handlers answer from: its replicas' logs are open and
        their roles applied. The broker heartbeats this offset, so the controller unfences it (and makes
        it a leader) only once it can serve what it is given, as Kafka's broker waits for its first
        metadata publication, logs loaded, before it asks to be unfenced. A broker restarted with
        100,000 logs would otherwise be made their leader while it is still opening them."""
        return self.metadata.image.provenance.last_offset

    def published_registration(self) -> BrokerRegistration | None:
        """This broker's registration in the image the handlers answer from."""
        return self.metadata.image.cluster.broker(self.node_id)

    def publish(self, image: MetadataImage, delta: MetadataDelta) -> None:
        """Newly committed metadata, and the delta from the image published before it."""
        self._queue((image, delta))

    def _queue(self, update: _Update) -> None:
        self._queued += 1
        self._updates_send.send_nowait(update)

    async def caught_up(self) -> None:
        """Wait until every update queued so far is applied (tests, and a controlled shutdown)."""
        while self._applied < self._queued:
            await self._caught_up.wait()

    async def _run_publisher(self) -> None:
        async for update in self._updates_receive:
            if isinstance(update, bool):
                await self.replicas.set_running(update)
            else:
                image, delta = update
                features_before = self.metadata.image.features
                await self.replicas.apply_delta(image, delta)
                self.authorizer.apply_delta(delta)
                self.metadata.set_image(image)
                if image.features != features_before:
                    level = image.features.metadata_version
                    self._log.info("features changed", levels=dict(image.features.levels), metadata_version=level,
                                   release_version=metadata_version.name(level))
                if delta.changed_brokers:
                    brokers = image.cluster.brokers
                    self._log.info("brokers changed", changed=list(delta.changed_brokers),
                                  serving=sorted(b for b, reg in brokers.items() if not reg.fenced),
                                  fenced=sorted(b for b, reg in brokers.items() if reg.fenced))
                if delta.scram_changed:
                    self._log.info("scram credentials changed", users=sorted(image.scram.users))
                self._check_caught_up()
                if self.on_published is not None:
                    self.on_published()
            # Not while shutting down: the coordinator's nursery may already be closing.
            await trio.lowlevel.checkpoint_if_cancelled()
            self._follow_offsets_topic(self.replicas.image)
            self.leadership.sync(self.replicas.image)
            self.txn_leadership.sync(self.replicas.image)
            self._applied += 1
            if self._applied == self._queued:
                event, self._caught_up = self._caught_up, trio.Event()
                event.set()

    # -- serving ----------------------------------------------------------------------------------

    def _listeners_inter_broker_first(self) -> list:
        served = list(self.settings.served_listeners())
        served.sort(key=lambda listener: listener.name != self.settings.inter_broker_listener_name)
        return served

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Serve until cancelled; ``task_status.started`` gets the bound port."""
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(self.replicas.run)
                await nursery.start(self.coordinator.run)
                await nursery.start(self.txn_coordinator.run)
                await nursery.start(self.txn_verifier.run)
                nursery.start_soon(self._run_publisher)
                listeners = self._listeners_inter_broker_first()
                self.ports = await nursery.start(functools.partial(
                    self.kafka_server.serve_listeners, listeners, setting=self.settings.listeners_setting))
                self.port = self.ports[listeners[0].name]
                reload_interval = self.settings.ssl_reload_check_interval_ms / 1000
                for listener in listeners:
                    if listener.tls is not None:
                        await nursery.start(listener.tls.watch, reload_interval,
                                            self._log.bind(listener=listener.name))
                if self.settings.inter_broker_tls is not None:
                    await nursery.start(self.settings.inter_broker_tls.watch, reload_interval, self._log)
                await nursery.start(self.fetchers.run)
                await nursery.start(self.sasl.run)
                self._log.info("broker serving", port=self.port,
                               listeners={listener.name: f"{listener.security_protocol}:{self.ports[listener.name]}"
                                          for listener in listeners})
                task_status.started(self.port)
        finally:
            with trio.CancelScope(shield=True):
                await self.connections.aclose()
                await self.replicas.close()
            self._log.info("broker stopped")
