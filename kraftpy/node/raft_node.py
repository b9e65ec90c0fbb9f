"""`RaftNode`: the Raft part of a process, assembled the same way for a controller and a broker.

A controller is a voter of the metadata quorum, a broker-only process an observer that fetches
``__cluster_metadata`` into its own copy of the log; both need the same pieces, built here from
one configuration: the log on disk (`FileRaftLog` in ``metadata.log.dir``), the persisted election
state (the ``quorum-state`` file), the sans-IO `RaftCore` and the trio `RaftDriver` that applies its
effects. ``run(listener)`` drives it until cancelled and then closes the log (in a worker thread,
shielded from the cancellation). What listens — a `ControllerServer`, or a broker's
`MetadataLoader` — is the caller's.

A metadata log that cannot be opened (its directory unreadable, a full disk while recovery writes)
stops the process with one line naming the directory and the errno (`kraftpy.fatal`); so does a
failed write later on (the driver's and the log's failure handling).

The replica's identity is its node id and the directory id of ``metadata.log.dir`` (meta.properties),
and a controller's endpoint is its controller listener (advertised.listeners' entry for it when set):
what a dynamic quorum's voter set records (KIP-853). Which voters there are comes from the core (the
log), or from controller.quorum.voters for a static quorum; `voters` gives their addresses.
"""

from __future__ import annotations

import random

import trio

from kraftpy.config import KraftConfig
from kraftpy.fatal import storage_failure
from kraftpy.ids import Uuid
from kraftpy.metadata.result import NON_ATOMIC_BATCH_RECORDS
from kraftpy.raft.config import RaftConfig
from kraftpy.raft.core import RaftCore
from kraftpy.raft.driver import RaftDriver, RaftListener
from kraftpy.raft.file_log import METADATA_LOG_DIR_NAME, FileRaftLog
from kraftpy.raft.quorum_state_store import FILE_NAME as QUORUM_STATE_FILE
from kraftpy.raft.quorum_state_store import read_quorum_state_file
from kraftpy.raft.voters import Endpoint
from kraftpy.security.controller_sasl import controller_login
from kraftpy.security.tls import connecting_tls
from kraftpy.storage.log_config import LogConfig
from kraftpy.storage.meta_properties import read_meta_properties


def controller_endpoint(config: KraftConfig) -> Endpoint | None:
    """Where this controller is reached on its controller listener: advertised.listeners' entry for it
    when there is one, else the listener itself (None for a broker-only process)."""
    listener = config.advertised_controller_listener
    if listener is None:
        return None
    return Endpoint(listener.name, listener.host, listener.port)


def raft_config(config: KraftConfig, cluster_id: str, directory_id: Uuid | None = None) -> RaftConfig:
    """The Raft settings of a node, from its configuration (Kafka's controller.quorum.* keys)."""
    listener_name = config.controller_listener_names[0]
    endpoint = controller_endpoint(config) if config.is_controller else None
    return RaftConfig(
        node_id=config.node_id,
        voters=[v.node_id for v in config.voters],
        cluster_id=cluster_id,
        directory_id=directory_id,
        endpoints=(endpoint,) if endpoint is not None else (),
        listener_name=listener_name,
        voter_endpoints=[(v.node_id, Endpoint(listener_name, v.host, v.port)) for v in config.voters],
        bootstrap_servers=config.quorum_bootstrap_servers,
        election_timeout_ms=config["controller.quorum.election.timeout.ms"],
        fetch_timeout_ms=config["controller.quorum.fetch.timeout.ms"],
        election_backoff_max_ms=config["controller.quorum.election.backoff.max.ms"],
        request_timeout_ms=config["controller.quorum.request.timeout.ms"],
        retry_backoff_ms=config["controller.quorum.retry.backoff.ms"],
        append_linger_ms=config["controller.quorum.append.linger.ms"],
        max_batch_records=NON_ATOMIC_BATCH_RECORDS,
    )


