"""``TopicsIndex``: which partitions a broker, an election or a new topic name concerns, without a scan.

Theory of operation. The controller's broker-driven decisions each concern a few partitions: fencing
a broker touches the partitions whose ISR holds it, a controlled shutdown the same, an unfencing the
partitions without a leader, the leader-rebalance check the partitions not led by their preferred
replica, a CreateTopics the one existing name a new name could collide with. Scanning every partition
for them costs the size of the cluster on every heartbeat that changes something. The index keeps the
answers, as persistent maps (``immutables.Map``: O(log n) to change, sharing the rest):

* ``by_broker``: broker id -> {(topic id, partition): leads}, every partition whose ISR contains the
  broker or whose leader it is (Kafka's ``BrokersToIsrs``; ``leads`` is its leader bit).
* ``leaderless``: the partitions whose leader is NO_LEADER.
* ``off_preferred``: the partitions not led by their first replica (leaderless ones included: Kafka's
  ``imbalancedPartitions``).
* ``unified_names``: a name's collision form (``unify_collision_chars``) -> the topic names having it.

Invariant: for the ``TopicsImage`` it belongs to, the index equals ``TopicsIndex.build`` of that image's
topics (the tests check it against a brute-force scan after random record sequences). It lives in the
image, next to what it indexes, and is never compared (it is derived data), so the controller's rules
stay pure functions of an image and every image a rule is handed (the controller's own, or one with a
few records replayed on top, as fencing and registration do) carries an index that matches it. The
delta keeps it up to date with an ``IndexEditor`` while applying, at O(log n) per changed partition.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

import attrs
import immutables

from kraftpy.ids import Uuid
from kraftpy.metadata.records import NO_LEADER
from kraftpy.metadata.topic_names import unify_collision_chars

if TYPE_CHECKING:
    from kraftpy.metadata.image import PartitionRegistration, TopicImage

#: A partition as the index names it.
PartitionKey = tuple[Uuid, int]

_EMPTY: immutables.Map = immutables.Map()


def members(part: PartitionRegistration) -> dict[int, bool]:
    """The brokers ``by_broker`` lists ``part`` under (its ISR and its leader), with their leader bit."""
    out = dict.fromkeys(part.isr, False)
    if part.leader != NO_LEADER:
        out[part.leader] = True
    return out


def is_off_preferred(part: PartitionRegistration) -> bool:
    """Led by someone other than its first replica (or by no one)."""
    return bool(part.replicas) and part.leader != part.replicas[0]


@attrs.frozen(eq=False)
class TopicsIndex:
    by_broker: immutables.Map = _EMPTY
    leaderless: immutables.Map = _EMPTY
    off_preferred: immutables.Map = _EMPTY
    unified_names: immutables.Map = _EMPTY

    @classmethod
    def build(cls, topics: Iterable[TopicImage]) -> TopicsIndex:
        """The index of ``topics`` from scratch (a scan: for images not made by a delta)."""
        editor = IndexEditor(cls())
        for topic in topics:
            editor.add_name(topic.name)
            for pid, part in topic.partitions.items():
                editor.change_partition((topic.id, pid), None, part)
        return editor.finish()

    def edit(self) -> IndexEditor:
        return IndexEditor(self)

    def of_broker(self, broker_id: int) -> Mapping[PartitionKey, bool]:
        """{partition: leads} for the partitions whose ISR holds ``broker_id`` or which it leads."""
        return self.by_broker.get(broker_id, _EMPTY)

    def memberships(self) -> int:
        """How many (broker, partition) pairs the index holds: the work a change of every partition of
        the cluster's brokers would be, counted in as many steps as there are brokers."""
        return sum(len(partitions) for partitions in self.by_broker.values())

    def names_like(self, name: str) -> tuple[str, ...]:
        """The existing topic names that collide with ``name`` (``name`` itself included, if it exists)."""
        return self.unified_names.get(unify_collision_chars(name), ())


class IndexEditor:
    """A ``TopicsIndex`` being changed: each edit is O(log n); ``finish()`` returns the new index and
    leaves the old one as it was."""

    def __init__(self, index: TopicsIndex) -> None:
        self._index = index
        self._brokers: dict[int, immutables.MapMutation] = {}
        self._leaderless = index.leaderless.mutate()
        self._off_preferred = index.off_preferred.mutate()
        self._names = index.unified_names.mutate()

    def _broker(self, broker_id: int) -> immutables.MapMutation:
        edit = self._brokers.get(broker_id)
        if edit is None:
            edit = self._brokers[broker_id] = self._index.by_broker.get(broker_id, _EMPTY).mutate()
        return edit

    def change_partition(
        self, key: PartitionKey, old: PartitionRegistration | None, new: PartitionRegistration | None
    ) -> None:
        """``key`` went from ``old`` to ``new`` (None: absent before, or gone after)."""
        before = members(old) if old is not None else {}
        after = members(new) if new is not None else {}
        for broker_id in before:
            if broker_id not in after:
                self._broker(broker_id).pop(key, None)
        for broker_id, leads in after.items():
            if before.get(broker_id) is not leads:
                self._broker(broker_id)[key] = leads
        self._flag(self._leaderless, key, new is not None and new.leader == NO_LEADER)
        self._flag(self._off_preferred, key, new is not None and is_off_preferred(new))

    @staticmethod
    def _flag(edit: immutables.MapMutation, key: PartitionKey, present: bool) -> None:
        if present:
            edit[key] = None
        else:
            edit.pop(key, None)

    def add_name(self, name: str) -> None:
        unified = unify_collision_chars(name)
        names = self._names.get(unified, ())
        if name not in names:
            self._names[unified] = tuple(sorted((*names, name)))

    def remove_name(self, name: str) -> None:
        unified = unify_collision_chars(name)
        names = tuple(n for n in self._names.get(unified, ()) if n != name)
        if names:
            self._names[unified] = names
        else:
            self._names.pop(unified, None)

    def remove_topic(self, topic: TopicImage) -> None:
        self.remove_name(topic.name)
        for pid, part in topic.partitions.items():
            self.change_partition((topic.id, pid), part, None)

    def finish(self) -> TopicsIndex:
        by_broker = self._index.by_broker
        if self._brokers:
            outer = by_broker.mutate()
            for broker_id, edit in self._brokers.items():
                partitions = edit.finish()
                if partitions:
                    outer[broker_id] = partitions
                else:
                    outer.pop(broker_id, None)
            by_broker = outer.finish()
        return TopicsIndex(
            by_broker=by_broker,
            leaderless=self._leaderless.finish(),
            off_preferred=self._off_preferred.finish(),
            unified_names=self._names.finish(),
        )
