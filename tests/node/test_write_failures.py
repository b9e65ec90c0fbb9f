"""A Raft node whose disk is full (a real ENOSPC on a small tmpfs) stops on the first write it cannot
make, whichever task meets it: a vote it cannot persist is never granted, and the driver's run task
raises the one-line `FatalError` that ends the process."""

from __future__ import annotations

import random

import pytest
import trio

from kraftpy.fatal import FatalError
from kraftpy.raft.config import RaftConfig
from kraftpy.raft.core import RaftCore
from kraftpy.raft.driver import RaftDriver, encode_envelope
from kraftpy.raft.effects import Commit, LeaderChange, SnapshotLoaded
from kraftpy.raft.file_log import FileRaftLog
from kraftpy.raft.messages import VoteRequest
from kraftpy.raft.quorum_state_store import FILE_NAME, read_quorum_state_file
from tests.helpers.filesystems import fill, small_filesystem

CLUSTER = "MkU3OEVBNTcwNTJENDM2Qg"


class Listener:
    def handle_commit(self, commit: Commit) -> None:
        pass

    def handle_leader_change(self, change: LeaderChange) -> None:
        pass

    def handle_snapshot_loaded(self, effect: SnapshotLoaded) -> None:
        pass


async def test_a_vote_that_cannot_be_persisted_is_not_granted_and_stops_the_driver(tmp_path):
    with small_filesystem(tmp_path / "fs", "256k") as fs:
        log = FileRaftLog.open(fs)
        # Voters 1 and 2; node 1 never hears from 2, so it waits as a follower (the timers are long).
        config = RaftConfig(1, [1, 2], CLUSTER, election_timeout_ms=60_000, fetch_timeout_ms=60_000)
        core = RaftCore(config, log, rng=random.Random(1), now=trio.current_time(), persisted=None)
        state_path = fs / FILE_NAME
        driver = RaftDriver(core, voter_addresses={1: ("127.0.0.1", 1), 2: ("127.0.0.1", 2)},
                            quorum_state_path=state_path, listener=Listener(), request_timeout=1.0)
        with pytest.raises(BaseExceptionGroup) as stopped:
            async with trio.open_nursery() as nursery:
                await nursery.start(driver.run)
                fill(fs)
                body = encode_envelope(2, VoteRequest(CLUSTER, 1, 5, 2, 0, 0))
                with pytest.raises(FatalError) as refused:  # the request's own task, answered with an error
                    await driver.handle_request(body)
                assert str(refused.value) == f"cannot write {state_path}: No space left on device (ENOSPC)"
                await trio.sleep_forever()  # the run task raises it: the nursery stops
        fatal, others = stopped.value.split(FatalError)
        assert others is None and fatal is not None  # nothing but the fault, however deep the nurseries
        assert driver.failure is refused.value
        log.close()  # after the failure: as a crash leaves it
        persisted = read_quorum_state_file(state_path) if state_path.exists() else None
        assert persisted is None or persisted.epoch < 5  # the vote in epoch 5 is nowhere on disk
