"""The trio driver: three voters over real TCP elect, replicate, commit and fail over."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import trio

from kraftpy.raft import codec
from kraftpy.raft.config import RaftConfig
from kraftpy.raft.core import RaftCore
from kraftpy.raft.driver import RAFT_API, RaftDriver, decode_response
from kraftpy.raft.effects import Commit, LeaderChange, SnapshotLoaded
from kraftpy.raft.errors import NotLeaderError
from kraftpy.raft.file_log import FileRaftLog
from kraftpy.raft.messages import BeginQuorumEpochResponse, VoteRequest, VoteResponse
from kraftpy.raft.quorum_state_store import FILE_NAME, read_quorum_state_file
from kraftpy.rpc.control import ControlClient, ControlServer, RpcError

CLUSTER = "MkU3OEVBNTcwNTJENDM2Qg"


class Recorder:
    def __init__(self) -> None:
        self.committed: list[bytes] = []
        self.leaders: list[LeaderChange] = []
        self.changed = trio.Event()

    def _poke(self) -> None:
        self.changed.set()
        self.changed = trio.Event()

    def handle_commit(self, commit: Commit) -> None:
        for batch in commit.batches:
            if not batch.is_control:
                self.committed.extend(batch.records)
        self._poke()

    def handle_leader_change(self, change: LeaderChange) -> None:
        self.leaders.append(change)
        self._poke()

    def handle_snapshot_loaded(self, effect: SnapshotLoaded) -> None:
        self._poke()


class Node:
    def __init__(self, node_id: int, directory: Path) -> None:
        self.node_id = node_id
        self.directory = directory
        self.recorder = Recorder()
        self.driver: RaftDriver | None = None
        self.scope = trio.CancelScope()
        self.port = 0
        self.voters: dict[int, tuple[str, int]] = {}
        self.voters_known = trio.Event()

    async def handler(self, api: str, body: dict) -> dict:
        if api != RAFT_API or self.driver is None:
            raise RpcError("UNSUPPORTED", api)
        return await self.driver.handle_request(body)

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Serve on an ephemeral port (reported), then run the driver once every port is known.
        Cancelling ``scope`` is this node's kill -9: its server and driver stop together."""
        with self.scope:
            async with trio.open_nursery() as nursery:
                self.port = await nursery.start(ControlServer(self.handler).serve, "127.0.0.1", 0)
                task_status.started(self.port)
                await self.voters_known.wait()
                log = FileRaftLog.open(self.directory)
                try:
                    config = RaftConfig(self.node_id, self.voters.keys(), CLUSTER, election_timeout_ms=500,
                                        fetch_timeout_ms=2000, request_timeout_ms=1500, fetch_max_wait_ms=200)
                    state_path = self.directory / FILE_NAME
                    core = RaftCore(config, log, rng=random.Random(self.node_id), now=trio.current_time(),
                                    persisted=read_quorum_state_file(state_path))
                    self.driver = RaftDriver(core, voter_addresses=self.voters, quorum_state_path=state_path,
                                             listener=self.recorder, request_timeout=1.5)
                    await self.driver.run()
                finally:
                    log.abandon()  # as a kill -9 would leave it


async def wait_until(nodes, predicate, timeout=20.0):
    """Wait until ``predicate()`` holds, checking it again at each change a node's recorder reports. The
    events are taken before the check: a change between the check and the wait is not missed (a
    watcher that read its event only once it ran could wait for a change that had already come)."""
    with trio.fail_after(timeout):
        while True:
            events = [node.recorder.changed for node in nodes]
            if predicate():
                return
            async with trio.open_nursery() as race:
                for event in events:
                    async def watch(e=event):
                        await e.wait()
                        race.cancel_scope.cancel()
                    race.start_soon(watch)


def leader_of(nodes):
    for node in nodes:
        if node.driver is not None and node.driver.core.is_leader and not node.scope.cancel_called:
            return node
    return None


async def test_three_voters_elect_commit_and_fail_over(tmp_path: Path) -> None:
    nodes = [Node(i, tmp_path / f"n{i}") for i in (1, 2, 3)]
    async with trio.open_nursery() as nursery:
        voters = {node.node_id: ("127.0.0.1", await nursery.start(node.run)) for node in nodes}
        for node in nodes:
            node.voters.update(voters)
            node.voters_known.set()

        await wait_until(nodes, lambda: leader_of(nodes) is not None)
        leader = leader_of(nodes)
        follower = next(n for n in nodes if n is not leader)
        try:
            await follower.driver.propose([b"x"])
            raise AssertionError("a follower accepted a proposal")
        except NotLeaderError:
            pass
        for i in range(5):
            await leader.driver.propose([b"v%d" % i])
        want = [b"v%d" % i for i in range(5)]
        await wait_until(nodes, lambda: all(n.recorder.committed == want for n in nodes))
        first_epoch = leader.driver.core.epoch

        leader.scope.cancel()  # the leader dies
        alive = [n for n in nodes if n is not leader]
        await wait_until(alive, lambda: leader_of(alive) is not None)
        new_leader = leader_of(alive)
        assert new_leader.driver.core.epoch > first_epoch
        await new_leader.driver.propose([b"after"])
        await wait_until(alive, lambda: all(n.recorder.committed == [*want, b"after"] for n in alive))
        persisted = read_quorum_state_file(new_leader.directory / FILE_NAME)
        assert persisted.epoch == new_leader.driver.core.epoch

        description = await new_leader.driver.describe_quorum()
        assert description.leader_id == new_leader.node_id
        assert description.high_watermark >= 7
        nursery.cancel_scope.cancel()


