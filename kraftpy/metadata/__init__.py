"""Cluster metadata (KIP-631): records, the immutable image and its delta, snapshots, and the controller.

``records`` defines what is written to ``__cluster_metadata``; ``image``/``delta`` turn a stream of
records into consistent ``MetadataImage`` values (persistent maps, ``persistent``; a partition index,
``topics_index``) and say what each delta changed (``MetadataDelta.local_changes``); ``snapshot`` writes an image as records and back;
``controller.QuorumController`` decides which records to write, through one manager module per area
(``cluster_control``, ``replication_control``, ``config_control``, ``producer_id_control``,
``feature_control``). Nothing here does I/O.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kraftpy.ids import Uuid
    from kraftpy.metadata.controller import QuorumController
    from kraftpy.metadata.controller_config import ControllerConfig
    from kraftpy.metadata.delta import (
        LocalPartition,
        LocalReplicaChanges,
        MetadataDelta,
        PartitionChange,
        replay_records,
    )
    from kraftpy.metadata.image import EMPTY_IMAGE, MetadataImage, MetadataProvenance
    from kraftpy.metadata.records import decode_record, encode_record
    from kraftpy.metadata.result import ControllerResult
    from kraftpy.metadata.snapshot import decode_snapshot, encode_snapshot, image_to_records, load_snapshot

#: Where each name this package exports lives. They are imported when first asked for: a command that
#: needs one record type (``kraftpy.metadata.records``) does not load the controller with it (a tenth of
#: a command's start).
_EXPORTS = {
    "Uuid": "kraftpy.ids",
    "QuorumController": "kraftpy.metadata.controller",
    "ControllerConfig": "kraftpy.metadata.controller_config",
    "LocalPartition": "kraftpy.metadata.delta",
    "LocalReplicaChanges": "kraftpy.metadata.delta",
    "MetadataDelta": "kraftpy.metadata.delta",
    "PartitionChange": "kraftpy.metadata.delta",
    "replay_records": "kraftpy.metadata.delta",
    "EMPTY_IMAGE": "kraftpy.metadata.image",
    "MetadataImage": "kraftpy.metadata.image",
    "MetadataProvenance": "kraftpy.metadata.image",
    "decode_record": "kraftpy.metadata.records",
    "encode_record": "kraftpy.metadata.records",
    "ControllerResult": "kraftpy.metadata.result",
    "decode_snapshot": "kraftpy.metadata.snapshot",
    "encode_snapshot": "kraftpy.metadata.snapshot",
    "image_to_records": "kraftpy.metadata.snapshot",
    "load_snapshot": "kraftpy.metadata.snapshot",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        # A submodule not imported yet (``kraftpy.metadata.controller`` after ``import kraftpy.metadata``).
        try:
            return importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


__all__ = [
    "EMPTY_IMAGE",
    "ControllerConfig",
    "ControllerResult",
    "LocalPartition",
    "LocalReplicaChanges",
    "MetadataDelta",
    "MetadataImage",
    "MetadataProvenance",
    "PartitionChange",
    "QuorumController",
    "Uuid",
    "decode_record",
    "decode_snapshot",
    "encode_record",
    "encode_snapshot",
    "image_to_records",
    "load_snapshot",
    "replay_records",
]
