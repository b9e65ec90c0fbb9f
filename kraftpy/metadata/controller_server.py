"""A controller process: a Raft voter of the metadata quorum, and the active controller when it leads.

Theory of operation. Every controller follows the committed log with a `MetadataLoader` (the same
replay brokers use), in the loader's own task. The one that leads the Raft quorum becomes active
once everything before its epoch is committed and replayed (its loader reached its leader-change
record): it then builds a `QuorumController` on the loaded image and serves writes. A write runs the
controller's pure logic, appends the resulting records as one Raft batch (a result that is not
atomic as batches of at most `NON_ATOMIC_BATCH_RECORDS`), replays them at once into the active
controller (so the next request sees them), and is answered when they are committed and replayed by
the loader. Losing the leadership drops the active controller, with every uncommitted write failed
as NOT_CONTROLLER (a committed one is still answered once replayed); the next active controller
starts again from committed records only, so nothing uncommitted survives.

Requests are served on the controller listener: ``raft`` carries the quorum's own messages (and
brokers' metadata fetches, and ``kraftpy quorum status``); the APIs of kraftpy.metadata.rpc carry
brokers' requests. Writes are serialised by one lock: that is the controller's event loop.

The quorum's own membership (KIP-853) is the Raft leader's business, not the metadata image's: adding
and removing controllers (kraftpy.metadata.quorum_membership) go to the Raft driver, and so does an
UpdateFeatures of kraft.version (answered once its record is committed); the rest of such a request
goes through the controller as usual.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import trio

from kraftpy.config import KraftConfig
from kraftpy.logs import get_logger
from kraftpy.metadata import quorum_membership as membership
from kraftpy.metadata.bootstrap import BootstrapError, read_bootstrap
from kraftpy.metadata.cluster_describe import describe_cluster
from kraftpy.metadata.configs import static_broker_configs
from kraftpy.metadata.controller import QuorumController
from kraftpy.metadata.controller_config import ControllerConfig
from kraftpy.metadata.controller_kafka import ControllerKafkaApis
from kraftpy.metadata.errors import Errors
from kraftpy.metadata.loader import MetadataLoader, write_metadata_snapshots
from kraftpy.metadata.messages import UpdatableFeatureResult, UpdateFeaturesRequest, UpdateFeaturesResponse
from kraftpy.metadata.records import MetadataRecord, UserScramCredentialRecord, encode_record
from kraftpy.metadata.replication_control import unclean_elections
from kraftpy.metadata.result import NON_ATOMIC_BATCH_RECORDS, ControllerResult
from kraftpy.metadata.rpc import (
    CLUSTER_DESCRIBE_API,
    CONTROLLER_APIS,
    NOT_CONTROLLER,
    QUORUM_STATUS_API,
    WIRE,
    decode_request,
    not_controller,
)
from kraftpy.metadata.validation import oversized_response
from kraftpy.metrics import ACTIVE_CONTROLLER, RAFT_EPOCH, RAFT_HIGH_WATERMARK, UNCLEAN_LEADER_ELECTIONS
from kraftpy.raft.driver import RAFT_API, RaftDriver, RaftListener
from kraftpy.raft.effects import Commit, LeaderChange, SnapshotLoaded
from kraftpy.raft.errors import NotLeaderError
from kraftpy.raft.log import RaftLog
from kraftpy.raft.voters import KRAFT_VERSION_FEATURE, SUPPORTED_KRAFT_VERSIONS
from kraftpy.rpc.control import ControlClient, ControlServer, RpcError
from kraftpy.security.authorizer import (
    CLUSTER_NAME,
    AclIndex,
    AclOperation,
    AuthorizationResult,
    ResourceType,
    parse_super_users,
)
from kraftpy.security.controller_sasl import server_sasl
from kraftpy.security.tls import listener_tls


class RaftRunner(Protocol):
    """The Raft part of the process (kraftpy.node.raft_node.RaftNode): the log, and a driver it builds
    for a listener and runs until cancelled."""

    log: RaftLog
    voters: dict[int, tuple[str, int]]
    driver: RaftDriver | None
    directory_id: Any
    client_tls: Any
    client_sasl: Any

    async def run(self, listener: RaftListener, *, task_status: Any = ...) -> None: ...


def controller_config(config: KraftConfig, cluster_id: str) -> ControllerConfig:
    return ControllerConfig(
        cluster_id=cluster_id,
        broker_session_timeout_ms=config["broker.session.timeout.ms"],
        num_partitions=config["num.partitions"],
        default_replication_factor=config["default.replication.factor"],
        delete_topic_enable=config["delete.topic.enable"],
        auto_leader_rebalance_enable=config["auto.leader.rebalance.enable"],
        leader_imbalance_check_interval_seconds=config["leader.imbalance.check.interval.seconds"],
        static_broker_configs=static_broker_configs(config),
        local_broker_id=config.node_id if config.is_broker else None,
        bootstrap_records=_bootstrap_records(config),
    )


def _bootstrap_records(config: KraftConfig) -> tuple:
    """What `storage format --add-scram` left in the metadata log directory; a damaged file stops the
    process with one line naming it."""
    try:
        return read_bootstrap(config.metadata_log_dir)
    except BootstrapError as exc:
        raise config.fail("metadata.log.dir", str(exc)) from None


#: Partition memberships (a broker leading or in the ISR of a partition) of the active controller's image
#: from which a write's records are built, encoded and replayed in a worker thread, the event loop
#: answering meanwhile (the quorum's fetches above all: a leader silent past
#: controller.quorum.fetch.timeout.ms is replaced). At 100,000 partitions fencing a broker of 33,000, or
#: electing leaders for them all when it returns, builds as many records, a second of work; below this
#: a write takes milliseconds and a thread would cost more than it frees.
OFFLOAD_MEMBERSHIPS = 20_000


def _encode_all(records: Sequence[MetadataRecord]) -> list[bytes]:
    return [encode_record(r) for r in records]


class ControllerServer:
    def __init__(self, config: KraftConfig, cluster_id: str, raft: RaftRunner, *,
                 rng: random.Random | None = None) -> None:
        """``raft`` is this process's Raft node (a voter): the controller is its listener."""
        self.config = config
        self.cluster_id = cluster_id
        self.node_id = config.node_id
        self.rng = rng or random.Random()
        self.log = get_logger("controller", node_id=self.node_id, role="controller")
        self.raft = raft
        self.loader = MetadataLoader(raft.log)
        self.controller_config = controller_config(config, cluster_id)
        self.snapshot_bytes = config["metadata.log.max.record.bytes.between.snapshots"]
        self.port: int | None = None
        #: The active controller, None when this node does not lead (or is still activating).
        self.active: QuorumController | None = None
        #: The controller built when this node's epoch became committed, until it is activated.
        self._leading: QuorumController | None = None
        self._activation_offset: int | None = None
        #: Writes waiting for their last offset to be committed and replayed by the loader, in offset order.
        self._pending: list[tuple[int, list[Any]]] = []
        self._high_watermark = 0
        self._write_lock = trio.Lock()
        #: A write on an image of this many partition memberships or more (a broker leading or in the ISR
        #: of a partition) is computed, encoded and replayed in a worker thread (`OFFLOAD_MEMBERSHIPS`).
        self.offload_memberships = OFFLOAD_MEMBERSHIPS
        self._changed = trio.Event()
        #: SCRAM credentials of the bootstrap checkpoint by (name, mechanism code): what peers on the
        #: controller listener are verified with until this controller has replayed some of the log.
        self._bootstrap_scram = {(r.name, r.mechanism): r for r in self.controller_config.bootstrap_records
                                 if isinstance(r, UserScramCredentialRecord)}
        #: The loaded image holds something (it has replayed the log's first records). Never goes back.
        self._replayed = False
        #: The ACLs of the loaded image, when an authorizer is configured: who may speak the control plane.
        self.acls: AclIndex | None = None
        if config["authorizer.class.name"]:
            self.acls = AclIndex(super_users=parse_super_users(config["super.users"]),
                                 allow_everyone_if_no_acl_found=config["allow.everyone.if.no.acl.found"])
        self.loader.subscribe(self._follow_image)

    # -- running ---------------------------------------------------------------------------------

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """The quorum work and the controller listener, until cancelled; started with the bound port."""
        listener = self.config.controller_listener
        assert listener is not None
        async with trio.open_nursery() as nursery:
            await nursery.start(self.run_quorum)
            sasl = server_sasl(self.config, lookup_scram=self.lookup_scram, authorize=self.authorize_control_plane)
            # Kafka-protocol requests (kafka-metadata-quorum.sh --bootstrap-controller) on the same listener.
            kafka = ControllerKafkaApis(self, listener_name=listener.name, sasl=sasl, acls=lambda: self.acls)
            server = ControlServer(self.handle, max_frame_bytes=self.config["socket.request.max.bytes"],
                                   name="controller",
                                   queued_max_request_bytes=self.config["queued.max.request.bytes"],
                                   connections_max_idle_ms=self.config["connections.max.idle.ms"],
                                   tls=listener_tls(self.config, listener.name), sasl=sasl, kafka=kafka.serve,
                                   sasl_max_receive_bytes=self.config["sasl.server.max.receive.size"])
            if server.tls is not None:
                await nursery.start(server.tls.watch, self.config["ssl.reload.check.interval.ms"] / 1000,
                                    self.log.bind(listener=listener.name))
            self.port = await nursery.start(server.serve, listener.host, listener.port)
            self.log.info("controller started", port=self.port, voters=sorted(self.raft.voters))
            task_status.started(self.port)

    async def run_quorum(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Everything but the listener: the Raft node, the controller's timers (session expiry, leader
        rebalancing) and snapshots. Requests come in through `handle`."""
        async with trio.open_nursery() as nursery:
            await nursery.start(self.loader.run)
            await nursery.start(self.raft.run, self)
            nursery.start_soon(self._timers)
            nursery.start_soon(write_metadata_snapshots, self.loader, self.raft.driver, self.snapshot_bytes, self.log)
            task_status.started()

    @property
    def driver(self) -> RaftDriver | None:
        """The Raft driver, once the Raft node built it (before it calls this listener)."""
        return self.raft.driver

    async def resign(self) -> None:
        """Leave the quorum's leadership on purpose before shutting down (EndQuorumEpoch)."""
        if self.driver is not None:
            await self.driver.resign()

    # -- who may speak the control plane (a SASL controller listener) --------------------------------

    def _follow_image(self, image: Any, delta: Any) -> None:
        if not self._replayed and not image.is_empty:
            self._replayed = True
        if self.acls is not None:
            self.acls.apply_changes(delta.changed_acls)
        replayed = self.loader.next_offset
        while self._pending and self._pending[0][0] < replayed:
            _, slot = self._pending.pop(0)
            slot[0].set()
        if self._leading is None and self._activation_offset is not None and replayed >= self._activation_offset:
            self._activate()
            self._poke()

    def lookup_scram(self, name: str, mechanism: int) -> UserScramCredentialRecord | None:
        """A user's SCRAM credential: the metadata image's once this controller replayed some of the log,
        before that (a fresh start) its own bootstrap checkpoint's (`storage format --add-scram`)."""
        if self._replayed:
            return self.loader.image.scram.credential(name, mechanism)
        return self._bootstrap_scram.get((name, mechanism))

    def authorize_control_plane(self, principal: str, host: str) -> str | None:
        """None when ``principal`` may use the controller listener: anyone authenticated without an
        authorizer; with one, a super user or a principal allowed ClusterAction on the cluster (Kafka's
        rule for controller APIs). Else the rule that refused it."""
        if self.acls is None:
            return None
        decision = self.acls.decide(principal, host, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER,
                                    CLUSTER_NAME)
        if decision.result is AuthorizationResult.ALLOWED:
            return None
        return f"no ClusterAction on the cluster ({decision})"

    # -- the Raft listener -----------------------------------------------------------------------

    def handle_commit(self, commit: Commit) -> None:
        # Replayed by the loader's own task: a commit of many records never holds up the Raft driver.
        self.loader.listener.handle_commit(commit)
        hw = self._high_watermark = commit.high_watermark
        RAFT_HIGH_WATERMARK.labels(self.node_id).set(hw)
        self._poke()

    def handle_leader_change(self, change: LeaderChange) -> None:
        self.loader.handle_leader_change(change)
        RAFT_EPOCH.labels(self.node_id).set(change.epoch)
        if change.leader_id == self.node_id:
            assert self.driver is not None
            # The new leader's leader-change record is its log's last batch: activate once it commits.
            self._activation_offset = self.driver.core.log.end_offset
        else:
            self._deactivate(change.leader_id)
        self._poke()

    def handle_snapshot_loaded(self, effect: SnapshotLoaded) -> None:
        self.loader.listener.handle_snapshot_loaded(effect)

    def _activate(self) -> None:
        """Everything before this epoch is committed and replayed by the loader: build the controller on
        its image; `_timers` activates it."""
        self._leading = QuorumController(self.controller_config, rng=self.rng, image=self.loader.image)
        self._activation_offset = None

    def _deactivate(self, leader_id: int | None) -> None:
        if self._leading is not None or self._activation_offset is not None:
            self.log.info("no longer the active controller", leader_id=leader_id)
        self.active = self._leading = None
        self._activation_offset = None
        ACTIVE_CONTROLLER.labels(self.node_id).set(0)
        # Writes already committed are answered once the loader replays them; the others may be lost.
        committed = [(offset, slot) for offset, slot in self._pending if offset < self._high_watermark]
        for offset, slot in self._pending:
            if offset >= self._high_watermark:
                slot[1] = not_controller(leader_id)
                slot[0].set()
        self._pending = committed

    def _poke(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    # -- requests --------------------------------------------------------------------------------

    async def handle(self, api: str, body: dict[str, Any]) -> dict[str, Any]:
        if api == RAFT_API:
            assert self.driver is not None
            return await self.driver.handle_request(body)
        if api == QUORUM_STATUS_API:
            return await self.quorum_status()
        if api == CLUSTER_DESCRIBE_API:
            return self.describe_cluster()
        if api in membership.MEMBERSHIP_APIS:
            return await self._membership(api, body)
        if api not in CONTROLLER_APIS:
            raise RpcError("UNSUPPORTED_VERSION", f"unknown controller API {api}")
        request = decode_request(api, body)
        response = await self._serve(api, request)
        return {"response": WIRE.encode(response)}

    async def serve_request(self, api: str, request: Any) -> Any:
        """One controller API of kraftpy.metadata.rpc.CONTROLLER_APIS, already decoded (the Kafka-protocol
        side of the listener translates into these); RpcError NOT_CONTROLLER when this one is not active."""
        return await self._serve(api, request)

    async def _serve(self, api: str, request: Any) -> Any:
        if api == "UpdateFeatures" and any(u.feature == KRAFT_VERSION_FEATURE for u in request.feature_updates):
            return await self._update_features_with_kraft_version(request)
        if api == "DescribeConfigs":
            return self._active_or_raise().describe_configs(request)
        if api == "ListPartitionReassignments":
            return self._active_or_raise().list_partition_reassignments(request)
        if api == "BrokerRegistration":
            return await self.write(lambda c, now, next_offset: c.handle_broker_registration(
                request, now, next_offset))
        handlers: dict[str, Callable[[QuorumController, float], ControllerResult]] = {
            "BrokerHeartbeat": lambda c, now: c.handle_broker_heartbeat(request, now),
            "UnregisterBroker": lambda c, now: c.handle_unregister_broker(request),
            "AlterPartition": lambda c, now: c.handle_alter_partition(request),
            "CreateTopics": lambda c, now: self._bounded(c, request) or c.handle_create_topics(request),
            "DeleteTopics": lambda c, now: c.handle_delete_topics(request),
            "AssignReplicasToDirs": lambda c, now: c.handle_assign_replicas_to_dirs(request),
            "CreatePartitions": lambda c, now: self._bounded(c, request) or c.handle_create_partitions(request),
            "IncrementalAlterConfigs": lambda c, now: c.handle_incremental_alter_configs(request),
            "AllocateProducerIds": lambda c, now: c.handle_allocate_producer_ids(request),
            "ElectLeaders": lambda c, now: c.handle_elect_leaders(request),
            "AlterPartitionReassignments": lambda c, now: c.handle_alter_partition_reassignments(request),
            "UpdateFeatures": lambda c, now: c.handle_update_features(request),
            "CreateAcls": lambda c, now: c.handle_create_acls(request),
            "DeleteAcls": lambda c, now: c.handle_delete_acls(request),
            "AlterUserScramCredentials": lambda c, now: c.handle_alter_user_scram_credentials(request),
            "AlterClientQuotas": lambda c, now: c.handle_alter_client_quotas(request),
        }
        handler = handlers[api]
        return await self.write(lambda c, now, _next: handler(c, now))

    def _bounded(self, controller: QuorumController, request: Any) -> ControllerResult | None:
        """A request adding too many partitions at once is answered POLICY_VIOLATION, unplaced."""
        response = oversized_response(controller.image, request, self.controller_config.num_partitions)
        return None if response is None else ControllerResult([], response)

    def _not_leader(self) -> RpcError:
        """NOT_LEADER_OR_FOLLOWER naming the Raft leader as ``id@host:port`` when it is known."""
        leader = self.loader.leader_id
        address = None
        if leader is not None and self.driver is not None:
            address = self.driver.core.address_of(leader) or self.raft.voters.get(leader)
        return RpcError("NOT_LEADER_OR_FOLLOWER", "" if address is None else f"{leader}@{address[0]}:{address[1]}")

    async def quorum_status(self) -> dict[str, Any]:
        """What `kraftpy quorum status` prints, from the leader; elsewhere NOT_LEADER_OR_FOLLOWER naming
        the leader and its address."""
        assert self.driver is not None
        described = await self.driver.describe_quorum()
        if described.error_code != 0:
            raise self._not_leader()
        now_ms = int(trio.current_time() * 1000)
        hw = described.high_watermark

        def replica(state: Any) -> dict[str, Any]:
            fetched = state.last_fetch_timestamp
            caught_up = state.last_caught_up_timestamp
            directory = state.replica_directory_id
            return {
                "id": state.replica_id,
                "directory_id": None if directory is None else str(directory),
                "log_end_offset": state.log_end_offset,
                "lag": max(0, hw - state.log_end_offset),
                "last_fetch_ms_ago": None if fetched < 0 else max(0, now_ms - fetched),
                "last_caught_up_ms_ago": None if caught_up < 0 else max(0, now_ms - caught_up),
            }

        return {
            "cluster_id": self.cluster_id,
            "leader_id": described.leader_id,
            "leader_epoch": described.leader_epoch,
            "high_watermark": hw,
            "kraft_version": described.kraft_version,
            "voters": [replica(v) for v in described.current_voters],
            "observers": [replica(o) for o in described.observers],
            "endpoints": {str(node.id): membership.encode_listeners(node.endpoints) for node in described.nodes},
        }

    # -- the quorum's membership (KIP-853) -----------------------------------------------------------

    async def serve_membership(self, api: str, body: dict[str, Any]) -> dict[str, Any]:
        """One request of kraftpy.metadata.quorum_membership (the Kafka-protocol side of the listener
        translates AddRaftVoter and RemoveRaftVoter into these)."""
        return await self._membership(api, body)

    async def _membership(self, api: str, body: dict[str, Any]) -> dict[str, Any]:
        driver = self.driver
        assert driver is not None
        core = driver.core
        if api == membership.DESCRIBE_RAFT_REPLICA_API:
            return membership.describe_replica(self.node_id, self.raft.directory_id, SUPPORTED_KRAFT_VERSIONS,
                                               core.config.endpoints)
        key = membership.parse_voter_key(api, body)
        if api == membership.REMOVE_RAFT_VOTER_API:
            if not core.is_leader:
                raise self._not_leader()
            self.log.info("removing a controller", voter=str(key))
            return membership.raise_unless_done(await driver.remove_voter(key))
        listeners = membership.parse_listeners(api, body.get("listeners"))
        if not core.is_leader:
            raise self._not_leader()
        endpoint = next((e for e in listeners if e.name == core.config.listener_name), None)
        if endpoint is None:
            raise RpcError("INVALID_REQUEST", f"{api}: no {core.config.listener_name} listener to reach it on")
        # Kafka's leader asks the new voter's ApiVersions: here, who it is and which kraft.version it runs.
        versions = await self._describe_new_voter(key, endpoint.host, endpoint.port)
        self.log.info("adding a controller", voter=str(key), endpoint=str(endpoint))
        return membership.raise_unless_done(await driver.add_voter(membership.voter_node(key, listeners, versions)))

    async def _describe_new_voter(self, key: Any, host: str, port: int) -> tuple[int, int]:
        timeout = self.config["controller.quorum.request.timeout.ms"] / 1000
        answer: Any = None
        failure: RpcError | None = None
        async with trio.open_nursery() as nursery:
            client = ControlClient(nursery, host, port, request_timeout=timeout, connect_timeout=timeout,
                                   tls=self.raft.client_tls, sasl=self.raft.client_sasl)
            try:
                answer = await client.request(membership.DESCRIBE_RAFT_REPLICA_API, {})
            except RpcError as exc:
                failure = exc  # raised below, outside the nursery (which would wrap it in a group)
            finally:
                await client.aclose()
        if failure is not None:
            raise RpcError("REQUEST_TIMED_OUT", f"the controller to add, at {host}:{port}, did not answer: {failure}")
        return membership.parse_replica_description(answer, key)

    async def _update_features_with_kraft_version(self, request: UpdateFeaturesRequest) -> UpdateFeaturesResponse:
        """UpdateFeatures naming kraft.version: that one by the Raft leader (a KRaftVersionRecord and the
        static voters' VotersRecord), the others by the controller; all validated before any is done."""
        self._active_or_raise()
        assert self.driver is not None
        kraft = [u for u in request.feature_updates if u.feature == KRAFT_VERSION_FEATURE]
        others = tuple(u for u in request.feature_updates if u.feature != KRAFT_VERSION_FEATURE)

        def refused(message: str) -> UpdateFeaturesResponse:
            results = tuple(UpdatableFeatureResult(u.feature, Errors.INVALID_UPDATE_VERSION, message)
                            for u in request.feature_updates)
            return UpdateFeaturesResponse(Errors.INVALID_UPDATE_VERSION, message, results)

        if len(kraft) > 1:
            return refused(f"The feature {KRAFT_VERSION_FEATURE} is named more than once.")
        level = kraft[0].max_version_level
        checked = await self.driver.upgrade_kraft_version(level, validate_only=True)
        if checked.error_code != Errors.NONE:
            return refused(checked.message or Errors(checked.error_code).name)
        if others:
            answer = await self._serve("UpdateFeatures", UpdateFeaturesRequest(others, validate_only=True))
            if answer.error_code != Errors.NONE:
                return UpdateFeaturesResponse(answer.error_code, answer.error_message, (
                    *answer.results, UpdatableFeatureResult(KRAFT_VERSION_FEATURE, Errors.INVALID_UPDATE_VERSION,
                                                            answer.error_message)))
        if request.validate_only:
            results = tuple(UpdatableFeatureResult(u.feature, Errors.NONE) for u in request.feature_updates)
            return UpdateFeaturesResponse(Errors.NONE, None, results)
        done = await self.driver.upgrade_kraft_version(level)
        if done.error_code != Errors.NONE:
            return refused(done.message or Errors(done.error_code).name)
        self.log.info("kraft.version upgraded", kraft_version=level)
        results = [UpdatableFeatureResult(KRAFT_VERSION_FEATURE, Errors.NONE)]
        if others:
            answer = await self._serve("UpdateFeatures", UpdateFeaturesRequest(others))
            return UpdateFeaturesResponse(answer.error_code, answer.error_message, (*answer.results, *results))
        return UpdateFeaturesResponse(Errors.NONE, None, tuple(results))

    def describe_cluster(self) -> dict[str, Any]:
        """The cluster in the active controller's image; elsewhere NOT_CONTROLLER naming the leader and
        its address (``id@host:port``) when known."""
        if self.active is None:
            leader = self.loader.leader_id
            address = self.raft.voters.get(leader) if leader is not None and leader != self.node_id else None
            raise RpcError(NOT_CONTROLLER, "" if address is None else f"{leader}@{address[0]}:{address[1]}")
        return describe_cluster(self.active.image, cluster_id=self.cluster_id, controller_id=self.node_id,
                                epoch=self.loader.leader_epoch, voters=self.raft.voters,
                                supported_features=self.controller_config.supported_features)

    def _active_or_raise(self) -> QuorumController:
        if self.active is None:
            raise not_controller(self.loader.leader_id if self.loader.leader_id != self.node_id else None)
        return self.active

    async def write(self, operation: Callable[[QuorumController, float, int], ControllerResult], *,
                    activating: bool = False) -> Any:
        """Run one controller operation: records appended as one batch (several for a result that is not
        atomic, each replayed into the controller as it is appended), answered once committed and
        replayed by this controller's loader (so that what it answers is in the image it serves).
        With ``activating``, run it on the controller being activated, which becomes the active one.

        An operation that writes nothing read the in-memory image, which may hold records not yet
        committed (another request's): it is answered once everything written so far is committed,
        as Kafka's controller does, so that a client retrying a CreateTopics whose first answer it lost
        is not told TOPIC_ALREADY_EXISTS of a topic whose batch is then lost with the leadership
        (it gets NOT_CONTROLLER and asks the next controller)."""
        assert self.driver is not None
        async with self._write_lock:
            controller = self._leading if activating else self._active_or_raise()
            if controller is None:
                raise not_controller(self.loader.leader_id)
            offload = controller.image.topics.index.memberships() >= self.offload_memberships
            now, next_offset = trio.current_time(), self.driver.next_offset()
            if offload:
                result = await trio.to_thread.run_sync(operation, controller, now, next_offset)
            else:
                result = operation(controller, now, next_offset)
            records = result.records
            step = len(records) if result.atomic else NON_ATOMIC_BATCH_RECORDS
            for start in range(0, len(records), max(step, 1)):
                chunk = records[start:start + step]
                encoded = (await trio.to_thread.run_sync(_encode_all, chunk) if offload and len(chunk) > 1
                           else _encode_all(chunk))
                try:
                    proposed = await self.driver.propose(encoded)
                except NotLeaderError as exc:
                    raise not_controller(exc.leader_id) from None
                if self._leading is not controller:  # leadership went while the batch was being written
                    raise not_controller(self.loader.leader_id)
                before = controller.image
                replay = functools.partial(controller.replay, chunk, last_offset=proposed.last_offset,
                                           epoch=proposed.epoch)
                if offload and len(chunk) > 1:
                    await trio.to_thread.run_sync(replay)
                else:
                    replay()
                self._report_unclean_elections(before, chunk)
            if activating:
                self.active = controller
                ACTIVE_CONTROLLER.labels(self.node_id).set(1)
                self.log.info("active controller", epoch=self.loader.leader_epoch,
                              metadata_offset=self.loader.next_offset)
            written = proposed.last_offset if result.records else self.driver.next_offset() - 1
            if written < self.loader.next_offset:
                return result.response  # committed and replayed already
            slot: list[Any] = [trio.Event(), None]
            self._pending.append((written, slot))
        await slot[0].wait()
        if slot[1] is not None:
            raise slot[1]
        return result.response

    def _report_unclean_elections(self, before: Any, records: list[Any]) -> None:
        for election in unclean_elections(before, records):
            UNCLEAN_LEADER_ELECTIONS.inc()
            self.log.warning(
                "unclean leader election: records may be lost",
                topic=election.topic, partition=election.partition, old_leader=election.old_leader,
                old_isr=list(election.old_isr), new_leader=election.new_leader,
                lost="what the old ISR held past the new leader's log end offset (the new leader logs "
                     "it as lost_from_offset)")

    # -- background work -------------------------------------------------------------------------

    async def _timers(self) -> None:
        """Session expiry and leader rebalancing, whenever the active controller has a deadline."""
        while True:
            if self._leading is not None and self.active is None:
                try:
                    await self.write(lambda c, now, _next: c.activate(now), activating=True)
                except RpcError:
                    pass
                continue
            deadline = self.active.next_deadline() if self.active is not None else None
            with trio.move_on_at(deadline if deadline is not None else float("inf")):
                await self._changed.wait()
                continue
            if self.active is None:
                continue
            try:
                fenced = await self.write(lambda c, now, _next: c.tick(now))
            except RpcError:
                continue
            if fenced:
                self.log.warning("fenced brokers whose sessions expired", brokers=list(fenced))
