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
"""

from __future__ import annotations

import random

import trio

from kraftpy.config import KraftConfig
from kraftpy.fatal import storage_failure
from kraftpy.metadata.result import NON_ATOMIC_BATCH_RECORDS
from kraftpy.raft.config import RaftConfig
from kraftpy.raft.core import RaftCore
from kraftpy.raft.driver import RaftDriver, RaftListener
from kraftpy.raft.file_log import METADATA_LOG_DIR_NAME, FileRaftLog
from kraftpy.raft.quorum_state_store import FILE_NAME as QUORUM_STATE_FILE
from kraftpy.raft.quorum_state_store import read_quorum_state_file
from kraftpy.security.controller_sasl import controller_login
from kraftpy.security.tls import connecting_tls
from kraftpy.storage.log_config import LogConfig


def raft_config(config: KraftConfig, cluster_id: str) -> RaftConfig:
    """The Raft settings of a node, from its configuration (Kafka's controller.quorum.* keys)."""
    return RaftConfig(
        node_id=config.node_id,
        voters=[v.node_id for v in config.voters],
        cluster_id=cluster_id,
        election_timeout_ms=config["controller.quorum.election.timeout.ms"],
        fetch_timeout_ms=config["controller.quorum.fetch.timeout.ms"],
        election_backoff_max_ms=config["controller.quorum.election.backoff.max.ms"],
        request_timeout_ms=config["controller.quorum.request.timeout.ms"],
        retry_backoff_ms=config["controller.quorum.retry.backoff.ms"],
        append_linger_ms=config["controller.quorum.append.linger.ms"],
        max_batch_records=NON_ATOMIC_BATCH_RECORDS,
    )


def voter_addresses(config: KraftConfig) -> dict[int, tuple[str, int]]:
    return {v.node_id: (v.host, v.port) for v in config.voters}


class RaftNode:
    def __init__(self, config: KraftConfig, cluster_id: str, log: FileRaftLog, *,
                 rng: random.Random | None = None) -> None:
        self.config = config
        self.cluster_id = cluster_id
        self.rng = rng or random.Random()
        self.log = log
        self.voters = voter_addresses(config)
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
        except OSError as exc:
            directory = config.metadata_log_dir / METADATA_LOG_DIR_NAME
            raise storage_failure("cannot open the metadata log in", directory, exc) from exc
        return cls(config, cluster_id, log, rng=rng)

    async def run(self, listener: RaftListener, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Build the core and the driver for ``listener`` and drive them until cancelled."""
        config = self.config
        state_path = self.log.directory / QUORUM_STATE_FILE
        try:
            persisted = await trio.to_thread.run_sync(read_quorum_state_file, state_path, self.voters)
            core = RaftCore(raft_config(config, self.cluster_id), self.log, rng=self.rng, now=trio.current_time(),
                            persisted=persisted)
            self.driver = RaftDriver(core, voter_addresses=self.voters, quorum_state_path=state_path,
                                     listener=listener, client_tls=self.client_tls, client_sasl=self.client_sasl,
                                     request_timeout=config["controller.quorum.request.timeout.ms"] / 1000)
            async with trio.open_nursery() as nursery:
                await nursery.start(self.driver.run)
                task_status.started(self.driver)
        finally:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(self.log.close)
