"""The consumer-group checks on hand-written histories and on simulated group runs whose anomalies are
known: group_lost, committed_regressions, redelivered_after_commit, and reads within one assignment."""

from __future__ import annotations

import random
from typing import Any

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.jepsen.checker import check
from tests.jepsen.synthetic import Builder

GROUP_KEYS = ("group_lost", "committed_regressions", "redelivered_after_commit")


def group_anomalies(r: dict[str, Any]) -> dict[str, int]:
    return {k: r[k] for k in (*GROUP_KEYS, "nonmonotonic", "lost", "duplicated") if r[k]}


def sends(b: Builder, partition: int, values: list[int]) -> None:
    for offset, value in enumerate(values):
        b.send(0, value, partition, offset=offset)


# --- hand-written histories -----------------------------------------------------------------


def test_a_queue_history_has_no_group_fields():
    b = Builder()
    sends(b, 0, [1])
    b.final_read(9, 0, [(0, 0, 1)])
    r = check(b.ops)
    assert r["workload"] == "queue"
    assert all(r[k] is None for k in GROUP_KEYS)
    assert "group" not in r["details"]


def test_a_clean_group_run_with_a_rebalance_is_valid():
    b = Builder()
    sends(b, 0, [10, 11, 12, 13])
    b.assign("m1", [0])
    b.consume("m1", 1, [(0, 0, 10), (0, 1, 11)])
    b.commit("m1", 1, [(0, 2)])
    b.consume("m1", 1, [(0, 2, 12)])  # processed, not committed: the next owner reads it again
    b.revoke("m1", [0])
    b.assign("m2", [0])
    b.consume("m2", 2, [(0, 2, 12), (0, 3, 13)])
    b.commit("m2", 2, [(0, 4)])
    b.committed(3, [(0, 4)])
    b.drain(4, [(0, 4)])
    r = check(b.ops)
    assert r["workload"] == "group"
    assert group_anomalies(r) == {}, r["details"]
    assert r["valid"] is True
    g = r["details"]["group"]
    assert g["drained"] is True and g["acked_commits"] == 2 and g["committed_reads"] == 1
    assert g["deliveries"] == 5 and g["redeliveries"] == 1  # offset 2, processed but not committed by m1
    assert g["assignment_changes"] == 3
    assert g["redelivered_after_racing_commit_count"] == 0
    assert r["details"]["ops"]["commit"]["ok"] == 2


def test_a_record_no_member_read_is_group_lost_once_a_member_read_past_it():
    b = Builder()
    sends(b, 0, [10, 11, 12])
    b.assign("m1", [0])
    b.consume("m1", 1, [(0, 0, 10)])
    b.commit("m1", 1, [(0, 2)])  # commits past what it read
    b.revoke("m1", [0])
    b.assign("m2", [0])
    b.consume("m2", 2, [(0, 2, 12)])
    b.final_read(9, 0, [(0, 0, 10), (0, 1, 11), (0, 2, 12)])  # the log holds it: only the group missed it
    r = check(b.ops)
    assert r["group_lost"] == 1 and r["lost"] == 0
    assert r["details"]["group"]["group_lost"] == [{"value": 11, "partition": 0, "offset": 1}]
    assert r["valid"] is False


def test_an_unread_tail_is_unknown_until_the_drain_completes():
    b = Builder()
    sends(b, 0, [10, 11])
    b.assign("m1", [0])
    b.consume("m1", 1, [(0, 0, 10)])
    b.final_read(9, 0, [(0, 0, 10), (0, 1, 11)])
    r = check(b.ops)
    assert r["group_lost"] == 0 and r["details"]["group"]["group_unseen_count"] == 1
    assert r["valid"] == "unknown"
    b.drain(5, [(0, 1)], error="incomplete: committed 1 of 2")
    assert check(b.ops)["valid"] == "unknown"  # a drain that ran out of time proves nothing
    b.drain(6, [(0, 2)])
    r = check(b.ops)
    assert r["group_lost"] == 1 and r["valid"] is False


