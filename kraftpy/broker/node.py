"""One kraftpy process, whatever its roles: controller, broker, or both (combined, as `kraftpy dev`).

A controller runs a `ControllerServer` (a Raft voter). A broker runs a `BrokerServer`, its
`BrokerLifecycle` with the active controller, and a metadata follower: in a broker-only process an
observer Raft node that fetches ``__cluster_metadata`` into its own copy of the log, in a combined
process the controller's own committed log. Either way every committed image reaches
`BrokerServer.publish` through a `MetadataLoader`.
"""

from __future__ import annotations

import random

import trio

from kraftpy.broker.lifecycle import BrokerLifecycle
from kraftpy.broker.server import BrokerServer
from kraftpy.config import KraftConfig
from kraftpy.logs import get_logger
from kraftpy.metadata.controller_server import (
    ControllerServer,
    raft_config,
    voter_addresses,
    write_metadata_snapshots,
)
from kraftpy.metadata.loader import MetadataLoader
from kraftpy.metadata.rpc import ControllerClient
from kraftpy.metrics import METADATA_OFFSET, serve_metrics, watch_event_loop_lag
from kraftpy.raft.core import RaftCore
from kraftpy.raft.driver import RaftDriver
from kraftpy.raft.file_log import FileRaftLog
from kraftpy.raft.quorum_state_store import FILE_NAME as QUORUM_STATE_FILE
from kraftpy.raft.quorum_state_store import read_quorum_state_file
from kraftpy.storage.log import LogConfig


class KraftNode:
    def __init__(self, config: KraftConfig, cluster_id: str) -> None:
        self.config = config
        self.cluster_id = cluster_id
        self.log = get_logger("node", node_id=config.node_id, role=config.role_name)
        self.controller: ControllerServer | None = None
        self.broker: BrokerServer | None = None
        self.lifecycle: BrokerLifecycle | None = None
        self.loader: MetadataLoader | None = None
        self.ready = trio.Event()
        self.metrics_port: int | None = None

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        config = self.config
        async with trio.open_nursery() as nursery:
            await nursery.start(watch_event_loop_lag)
            if config["metrics.port"] is not None:
                self.metrics_port = await nursery.start(serve_metrics, config["metrics.port"])
            if config.is_controller:
                self.controller = ControllerServer(config, self.cluster_id)
                await nursery.start(self.controller.run)
            if config.is_broker:
                await self._run_broker(nursery)
            else:
                self.ready.set()
            task_status.started()

    async def _run_broker(self, nursery: trio.Nursery) -> None:
        config = self.config
        voters = voter_addresses(config)
        client = ControllerClient(nursery, voters, node_id=config.node_id,
                                  request_timeout=config["controller.quorum.request.timeout.ms"] / 1000)
        self.broker = BrokerServer.from_config(config, client, cluster_id=self.cluster_id)
        await nursery.start(self.broker.run)
        if self.controller is not None:
            self.loader = self.controller.loader
        else:
            await nursery.start(self._observe_metadata, voters)
        assert self.loader is not None
        self.loader.subscribe(self.broker.publish)
        node_id = config.node_id
        self.loader.subscribe(lambda image, _delta: METADATA_OFFSET.labels(node_id).set(
            image.provenance.last_offset))
        loader = self.loader
        self.lifecycle = BrokerLifecycle(config, self.cluster_id, self.broker, client,
                                         metadata_offset=lambda: loader.image.provenance.last_offset)
        lifecycle = self.lifecycle
        loader.subscribe(lambda _image, _delta: lifecycle.metadata_advanced())
        await nursery.start(lifecycle.run)
        self.ready_when_running(nursery)

    def ready_when_running(self, nursery: trio.Nursery) -> None:
        async def wait() -> None:
            assert self.lifecycle is not None
            await self.lifecycle.unfenced.wait()
            self.log.info("broker running", port=self.broker.port if self.broker else None)
            self.ready.set()

        nursery.start_soon(wait)

    async def _observe_metadata(self, voters: dict[int, tuple[str, int]], *,
                                task_status=trio.TASK_STATUS_IGNORED) -> None:
        """A broker-only process follows the metadata log as a Raft observer."""
        config = self.config
        log = FileRaftLog.open(config.metadata_log_dir, LogConfig(segment_bytes=config["metadata.log.segment.bytes"]))
        try:
            loader = MetadataLoader(log)
            self.loader = loader
            state_path = log.directory / QUORUM_STATE_FILE
            core = RaftCore(raft_config(config, self.cluster_id), log, rng=random.Random(), now=trio.current_time(),
                            persisted=read_quorum_state_file(state_path, voters))
            driver = RaftDriver(core, voter_addresses=voters, quorum_state_path=state_path, listener=loader,
                                request_timeout=config["controller.quorum.request.timeout.ms"] / 1000)
            async with trio.open_nursery() as nursery:
                await nursery.start(driver.run)
                nursery.start_soon(write_metadata_snapshots, loader, driver,
                                   config["metadata.log.max.record.bytes.between.snapshots"], self.log)
                task_status.started()
        finally:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(log.close)

    async def stop_gracefully(self) -> None:
        """Controlled shutdown of the broker, then the controller hands over its leadership."""
        if self.lifecycle is not None:
            await self.lifecycle.shut_down()
        if self.controller is not None:
            await self.controller.resign()
