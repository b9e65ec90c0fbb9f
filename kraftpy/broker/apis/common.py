"""What several handler modules share: topic ids on the wire, and finding the partition a request may act on."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from typing import Any

from kraftpy.broker.metadata_cache import MetadataCache
from kraftpy.broker.partition import Partition
from kraftpy.broker.replica_manager import ReplicaManager
from kraftpy.ids import Uuid
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.types import ZERO_UUID


def to_wire_uuid(topic_id: Uuid | None) -> uuid.UUID:
    return ZERO_UUID if topic_id is None else uuid.UUID(bytes=topic_id.raw)


def from_wire_uuid(value: uuid.UUID) -> Uuid | None:
    return None if value == ZERO_UUID else Uuid(value.bytes)


def epoch_error(part: Partition, current_leader_epoch: int) -> ErrorCode:
    """KIP-320: a request naming another leader epoch than the partition's is fenced or early."""
    if current_leader_epoch < 0 or current_leader_epoch == part.leader_epoch:
        return ErrorCode.NONE
    if current_leader_epoch < part.leader_epoch:
        return ErrorCode.FENCED_LEADER_EPOCH
    return ErrorCode.UNKNOWN_LEADER_EPOCH


def leader_partition(replicas: ReplicaManager, metadata: MetadataCache, topic: str, index: int,
                     current_leader_epoch: int = -1) -> tuple[Partition | None, ErrorCode]:
    """The partition if this broker leads it in the epoch the request names, else the error to answer
    (KAFKA_STORAGE_ERROR for a replica whose log failed here)."""
    part = replicas.get(topic, index)
    if part is None and replicas.is_offline(topic, index):
        return None, ErrorCode.KAFKA_STORAGE_ERROR
    if part is None or not part.is_leader:
        return None, metadata.partition_error(topic, index)
    error = epoch_error(part, current_leader_epoch)
    return (part, error) if error == ErrorCode.NONE else (None, error)


def point_to_leaders(metadata: MetadataCache, refused: Iterable[tuple[str, int, Any]], listener: str,
                     node_endpoint: Callable[..., Any]) -> list[Any]:
    """KIP-951: set ``current_leader`` (leader id and epoch, as this broker's metadata has them) on each
    (topic, partition, answer) of ``refused``, and return the endpoints of those leaders on ``listener``,
    by id, made with ``node_endpoint`` (the response's NodeEndpoint)."""
    endpoints: dict[int, Any] = {}
    for topic, index, answer in refused:
        leader = metadata.current_leader(topic, index, listener)
        if leader is None:
            continue
        leader_id, leader_epoch, endpoint = leader
        answer.current_leader.leader_id, answer.current_leader.leader_epoch = leader_id, leader_epoch
        if endpoint is not None and leader_id not in endpoints:
            host, port, rack = endpoint
            endpoints[leader_id] = node_endpoint(node_id=leader_id, host=host, port=port, rack=rack)
    return [endpoints[node_id] for node_id in sorted(endpoints)]
