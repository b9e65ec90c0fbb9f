"""Checkpoint files: Kafka's text form, atomic replacement, refusal of damaged files."""

from __future__ import annotations

import pytest

from kraftpy.storage.checkpoint import (
    LEGACY_OFFSETS_FILE,
    CheckpointError,
    LogOffsets,
    decode_checkpoint,
    decode_offsets,
    encode_checkpoint,
    encode_offsets,
    read_legacy_offsets,
    read_offsets,
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


def test_offsets_of_a_log_directory_are_topic_partition_offset_lines():
    data = encode_offsets({("orders", 1): 17, ("orders", 0): 5, ("a.b_c", 12): 0})
    assert data == b"0\n3\na.b_c 12 0\norders 0 5\norders 1 17\n"
    assert decode_offsets(data) == {("orders", 0): 5, ("orders", 1): 17, ("a.b_c", 12): 0}


@pytest.mark.parametrize("data", [b"0\n1\norders 0\n", b"0\n1\norders x 5\n", b"0\n1\norders 0 y\n"])
def test_damaged_offset_checkpoints_are_refused(data):
    with pytest.raises(CheckpointError):
        decode_offsets(data)


def test_missing_offset_checkpoint_reads_as_none(tmp_path):
    assert read_offsets(tmp_path / "recovery-point-offset-checkpoint") is None


def test_the_per_partition_file_of_earlier_versions_is_still_read(tmp_path):
    assert read_legacy_offsets(tmp_path) is None
    (tmp_path / LEGACY_OFFSETS_FILE).write_text("0\n3\nlog-start-offset 5\nrecovery-point 17\nhigh-watermark 12\n")
    assert read_legacy_offsets(tmp_path) == LogOffsets(5, 17, 12)
    (tmp_path / LEGACY_OFFSETS_FILE).write_text("0\n1\nsomething-else 5\n")
    with pytest.raises(CheckpointError):
        read_legacy_offsets(tmp_path)


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b"0\n1\norders 0 -7\n", "line 3: offset of orders-0 -7 is negative"),
        (b"0\n1\norders 0 9223372036854775808\n", "line 3: offset of orders-0 9223372036854775808 is out of range"),
        (b"0\n1\norders 2147483648 5\n", "line 3: partition of orders 2147483648 is out of range"),
        (b"0\n1\norders -1 5\n", "line 3: partition of orders -1 is negative"),
        (b"0\n1\norders 0 +5\n", "line 3: offset of orders-0 '+5' is not a number"),
        (b"0\n1\norders 0 5_000\n", "'5_000' is not a number"),
        ("0\n1\norders 0 \u0665\n".encode(), "is not a number"),  # an Arabic-Indic digit: int() would take it
        (b"0\n1\nord/ers 0 5\n", "line 3: 'ord/ers' is not a topic name"),
        (b"0\n2\norders 0 5\norders 0 6\n", "line 4: orders-0 appears twice"),
        (b"-0\n1\norders 0 5\n", "line 1: version -0 is negative"),
        (b"0\n99999999999\n", "line 2: entry count 99999999999 is out of range"),
    ],
)
def test_each_value_of_an_offset_checkpoint_is_checked_and_named(data, says):
    with pytest.raises(CheckpointError) as raised:
        decode_offsets(data)
    assert says in str(raised.value)


def test_the_error_names_the_file(tmp_path):
    path = tmp_path / "replication-offset-checkpoint"
    path.write_bytes(b"0\n1\norders 0 -7\n")
    with pytest.raises(CheckpointError) as raised:
        read_offsets(path)
    assert str(raised.value) == f"{path}: line 3: offset of orders-0 -7 is negative"
    (tmp_path / LEGACY_OFFSETS_FILE).write_text("0\n1\nhigh-watermark 2x\n")
    with pytest.raises(CheckpointError, match=f"{LEGACY_OFFSETS_FILE}: line 3: high-watermark '2x' is not a number"):
        read_legacy_offsets(tmp_path)


def test_read_small_file_reads_whole_files_of_any_size(tmp_path):
    """Checkpoints and partition metadata are read with one read call when small, and whole when not."""
    import pytest

    from kraftpy.storage.fsutil import read_small_file

    for size in (0, 1, 100, 65535, 65536, 65537, 300_000):
        path = tmp_path / f"f{size}"
        data = bytes(i % 251 for i in range(size))
        path.write_bytes(data)
        assert read_small_file(path) == data
        assert read_small_file(path, chunk=7) == data
    with pytest.raises(FileNotFoundError):
        read_small_file(tmp_path / "absent")
