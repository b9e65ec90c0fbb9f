"""The consumer-group checks: what a group of members, committing what they processed, must never do.

Kafka's classic group protocol with synchronous commits gives at-least-once delivery: a record may
be delivered twice (a member processed it but died before its commit), but

- **group_lost**: every acknowledged record is read by some member of the group. It is judged for a
  partition once the group covered it: the final `drain` (the healed group consuming and committing
  up to every high watermark) completed, or some member read past the record's offset. Acknowledged
  records not read in a partition that was never covered are *group_unseen* (the verdict is then
  `unknown`, as for the queue's unseen tail);
- **committed_regressions**: the group's committed offset for a partition never goes back. Two
  kinds: a `committed` read (OffsetFetch) below a commit acknowledged before the read began (a
  missing offset counts as -1), and an acknowledged commit below one acknowledged before it began;
- **redelivered_after_commit**: a record is not delivered again once a commit covering its offset
  (a committed offset above it) was acknowledged before the receiving member's assignment of the
  partition began: that member's position starts at the committed offset, which it fetches after
  its assignment. A delivery after a covering commit that was acknowledged only after the
  assignment began is legal (the commit raced the rebalance) and counted apart, as
  `details.redelivered_after_racing_commit`;
- within one assignment (a member holding a partition from the `assign` event that gave it to the
  `revoke` that took it), a member's reads of the partition are contiguous: the checker adds rewinds
  and skips to the queue's `nonmonotonic`.

Times are the members' own readings of the system's monotonic clock (recorded with the operation),
so an event of one member and an operation of another compare in real time: a commit recorded `ok`
before an assignment recorded as begun was acknowledged before it.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from tests.jepsen.history import ASSIGN, COMMIT, COMMITTED, CONSUME, DRAIN, OK, REVOKE, Op

GROUP_FS = (CONSUME, COMMIT, COMMITTED, DRAIN, ASSIGN, REVOKE)
INF = float("inf")


class Capped:
    """A count plus the first `limit` examples."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.count = 0
        self.items: list[Any] = []

    def add(self, item: Any) -> None:
        self.count += 1
        if len(self.items) < self.limit:
            self.items.append(item)


class Assignments:
    """Every member's assignment of every partition as a list of intervals [start, end) in time,
    built from the `assign` and `revoke` events (each member's events are in its own order)."""

    def __init__(self, history: Sequence[Op]) -> None:
        self.intervals: dict[tuple[str, int], list[list[float]]] = defaultdict(list)
        self.changes = 0
        for op in history:
            if op.f not in (ASSIGN, REVOKE) or op.member is None:
                continue
            self.changes += 1
            for p in op.partitions or ():
                spans = self.intervals[(op.member, p)]
                is_open = bool(spans) and spans[-1][1] == INF
                if op.f == ASSIGN and not is_open:
                    spans.append([op.time, INF])
                elif op.f == REVOKE and is_open:
                    spans[-1][1] = op.time

    def holding(self, member: str, partition: int, at: int) -> tuple[int, float] | None:
        """The assignment (its index and start) of `partition` that `member` held at time `at`."""
        spans = self.intervals.get((member, partition), [])
        starts = [s for s, _ in spans]
        i = bisect.bisect_right(starts, at) - 1
        if i >= 0 and spans[i][0] <= at <= spans[i][1]:
            return i, spans[i][0]
        return None


class AckedCommits:
    """Per partition, the acknowledged commits ordered by the time they were acknowledged, with the
    highest offset acknowledged up to each of them."""

    def __init__(self) -> None:
        self._times: dict[int, list[int]] = defaultdict(list)
        self._best: dict[int, list[tuple[int, int]]] = defaultdict(list)  # (offset, op index)
        self._raw: dict[int, list[tuple[int, int, int]]] = defaultdict(list)

    def add(self, partition: int, acked_at: int, offset: int, index: int) -> None:
        self._raw[partition].append((acked_at, offset, index))

    def freeze(self) -> None:
        for p, raw in self._raw.items():
            raw.sort()
            best: tuple[int, int] = (-1, -1)
            for t, offset, index in raw:
                if offset > best[0]:
                    best = (offset, index)
                self._times[p].append(t)
                self._best[p].append(best)

    def highest_before(self, partition: int, t: float) -> tuple[int, int] | None:
        """The highest offset (and its commit's op index) acknowledged strictly before `t`."""
        i = bisect.bisect_left(self._times.get(partition, []), t) - 1
        return self._best[partition][i] if i >= 0 else None

    def partitions(self) -> list[int]:
        return sorted(self._times)


