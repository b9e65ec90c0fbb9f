"""An in-memory cluster for broker tests: N real brokers in one trio run, one in-process controller.

Each broker is a real `BrokerServer` with its Kafka listener on 127.0.0.1 (port 0), its logs under
a temporary directory, and fetchers that replicate over real TCP. The controller is the real
`QuorumController` without Raft: a request's result records are replayed at once and the new
image is published to every broker before the call returns, which is what a `ControllerChannel`
promises (the records are committed when it returns).

    async with open_cluster(tmp_path, brokers=3) as cluster:
        await cluster.create_topic("orders", partitions=1, replication_factor=3)
        ... clients connect to cluster.bootstrap ...
        cluster.fence(leader)          # the controller elects another leader from the ISR

Tests wait with `Cluster.wait_for`, which parks on the brokers' metadata and partition events
(never on a wall-clock sleep) and re-checks its condition on each wake-up.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path

import trio

from kraftpy.broker.controller_channel import ControllerUnavailable
from kraftpy.broker.server import BrokerServer
from kraftpy.broker.settings import BrokerSettings
from kraftpy.ids import Uuid, random_uuid_str
from kraftpy.metadata import cluster_control
from kraftpy.metadata.controller import QuorumController
from kraftpy.metadata.controller_config import LATEST_METADATA_VERSION, ControllerConfig
from kraftpy.metadata.delta import MetadataDelta
from kraftpy.metadata.errors import Errors
from kraftpy.metadata.image import EMPTY_IMAGE, MetadataImage, PartitionRegistration
from kraftpy.metadata.messages import (
    AllocateProducerIdsRequest,
    AllocateProducerIdsResponse,
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    AlterPartitionRequest,
    AlterPartitionResponse,
    AssignReplicasToDirsRequest,
    AssignReplicasToDirsResponse,
    BrokerHeartbeatRequest,
    BrokerRegistrationRequest,
    CreatableTopic,
    CreatableTopicConfig,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    ElectLeadersRequest,
    ElectLeadersResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
    UnregisterBrokerRequest,
    UnregisterBrokerResponse,
)
from kraftpy.metadata.records import BrokerEndpoint, BrokerFeature
from kraftpy.metadata.result import ControllerResult
from kraftpy.storage.meta_properties import MetaProperties, read_meta_properties, write_meta_properties

CLUSTER_ID = "a3JhZnRweS10ZXN0LWNsdXN0ZXI"
RAFT_EPOCH = 1


class InProcessController:
    """A `ControllerChannel` backed by a real `QuorumController`; every write is committed at once."""

    def __init__(self, config: ControllerConfig, seed: int = 11) -> None:
        self.config = config
        self.controller = QuorumController(config, rng=random.Random(seed))
        self.last_offset = -1
        self.brokers: dict[int, BrokerServer] = {}
        #: When False every call raises ControllerUnavailable (a controller outage).
        self.available = True
        #: Requests received, by method name.
        self.requests: list[tuple[str, object]] = []
        self.commit(self.controller.activate(0.0))

    @property
    def image(self) -> MetadataImage:
        return self.controller.image

    def commit(self, result: ControllerResult):
        if result.records:
            first = self.last_offset + 1
            self.last_offset += len(result.records)
            delta = MetadataDelta(self.controller.image)
            for i, record in enumerate(result.records):
                delta.replay(record, first + i, RAFT_EPOCH)
            image = self.controller.replay(result.records, last_offset=self.last_offset, epoch=RAFT_EPOCH)
            assert delta.apply() == image
            for broker in self.brokers.values():
                broker.publish(image, delta)
        return result.response

    async def _call(self, name: str, request, handle: Callable):
        self.requests.append((name, request))
        await trio.lowlevel.checkpoint()
        if not self.available:
            raise ControllerUnavailable("the in-process controller is switched off")
        return self.commit(handle(request))

    # -- ControllerChannel ------------------------------------------------------------------------

    async def create_topics(self, request: CreateTopicsRequest) -> CreateTopicsResponse:
        return await self._call("create_topics", request, self.controller.handle_create_topics)

    async def delete_topics(self, request: DeleteTopicsRequest) -> DeleteTopicsResponse:
        return await self._call("delete_topics", request, self.controller.handle_delete_topics)

    async def create_partitions(self, request: CreatePartitionsRequest) -> CreatePartitionsResponse:
        return await self._call("create_partitions", request, self.controller.handle_create_partitions)

    async def incremental_alter_configs(self, request: IncrementalAlterConfigsRequest) -> IncrementalAlterConfigsResponse:
        return await self._call("incremental_alter_configs", request, self.controller.handle_incremental_alter_configs)

    async def alter_partition(self, request: AlterPartitionRequest) -> AlterPartitionResponse:
        return await self._call("alter_partition", request, self.controller.handle_alter_partition)

    async def assign_replicas_to_dirs(self, request: AssignReplicasToDirsRequest) -> AssignReplicasToDirsResponse:
        return await self._call("assign_replicas_to_dirs", request, self.controller.handle_assign_replicas_to_dirs)

    async def allocate_producer_ids(self, request: AllocateProducerIdsRequest) -> AllocateProducerIdsResponse:
        return await self._call("allocate_producer_ids", request, self.controller.handle_allocate_producer_ids)

    async def elect_leaders(self, request: ElectLeadersRequest) -> ElectLeadersResponse:
        return await self._call("elect_leaders", request, self.controller.handle_elect_leaders)

    async def alter_partition_reassignments(
        self, request: AlterPartitionReassignmentsRequest
    ) -> AlterPartitionReassignmentsResponse:
        return await self._call("alter_partition_reassignments", request,
                                self.controller.handle_alter_partition_reassignments)

    async def list_partition_reassignments(
        self, request: ListPartitionReassignmentsRequest
    ) -> ListPartitionReassignmentsResponse:
        self.requests.append(("list_partition_reassignments", request))
        await trio.lowlevel.checkpoint()
        if not self.available:
            raise ControllerUnavailable("the in-process controller is switched off")
        return self.controller.list_partition_reassignments(request)

    async def unregister_broker(self, request: UnregisterBrokerRequest) -> UnregisterBrokerResponse:
        return await self._call("unregister_broker", request, self.controller.handle_unregister_broker)

    async def quorum_status(self, timeout: float = 10.0):
        raise ControllerUnavailable("the in-process controller runs no Raft quorum")

    async def change_voters(self, api, body, timeout: float = 30.0):
        self.requests.append(("change_voters", (api, body)))
        await trio.lowlevel.checkpoint()
        raise ControllerUnavailable("the in-process controller runs no Raft quorum")

    async def update_features(self, request):
        return await self._call("update_features", request, self.controller.handle_update_features)

    async def create_acls(self, request):
        return await self._call("create_acls", request, self.controller.handle_create_acls)

    async def delete_acls(self, request):
        return await self._call("delete_acls", request, self.controller.handle_delete_acls)

    async def alter_user_scram_credentials(self, request):
        return await self._call("alter_user_scram_credentials", request,
                                self.controller.handle_alter_user_scram_credentials)

    async def alter_client_quotas(self, request):
        return await self._call("alter_client_quotas", request, self.controller.handle_alter_client_quotas)

    # -- broker lifecycle, as the control plane would drive it -----------------------------------

    def register(self, broker: BrokerServer, port: int) -> int:
        """Register and unfence ``broker``; returns its broker epoch."""
        self.brokers[broker.node_id] = broker
        delta = MetadataDelta.between(EMPTY_IMAGE, self.image)
        broker.publish(self.image, delta)
        request = BrokerRegistrationRequest(
            broker_id=broker.node_id,
            cluster_id=self.config.cluster_id,
            incarnation_id=Uuid(bytes([broker.node_id % 256]) + bytes(15)),
            listeners=(BrokerEndpoint("PLAINTEXT", "127.0.0.1", port, 0),),
            features=(BrokerFeature("metadata.version", 1, LATEST_METADATA_VERSION),),
            log_dirs=broker.log_dir_ids(),
        )
        response = self.commit(self.controller.handle_broker_registration(request, 0.0, self.last_offset + 1))
        assert response.error_code == Errors.NONE, response
        broker.registered(response.broker_epoch)
        self.unfence(broker.node_id)
        return response.broker_epoch

    def unfence(self, broker_id: int) -> None:
        reg = self.image.cluster.broker(broker_id)
        heartbeat = BrokerHeartbeatRequest(broker_id, reg.epoch, current_metadata_offset=self.last_offset)
        response = self.commit(self.controller.handle_broker_heartbeat(heartbeat, 0.0))
        assert response.error_code == Errors.NONE and not response.is_fenced, response
        self.brokers[broker_id].set_running(True)

    def heartbeat(self, broker_id: int) -> None:
        """A heartbeat of a running broker, with what it reports (its offline replicas)."""
        broker = self.brokers[broker_id]
        reg = self.image.cluster.broker(broker_id)
        heartbeat = BrokerHeartbeatRequest(broker_id, reg.epoch, current_metadata_offset=self.last_offset,
                                           offline_replicas=broker.offline_replicas(),
                                           offline_log_dirs=broker.offline_log_dirs())
        response = self.commit(self.controller.handle_broker_heartbeat(heartbeat, 0.0))
        assert response.error_code == Errors.NONE, response

    def fence(self, broker_id: int) -> None:
        """Fence a broker as a missed session would: it loses its leaderships and ISR places."""
        self.brokers[broker_id].set_running(False)
        self.commit(ControllerResult(cluster_control.fence_brokers(self.image, [broker_id], self.config), None))


class Cluster:
    def __init__(self, root: Path, controller: InProcessController, settings: Mapping[int, BrokerSettings],
                 clock: Callable[[], int] | None = None) -> None:
        """``clock``: the brokers' wall clock in milliseconds (follower lag, timestamps, retention)."""
        self.root = root
        self.clock = clock
        self.controller = controller
        self.settings = dict(settings)
        self.brokers: dict[int, BrokerServer] = {}
        self.ports: dict[int, int] = {}
        self._scopes: dict[int, trio.CancelScope] = {}
        self._stopped: dict[int, trio.Event] = {}
        #: Where brokers run (set by `open_cluster`), for `restart_broker`.
        self.nursery: trio.Nursery | None = None

    @property
    def image(self) -> MetadataImage:
        return self.controller.image

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{port}" for _, port in sorted(self.ports.items()))

    async def start_broker(self, nursery: trio.Nursery, broker_id: int) -> BrokerServer:
        broker = (BrokerServer(self.settings[broker_id], self.controller) if self.clock is None
                  else BrokerServer(self.settings[broker_id], self.controller, clock=self.clock))
        scope = trio.CancelScope()
        stopped = self._stopped[broker_id] = trio.Event()

        async def run(task_status=trio.TASK_STATUS_IGNORED):
            try:
                with scope:
                    await broker.run(task_status=task_status)
            finally:
                stopped.set()

        port = await nursery.start(run)
        self.brokers[broker_id] = broker
        self.ports[broker_id] = port
        self._scopes[broker_id] = scope
        self.controller.register(broker, port)
        return broker

    async def stop_broker(self, broker_id: int) -> None:
        """Stop a broker for good or for a restart: the controller fences it (its leaderships move),
        then it closes its logs as a clean shutdown does."""
        self.controller.fence(broker_id)
        await self.caught_up()
        self._scopes.pop(broker_id).cancel()
        await self._stopped[broker_id].wait()
        del self.brokers[broker_id], self.ports[broker_id]
        del self.controller.brokers[broker_id]

    async def restart_broker(self, broker_id: int) -> BrokerServer:
        """Start a stopped broker again on its log directories, registered and unfenced."""
        assert self.nursery is not None and broker_id not in self.brokers
        broker = await self.start_broker(self.nursery, broker_id)
        await self.caught_up()
        return broker

    # -- topics -----------------------------------------------------------------------------------

    async def create_topic(self, name: str, partitions: int = 1, replication_factor: int = 1,
                           configs: Mapping[str, str] | None = None) -> Uuid:
        response = await self.controller.create_topics(CreateTopicsRequest((
            CreatableTopic(name, partitions, replication_factor,
                           configs=tuple(CreatableTopicConfig(k, v) for k, v in (configs or {}).items())),
        )))
        result = response.result(name)
        assert result.error_code == Errors.NONE, result
        await self.wait_for(lambda: all(
            self.partition(b, name, p) is not None and (self.partition(b, name, p).is_leader or b != self.leader(name, p))
            for p in range(partitions) for b in self.registration(name, p).replicas
        ))
        return result.topic_id

    def registration(self, topic: str, partition: int) -> PartitionRegistration:
        return self.image.topics.get_by_name(topic).partitions[partition]

    def leader(self, topic: str, partition: int = 0) -> int:
        return self.registration(topic, partition).leader

    def partition(self, broker_id: int, topic: str, partition: int = 0):
        return self.brokers[broker_id].replicas.get(topic, partition)

    async def fence(self, broker_id: int) -> None:
        """Fence a broker as a missed session would, and wait until every broker applied it."""
        self.controller.fence(broker_id)
        await self.caught_up()

    async def unfence(self, broker_id: int) -> None:
        self.controller.unfence(broker_id)
        await self.caught_up()

    async def fetch_rounds(self, broker_id: int, rounds: int) -> None:
        """Wait until ``broker_id``'s fetchers completed ``rounds`` more fetch rounds."""
        fetchers = self.brokers[broker_id].fetchers
        for _ in range(rounds):
            await fetchers.round_done.wait()

    async def caught_up(self) -> None:
        """Wait until every broker applied every metadata update published to it."""
        for broker in self.brokers.values():
            await broker.caught_up()

    # -- waiting ----------------------------------------------------------------------------------

    async def wait_for(self, condition: Callable[[], bool], timeout: float = 30.0) -> None:
        """Wait until ``condition()`` holds, waking on any metadata or partition change of any broker."""
        with trio.fail_after(timeout):
            while not condition():
                event = trio.Event()
                sets = []
                for broker in self.brokers.values():
                    for part in broker.replicas.partitions.values():
                        sets += [part.append_watchers, part.hw_watchers]
                for w in sets:
                    w.add(event)
                metadata_events = [b.metadata.changed for b in self.brokers.values()]
                try:
                    async with trio.open_nursery() as nursery:
                        for metadata_event in metadata_events:
                            nursery.start_soon(_set_when, metadata_event, event)
                        await event.wait()
                        nursery.cancel_scope.cancel()
                finally:
                    for w in sets:
                        w.discard(event)


