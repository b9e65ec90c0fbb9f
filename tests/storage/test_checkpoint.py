"""Checkpoint files: Kafka's text form, atomic replacement, refusal of damaged files."""

from __future__ import annotations

import pytest

from kraftpy.storage.checkpoint import (
    OFFSETS_CHECKPOINT_FILE,
    CheckpointError,
    OffsetsCheckpoint,
    decode_checkpoint,
    encode_checkpoint,
)


def test_encode_is_version_count_then_entries():
    assert encode_checkpoint([(0, 0), (3, 120)]) == b"0\n2\n0 0\n3 120\n"
    assert decode_checkpoint(b"0\n2\n0 0\n3 120\n", 2) == [["0", "0"], ["3", "120"]]


@pytest.mark.parametrize(
    "data",
    [b"", b"0\n", b"1\n0\n", b"0\n2\n0 0\n", b"0\n1\n0 0 0\n", b"x\n0\n", b"\xff\xfe"],
)
def test_damaged_checkpoints_are_refused(data):
    with pytest.raises(CheckpointError):
        decode_checkpoint(data, 2)


def test_offsets_checkpoint_round_trips_and_leaves_no_tmp(tmp_path):
    OffsetsCheckpoint(5, 17, 12).write(tmp_path)
    assert OffsetsCheckpoint.read(tmp_path) == OffsetsCheckpoint(5, 17, 12)
    assert sorted(p.name for p in tmp_path.iterdir()) == [OFFSETS_CHECKPOINT_FILE]
    text = (tmp_path / OFFSETS_CHECKPOINT_FILE).read_text()
    assert text == "0\n3\nlog-start-offset 5\nrecovery-point 17\nhigh-watermark 12\n"


def test_missing_offsets_checkpoint_reads_as_none(tmp_path):
    assert OffsetsCheckpoint.read(tmp_path) is None
