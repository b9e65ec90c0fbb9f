"""The topics index and a delta's changes agree with brute force, whatever the records.

Two random sources: the controller's own workload (``workload.py``: what real logs look like), and raw
records that need not respect the controller's invariants (leaders outside the ISR, replicas
reassigned, names reused by new topics, topics created and removed in one delta). After every delta:
the image's ``TopicsIndex`` equals one built from a scan, the index lookups equal filtered scans, and
the delta's ``local_changes``, created and deleted topics and changed partitions equal what comparing
the two images says — and equal those of ``MetadataDelta.between`` the two images.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kraftpy.ids import Uuid
from kraftpy.metadata.delta import LocalPartition, LocalReplicaChanges, MetadataDelta
from kraftpy.metadata.image import EMPTY_IMAGE, MetadataImage
from kraftpy.metadata.records import (
    NO_LEADER,
    NO_LEADER_CHANGE,
    ConfigRecord,
    ConfigResourceType,
    PartitionChangeRecord,
    PartitionRecord,
    RemoveTopicRecord,
    TopicRecord,
)
from kraftpy.metadata.topic_names import unify_collision_chars
from kraftpy.metadata.topics_index import TopicsIndex

from .workload import OPERATIONS, run

BROKER_IDS = range(1, 6)
NAMES = ["a", "b", "c.d", "c_d", "e"]

# -- brute force ------------------------------------------------------------------------------------


def scanned_index(image: MetadataImage) -> tuple:
    by_broker: dict[int, dict] = {}
    leaderless, off_preferred, names = set(), set(), {}
    for topic, pid, part in image.topics.partitions():
        key = (topic.id, pid)
        for member in part.isr:
            by_broker.setdefault(member, {})[key] = member == part.leader
        if part.leader != NO_LEADER:
            by_broker.setdefault(part.leader, {})[key] = True
            if part.leader != part.replicas[0]:
                off_preferred.add(key)
        else:
            leaderless.add(key)
            off_preferred.add(key)
    for name in image.topics.by_name:
        names.setdefault(unify_collision_chars(name), set()).add(name)
    return by_broker, leaderless, off_preferred, names


def index_contents(index: TopicsIndex) -> tuple:
    return (
        {b: dict(parts.items()) for b, parts in index.by_broker.items()},
        set(index.leaderless),
        set(index.off_preferred),
        {unified: set(names) for unified, names in index.unified_names.items()},
    )


def check_index(image: MetadataImage) -> None:
    assert index_contents(image.topics.index) == scanned_index(image)
    everything = list(image.topics.partitions())
    for broker_id in BROKER_IDS:
        assert image.topics.partitions_of_broker(broker_id) == [
            e for e in everything if broker_id in e[2].isr or e[2].leader == broker_id]
        assert image.topics.partitions_led_by(broker_id) == [e for e in everything if e[2].leader == broker_id]
    assert image.topics.partitions_without_leader() == [e for e in everything if e[2].leader == NO_LEADER]
    assert image.topics.partitions_off_preferred() == [e for e in everything if e[2].leader != e[2].replicas[0]]
    for name in NAMES:
        assert set(image.topics.names_colliding_with(name)) == {
            n for n in image.topics.by_name if unify_collision_chars(n) == unify_collision_chars(name)}


def local_partitions(image: MetadataImage) -> dict:
    return {(t.id, pid): LocalPartition(t.name, t.id, pid, part) for t, pid, part in image.topics.partitions()}


def expected_local_changes(before: MetadataImage, after: MetadataImage, broker_id: int) -> LocalReplicaChanges:
    old, new = local_partitions(before), local_partitions(after)
    deletes = [p for key, p in old.items() if broker_id in p.registration.replicas
               and (key not in new or broker_id not in new[key].registration.replicas)]
    changed = [p for key, p in new.items() if broker_id in p.registration.replicas
               and (key not in old or old[key].registration != p.registration)]

    def order(found: list) -> tuple:
        return tuple(sorted(found, key=lambda p: (p.topic_name, p.partition, p.topic_id)))

    return LocalReplicaChanges(
        deletes=order(deletes),
        leaders=order([p for p in changed if p.registration.leader == broker_id]),
        followers=order([p for p in changed if p.registration.leader != broker_id]),
    )


def check_delta(before: MetadataImage, delta: MetadataDelta, after: MetadataImage) -> None:
    """``delta`` (records replayed on ``before``) against brute force and against ``between``."""
    between = MetadataDelta.between(before, after)
    assert between.apply() == after
    old, new = local_partitions(before), local_partitions(after)
    assert [(c.topic_id, c.partition, c.old, c.new) for c in delta.changed_partitions] == sorted(
        ((key[0], key[1], old[key].registration if key in old else None, p.registration)
         for key, p in new.items() if key not in old or old[key].registration != p.registration),
        key=lambda c: (new[(c[0], c[1])].topic_name, c[1]))
    assert delta.created_topics == {t.id: t.name for t in after.topics.by_id.values()
                                    if t.id not in before.topics.by_id}
    assert delta.deleted_topics == {t.id: t.name for t in before.topics.by_id.values()
                                    if t.id not in after.topics.by_id}
    for attribute in ("created_topics", "deleted_topics", "changed_partitions", "changed_configs",
                      "changed_topic_configs", "changed_brokers"):
        assert getattr(between, attribute) == getattr(delta, attribute), attribute
    for broker_id in BROKER_IDS:
        expected = expected_local_changes(before, after, broker_id)
        assert delta.local_changes(broker_id) == expected
        assert between.local_changes(broker_id) == expected
    from_empty = MetadataDelta.between(EMPTY_IMAGE, after)
    for broker_id in BROKER_IDS:
        assert from_empty.local_changes(broker_id) == expected_local_changes(EMPTY_IMAGE, after, broker_id)


# -- the controller's workload ------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(st.lists(OPERATIONS, min_size=1, max_size=40), st.integers(0, 1000))
def test_index_and_changes_agree_with_a_scan_under_the_controller_workload(make_cluster_factory, operations, seed):
    c = make_cluster_factory(seed=seed)
    for op in operations:
        before, start = c.image, len(c.log)
        run(c, op)
        if len(c.log) == start:
            continue
        delta = MetadataDelta(before)
        for offset in range(start, len(c.log)):
            delta.replay(c.log[offset], offset, 1)
        after = delta.apply()
        assert after == c.image
        check_index(after)
        check_delta(before, delta, after)


# -- raw records ------------------------------------------------------------------------------------

SOME_BROKERS = st.lists(st.sampled_from(list(BROKER_IDS)), min_size=1, max_size=4, unique=True)


@st.composite
def registration(draw: st.DrawFn) -> tuple[tuple[int, ...], tuple[int, ...], int]:
    replicas = tuple(draw(SOME_BROKERS))
    isr = tuple(draw(st.lists(st.sampled_from(replicas), min_size=1, max_size=len(replicas), unique=True)))
    leader = draw(st.sampled_from([NO_LEADER, *isr, *BROKER_IDS]))
    return replicas, isr, leader


class Model:
    """Which topics are live, and how many partitions each has, as records are drawn."""

    def __init__(self) -> None:
        self.topics: dict[Uuid, tuple[str, int]] = {}
        self.next_id = 1

    def fresh_id(self) -> Uuid:
        self.next_id += 1
        return Uuid(self.next_id.to_bytes(16, "big"))


def draw_records(draw: st.DrawFn, model: Model) -> list:
    live_names = {name for name, _ in model.topics.values()}
    kinds = ["create"] if not model.topics else ["create", "change", "change", "change", "remove", "grow", "config"]
    kind = draw(st.sampled_from(kinds))
    if kind == "create":
        free = [n for n in NAMES if n not in live_names]
        if not free:
            return []
        name, topic_id, count = draw(st.sampled_from(free)), model.fresh_id(), draw(st.integers(1, 3))
        model.topics[topic_id] = (name, count)
        records: list = [TopicRecord(name, topic_id)]
        for pid in range(count):
            replicas, isr, leader = draw(registration())
            records.append(PartitionRecord(pid, topic_id, replicas, isr, leader=leader))
        return records
    topic_id = draw(st.sampled_from(sorted(model.topics)))
    name, count = model.topics[topic_id]
    if kind == "remove":
        del model.topics[topic_id]
        return [RemoveTopicRecord(topic_id)]
    if kind == "grow":
        model.topics[topic_id] = (name, count + 1)
        replicas, isr, leader = draw(registration())
        return [PartitionRecord(count, topic_id, replicas, isr, leader=leader)]
    if kind == "config":
        value = draw(st.sampled_from([None, "1000", "2000"]))
        return [ConfigRecord(ConfigResourceType.TOPIC, name, "retention.ms", value)]
    replicas, isr, leader = draw(registration())
    return [PartitionChangeRecord(
        draw(st.integers(0, count - 1)), topic_id,
        isr=draw(st.sampled_from([None, isr])),
        leader=draw(st.sampled_from([NO_LEADER_CHANGE, leader])),
        replicas=draw(st.sampled_from([None, replicas])),
    )]


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_index_and_changes_agree_with_a_scan_after_random_records(data):
    model, image = Model(), EMPTY_IMAGE
    for _ in range(data.draw(st.integers(1, 10), label="deltas")):
        delta = MetadataDelta(image)
        for _ in range(data.draw(st.integers(1, 6), label="steps")):
            for record in draw_records(data.draw, model):
                delta.replay(record)
        after = delta.apply()
        check_index(after)
        check_delta(image, delta, after)
        image = after


def test_an_image_made_by_hand_gets_its_index_built():
    delta = MetadataDelta(EMPTY_IMAGE)
    topic_id = Uuid(b"\x07" * 16)
    delta.replay(TopicRecord("t", topic_id))
    delta.replay(PartitionRecord(0, topic_id, (1, 2), (1, 2), leader=2))
    image = delta.apply()
    from kraftpy.metadata.image import TopicsImage

    by_hand = TopicsImage(by_id=dict(image.topics.by_id), by_name=dict(image.topics.by_name))
    assert by_hand == image.topics
    assert index_contents(by_hand.index) == index_contents(image.topics.index) == scanned_index(image)
