"""The server-side assignors of KIP-848 consumer groups: ``uniform`` and ``range`` (group.consumer.assignors).

An assignor is a pure function: every member's subscribed topic names, the subscribed topics that
exist (name -> (topic id, partition count)) and the group's current target assignment in, the new
target assignment out (member id -> {topic id: frozenset of partitions}). Every partition of a
subscribed topic goes to exactly one member subscribed to it; a topic nobody subscribes to, or one
that does not exist, is assigned to nobody.

* ``uniform`` (Kafka's UniformAssignor): as even as the subscriptions allow, and sticky: a member
  keeps what it had as long as that does not leave it above its share. Members with the same
  subscriptions end with counts that differ by at most one.
* ``range`` (Kafka's RangeAssignor, server side): per topic, the members subscribed to it in member id
  order get contiguous ranges, the first ``partitions % members`` one partition more. Not sticky.
"""

from __future__ import annotations

import heapq
import uuid
from collections.abc import Callable, Mapping

Assignment = dict[uuid.UUID, frozenset[int]]
#: topic name -> (topic id, partition count)
TopicsMetadata = Mapping[str, tuple[uuid.UUID, int]]
Assignor = Callable[[Mapping[str, frozenset[str]], TopicsMetadata, Mapping[str, Assignment]], dict[str, Assignment]]


def _freeze(owned: dict[str, dict[uuid.UUID, set[int]]]) -> dict[str, Assignment]:
    return {m: {t: frozenset(ps) for t, ps in topics.items() if ps} for m, topics in owned.items()}


def uniform(subscriptions: Mapping[str, frozenset[str]], topics: TopicsMetadata,
            current: Mapping[str, Assignment]) -> dict[str, Assignment]:
    members = sorted(subscriptions)
    out: dict[str, dict[uuid.UUID, set[int]]] = {m: {} for m in members}
    if not members:
        return {}
    # The members that may take each subscribed topic's partitions.
    takers: dict[uuid.UUID, list[str]] = {}
    taker_sets: dict[uuid.UUID, frozenset[str]] = {}
    counts_of: dict[uuid.UUID, int] = {}
    for name in sorted({t for subs in subscriptions.values() for t in subs}):
        if name in topics:
            topic_id, count = topics[name]
            takers[topic_id] = [m for m in members if name in subscriptions[m]]
            taker_sets[topic_id] = frozenset(takers[topic_id])
            counts_of[topic_id] = count
    homogeneous = len({subscriptions[m] for m in members}) == 1
    # A member's share: the partitions it may take divided among the members competing for them,
    # rounded down; ``extra`` members may keep one more (those that had more, first).
    floor: dict[str, int] = {}
    for m in members:
        mine = [t for t in takers if m in taker_sets[t]]
        competitors = set().union(*(taker_sets[t] for t in mine)) if mine else set()
        floor[m] = sum(counts_of[t] for t in mine) // max(len(competitors), 1)
    total = sum(counts_of.values())
    extra = max(total - sum(floor.values()), 0)
    counts = dict.fromkeys(members, 0)
    taken: set[tuple[uuid.UUID, int]] = set()
    # Sticky passes: keep what each member had, up to its share, then one more while extras remain.
    previous = {m: [(t, p) for t, ps in sorted(current.get(m, {}).items(), key=lambda kv: str(kv[0]))
                    if t in taker_sets and m in taker_sets[t] for p in sorted(ps) if p < counts_of[t]]
                for m in members}
    for m in members:
        for tp in previous[m]:
            if tp not in taken and counts[m] < floor[m]:
                out[m].setdefault(tp[0], set()).add(tp[1])
                counts[m] += 1
                taken.add(tp)
    for m in sorted(members, key=lambda m: -len(previous[m])):
        if extra <= 0:
            break
        left = [tp for tp in previous[m] if tp not in taken]
        if left and counts[m] == floor[m]:
            out[m].setdefault(left[0][0], set()).add(left[0][1])
            counts[m] += 1
            taken.add(left[0])
            extra -= 1
    # The rest, each to its least loaded candidate (ties: member id order).
    rest = [(t, p) for t in sorted(takers, key=str) for p in range(counts_of[t]) if (t, p) not in taken]
    if homogeneous:
        heap = [(counts[m], m) for m in members]
        heapq.heapify(heap)
        for t, p in rest:
            count, m = heapq.heappop(heap)
            out[m].setdefault(t, set()).add(p)
            counts[m] = count + 1
            heapq.heappush(heap, (count + 1, m))
        return _freeze(out)
    for t, p in rest:
        m = min(takers[t], key=lambda c: (counts[c], c))
        out[m].setdefault(t, set()).add(p)
        counts[m] += 1
    # Different subscriptions: even out what stickiness left uneven among members that could swap.
    moved = True
    while moved:
        moved = False
        for m in members:
            for topic_id in sorted(out[m], key=str):
                for p in sorted(out[m][topic_id]):
                    target = min(takers[topic_id], key=lambda c: (counts[c], c))
                    if counts[target] + 1 < counts[m]:
                        out[m][topic_id].discard(p)
                        out[target].setdefault(topic_id, set()).add(p)
                        counts[m] -= 1
                        counts[target] += 1
                        moved = True
    return _freeze(out)


def range_(subscriptions: Mapping[str, frozenset[str]], topics: TopicsMetadata,
           current: Mapping[str, Assignment]) -> dict[str, Assignment]:
    members = sorted(subscriptions)
    out: dict[str, dict[uuid.UUID, set[int]]] = {m: {} for m in members}
    for name in sorted({t for subs in subscriptions.values() for t in subs}):
        if name not in topics:
            continue
        topic_id, count = topics[name]
        takers = [m for m in members if name in subscriptions[m]]
        base, extra = divmod(count, len(takers))
        start = 0
        for i, m in enumerate(takers):
            n = base + (1 if i < extra else 0)
            if n:
                out[m][topic_id] = set(range(start, start + n))
            start += n
    return _freeze(out)


#: name -> assignor, the names group.consumer.assignors and a member's server_assignor use.
ASSIGNORS: dict[str, Assignor] = {"uniform": uniform, "range": range_}
