"""A random controller workload for property tests: registrations, heartbeats (plain, fence, controlled
shutdown), silence that fences, topics created, deleted and shrunk, configs, producer ids, elections.

``OPERATIONS`` draws one operation; ``run(cluster, op)`` performs it on a ``conftest.Cluster`` (doing
nothing when it does not apply); ``check_invariants`` checks what the controller promises of an image.
"""

from __future__ import annotations

from hypothesis import strategies as st

from kraftpy.metadata.image import MetadataImage
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
    ElectionType,
    ElectLeadersRequest,
    IncrementalAlterConfigsRequest,
)
from kraftpy.metadata.records import NO_LEADER

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
    st.tuples(st.just("elect_unclean"),),
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
    elif kind == "elect_unclean":
        c.commit(c.controller.handle_elect_leaders(ElectLeadersRequest(ElectionType.UNCLEAN, None)))


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