def check_group(pairs: Sequence[tuple[Op, Op | None]], history: Sequence[Op],
                acked: dict[Any, tuple[int | None, int | None]], nonmonotonic: Capped,
                detail_limit: int) -> dict[str, Any] | None:
    """The group checks over a paired history; None when the history has no group operations.
    Rewinds and skips within an assignment are added to `nonmonotonic`."""
    if not any(op.f in GROUP_FS for op in history):
        return None
    assignments = Assignments(history)

    commits = AckedCommits()
    regressions = Capped(detail_limit)
    acked_commits: list[tuple[Op, Op]] = []
    reads: list[tuple[Op, Op]] = []
    drained = False
    for inv, comp in pairs:
        if comp is None or comp.type != OK:
            continue
        if inv.f == COMMIT:
            acked_commits.append((inv, comp))
            for p, offset in comp.offsets or ():
                commits.add(p, comp.time, offset, comp.index)
        elif inv.f == COMMITTED:
            reads.append((inv, comp))
        elif inv.f == DRAIN and comp.error is None:
            drained = True
    commits.freeze()

    # A committed offset going back: a read, or a later commit, below an acknowledged commit.
    for inv, comp in reads:
        seen = dict(comp.offsets or ())
        for p in commits.partitions():
            best = commits.highest_before(p, inv.time)
            if best is not None and seen.get(p, -1) < best[0]:
                regressions.add({"kind": "read", "partition": p, "read": seen.get(p), "committed": best[0],
                                 "ops": [best[1], comp.index]})
    for inv, comp in acked_commits:
        for p, offset in comp.offsets or ():
            best = commits.highest_before(p, inv.time)
            if best is not None and offset < best[0]:
                regressions.add({"kind": "commit", "partition": p, "offset": offset, "committed": best[0],
                                 "member": comp.member, "ops": [best[1], comp.index]})

    # Deliveries: who read what, inside which assignment, and after which commits.
    redelivered = Capped(detail_limit)
    racing = Capped(detail_limit)
    unassigned = Capped(detail_limit)
    group_read: set[Any] = set()
    delivered: set[tuple[int, int]] = set()
    deliveries = redeliveries = 0
    max_group_offset: dict[int, int] = {}
    last: dict[tuple[str, int], tuple[int, int, int]] = {}  # (member, partition) -> (assignment, offset, op)
    for inv, comp in pairs:
        if inv.f != CONSUME or comp is None or comp.type != OK:
            continue
        member = comp.member or str(comp.process)
        for p, offset, value in comp.records or ():
            group_read.add(value)
            deliveries += 1
            redeliveries += (p, offset) in delivered
            delivered.add((p, offset))
            max_group_offset[p] = max(max_group_offset.get(p, -1), offset)
            held = assignments.holding(member, p, comp.time)
            if held is None:
                unassigned.add({"member": member, "partition": p, "offset": offset, "op": comp.index})
                continue
            epoch, started = held
            prev = last.get((member, p))
            if prev is not None and prev[0] == epoch and offset != prev[1] + 1:
                nonmonotonic.add({
                    "kind": "rewind" if offset <= prev[1] else "skip", "member": member,
                    "process": comp.process, "partition": p, "from": prev[1], "to": offset,
                    "ops": [prev[2], comp.index]})
            last[(member, p)] = (epoch, offset, comp.index)
            before_assignment = commits.highest_before(p, started)
            if before_assignment is not None and before_assignment[0] > offset:
                redelivered.add({"member": member, "partition": p, "offset": offset,
                                 "committed": before_assignment[0], "commit_op": before_assignment[1],
                                 "op": comp.index})
                continue
            before_poll = commits.highest_before(p, inv.time)
            if before_poll is not None and before_poll[0] > offset:
                racing.add({"member": member, "partition": p, "offset": offset, "committed": before_poll[0],
                            "commit_op": before_poll[1], "op": comp.index})

    group_lost = Capped(detail_limit)
    group_unseen = Capped(detail_limit)
    for value, (partition, offset) in acked.items():
        if value in group_read:
            continue
        item = {"value": value, "partition": partition, "offset": offset}
        covered = drained or (partition is not None and offset is not None
                              and max_group_offset.get(partition, -1) > offset)
        (group_lost if covered else group_unseen).add(item)

    return {
        "group_lost": group_lost,
        "group_unseen": group_unseen,
        "committed_regressions": regressions,
        "redelivered_after_commit": redelivered,
        "redelivered_after_racing_commit": racing,
        "unassigned_reads": unassigned,
        "drained": drained,
        "acked_commits": len(acked_commits),
        "deliveries": deliveries,
        "redeliveries": redeliveries,
        "committed_reads": len(reads),
        "assignment_changes": assignments.changes,
        "group_read_values": len(group_read),
    }