async def test_proposals_within_the_linger_time_share_one_batch(tmp_path: Path) -> None:
    log = FileRaftLog.open(tmp_path)
    recorder = Recorder()
    config = RaftConfig(1, [1], CLUSTER, election_timeout_ms=50, append_linger_ms=50)
    core = RaftCore(config, log, rng=random.Random(1), now=trio.current_time())
    driver = RaftDriver(core, voter_addresses={}, quorum_state_path=tmp_path / FILE_NAME, listener=recorder)
    async with trio.open_nursery() as nursery:
        await nursery.start(driver.run)
        with trio.fail_after(10):
            while not core.is_leader:
                await recorder.changed.wait()
        results = {}

        async def propose(i: int) -> None:
            results[i] = await driver.propose([b"r%d" % i, b"s%d" % i])

        async with trio.open_nursery() as proposers:
            for i in range(5):
                proposers.start_soon(propose, i)
        offsets = sorted((r.base_offset, r.last_offset) for r in results.values())
        assert all(b + 1 == last for b, last in offsets)
        assert [b for b, _ in offsets] == list(range(offsets[0][0], offsets[0][0] + 10, 2))
        with trio.fail_after(10):
            while len(recorder.committed) < 10:
                await recorder.changed.wait()
        data_batches = [b for b in log.read(0, 1 << 20) if not b.is_control]
        assert len(data_batches) == 1 and len(data_batches[0].records) == 10
        for i, result in results.items():  # every record sits at the offset propose promised
            assert log.read(result.base_offset, 1)[0].records[result.base_offset - data_batches[0].base_offset] \
                == b"r%d" % i
        nursery.cancel_scope.cancel()
    log.close()


async def test_malformed_raft_requests_are_answered_invalid_request_and_change_nothing(tmp_path: Path) -> None:
    """Over real TCP: a string where an int is, a bad sender, a list where a map is, an epoch past
    int32 (the probe's Vote) — each answered INVALID_REQUEST naming the field, never
    UNKNOWN_SERVER_ERROR; the node keeps its epoch and its quorum-state file, and goes on serving."""
    log = FileRaftLog.open(tmp_path)
    recorder = Recorder()
    config = RaftConfig(1, [1, 2, 3], CLUSTER, election_timeout_ms=60_000)
    state_path = tmp_path / FILE_NAME
    core = RaftCore(config, log, rng=random.Random(1), now=trio.current_time())
    driver = RaftDriver(core, voter_addresses={}, quorum_state_path=state_path, listener=recorder)
    vote = codec.encode(VoteRequest(CLUSTER, 1, 2**31 + 5, 2, 0, 0))

    async def handler(api: str, body: dict) -> dict:
        return await driver.handle_request(body)

    async with trio.open_nursery() as nursery:
        await nursery.start(driver.run)
        port = await nursery.start(ControlServer(handler).serve, "127.0.0.1", 0)
        client = ControlClient(nursery, "127.0.0.1", port)
        bad = {
            "source as a string": {"source": "2", "message": codec.encode(VoteRequest(CLUSTER, 1, 1, 2, 0, 0))},
            "negative source": {"source": -2, "message": codec.encode(VoteRequest(CLUSTER, 1, 1, 2, 0, 0))},
            "epoch as a string": {"source": 2, "message": {**vote, "candidate_epoch": "7"}},
            "a list for a message": {"source": 2, "message": [1, 2]},
            "epoch past int32": {"source": 2, "message": vote},
            "a response": {"source": 2, "message": codec.encode(VoteResponse(0, 2, 9, True))},
        }
        for name, body in bad.items():
            try:
                await client.request(RAFT_API, body)
                raise AssertionError(f"{name}: accepted")
            except RpcError as exc:
                assert exc.code == "INVALID_REQUEST", (name, exc)
        assert core.epoch == 0 and not state_path.exists()
        good = await client.request(RAFT_API, {"source": 2, "message": codec.encode(VoteRequest(CLUSTER, 1, 1, 2, 0, 0))})
        assert codec.decode(good["message"]) == VoteResponse(0, -1, 1, True)
        assert read_quorum_state_file(state_path).epoch == 1
        nursery.cancel_scope.cancel()
    log.close()


def test_an_answer_of_the_wrong_type_is_refused() -> None:
    request = VoteRequest(CLUSTER, 2, 3, 1, 0, 0)
    assert decode_response({"message": codec.encode(VoteResponse(0, -1, 3, True))}, request).vote_granted
    for body in ({"message": codec.encode(BeginQuorumEpochResponse(0, 2, 3))}, {"message": codec.encode(request)},
                 {"nothing": 1}, {"message": "VoteResponse"}):
        with pytest.raises(RpcError) as raised:
            decode_response(body, request)
        assert raised.value.code == "INVALID_RESPONSE"