def test_committed_offsets_going_back_are_regressions():
    b = Builder()
    sends(b, 0, [10, 11, 12])
    sends(b, 1, [20])
    b.assign("m1", [0, 1])
    b.consume("m1", 1, [(0, 0, 10), (0, 1, 11), (0, 2, 12), (1, 0, 20)])
    b.commit("m1", 1, [(0, 3), (1, 1)])
    b.committed(2, [(0, 3), (1, 1)])  # fine
    b.committed(2, [(0, 1)])  # 0 went back to 1, and 1's offset is gone
    b.commit("m1", 1, [(0, 2)])  # an acknowledged commit below an acknowledged one
    r = check(b.ops)
    assert r["committed_regressions"] == 3
    kinds = [(d["kind"], d["partition"], d.get("read", d.get("offset")), d["committed"])
             for d in r["details"]["group"]["committed_regressions"]]
    assert kinds == [("read", 0, 1, 3), ("read", 1, None, 1), ("commit", 0, 2, 3)]
    assert r["valid"] is False


def test_an_unacknowledged_commit_is_no_promise():
    b = Builder()
    sends(b, 0, [10, 11])
    b.assign("m1", [0])
    b.consume("m1", 1, [(0, 0, 10), (0, 1, 11)])
    b.commit("m1", 1, [(0, 2)], result="info", error="_TIMED_OUT")
    b.commit("m1", 2, [(0, 2)], result="fail", error="REBALANCE_IN_PROGRESS")
    b.revoke("m1", [0])
    b.committed(3, [])
    b.assign("m2", [0])
    b.consume("m2", 4, [(0, 0, 10), (0, 1, 11)])
    b.commit("m2", 4, [(0, 2)])
    b.drain(5, [(0, 2)])
    r = check(b.ops)
    assert group_anomalies(r) == {} and r["valid"] is True


def test_redelivery_after_a_commit_acknowledged_before_the_assignment():
    b = Builder()
    sends(b, 0, [10, 11, 12, 13])
    b.assign("m1", [0])
    b.consume("m1", 1, [(0, 0, 10), (0, 1, 11), (0, 2, 12)])
    b.commit("m1", 1, [(0, 3)])
    b.revoke("m1", [0])
    b.assign("m2", [0])
    b.consume("m2", 2, [(0, 1, 11), (0, 2, 12), (0, 3, 13)])  # started below the commit
    b.commit("m2", 2, [(0, 4)])
    b.drain(3, [(0, 4)])
    r = check(b.ops)
    assert r["redelivered_after_commit"] == 2
    assert [(d["member"], d["offset"], d["committed"]) for d in r["details"]["group"]["redelivered_after_commit"]] \
        == [("m2", 1, 3), ("m2", 2, 3)]
    assert r["valid"] is False


def test_a_commit_acknowledged_after_the_assignment_began_is_a_legal_race():
    b = Builder()
    sends(b, 0, [10, 11, 12])
    b.assign("m1", [0])
    b.consume("m1", 1, [(0, 0, 10), (0, 1, 11)])
    b.assign("m2", [0])  # m1 was expelled: its revocation is not recorded
    b.commit("m1", 1, [(0, 2)])  # acknowledged late: m2 may already have fetched the older offset
    b.consume("m2", 2, [(0, 0, 10), (0, 1, 11), (0, 2, 12)])
    b.commit("m2", 2, [(0, 3)])
    b.drain(3, [(0, 3)])
    r = check(b.ops)
    assert r["redelivered_after_commit"] == 0
    assert r["details"]["group"]["redelivered_after_racing_commit_count"] == 2
    assert r["valid"] is True


