"""Committed metadata for broker tests without a quorum: a real `QuorumController` whose records are
replayed into real (image, delta) pairs, and that also serves as the broker's ControllerChannel for
AlterPartition. A wall clock the test moves by hand goes with it."""

from __future__ import annotations

import random

from kraftpy.ids import Uuid
from kraftpy.metadata.controller import QuorumController
from kraftpy.metadata.controller_config import LATEST_METADATA_VERSION, ControllerConfig
from kraftpy.metadata.delta import MetadataDelta
from kraftpy.metadata.messages import (
    AlterPartitionRequest,
    AlterPartitionResponse,
    BrokerHeartbeatRequest,
    BrokerRegistrationRequest,
    CreatableReplicaAssignment,
    CreatableTopic,
    CreatableTopicConfig,
    CreateTopicsRequest,
)
from kraftpy.metadata.records import BrokerEndpoint, BrokerFeature
from kraftpy.metadata.result import ControllerResult
from kraftpy.protocol.errors import ErrorCode

CLUSTER_ID = "cmVwbGljYS1tYW5hZ2VyLXRlc3Q"
NODE = 1


class WallClock:
    def __init__(self) -> None:
        self.now = 1_700_000_000_000

    def __call__(self) -> int:
        return self.now


class Metadata:
    """A real controller whose committed records become (image, delta) pairs for the broker."""

    def __init__(self, brokers=(1, 2, 3), *, bootstrap_records: tuple = ()) -> None:
        """``bootstrap_records``: what `storage format` would leave (a FeatureLevelRecord of metadata.version
        to start below the newest level)."""
        self.controller = QuorumController(ControllerConfig(cluster_id=CLUSTER_ID, auto_leader_rebalance_enable=False,
                                                            bootstrap_records=bootstrap_records),
                                           rng=random.Random(3))
        self.offset = -1
        self.alter_partitions: list[AlterPartitionRequest] = []
        self.pending: list[tuple] = []
        self.commit(self.controller.activate(0.0))
        for b in brokers:
            request = BrokerRegistrationRequest(b, CLUSTER_ID, Uuid(bytes([b]) + bytes(15)),
                                                listeners=(BrokerEndpoint("PLAINTEXT", "127.0.0.1", 9000 + b, 0),),
                                                features=(BrokerFeature("metadata.version", 1, LATEST_METADATA_VERSION),))
            epoch = self.commit(self.controller.handle_broker_registration(request, 0.0, self.offset + 1)).broker_epoch
            self.commit(self.controller.handle_broker_heartbeat(BrokerHeartbeatRequest(b, epoch, self.offset), 0.0))

    def commit(self, result: ControllerResult):
        if result.records:
            delta = MetadataDelta(self.controller.image)
            for record in result.records:
                self.offset += 1
                delta.replay(record, self.offset, 1)
            self.controller.replay(result.records, last_offset=self.offset, epoch=1)
            self.pending.append((self.controller.image, delta))
        return result.response

    async def publish_to(self, replicas) -> None:
        """Apply every (image, delta) committed since the last call to a ReplicaManager."""
        pending, self.pending = self.pending, []
        for image, delta in pending:
            await replicas.apply_delta(image, delta)

    def create(self, name: str, partitions: int, rf: int = 3, *, only_here: bool = False, **configs: str) -> None:
        """Create a topic; ``only_here``: every partition has one replica, on this broker."""
        assignments = tuple(CreatableReplicaAssignment(p, (NODE,)) for p in range(partitions)) if only_here else ()
        if only_here:
            partitions = rf = -1
        topic = CreatableTopic(name, partitions, rf, assignments,
                               configs=tuple(CreatableTopicConfig(k, v) for k, v in configs.items()))
        result = self.commit(self.controller.handle_create_topics(CreateTopicsRequest((topic,))))
        assert result.result(name).error_code == ErrorCode.NONE

    # -- a ControllerChannel, for the replica manager's AlterPartition ------------------------------

    async def alter_partition(self, request: AlterPartitionRequest) -> AlterPartitionResponse:
        self.alter_partitions.append(request)
        return self.commit(self.controller.handle_alter_partition(request))


