"""No file work inside a core call: with a FileRaftLog, step / tick / propose / start / resign /
create_snapshot only change memory, and the FlushLog effect (run by the driver off the event loop)
does the writing. Every os call that opens, writes, syncs, truncates, renames, deletes or closes a
file fails while a core call runs."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from kraftpy.raft import Commit, FlushLog, RaftConfig, RaftCore, SnapshotLoaded
from kraftpy.raft.file_log import FileRaftLog
from tests.helpers.raft_sim import FileWriteInCoreCall, SimCluster, forbid_file_writes


def test_the_guard_refuses_file_writes() -> None:
    with forbid_file_writes(), pytest.raises(FileWriteInCoreCall):
        os.open("/nonexistent", os.O_RDONLY)
    with forbid_file_writes(), pytest.raises(FileWriteInCoreCall):
        open("/nonexistent")  # noqa: SIM115
    assert os.open.__name__ == "open" and open.__name__ == "open"  # restored


def test_a_single_voter_on_a_file_log_writes_only_when_its_effects_are_applied(tmp_path: Path) -> None:
    log = FileRaftLog.open(tmp_path)
    config = RaftConfig(1, [1], "c", election_timeout_ms=10, append_linger_ms=20)

    def call(method, *args, **kwargs):
        with forbid_file_writes():
            return method(*args, **kwargs)

    def apply(effects: list) -> list:
        for effect in effects:
            if isinstance(effect, FlushLog):
                log.flush(effect.up_to)
        return effects

    core = call(RaftCore, config, log, rng=random.Random(1), now=0.0, wall_clock=lambda: 42)
    apply(call(core.start, 0.0))
    assert core.is_leader
    for i in range(5):
        apply(call(core.propose, [b"v%d" % i], 1.0 + i / 1000).effects)
    effects = apply(call(core.tick, call(core.next_deadline)))
    (commit,) = [e for e in effects if isinstance(e, Commit)]
    assert [b.records for b in commit.batches] == [(b"v0", b"v1", b"v2", b"v3", b"v4")]
    result = call(core.create_snapshot, 6, b"state")
    apply(result.effects)
    apply(call(core.resign, 2.0))
    log.close()

    again = FileRaftLog.open(tmp_path)
    assert (again.start_offset, again.end_offset, again.latest_snapshot_id) == (6, 6, result.snapshot_id)
    core = call(RaftCore, config, again, rng=random.Random(1), now=0.0)
    assert SnapshotLoaded(result.snapshot_id) in call(core.start, 0.0)
    again.close()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_cluster_on_file_logs_does_no_file_work_inside_core_calls(seed: int) -> None:
    """Every core call of the simulation runs under the guard when its logs are files: elections,
    replication, truncation, snapshots and their download, crashes with torn writes, restarts."""
    cluster = SimCluster(seed, voters=3, observers=1, file_logs=True, append_linger_ms=5, snapshot_chunk_bytes=5)
    try:
        cluster.crash_mid_apply_rate = 0.02
        cluster.run_for(3.0)
        for round_ in range(6):
            for _ in range(5):
                cluster.propose()
                cluster.run_for(0.1)
            for node in cluster.nodes.values():
                if node.alive:
                    cluster.take_snapshot(node, delete_prefix=True)
            victim = cluster.nodes[1 + (seed + round_) % 4]
            cluster.crash(victim)
            cluster.run_for(2.0)
            cluster.restart(victim)
            cluster.run_for(2.0)
        cluster.heal()
        for node in cluster.nodes.values():
            cluster.restart(node)
        target = None
        for _ in range(100):
            cluster.run_for(0.2)
            if target is not None and cluster.all_caught_up(target):
                break
            proposed = cluster.propose(tag="end") if target is None else None
            target = proposed[1] if proposed is not None else target
        assert target is not None and cluster.all_caught_up(target), cluster.failure_report()
        # Work was done under the guard (how much depends on where the random mid-apply crashes fall).
        assert cluster.checker.committed_end > 15
    finally:
        cluster.close()
