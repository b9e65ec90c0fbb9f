"""The largest operation the controller accepts fits one metadata batch.

A controller operation is appended as one batch (replayed atomically), refused past the batch limit.
CreateTopics is bounded by partitions (Kafka's MAX_RECORDS_PER_USER_OP, 10,000); at that bound, with
replication factor 10 and a log directory recorded per replica, its records must still fit the batch
limit (Kafka's 8 MiB): with a 1 MiB limit a CreateTopics of 10,000 partitions at replication factor 3
was refused with UNKNOWN_SERVER_ERROR."""

from __future__ import annotations

import random

from kraftpy.ids import Uuid
from kraftpy.metadata.controller import QuorumController
from kraftpy.metadata.controller_config import ControllerConfig
from kraftpy.metadata.errors import Errors
from kraftpy.metadata.messages import (
    BrokerHeartbeatRequest,
    BrokerRegistrationRequest,
    CreatableTopic,
    CreateTopicsRequest,
)
from kraftpy.metadata.records import BrokerEndpoint, BrokerFeature, encode_record
from kraftpy.metadata.validation import oversized_response
from kraftpy.raft.batch import encoded_size_bound
from kraftpy.raft.config import RaftConfig

CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"


def test_the_largest_create_topics_fits_one_metadata_batch() -> None:
    controller = QuorumController(ControllerConfig(cluster_id=CLUSTER_ID), rng=random.Random(1))
    offset = 0

    def commit(result):
        nonlocal offset
        if result.records:
            offset += len(result.records)
            controller.replay(result.records, last_offset=offset - 1, epoch=1)
        return result

    commit(controller.activate(0.0))
    for broker_id in range(1, 11):
        request = BrokerRegistrationRequest(
            broker_id=broker_id, cluster_id=CLUSTER_ID, incarnation_id=Uuid(bytes([broker_id]) * 16),
            listeners=(BrokerEndpoint("PLAINTEXT", f"broker{broker_id}", 9092, 0),),
            features=(BrokerFeature("metadata.version", 1, 21),), rack=None,
            log_dirs=(Uuid(bytes([100 + broker_id]) * 16),))
        epoch = commit(controller.handle_broker_registration(request, 0.0, offset)).response.broker_epoch
        commit(controller.handle_broker_heartbeat(BrokerHeartbeatRequest(broker_id, epoch, offset - 1, False, False),
                                                  0.0))
    topics = tuple(CreatableTopic(f"t-{i:03d}", 100, 10) for i in range(100))
    result = controller.handle_create_topics(CreateTopicsRequest(topics))
    assert all(t.error_code == 0 for t in result.response.topics)
    size = encoded_size_bound([encode_record(r) for r in result.records])
    assert size <= RaftConfig(node_id=1, voters=frozenset({1}), cluster_id=CLUSTER_ID).max_batch_bytes
    # The bound itself: 10,000 partitions pass, one more is refused whole (POLICY_VIOLATION) before the
    # controller places anything.
    assert oversized_response(controller.image, CreateTopicsRequest(topics), 1) is None
    over = oversized_response(controller.image, CreateTopicsRequest((*topics, CreatableTopic("one-more", 1, 1))), 1)
    assert over is not None and {t.error_code for t in over.topics} == {Errors.POLICY_VIOLATION}