async def _set_when(source: trio.Event, target: trio.Event) -> None:
    await source.wait()
    target.set()


def broker_settings(root: Path, broker_id: int, log_dirs_per_broker: int = 1, **overrides) -> BrokerSettings:
    """``log_dirs_per_broker`` > 1: that many log directories (``broker-N/dir-K``), formatted (each has
    its own directory.id)."""
    dirs: tuple[Path, ...] = (root / f"broker-{broker_id}",)
    if log_dirs_per_broker > 1:
        dirs = tuple(root / f"broker-{broker_id}" / f"dir-{k}" for k in range(log_dirs_per_broker))
        for d in dirs:  # the identity of each directory (the harness's cluster id is not a base64 uuid)
            if read_meta_properties(d) is None:
                d.mkdir(parents=True, exist_ok=True)
                write_meta_properties(d, MetaProperties(random_uuid_str(), broker_id, random_uuid_str()))
    values = dict(
        node_id=broker_id,
        cluster_id=CLUSTER_ID,
        log_dirs=dirs,
        host="127.0.0.1",
        port=0,
        replica_fetch_backoff_ms=50,
        replica_fetch_wait_max_ms=200,
    )
    values.update(overrides)
    return BrokerSettings(**values)


@asynccontextmanager
async def open_cluster(
    root: Path,
    brokers: int = 1,
    *,
    static_configs: Mapping[str, str] | None = None,
    controller_config: Mapping[str, object] | None = None,
    clock: Callable[[], int] | None = None,
    log_dirs_per_broker: int = 1,
    **settings_overrides,
) -> AsyncIterator[Cluster]:
    """Start ``brokers`` brokers (ids 1..N) and an in-process controller; stop them all on exit."""
    static = dict(static_configs or {})
    config = ControllerConfig(cluster_id=CLUSTER_ID, auto_leader_rebalance_enable=False,
                              static_broker_configs=static, **(controller_config or {}))
    controller = InProcessController(config)
    settings = {
        b: broker_settings(root, b, log_dirs_per_broker, static_broker_configs=static, **settings_overrides)
        for b in range(1, brokers + 1)
    }
    cluster = Cluster(root, controller, settings, clock)
    async with trio.open_nursery() as nursery:
        cluster.nursery = nursery
        for broker_id in settings:
            await cluster.start_broker(nursery, broker_id)
        try:
            yield cluster
        finally:
            nursery.cancel_scope.cancel()
