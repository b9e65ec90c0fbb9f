"""Deterministic simulation of whole clusters under faults (see tests/helpers/raft_sim.py).

- `test_simulation_seeds` runs KRAFTPY_SIM_SEEDS seeds (default 120) starting at
  KRAFTPY_SIM_BASE_SEED (default 0): 1, 3 or 5 voters plus 0-2 observers, on memory logs or (one
  seed in five) real file logs whose crashes may tear a flush, with a leader linger time of 0, 5 or
  50 ms; three simulated minutes of drops, duplicates, delays, partitions, crashes (also mid-way
  through applying effects), restarts, clock jumps, snapshots and resignations, then healing, after
  which a leader must commit on every node within 30 simulated seconds. Set KRAFTPY_SIM_SEEDS=5000
  for a soak.
- A quarter of those seeds (every seed ≡ 3 mod 4) run in Byzantine-input mode: hostile messages
  (epochs and offsets outside their types, other clusters, non-voter candidates and leaders, spoofed
  senders, impossible Fetch answers, bogus snapshots; tests/helpers/raft_hostile.py) arrive among
  the normal ones, each checked to change nothing, the invariants checked after every event.
  Under ``make soak`` (KRAFTPY_SOAK set), `test_simulation_seeds` runs every seed in the normal mode
  and `test_byzantine_seeds` every seed again in Byzantine-input mode.
- `test_replay_seed` replays the one seed in KRAFTPY_SIM_SEED (KRAFTPY_SIM_BYZANTINE=1 for the
  Byzantine-input mode); every failure prints that line.
- `test_hypothesis_seeds` and `TestClusterMachine` let hypothesis pick seeds and build schedules
  step by step (and shrink them), hostile messages among the steps.
- `test_membership_seeds` runs KRAFTPY_SIM_MEMBERSHIP_SEEDS seeds (default 200; 10,000 under ``make
  soak``) of dynamic quorums (KIP-853): voters added, removed (the leader too), replaced (a new disk)
  and moved (a new endpoint) among crashes, partitions and restarts, a static quorum upgraded to
  kraft.version 1 in one seed in five, with the membership invariants checked after every event
  (tests/helpers/raft_sim.py). `test_replay_membership_seed` replays KRAFTPY_SIM_MEMBERSHIP_SEED.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import kraftpy.raft.core
import kraftpy.raft.leader
from kraftpy.raft.voters import ReplicaKey
from tests.helpers.raft_sim import InvariantViolation, SimCluster, run_membership_seed, run_seed

FAULT_SECONDS = float(os.environ.get("KRAFTPY_SIM_FAULT_SECONDS", "180"))
MEMBERSHIP_FAULT_SECONDS = float(os.environ.get("KRAFTPY_SIM_MEMBERSHIP_FAULT_SECONDS", "30"))
SOAK = bool(os.environ.get("KRAFTPY_SOAK"))


def replay_line(seed: int, byzantine: bool) -> str:
    mode = "KRAFTPY_SIM_BYZANTINE=1 " if byzantine else ""
    return f"KRAFTPY_SIM_SEED={seed} {mode}.venv/bin/pytest tests/raft/test_simulation.py::test_replay_seed"


def check_seed(seed: int, byzantine: bool = False) -> None:
    try:
        run_seed(seed, fault_seconds=FAULT_SECONDS, byzantine=byzantine)
    except InvariantViolation as exc:
        raise AssertionError(
            f"simulation seed {seed} failed; replay with:\n  {replay_line(seed, byzantine)}\n{exc}"
        ) from None


def seeds() -> range:
    count = int(os.environ.get("KRAFTPY_SIM_SEEDS", "120"))
    base = int(os.environ.get("KRAFTPY_SIM_BASE_SEED", "0"))
    return range(base, base + count)


def test_simulation_seeds() -> None:
    for seed in seeds():
        check_seed(seed, byzantine=not SOAK and seed % 4 == 3)


@pytest.mark.skipif(not SOAK, reason="a quarter of test_simulation_seeds runs this mode; every seed under make soak")
def test_byzantine_seeds() -> None:
    for seed in seeds():
        check_seed(seed, byzantine=True)


@pytest.mark.skipif("KRAFTPY_SIM_SEED" not in os.environ, reason="set KRAFTPY_SIM_SEED to replay one seed")
def test_replay_seed() -> None:
    check_seed(int(os.environ["KRAFTPY_SIM_SEED"]), byzantine=bool(os.environ.get("KRAFTPY_SIM_BYZANTINE")))


def membership_replay_line(seed: int) -> str:
    return f"KRAFTPY_SIM_MEMBERSHIP_SEED={seed} .venv/bin/pytest tests/raft/test_simulation.py::test_replay_membership_seed"


def check_membership_seed(seed: int) -> None:
    try:
        run_membership_seed(seed, fault_seconds=MEMBERSHIP_FAULT_SECONDS)
    except InvariantViolation as exc:
        raise AssertionError(
            f"membership simulation seed {seed} failed; replay with:\n  {membership_replay_line(seed)}\n{exc}"
        ) from None


def test_membership_seeds() -> None:
    count = int(os.environ.get("KRAFTPY_SIM_MEMBERSHIP_SEEDS", "200"))
    base = int(os.environ.get("KRAFTPY_SIM_BASE_SEED", "0"))
    for seed in range(base, base + count):
        check_membership_seed(seed)


@pytest.mark.skipif("KRAFTPY_SIM_MEMBERSHIP_SEED" not in os.environ,
                    reason="set KRAFTPY_SIM_MEMBERSHIP_SEED to replay one membership seed")
def test_replay_membership_seed() -> None:
    check_membership_seed(int(os.environ["KRAFTPY_SIM_MEMBERSHIP_SEED"]))


def test_membership_seeds_exercise_every_kind_of_change() -> None:
    """The default seeds add and remove voters, remove the leader itself, replace disks, move
    endpoints and upgrade static quorums, each committed somewhere, and give up some changes too."""
    seen: dict[str, int] = {}
    results = [run_membership_seed(seed, fault_seconds=MEMBERSHIP_FAULT_SECONDS) for seed in range(40)]
    for result in results:
        for kind, count in result.change_counts:
            seen[kind] = seen.get(kind, 0) + count
    assert {"add", "remove", "remove-leader", "kraft.version", "refused"} <= {k for k, n in seen.items() if n}, seen
    assert sum(r.replaced for r in results) > 0 and sum(r.moved for r in results) > 0
    assert any(r.upgrade for r in results) and any(r.file_logs for r in results)


def test_same_membership_seed_same_history() -> None:
    assert run_membership_seed(12, fault_seconds=15) == run_membership_seed(12, fault_seconds=15)


def _without_refusal(monkeypatch: pytest.MonkeyPatch, reason: str) -> None:
    """Switch off the leader's refusal of a voter change whose message contains `reason`."""
    refused = kraftpy.raft.leader.LeaderRole._voter_change_refused

    def weakened(self, leader, minimum_kraft_version=1):  # type: ignore[no-untyped-def]
        why = refused(self, leader, minimum_kraft_version)
        return None if why is not None and reason in why[1] else why

    monkeypatch.setattr(kraftpy.raft.leader.LeaderRole, "_voter_change_refused", weakened)


