from __future__ import annotations

import json
from pathlib import Path

import pytest

from kraftpy.raft.effects import ElectionState
from kraftpy.raft.quorum_state_file import CorruptQuorumStateError, decode_quorum_state, encode_quorum_state
from kraftpy.raft.quorum_state_store import read_quorum_state_file, write_quorum_state_file

STATES = [
    ElectionState(0),
    ElectionState(7, leader_id=2),
    ElectionState(8, voted_id=3),
    ElectionState(9),
]


@pytest.mark.parametrize("state", STATES, ids=str)
def test_round_trip(state: ElectionState) -> None:
    assert decode_quorum_state(encode_quorum_state(state, [1, 2, 3]), [3, 2, 1]) == state


def test_layout_matches_kafka_keys() -> None:
    data = json.loads(encode_quorum_state(ElectionState(7, leader_id=2), [1, 2, 3]))
    assert data == {
        "clusterId": "",
        "leaderId": 2,
        "leaderEpoch": 7,
        "votedId": -1,
        "appliedOffset": 0,
        "currentVoters": [{"voterId": 1}, {"voterId": 2}, {"voterId": 3}],
        "data_version": 0,
    }


def test_reads_a_version_1_file() -> None:
    raw = b'{"leaderId":-1,"leaderEpoch":4,"votedId":2,"votedDirectoryId":"AAAAAAAAAAAAAAAAAAAAAA","data_version":1}'
    assert decode_quorum_state(raw) == ElectionState(4, voted_id=2)


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"[]",
        b"{not json",
        b'{"leaderId":1,"leaderEpoch":1,"votedId":-1,"data_version":9}',
        b'{"leaderId":1,"leaderEpoch":1,"votedId":2,"data_version":0}',
        b'{"leaderId":"x","leaderEpoch":1,"votedId":-1,"data_version":0}',
    ],
)
def test_corrupt_files_are_refused(raw: bytes) -> None:
    with pytest.raises(CorruptQuorumStateError):
        decode_quorum_state(raw)


def test_voter_set_mismatch_is_refused() -> None:
    with pytest.raises(CorruptQuorumStateError):
        decode_quorum_state(encode_quorum_state(ElectionState(1), [1, 2, 3]), [1, 2])


def test_atomic_write_and_read(tmp_path: Path) -> None:
    path = tmp_path / "quorum-state"
    assert read_quorum_state_file(path) is None
    write_quorum_state_file(path, ElectionState(3, voted_id=1), [1, 2, 3])
    write_quorum_state_file(path, ElectionState(4, leader_id=2), [1, 2, 3])
    assert read_quorum_state_file(path, [1, 2, 3]) == ElectionState(4, leader_id=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["quorum-state"]


def test_leftover_tmp_file_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "quorum-state"
    write_quorum_state_file(path, ElectionState(3, voted_id=1), [1])
    (tmp_path / "quorum-state.tmp").write_bytes(b"{torn")
    assert read_quorum_state_file(path) == ElectionState(3, voted_id=1)


def file_with(**fields: object) -> bytes:
    data = json.loads(encode_quorum_state(ElectionState(4, voted_id=2), [1, 2, 3]))
    data.update(fields)
    return json.dumps(data).encode()


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"leaderEpoch": 2147483653}, "leaderEpoch 2147483653 is out of range (-1 to 2147483647)"),
        ({"leaderEpoch": -2}, "leaderEpoch -2 is out of range"),
        ({"leaderEpoch": 4.5}, "leaderEpoch 4.5 is not an integer"),
        ({"leaderEpoch": True}, "leaderEpoch true is not an integer"),
        ({"leaderEpoch": "4"}, 'leaderEpoch "4" is not an integer'),
        ({"votedId": 2**40}, "votedId 1099511627776 is out of range"),
        ({"leaderId": None}, "leaderId null is not an integer"),
        ({"leaderEpoch": -1}, "leaderEpoch -1 with a leader or a vote"),
        ({"currentVoters": {"voterId": 1}}, "currentVoters"),
        ({"currentVoters": [{"voterId": "1"}]}, 'voterId "1" is not an integer'),
        ({"currentVoters": [{"voterId": 1}, {"voterId": 1}]}, "currentVoters [1, 1] holds an id that is negative or repeated"),
        ({"data_version": 0.0}, "unsupported data_version 0.0"),
    ],
)
def test_every_field_is_checked_and_named(fields: dict, says: str) -> None:
    with pytest.raises(CorruptQuorumStateError) as raised:
        decode_quorum_state(file_with(**fields))
    assert says in str(raised.value)


def test_the_error_names_the_file_on_one_line(tmp_path: Path) -> None:
    path = tmp_path / "quorum-state"
    path.write_bytes(file_with(leaderEpoch=2147483653))
    with pytest.raises(CorruptQuorumStateError) as raised:
        read_quorum_state_file(path, [1, 2, 3])
    assert str(raised.value) == f"{path}: leaderEpoch 2147483653 is out of range (-1 to 2147483647)"


@pytest.mark.parametrize(
    "state", [ElectionState(2**31), ElectionState(-1), ElectionState(3, leader_id=2**31), ElectionState(3, voted_id=-5)],
    ids=str,
)
def test_the_writer_refuses_what_it_could_not_read_back(state: ElectionState, tmp_path: Path) -> None:
    path = tmp_path / "quorum-state"
    write_quorum_state_file(path, ElectionState(3, voted_id=1), [1, 2, 3])
    with pytest.raises(CorruptQuorumStateError, match="refusing to write"):
        write_quorum_state_file(path, state, [1, 2, 3])
    assert read_quorum_state_file(path, [1, 2, 3]) == ElectionState(3, voted_id=1)


def test_the_largest_epoch_round_trips() -> None:
    state = ElectionState(2**31 - 1, leader_id=2**31 - 1)
    assert decode_quorum_state(encode_quorum_state(state, [1])) == state
