"""Cluster metadata (KIP-631): records, the immutable image and its delta, snapshots, and the controller.

``records`` defines what is written to ``__cluster_metadata``; ``image``/``delta`` turn a stream of
records into consistent ``MetadataImage`` values (persistent maps, ``persistent``; a partition index,
``topics_index``) and say what each delta changed (``MetadataDelta.local_changes``); ``snapshot`` writes an image as records and back;
``controller.QuorumController`` decides which records to write, through one manager module per area
(``cluster_control``, ``replication_control``, ``config_control``, ``producer_id_control``,
``feature_control``). Nothing here does I/O.
"""

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
