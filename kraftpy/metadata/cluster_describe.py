"""The cluster as the active controller's image shows it: what `kraftpy cluster describe
--bootstrap-controller` and `kraftpy features describe --bootstrap-controller` print.

Served on the controller listener under `kraftpy.metadata.rpc.CLUSTER_DESCRIBE_API` as a plain map
(like the quorum status), by the active controller only: brokers with their epoch, listeners, rack and
state — Fenced (registered but not unfenced, or fenced after its session expired), Stopping (in
controlled shutdown: its leaderships are being moved away), Running — the controllers, and the
finalized and supported feature levels.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kraftpy.metadata.image import BrokerRegistration, MetadataImage


def broker_state(reg: BrokerRegistration) -> str:
    """Kafka's names for what the controller knows of a broker: Fenced, Stopping or Running."""
    if reg.fenced:
        return "Fenced"
    if reg.in_controlled_shutdown:
        return "Stopping"
    return "Running"


def describe_cluster(image: MetadataImage, *, cluster_id: str, controller_id: int, epoch: int,
                     voters: Mapping[int, tuple[str, int]],
                     supported_features: Mapping[str, tuple[int, int]]) -> dict[str, Any]:
    """A JSON-able map of the cluster in ``image`` (the active controller's), for the control plane."""
    brokers = []
    for broker_id, reg in sorted(image.cluster.brokers.items()):
        brokers.append({
            "id": broker_id,
            "epoch": reg.epoch,
            "incarnation_id": str(reg.incarnation_id),
            "rack": reg.rack,
            "state": broker_state(reg),
            "listeners": [{"name": e.name, "host": e.host, "port": e.port} for e in reg.listeners],
            "supported_features": {f.name: [f.min_supported_version, f.max_supported_version]
                                   for f in reg.features},
        })
    return {
        "cluster_id": cluster_id,
        "controller_id": controller_id,
        "controller_epoch": epoch,
        "metadata_offset": image.provenance.last_offset,
        "brokers": brokers,
        "controllers": [{"id": vid, "host": host, "port": port} for vid, (host, port) in sorted(voters.items())],
        "finalized_features": dict(sorted(image.finalized_features.items())),
        "supported_features": {name: list(rng) for name, rng in sorted(supported_features.items())},
    }
