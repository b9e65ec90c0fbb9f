"""What a controller request must say before the controller looks at it: the checks no type can make.

A request reaching the controller has passed the control plane's type checks (kraftpy.rpc.wire_schema:
every field of its declared type, integers within their Kafka type, node ids and partition indices
not negative). What is left is what a type cannot say, and what would otherwise end up in the
metadata log, where every broker and every later controller would have to live with it:

- BrokerRegistration: at least one listener; listener names distinct and not empty, hosts not
  empty, ports 1..65535, a security protocol Kafka knows (0..3); feature names distinct and not
  empty, 0 <= min_supported_version <= max_supported_version; a rack that is None or not empty; an
  incarnation id that is not the zero id; a cluster id that is not empty;
- AlterPartition: a (topic, partition) at most once; an ISR naming a broker at most once; epochs not
  negative.

These are requests only brokers send. `request_problem` returns the first problem found, in a few
words naming the field, and the control plane answers INVALID_REQUEST with it; nothing is written.
Requests a broker forwards for Kafka clients (CreateTopics, CreatePartitions, ElectLeaders, ...) are
left to the controller's handlers, which answer each topic or partition with Kafka's error code (a
replica named twice: INVALID_REPLICA_ASSIGNMENT), as a Kafka client expects. Whether a request fits
the cluster (a replica not in the partition's assignment, a broker that is not registered, stale
epochs) is likewise the handlers' business.

One bound needs the image: like Kafka's controller (``MAX_RECORDS_PER_USER_OP``), a CreateTopics or
CreatePartitions that would add more than `MAX_PARTITIONS_PER_REQUEST` partitions is refused whole,
each topic answered POLICY_VIOLATION (`oversized_response`), before any placement is computed: one
request asking for 2**31 - 1 partitions must not hold the controller for hours.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from kraftpy.ids import ZERO_UUID
from kraftpy.metadata.errors import Errors
from kraftpy.metadata.image import MetadataImage
from kraftpy.metadata.messages import (
    AlterPartitionRequest,
    BrokerRegistrationRequest,
    CreatableTopicResult,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreatePartitionsTopicResult,
    CreateTopicsRequest,
    CreateTopicsResponse,
)
from kraftpy.rpc.wire_schema import INT16

#: Kafka's SecurityProtocol ids: PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL.
SECURITY_PROTOCOLS = range(0, 4)
#: Kafka's QuorumController.MAX_RECORDS_PER_USER_OP, applied to the partitions one request adds.
MAX_PARTITIONS_PER_REQUEST = 10_000
OVERSIZED = "Unable to perform excessively large batch operation."


def _repeated(items: Iterable[Any]) -> Any | None:
    """An item that occurs more than once, if any."""
    counts = Counter(items)
    return next((item for item, count in counts.items() if count > 1), None)


def request_problem(request: Any) -> str | None:
    """What makes `request` invalid whatever the cluster holds, or None (see the module doc)."""
    match request:
        case BrokerRegistrationRequest():
            return _registration_problem(request)
        case AlterPartitionRequest():
            return _alter_partition_problem(request)
    return None


def _registration_problem(request: BrokerRegistrationRequest) -> str | None:
    if not request.cluster_id:
        return "cluster_id is empty"
    if request.incarnation_id == ZERO_UUID:
        return "incarnation_id is the zero id"
    if not request.listeners:
        return "listeners is empty"
    for i, listener in enumerate(request.listeners):
        if not listener.name or not listener.host:
            return f"listeners[{i}] has an empty name or host"
        if not 1 <= listener.port <= 65535:
            return f"listeners[{i}].port {listener.port} is not a port (1 to 65535)"
        if listener.security_protocol not in SECURITY_PROTOCOLS:
            return f"listeners[{i}].security_protocol {listener.security_protocol} is not one of Kafka's (0 to 3)"
    if (name := _repeated(listener.name for listener in request.listeners)) is not None:
        return f"listeners name {name!r} twice"
    for i, feature in enumerate(request.features):
        if not feature.name:
            return f"features[{i}] has an empty name"
        if not 0 <= feature.min_supported_version <= feature.max_supported_version <= INT16.high:
            return (f"features[{i}] {feature.name!r} supports versions {feature.min_supported_version} to "
                    f"{feature.max_supported_version}")
    if (name := _repeated(feature.name for feature in request.features)) is not None:
        return f"features name {name!r} twice"
    if request.rack is not None and not request.rack:
        return "rack is empty (None when there is none)"
    return None


def _alter_partition_problem(request: AlterPartitionRequest) -> str | None:
    if (topic_id := _repeated(t.topic_id for t in request.topics)) is not None:
        return f"topics name {topic_id} twice"
    for topic in request.topics:
        if (index := _repeated(p.partition_index for p in topic.partitions)) is not None:
            return f"topics[{topic.topic_id}] names partition {index} twice"
        for data in topic.partitions:
            if data.leader_epoch < 0 or data.partition_epoch < 0:
                return f"topics[{topic.topic_id}] partition {data.partition_index} has a negative epoch"
            if (broker := _repeated(s.broker_id for s in data.new_isr_with_epochs)) is not None:
                return f"topics[{topic.topic_id}] partition {data.partition_index} names broker {broker} twice in its ISR"
    return None


def oversized_response(
    image: MetadataImage, request: CreateTopicsRequest | CreatePartitionsRequest, default_partitions: int
) -> CreateTopicsResponse | CreatePartitionsResponse | None:
    """The answer to a CreateTopics or CreatePartitions that would add more than
    `MAX_PARTITIONS_PER_REQUEST` partitions (every topic POLICY_VIOLATION), else None."""
    added = 0
    if isinstance(request, CreateTopicsRequest):
        for topic in request.topics:
            if topic.assignments:
                added += len(topic.assignments)
            else:
                added += default_partitions if topic.num_partitions == -1 else max(topic.num_partitions, 0)
        if added <= MAX_PARTITIONS_PER_REQUEST:
            return None
        return CreateTopicsResponse(tuple(
            CreatableTopicResult(topic.name, Errors.POLICY_VIOLATION, OVERSIZED) for topic in request.topics))
    for entry in request.topics:
        existing = image.topics.get_by_name(entry.name)
        added += max(entry.count - (len(existing.partitions) if existing is not None else 0), 0)
    if added <= MAX_PARTITIONS_PER_REQUEST:
        return None
    return CreatePartitionsResponse(tuple(
        CreatePartitionsTopicResult(entry.name, Errors.POLICY_VIOLATION, OVERSIZED) for entry in request.topics))
