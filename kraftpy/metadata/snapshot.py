"""Metadata snapshots as records: an image written as the list of records that rebuild it.

``image_to_records(image)`` lists, in this order: the feature levels (metadata.version first, since a
reader needs it before anything else), controller and broker registrations (with their fenced and
controlled-shutdown state folded in), each topic's TopicRecord followed by its PartitionRecords, the
config overrides, the producer-id position and the client quotas. Replaying that list on an empty image gives back the
image (``load_snapshot``); that is the property a snapshot must have, and the tests check it against
replaying the log itself. The ACLs (AccessControlEntryRecords) come after the producer-id position.

``encode_snapshot``/``decode_snapshot`` turn the list into record values (``records.encode_record``)
and back; the snapshot file format that holds them belongs to the storage layer.
"""

from __future__ import annotations

from collections.abc import Iterable

from kraftpy.metadata.delta import MetadataDelta
from kraftpy.metadata.image import EMPTY_IMAGE, METADATA_VERSION, MetadataImage, MetadataProvenance
from kraftpy.metadata.records import (
    AccessControlEntryRecord,
    ClientQuotaEntityData,
    ClientQuotaRecord,
    ConfigRecord,
    FeatureLevelRecord,
    MetadataRecord,
    ProducerIdsRecord,
    TopicRecord,
    decode_record,
    encode_record,
)


def image_to_records(image: MetadataImage) -> list[MetadataRecord]:
    records: list[MetadataRecord] = []
    levels = image.features.levels
    if METADATA_VERSION in levels:
        records.append(FeatureLevelRecord(METADATA_VERSION, levels[METADATA_VERSION]))
    records += [FeatureLevelRecord(name, level) for name, level in sorted(levels.items()) if name != METADATA_VERSION]
    records += [reg.to_record() for _, reg in sorted(image.cluster.controllers.items())]
    records += [reg.to_record() for _, reg in sorted(image.cluster.brokers.items())]
    for name, topic in sorted(image.topics.by_name.items()):
        records.append(TopicRecord(name, topic.id))
        records += [part.to_record(topic.id, pid) for pid, part in sorted(topic.partitions.items())]
    for resource, entries in sorted(image.configs.resources.items()):
        records += [ConfigRecord(resource.type, resource.name, key, value) for key, value in sorted(entries.items())]
    for _, creds in sorted(image.scram.users.items()):
        records += [record for _, record in sorted(creds.items())]
    if image.producer_ids.next_producer_id > 0:
        records.append(ProducerIdsRecord(-1, -1, image.producer_ids.next_producer_id))
    for acl_id, acl in sorted(image.acls.by_id.items(), key=lambda item: item[0].raw):
        records.append(AccessControlEntryRecord(
            acl_id, acl.resource_type, acl.resource_name, acl.pattern_type, acl.principal, acl.host,
            acl.operation, acl.permission))
    for entity, quotas in sorted(image.client_quotas.entities.items(), key=lambda item: repr(item[0])):
        parts = tuple(ClientQuotaEntityData(t, n) for t, n in entity)
        records += [ClientQuotaRecord(parts, key, value) for key, value in sorted(quotas.items())]
    return records


def load_snapshot(records: Iterable[MetadataRecord], provenance: MetadataProvenance) -> MetadataImage:
    """The image a snapshot taken at ``provenance`` holds."""
    delta = MetadataDelta(EMPTY_IMAGE)
    for record in records:
        delta.replay(record)
    delta.set_provenance(provenance)
    return delta.apply()


def encode_snapshot(image: MetadataImage) -> list[bytes]:
    return [encode_record(r) for r in image_to_records(image)]


def decode_snapshot(values: Iterable[bytes], provenance: MetadataProvenance) -> MetadataImage:
    return load_snapshot((decode_record(v) for v in values), provenance)