def test_reads_within_one_assignment_are_contiguous_and_a_new_assignment_starts_anywhere():
    b = Builder()
    sends(b, 0, list(range(10, 16)))
    b.assign("m1", [0])
    b.consume("m1", 1, [(0, 0, 10), (0, 1, 11)])
    b.consume("m1", 1, [(0, 3, 13)])  # skip
    b.consume("m1", 1, [(0, 2, 12)])  # rewind
    b.revoke("m1", [0])
    b.assign("m1", [0])  # a new assignment: starting back at 0 is the committed offset (none)
    b.consume("m1", 1, [(0, 0, 10), (0, 1, 11), (0, 2, 12), (0, 3, 13), (0, 4, 14), (0, 5, 15)])
    r = check(b.ops)
    kinds = [(d["kind"], d["member"], d["from"], d["to"]) for d in r["details"]["nonmonotonic"]]
    assert kinds == [("skip", "m1", 1, 3), ("rewind", "m1", 3, 2)]
    assert r["nonmonotonic"] == 2 and r["redelivered_after_commit"] == 0


def test_a_read_outside_any_assignment_is_reported_not_judged():
    b = Builder()
    sends(b, 0, [10])
    b.assign("m1", [0])
    b.revoke("m1", [0], error="lost")
    b.consume("m1", 1, [(0, 0, 10)])
    b.drain(3, [(0, 1)])
    r = check(b.ops)
    assert r["details"]["group"]["unassigned_reads_count"] == 1
    assert group_anomalies(r) == {} and r["valid"] is True


# --- simulated group runs -------------------------------------------------------------------


@attrs.define
class GroupRun:
    """A correct consumer group simulated step by step into a history: the coordinator's committed
    offsets, members holding partitions from their assignment to its revocation, each starting at the
    committed offset and committing what it processed. `forget_commit` and `skip_at_drain` make the
    coordinator misbehave once, as described on them."""

    rnd: random.Random
    partitions: int
    logs: list[list[int]]
    b: Builder = attrs.Factory(Builder)
    committed: dict[int, int] = attrs.Factory(dict)
    history_of_commits: dict[int, list[int]] = attrs.Factory(dict)
    owner: dict[int, str] = attrs.Factory(dict)
    position: dict[int, int] = attrs.Factory(dict)
    processed: dict[int, int] = attrs.Factory(dict)
    members: list[str] = attrs.Factory(list)
    next_member: int = 0
    process: dict[str, int] = attrs.Factory(dict)
    read_up_to: dict[int, int] = attrs.Factory(dict)  # highest offset any member read + 1
    forget_commit: bool = False  # at one rebalance, a partition's committed offset reverts to an older one
    skip_at_drain: bool = False  # the drain's owner of a fully committed partition starts one past it
    forgotten: int | None = None
    skipped: int | None = None

    def __attrs_post_init__(self) -> None:
        for p, log in enumerate(self.logs):
            for offset, v in enumerate(log):
                self.b.send(0, v, p, offset=offset)
        for _ in range(2):
            self.join()

    def join(self) -> None:
        name = f"m{self.next_member}"
        self.next_member += 1
        self.members.append(name)
        self.process[name] = 100 + self.next_member

    def commit(self, member: str) -> None:
        offsets = [(p, self.processed[p]) for p, m in sorted(self.owner.items())
                   if m == member and p in self.processed and self.processed[p] != self.committed.get(p)]
        if not offsets:
            return
        self.b.commit(member, self.process[member], offsets)
        for p, o in offsets:
            self.committed[p] = o
            self.history_of_commits.setdefault(p, []).append(o)

    def rebalance(self, *, crash: str | None = None, only: str | None = None) -> None:
        for member in self.members:
            held = sorted(p for p, m in self.owner.items() if m == member)
            if member == crash:
                continue  # a killed member records nothing more
            self.commit(member)
            if held:
                self.b.revoke(member, held)
        if crash:
            self.members.remove(crash)
        if self.forget_commit and self.forgotten is None:
            for p, seen in self.history_of_commits.items():
                older = [o for o in seen if o < self.committed[p]]
                if older:
                    self.committed[p] = older[0]
                    self.forgotten = p
                    break
        self.owner.clear()
        self.processed.clear()
        members = [only] if only else self.members
        for p in range(self.partitions):
            self.owner[p] = self.rnd.choice(members)
        for member in members:
            held = sorted(p for p, m in self.owner.items() if m == member)
            if held:
                self.b.assign(member, held)
            for p in held:
                self.position[p] = self.committed.get(p, 0)

    def consume(self, member: str, limit: int) -> None:
        records = []
        for p, m in sorted(self.owner.items()):
            if m != member:
                continue
            log = self.logs[p]
            start = self.position[p]
            chunk = [(p, o, log[o]) for o in range(start, min(len(log), start + limit))]
            records.extend(chunk)
            if chunk:
                self.position[p] = self.processed[p] = chunk[-1][1] + 1
                self.read_up_to[p] = max(self.read_up_to.get(p, 0), self.position[p])
        self.b.consume(member, self.process[member], records)

    def step(self, kind: str) -> None:
        member = self.rnd.choice(self.members)
        if kind == "consume":
            self.consume(member, self.rnd.randint(1, 3))
        elif kind == "commit":
            self.commit(member)
        elif kind == "read":
            self.b.committed(1, sorted(self.committed.items()))
        elif kind == "rebalance":
            self.rebalance()
        elif kind == "join":
            self.join()
            self.rebalance()
        elif kind == "crash" and len(self.members) > 1:
            self.rebalance(crash=member)

    def drain(self) -> list:
        self.join()
        last = self.members[-1]
        self.rebalance(only=last)
        if self.skip_at_drain:
            for p in range(self.partitions):
                c = self.committed.get(p, 0)
                if self.read_up_to.get(p, 0) == c < len(self.logs[p]):
                    self.position[p] = c + 1
                    self.skipped = p
                    break
        while any(self.position[p] < len(self.logs[p]) for p in range(self.partitions)):
            self.consume(last, 5)
            self.commit(last)
        final = [(p, len(self.logs[p])) for p in range(self.partitions) if self.logs[p]]
        self.b.committed(1, sorted(self.committed.items()))
        self.b.drain(2, final)
        for p, log in enumerate(self.logs):
            self.b.final_read(3 + p, p, [(p, o, v) for o, v in enumerate(log)])
        return self.b.ops


