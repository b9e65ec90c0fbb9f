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
from kraftpy.metadata.messages import (
    AllocateProducerIdsRequest,
    AlterableConfig,
    AlterConfigsResource,
    AlterPartitionPartitionData,
    AlterPartitionRequest,
    AlterPartitionTopicData,
    BrokerState,
    DeleteTopicsRequest,
    DeleteTopicState,
    ElectLeadersRequest,
    IncrementalAlterConfigsRequest,
)
from kraftpy.metadata.records import NO_LEADER
from kraftpy.metadata.snapshot import decode_snapshot, encode_snapshot, image_to_records, load_snapshot

BROKERS = st.integers(1, 4)
OPERATIONS = st.one_of(
    st.tuples(st.just("register"), BROKERS, st.integers(0, 1)),
    st.tuples(st.just("heartbeat"), BROKERS, st.sampled_from(["plain", "fence", "shutdown"])),
    st.tuples(st.just("advance"), st.floats(0.5, 12.0)),
    st.tuples(st.just("topic"), st.sampled_from(["a", "b", "c.d"]), st.integers(1, 3), st.integers(1, 3)),
    st.tuples(st.just("delete"), st.sampled_from(["a", "b", "c.d"])),
    st.tuples(st.just("shrink"), st.sampled_from(["a", "b", "c.d"])),
    st.tuples(st.just("config"), st.sampled_from(["a", ""]), st.sampled_from(["1000", "2000"])),
    st.tuples(st.just("producer_ids"), BROKERS),
    st.tuples(st.just("elect"),),
)


def run(c, op) -> None:
    kind = op[0]
    if kind == "register":
        c.register(op[1], generation=op[2])
    elif kind == "heartbeat" and c.image.cluster.broker(op[1]) is not None:
        c.heartbeat(op[1], want_fence=op[2] == "fence", want_shut_down=op[2] == "shutdown")
    elif kind == "advance":
        c.advance(op[1])
        c.commit(c.controller.tick(c.now))
    elif kind == "topic":
        c.create_topic(op[1], op[2], op[3])
    elif kind == "delete":
        c.commit(c.controller.handle_delete_topics(DeleteTopicsRequest((DeleteTopicState(name=op[1]),))))
    elif kind == "shrink" and (topic := c.image.topics.get_by_name(op[1])) is not None:
        part = topic.partitions[0]
        if part.leader != NO_LEADER:
            reg = c.image.cluster.broker(part.leader)
            data = AlterPartitionPartitionData(0, part.leader_epoch, (BrokerState(part.leader),), part.partition_epoch)
            c.commit(c.controller.handle_alter_partition(
                AlterPartitionRequest(part.leader, reg.epoch, (AlterPartitionTopicData(topic.id, (data,)),))))
    elif kind == "config":
        resource_type = 2 if op[1] else 4
        key = "retention.ms" if op[1] else "log.retention.ms"
        request = IncrementalAlterConfigsRequest(
            (AlterConfigsResource(resource_type, op[1], (AlterableConfig(key, 0, op[2]),)),))
        c.commit(c.controller.handle_incremental_alter_configs(request))
    elif kind == "producer_ids" and (reg := c.image.cluster.broker(op[1])) is not None:
        c.commit(c.controller.handle_allocate_producer_ids(AllocateProducerIdsRequest(op[1], reg.epoch)))
    elif kind == "elect":
        c.commit(c.controller.handle_elect_leaders(ElectLeadersRequest()))


def check_invariants(image: MetadataImage) -> None:
    for _, _, part in image.topics.partitions():
        assert part.isr and set(part.isr) <= set(part.replicas) and len(set(part.isr)) == len(part.isr)
        if part.leader != NO_LEADER:
            assert part.leader in part.isr
            assert not image.cluster.brokers[part.leader].fenced, "a fenced broker leads"
        for member in part.isr:
            reg = image.cluster.broker(member)
            assert reg is not None
            assert not reg.fenced or part.isr == (member,), "a fenced broker shares an ISR"


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