def voter_addresses(config: KraftConfig) -> dict[int, tuple[str, int]]:
    """controller.quorum.voters' addresses (empty for a dynamic quorum)."""
    return {v.node_id: (v.host, v.port) for v in config.voters}


class RaftNode:
    def __init__(self, config: KraftConfig, cluster_id: str, log: FileRaftLog, *,
                 rng: random.Random | None = None, directory_id: Uuid | None = None) -> None:
        self.config = config
        self.cluster_id = cluster_id
        self.rng = rng or random.Random()
        self.log = log
        #: The directory id of metadata.log.dir: with node.id, this replica's key (KIP-853).
        self.directory_id = directory_id
        self._static_voters = voter_addresses(config)
        #: How this node connects to the controllers (TLS when the controller listener runs over it).
        self.client_tls = connecting_tls(config, config.controller_listener_names[0])
        #: Who this node authenticates as to the controllers (when the controller listener runs over SASL).
        self.client_sasl = controller_login(config)
        #: Set once `run` has built it.
        self.driver: RaftDriver | None = None

    @classmethod
    async def open(cls, config: KraftConfig, cluster_id: str, *, rng: random.Random | None = None) -> RaftNode:
        """Open (recovering if need be) the metadata log in a worker thread."""
        # The metadata log takes any batch the quorum's leader may build (Kafka sets its max.message.bytes
        # to KafkaRaftClient.MAX_BATCH_SIZE_BYTES the same way): a smaller bound refuses a large
        # operation's batch on the followers (a controlled shutdown of a broker of 33,000 partitions).
        log_config = LogConfig(segment_bytes=config["metadata.log.segment.bytes"],
                               max_message_bytes=raft_config(config, cluster_id).max_batch_bytes)
        try:
            log = await trio.to_thread.run_sync(FileRaftLog.open, config.metadata_log_dir, log_config)
            meta = await trio.to_thread.run_sync(read_meta_properties, config.metadata_log_dir)
        except OSError as exc:
            directory = config.metadata_log_dir / METADATA_LOG_DIR_NAME
            raise storage_failure("cannot open the metadata log in", directory, exc) from exc
        directory_id = Uuid.from_base64(meta.directory_id) if meta is not None else None
        return cls(config, cluster_id, log, rng=rng, directory_id=directory_id)

    @property
    def voters(self) -> dict[int, tuple[str, int]]:
        """The voters' addresses: from the voter set in the log (a dynamic quorum) once the core runs,
        else controller.quorum.voters."""
        driver = self.driver
        if driver is None or not driver.core.voter_history.is_dynamic:
            return dict(self._static_voters)
        out = {}
        for node_id in sorted(driver.core.voters.ids):
            address = driver.core.address_of(node_id)
            if address is not None:
                out[node_id] = address
        return out

    async def run(self, listener: RaftListener, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Build the core and the driver for ``listener`` and drive them until cancelled."""
        config = self.config
        state_path = self.log.directory / QUORUM_STATE_FILE
        try:
            static = sorted(self._static_voters) if self._static_voters else None
            persisted = await trio.to_thread.run_sync(read_quorum_state_file, state_path, static)
            settings = raft_config(config, self.cluster_id, self.directory_id)
            now = trio.current_time()
            # Building the core reads the log's control records (its voter sets): off the event loop.
            core = await trio.to_thread.run_sync(
                lambda: RaftCore(settings, self.log, rng=self.rng, now=now, persisted=persisted))
            self.driver = RaftDriver(core, voter_addresses=self._static_voters, quorum_state_path=state_path,
                                     listener=listener, client_tls=self.client_tls, client_sasl=self.client_sasl,
                                     request_timeout=config["controller.quorum.request.timeout.ms"] / 1000)
            async with trio.open_nursery() as nursery:
                await nursery.start(self.driver.run)
                task_status.started(self.driver)
        finally:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(self.log.close)