@pytest.mark.parametrize(("reason", "seeds"), [
    ("first record", (4, 33, 44)),  # a new leader changing voters before it committed its epoch
    ("not committed yet", (188, 243, 336)),  # a second change while the log's last one is uncommitted
    ("previous voter change", (1, 14, 22)),  # a second operator change while one is pending
])
def test_the_membership_checker_catches_a_leader_that_breaks_one_change_at_a_time(
        reason: str, seeds: tuple[int, ...], monkeypatch: pytest.MonkeyPatch) -> None:
    _without_refusal(monkeypatch, reason)
    failed = 0
    for seed in seeds:
        with pytest.raises(InvariantViolation, match="was not committed"):
            run_membership_seed(seed, fault_seconds=MEMBERSHIP_FAULT_SECONDS)
        failed += 1
    assert failed == len(seeds)


def test_the_membership_checker_catches_a_replaced_disk_taken_for_the_old_replica(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """With replicas told apart by id only, a wiped disk counts as the voter it replaced: committed
    records end up on fewer replicas than any majority needs."""
    monkeypatch.setattr(ReplicaKey, "matches", lambda self, other: self.id == other.id)
    with pytest.raises(InvariantViolation, match="a majority could miss it"):
        run_membership_seed(52, fault_seconds=MEMBERSHIP_FAULT_SECONDS)


def test_byzantine_mode_sends_every_kind_of_hostile_message_and_each_is_refused() -> None:
    """Every kind is built within a few seeds, and a seed passes only if each one changed nothing."""
    sent: dict[str, int] = {}
    for seed in (3, 7):
        cluster = SimCluster(seed, voters=3, observers=1, snapshot_chunk_bytes=8, hostile_interval=0.02)
        cluster.run_for(2.0)
        for _ in range(10):
            cluster.crash(cluster.nodes[4])  # the observer will catch up from a snapshot, in chunks
            for _ in range(3):
                cluster.propose()
                cluster.run_for(0.3)
            for node in cluster.alive_nodes():
                cluster.take_snapshot(node, delete_prefix=True)
            cluster.restart(cluster.nodes[4])
            cluster.run_for(1.0)
        for kind, count in cluster.hostile.sent.items():
            sent[kind] = sent.get(kind, 0) + count
    assert set(sent) == {
        "other-cluster", "bad-epoch", "bad-field", "not-a-voter", "spoofed-sender", "from-itself", "bad-successors",
        "wrong-voter-key", "fetch-past-the-end", "bogus-snapshot", "describe", "bad-epoch-response",
        "non-voter-leader", "receiver-as-leader", "impossible-fetch-answer", "impossible-snapshot-chunk",
    }


@pytest.mark.parametrize("check", ["request_error", "response_is_valid"])
def test_byzantine_mode_catches_a_core_that_trusts_messages(check: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The mode has teeth: with either check of kraftpy.raft.validation switched off, a seed fails."""
    monkeypatch.setattr(kraftpy.raft.core, check, (lambda *args: None) if check == "request_error" else
                        (lambda *args: True))
    with pytest.raises(InvariantViolation, match="acted on a hostile message"):
        run_seed(3, fault_seconds=20, byzantine=True)


@settings(max_examples=15, deadline=None, derandomize=True)
@given(seed=st.integers(min_value=10**6, max_value=2**40))
def test_hypothesis_seeds(seed: int) -> None:
    check_seed(seed)


@pytest.mark.parametrize("seed", [42, 2, 7])  # memory logs; file logs with a linger of 5 and 50 ms
def test_same_seed_same_history(seed: int) -> None:
    assert run_seed(seed, fault_seconds=20) == run_seed(seed, fault_seconds=20)
    byzantine = run_seed(seed, fault_seconds=20, byzantine=True)
    assert byzantine == run_seed(seed, fault_seconds=20, byzantine=True) and byzantine.hostile > 20


def test_the_default_seeds_cover_file_logs_and_linger() -> None:
    results = [run_seed(seed, fault_seconds=1) for seed in range(20)]
    assert any(r.file_logs for r in results) and any(not r.file_logs for r in results)
    assert {r.append_linger_ms for r in results} == {0, 5, 50}


class ClusterMachine(RuleBasedStateMachine):
    """Hypothesis builds the fault schedule rule by rule; the checker runs after every event."""

    @initialize(
        seed=st.integers(0, 2**32),
        voters=st.sampled_from([1, 3, 5]),
        observers=st.integers(0, 2),
    )
    def setup(self, seed: int, voters: int, observers: int) -> None:
        self.cluster = SimCluster(seed, voters=voters, observers=observers)
        self.ids = sorted(self.cluster.nodes)

    @rule(seconds=st.floats(0.01, 4.0))
    def advance(self, seconds: float) -> None:
        self.cluster.run_for(seconds)

    @rule()
    def propose(self) -> None:
        self.cluster.propose()

    @rule(index=st.integers(0, 6))
    def crash(self, index: int) -> None:
        self.cluster.crash(self.cluster.nodes[self.ids[index % len(self.ids)]])

    @rule()
    def restart_all(self) -> None:
        for node in self.cluster.nodes.values():
            self.cluster.restart(node)

    @rule(data=st.data())
    def partition(self, data: st.DataObject) -> None:
        side = data.draw(st.sets(st.sampled_from(self.ids)))
        self.cluster.partition([set(side), set(self.ids) - set(side)])

    @precondition(lambda self: len(self.ids) > 1)
    @rule(data=st.data())
    def block_one_way(self, data: st.DataObject) -> None:
        src, dst = data.draw(st.lists(st.sampled_from(self.ids), min_size=2, max_size=2, unique=True))
        self.cluster.block_one_way(src, dst)

    @rule(
        drop=st.sampled_from([0.0, 0.1, 0.3]),
        dup=st.sampled_from([0.0, 0.1]),
        spike=st.sampled_from([0.0, 0.1]),
    )
    def network_quality(self, drop: float, dup: float, spike: float) -> None:
        self.cluster.drop_rate, self.cluster.dup_rate, self.cluster.spike_rate = drop, dup, spike

    @rule(index=st.integers(0, 6), jump=st.floats(-2.0, 5.0))
    def clock_jump(self, index: int, jump: float) -> None:
        self.cluster.nodes[self.ids[index % len(self.ids)]].clock_offset += jump

    @rule(index=st.integers(0, 6), delete=st.booleans())
    def snapshot(self, index: int, delete: bool) -> None:
        self.cluster.take_snapshot(self.cluster.nodes[self.ids[index % len(self.ids)]], delete)

    @rule()
    def resign(self) -> None:
        self.cluster.resign()

    @rule(count=st.integers(1, 20))
    def hostile(self, count: int) -> None:
        """Byzantine input: hostile messages, each checked to change nothing."""
        for _ in range(count):
            self.cluster.inject_hostile()

    @invariant()
    def safe(self) -> None:
        self.cluster.checker.check_all()

    def teardown(self) -> None:
        cluster = getattr(self, "cluster", None)
        if cluster is None:
            return
        cluster.heal()
        for node in cluster.nodes.values():
            cluster.restart(node)
        target = None
        for _ in range(300):
            cluster.run_for(0.1)
            if target is not None and cluster.all_caught_up(target):
                return
            if target is None or cluster.checker.committed_end <= target:
                proposed = cluster.propose(tag="heal")
                target = proposed[1] if proposed is not None and target is None else target
        raise InvariantViolation(f"no commit on every node 30s after healing\n{cluster.failure_report()}")


TestClusterMachine = ClusterMachine.TestCase
TestClusterMachine.settings = settings(
    max_examples=20, stateful_step_count=25, deadline=None, derandomize=True
)
