"""Snapshots: the image from replaying the log equals the image loaded from a snapshot at the same offset.

A random workload (registrations, heartbeats, fencing by silence, controlled shutdowns, topics, ISR
changes, configs, producer ids) runs against the controller; then, at every offset of the log it wrote,
a snapshot of the replayed image must load back into that same image, through records and through bytes.
The controller's invariants are checked after every step as well."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kraftpy.metadata.delta import MetadataDelta
from kraftpy.metadata.image import EMPTY_IMAGE, MetadataImage, MetadataProvenance
from kraftpy.metadata.messages import AllocateProducerIdsRequest
from kraftpy.metadata.snapshot import decode_snapshot, encode_snapshot, image_to_records, load_snapshot

from .workload import OPERATIONS, check_invariants, run


def replay_prefix(log, end: int) -> MetadataImage:
    delta = MetadataDelta(EMPTY_IMAGE)
    for offset, record in enumerate(log[:end]):
        delta.replay(record, offset, 1)
    return delta.apply()


@settings(max_examples=40)
@given(st.lists(OPERATIONS, min_size=1, max_size=40), st.integers(0, 1000))
def test_snapshot_at_every_offset_equals_replaying_the_log(make_cluster_factory, operations, seed):
    c = make_cluster_factory(seed=seed)
    for op in operations:
        run(c, op)
        check_invariants(c.image)
    assert replay_prefix(c.log, len(c.log)) == c.image
    for end in range(1, len(c.log) + 1):
        replayed = replay_prefix(c.log, end)
        provenance = MetadataProvenance(end - 1, 1)
        assert replayed.provenance == provenance
        assert load_snapshot(image_to_records(replayed), provenance) == replayed
    assert decode_snapshot(encode_snapshot(c.image), c.image.provenance) == c.image


def test_snapshot_of_a_busy_image_round_trips_through_bytes(cluster3):
    c = cluster3
    c.create_topic("t", 3, 2, configs={"cleanup.policy": "compact"})
    c.heartbeat(2, want_shut_down=True)
    c.commit(c.controller.handle_allocate_producer_ids(
        AllocateProducerIdsRequest(1, c.image.cluster.broker(1).epoch)))
    values = encode_snapshot(c.image)
    assert all(isinstance(v, bytes) for v in values)
    assert decode_snapshot(values, c.image.provenance) == c.image
    assert image_to_records(c.image)[0].name == "metadata.version"