@st.composite
def group_runs(draw: st.DrawFn, **flags: bool) -> GroupRun:
    partitions = draw(st.integers(1, 3))
    sizes = draw(st.lists(st.integers(0, 12), min_size=partitions, max_size=partitions))
    value = iter(range(10_000))
    logs = [[next(value) for _ in range(n)] for n in sizes]
    run = GroupRun(random.Random(draw(st.integers(0, 2**32))), partitions, logs, **flags)
    run.rebalance()
    for kind in draw(st.lists(st.sampled_from(["consume", "consume", "consume", "commit", "read", "rebalance",
                                               "join", "crash"]), max_size=40)):
        run.step(kind)
    return run


FAST = settings(max_examples=80, deadline=None)


@FAST
@given(group_runs())
def test_simulated_correct_group_runs_are_valid(run):
    r = check(run.drain())
    assert group_anomalies(r) == {}, r["details"]
    assert r["valid"] is True
    assert r["details"]["group"]["drained"] is True


@FAST
@given(group_runs(forget_commit=True))
def test_simulated_forgotten_commit_is_caught(run):
    history = run.drain()
    if run.forgotten is None:
        return  # no partition had an older commit to go back to
    r = check(history)
    assert r["redelivered_after_commit"] >= 1, r["details"]  # its next owner starts below the commit
    assert r["valid"] is False
    assert r["group_lost"] == 0  # at-least-once still holds: a forgotten commit only redelivers


@FAST
@given(group_runs(skip_at_drain=True))
def test_simulated_skipped_record_is_group_lost(run):
    history = run.drain()
    if run.skipped is None:
        return
    r = check(history)
    assert r["group_lost"] == 1, r["details"]
    assert r["details"]["group"]["group_lost"][0]["partition"] == run.skipped
    assert r["lost"] == 0  # the log itself holds the record
    assert r["valid"] is False
