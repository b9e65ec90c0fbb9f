"""The probe's forged control-plane frames, sent to three real `kraftpy controller` processes.

A VoteRequest for candidate_epoch 2**31 + 5 used to be granted, persisted to quorum-state, and kill
the controller in `build_batch` at every start; a BeginQuorumEpoch naming leader 999 (not a voter)
was accepted and written. Now each is refused over the control port (with the other malformed
frames next to them); the quorum keeps its leader and its epoch, nothing reaches a quorum-state
file, no handler fails, the controllers go on serving, and a restart of all three works.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from kraftpy.cli.quorum import fetch_status
from kraftpy.ids import Uuid
from kraftpy.metadata.controller_config import DEFAULT_SUPPORTED_FEATURES
from kraftpy.metadata.errors import Errors
from kraftpy.metadata.messages import BrokerRegistrationRequest
from kraftpy.metadata.records import BrokerEndpoint, BrokerFeature
from kraftpy.metadata.rpc import ControllerClient
from kraftpy.raft import codec
from kraftpy.raft.driver import RAFT_API
from kraftpy.raft.errors import ErrorCode
from kraftpy.raft.messages import BeginQuorumEpochRequest, EndQuorumEpochRequest, FetchRequest, VoteRequest
from kraftpy.raft.quorum_state_store import FILE_NAME, read_quorum_state_file
from kraftpy.rpc.control import ControlClient, RpcError
from tests.helpers.processes import KraftProcess, controller_configs, format_all

pytestmark = pytest.mark.slow
SUPPORTED = tuple(BrokerFeature(name, low, high) for name, (low, high) in DEFAULT_SUPPORTED_FEATURES.items())


def quorum_states(root: Path) -> dict[int, object]:
    return {i: read_quorum_state_file(root / f"controller-{i}" / "__cluster_metadata-0" / FILE_NAME, [1, 2, 3])
            for i in (1, 2, 3)}


def forged_frames(cluster_id: str, target: int, epoch: int) -> dict[str, dict]:
    """The probe's two frames, and their malformed neighbours, for controller `target`."""
    other = 1 if target != 1 else 2
    vote = codec.encode(VoteRequest(cluster_id, target, 2**31 + 5, other, 0, 0))
    return {
        "vote for epoch 2**31+5": {"source": other, "message": vote},
        "begin-quorum-epoch of leader 999": {
            "source": 999, "message": codec.encode(BeginQuorumEpochRequest(cluster_id, target, 999, epoch + 1))},
        "end-quorum-epoch of leader 999": {
            "source": 999, "message": codec.encode(EndQuorumEpochRequest(cluster_id, 999, epoch + 1))},
        "vote naming another sender": {
            "source": 999, "message": codec.encode(VoteRequest(cluster_id, target, epoch + 1, other, 0, 0))},
        "fetch past the end": {
            "source": other, "message": codec.encode(FetchRequest(cluster_id, other, 0, epoch, 10**12, epoch))},
        "epoch as a string": {"source": other, "message": {**vote, "candidate_epoch": str(epoch + 1)}},
        "a list for a message": {"source": other, "message": [vote]},
        "no source": {"message": vote},
    }


async def test_forged_votes_and_leaders_change_nothing_and_a_restart_works(tmp_path: Path) -> None:
    configs, voters = controller_configs(tmp_path, **{"controller.quorum.election.timeout.ms": 500})
    cluster_id = format_all(configs)
    procs = [KraftProcess(f"controller-{i}", "controller", c) for i, c in enumerate(configs, start=1)]
    async with trio.open_nursery() as nursery:
        for proc in procs:
            await proc.start(nursery)
        for proc in procs:
            await proc.wait_for("controller started")
        client = ControllerClient(nursery, voters, request_timeout=3.0)

        async def serves_writes(broker_id: int) -> None:
            registered = await client.call(BrokerRegistrationRequest(
                broker_id, cluster_id, Uuid(bytes([broker_id]) * 16),
                listeners=(BrokerEndpoint("PLAINTEXT", "127.0.0.1", 9000 + broker_id),), features=SUPPORTED))
            assert registered.error_code == Errors.NONE

        await serves_writes(10)
        before = await fetch_status(list(voters.values()))
        # A write commits on a majority: the third voter may not have heard of the leader's epoch yet, and
        # would answer the forged fetch UNKNOWN_LEADER_EPOCH. Every voter knows it first.
        for proc in procs:
            await proc.wait_for("leader changed", epoch=before["leader_epoch"], leader_id=before["leader_id"])
        states_before = quorum_states(tmp_path)

        answers: dict[tuple[int, str], str] = {}
        for target, address in voters.items():
            raw = ControlClient(nursery, *address, request_timeout=5.0)
            for name, body in forged_frames(cluster_id, target, before["leader_epoch"]).items():
                try:
                    reply = await raw.request(RAFT_API, body)
                    answers[(target, name)] = ErrorCode(codec.decode(reply["message"]).error_code).name
                except RpcError as exc:
                    answers[(target, name)] = exc.code
            await raw.aclose()
        for (target, name), answer in answers.items():
            expected = {"begin-quorum-epoch of leader 999": "INCONSISTENT_VOTER_SET",
                        "end-quorum-epoch of leader 999": "INCONSISTENT_VOTER_SET",
                        "fetch past the end": "NONE" if target == before["leader_id"] else "NOT_LEADER_OR_FOLLOWER",
                        }.get(name, "INVALID_REQUEST")
            assert answer == expected, (target, name, answer)

        after = await fetch_status(list(voters.values()))
        assert (after["leader_id"], after["leader_epoch"]) == (before["leader_id"], before["leader_epoch"])
        assert quorum_states(tmp_path) == states_before
        await serves_writes(11)
        for proc in procs:
            assert proc.find("handler failed") is None, "\n".join(proc.raw[-20:])

        for proc in procs:  # a restart of the whole quorum works
            proc.signal(15)
        for proc in procs:
            assert await proc.wait() == 0
        for proc in procs:
            await proc.start(nursery)
        for proc in procs:
            await proc.wait_for("controller started")
        await serves_writes(12)
        restarted = await fetch_status(list(voters.values()))
        assert before["leader_epoch"] < restarted["leader_epoch"] < 2**31
        for proc in procs:
            proc.signal(15)
        for proc in procs:
            assert await proc.wait() == 0
        nursery.cancel_scope.cancel()


async def test_a_quorum_state_that_cannot_be_true_stops_the_controller_in_one_line(tmp_path: Path) -> None:
    """What the probe left behind (an epoch past int32 in quorum-state) is named, with its file, in the
    one line the process ends with; no traceback."""
    configs, _ = controller_configs(tmp_path, count=1)
    format_all(configs)
    state_dir = tmp_path / "controller-1" / "__cluster_metadata-0"
    state_dir.mkdir(parents=True, exist_ok=True)
    (state_dir / FILE_NAME).write_text(
        '{"clusterId":"","leaderId":-1,"leaderEpoch":2147483653,"votedId":2,"appliedOffset":0,'
        '"currentVoters":[{"voterId":1}],"data_version":0}')
    proc = KraftProcess("controller-1", "controller", configs[0])
    async with trio.open_nursery() as nursery:  # ends once stderr is read to its end
        await proc.start(nursery)
        assert await proc.wait() == 1
    assert proc.raw[-1] == (f"kraftpy: {state_dir / FILE_NAME}: leaderEpoch 2147483653 is out of range "
                            "(-1 to 2147483647)")
    assert not any("Traceback" in line for line in proc.raw)
