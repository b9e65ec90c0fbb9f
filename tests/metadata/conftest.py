"""A controller wired to an in-memory metadata log: results are appended and replayed at once, so every
test reads as a conversation between brokers, clients and the controller."""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence

import pytest

from kraftpy.ids import Uuid
from kraftpy.metadata.controller import QuorumController
from kraftpy.metadata.controller_config import LATEST_METADATA_VERSION, ControllerConfig
from kraftpy.metadata.errors import Errors
from kraftpy.metadata.image import MetadataImage, PartitionRegistration, TopicImage
from kraftpy.metadata.messages import (
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    CreatableReplicaAssignment,
    CreatableTopic,
    CreatableTopicConfig,
    CreatableTopicResult,
    CreateTopicsRequest,
)
from kraftpy.metadata.records import BrokerEndpoint, BrokerFeature, MetadataRecord
from kraftpy.metadata.result import ControllerResult

CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"
EPOCH = 1


def incarnation(broker_id: int, generation: int = 0) -> Uuid:
    return Uuid(bytes([broker_id % 256, generation % 256]) + bytes(14))


def registration_request(
    broker_id: int, *, rack: str | None = None, generation: int = 0, port: int | None = None,
    cluster_id: str = CLUSTER_ID, features: Sequence[BrokerFeature] | None = None,
) -> BrokerRegistrationRequest:
    return BrokerRegistrationRequest(
        broker_id=broker_id,
        cluster_id=cluster_id,
        incarnation_id=incarnation(broker_id, generation),
        listeners=(BrokerEndpoint("PLAINTEXT", f"broker{broker_id}", port or 9092 + broker_id, 0),),
        features=tuple(features) if features is not None else (BrokerFeature("metadata.version", 1, LATEST_METADATA_VERSION),),
        rack=rack,
    )


class Cluster:
    """One active controller and its log. ``now`` is the controller's clock, moved only by ``advance``."""

    def __init__(self, config: ControllerConfig | None = None, seed: int = 7) -> None:
        self.config = config or ControllerConfig(cluster_id=CLUSTER_ID)
        self.controller = QuorumController(self.config, rng=random.Random(seed))
        self.log: list[MetadataRecord] = []
        self.now = 0.0
        self.commit(self.controller.activate(self.now))

    # -- plumbing ---------------------------------------------------------------------------------

    @property
    def image(self) -> MetadataImage:
        return self.controller.image

    @property
    def next_offset(self) -> int:
        return len(self.log)

    def commit(self, result: ControllerResult) -> object:
        """Append the result's records to the log and replay them; return the response."""
        if result.records:
            self.log.extend(result.records)
            self.controller.replay(result.records, last_offset=len(self.log) - 1, epoch=EPOCH)
        return result.response

    def advance(self, seconds: float) -> None:
        self.now += seconds

    # -- brokers ----------------------------------------------------------------------------------

    def register(self, broker_id: int, **kw: object) -> BrokerRegistrationResponse:
        result = self.controller.handle_broker_registration(
            registration_request(broker_id, **kw), self.now, self.next_offset  # type: ignore[arg-type]
        )
        return self.commit(result)  # type: ignore[return-value]

    def heartbeat(
        self, broker_id: int, *, offset: int | None = None, want_fence: bool = False, want_shut_down: bool = False,
        epoch: int | None = None,
    ) -> BrokerHeartbeatResponse:
        """A heartbeat from a broker that has read the whole log unless ``offset`` says otherwise."""
        reg = self.image.cluster.broker(broker_id)
        request = BrokerHeartbeatRequest(
            broker_id=broker_id,
            broker_epoch=epoch if epoch is not None else (reg.epoch if reg else -1),
            current_metadata_offset=self.next_offset - 1 if offset is None else offset,
            want_fence=want_fence,
            want_shut_down=want_shut_down,
        )
        return self.commit(self.controller.handle_broker_heartbeat(request, self.now))  # type: ignore[return-value]

    def add_broker(self, broker_id: int, rack: str | None = None) -> int:
        """Register and unfence a broker; returns its epoch."""
        response = self.register(broker_id, rack=rack)
        assert response.error_code == Errors.NONE, response
        beat = self.heartbeat(broker_id)
        assert not beat.is_fenced, beat
        return response.broker_epoch

    def add_brokers(self, *ids: int, racks: Mapping[int, str] | None = None) -> None:
        for broker_id in ids:
            self.add_broker(broker_id, rack=(racks or {}).get(broker_id))

    def keep_alive(self, *ids: int) -> None:
        for broker_id in ids:
            self.heartbeat(broker_id)

    # -- topics ---------------------------------------------------------------------------------

    def create_topic(
        self, name: str, partitions: int = -1, rf: int = -1, *, configs: Mapping[str, str | None] | None = None,
        assignments: Sequence[Sequence[int]] | None = None,
    ) -> CreatableTopicResult:
        topic = CreatableTopic(
            name=name,
            num_partitions=partitions,
            replication_factor=rf,
            assignments=tuple(CreatableReplicaAssignment(i, tuple(b)) for i, b in enumerate(assignments or ())),
            configs=tuple(CreatableTopicConfig(k, v) for k, v in (configs or {}).items()),
        )
        response = self.commit(self.controller.handle_create_topics(CreateTopicsRequest((topic,))))
        return response.result(name)  # type: ignore[attr-defined]

    def topic(self, name: str) -> TopicImage:
        topic = self.image.topics.get_by_name(name)
        assert topic is not None, name
        return topic

    def partition(self, name: str, pid: int = 0) -> PartitionRegistration:
        return self.topic(name).partitions[pid]


@pytest.fixture
def make_cluster() -> Callable[..., Cluster]:
    return Cluster


@pytest.fixture
def cluster() -> Cluster:
    return Cluster()


@pytest.fixture
def cluster3() -> Cluster:
    """Three unfenced brokers, 1, 2 and 3."""
    c = Cluster()
    c.add_brokers(1, 2, 3)
    return c


@pytest.fixture(scope="session")
def make_cluster_factory() -> Callable[..., Cluster]:
    """``make_cluster`` for hypothesis tests, which may not use function-scoped fixtures."""
    return Cluster
