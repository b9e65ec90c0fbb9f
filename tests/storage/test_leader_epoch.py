"""The leader-epoch cache: assignment rules, Kafka's endOffsetFor, truncation, the checkpoint file."""

from __future__ import annotations

from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraftpy.storage.checkpoint import CheckpointError
from kraftpy.storage.leader_epoch import (
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    EpochEntry,
    LeaderEpochCache,
)

UNDEFINED = (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)


def cache(tmp_path, leo=100):
    end = [leo]
    c = LeaderEpochCache(tmp_path / "leader-epoch-checkpoint", lambda: end[0])
    return c, end


def test_assign_appends_and_ignores_repeats(tmp_path):
    c, _ = cache(tmp_path)
    assert c.assign(1, 0)
    assert not c.assign(1, 5)  # same epoch, later offset: already implied
    assert c.assign(3, 10)
    assert c.entries == (EpochEntry(1, 0), EpochEntry(3, 10))


def test_assign_removes_entries_not_below_the_new_one(tmp_path):
    c, _ = cache(tmp_path)
    for epoch, offset in [(1, 0), (2, 10), (4, 20)]:
        c.assign(epoch, offset)
    c.assign(3, 15)  # epoch 4 >= 3 goes; epoch 2 at 10 < 15 stays
    assert c.entries == (EpochEntry(1, 0), EpochEntry(2, 10), EpochEntry(3, 15))
    c.assign(5, 5)  # start offset 5 is below 10 and 15: they go
    assert c.entries == (EpochEntry(1, 0), EpochEntry(5, 5))


def test_assign_refuses_negative_values(tmp_path):
    c, _ = cache(tmp_path)
    with pytest.raises(ValueError):
        c.assign(-1, 0)


def test_end_offset_for_follows_kafka(tmp_path):
    c, end = cache(tmp_path, leo=100)
    assert c.end_offset_for(0) == UNDEFINED  # empty cache
    c.assign(2, 10)
    c.assign(4, 30)
    c.assign(7, 60)
    assert c.end_offset_for(7) == (7, 100)  # latest epoch: the log end offset
    end[0] = 120
    assert c.end_offset_for(7) == (7, 120)
    assert c.end_offset_for(4) == (4, 60)
    assert c.end_offset_for(5) == (4, 60)  # unknown epoch in between: the largest epoch below it
    assert c.end_offset_for(6) == (4, 60)
    assert c.end_offset_for(2) == (2, 30)
    assert c.end_offset_for(8) == UNDEFINED  # above every known epoch
    assert c.end_offset_for(UNDEFINED_EPOCH) == UNDEFINED
    # Below the first epoch: Kafka answers with the requested epoch and the first start offset,
    # so the follower truncates to where this log's history begins.
    assert c.end_offset_for(1) == (1, 10)


def test_truncate_from_end_and_start(tmp_path):
    c, _ = cache(tmp_path)
    for epoch, offset in [(1, 0), (2, 10), (3, 20), (4, 30)]:
        c.assign(epoch, offset)
    c.truncate_from_end(20)
    assert c.entries == (EpochEntry(1, 0), EpochEntry(2, 10))
    c.truncate_from_start(15)
    assert c.entries == (EpochEntry(2, 15),)
    c.truncate_from_start(15)
    assert c.entries == (EpochEntry(2, 15),)
    c.truncate_from_start(3)  # before the first entry: nothing to do
    assert c.entries == (EpochEntry(2, 15),)


def test_checkpoint_is_kafkas_text_form_and_reloads(tmp_path):
    c, _ = cache(tmp_path)
    c.assign(0, 0)
    c.assign(3, 42)
    assert c.dirty and not (tmp_path / "leader-epoch-checkpoint").exists()  # written when the log flushes
    c.flush()
    assert not c.dirty
    assert (tmp_path / "leader-epoch-checkpoint").read_text() == "0\n2\n0 0\n3 42\n"
    again = LeaderEpochCache.load(tmp_path / "leader-epoch-checkpoint", lambda: 50)
    assert again.entries == c.entries
    assert again.end_offset_for(0) == (0, 42)


def test_out_of_order_checkpoint_is_refused(tmp_path):
    (tmp_path / "leader-epoch-checkpoint").write_text("0\n2\n3 10\n2 20\n")
    with pytest.raises(CheckpointError):
        LeaderEpochCache.load(tmp_path / "leader-epoch-checkpoint", lambda: 0)


@settings(max_examples=60)
@given(st.lists(st.tuples(st.integers(0, 20), st.integers(0, 200)), max_size=30), st.integers(0, 25))
def test_entries_stay_strictly_increasing_and_answers_are_bounded(assignments, requested):
    c = LeaderEpochCache(None, lambda: 300)
    for epoch, offset in assignments:
        c.assign(epoch, offset)
        entries = c.entries
        assert all(a.epoch < b.epoch and a.start_offset < b.start_offset for a, b in pairwise(entries))
        assert entries[-1] == EpochEntry(epoch, offset) or (
            entries[-1].epoch == epoch and entries[-1].start_offset <= offset
        )
    epoch, end = c.end_offset_for(requested)
    if (epoch, end) != UNDEFINED:
        assert epoch <= requested or epoch == requested
        assert end <= 300


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("0\n1\n2147483648 0\n", "line 3: epoch 2147483648 is out of range (at most 2147483647)"),
        ("0\n1\n-1 0\n", "line 3: epoch -1 is negative"),
        ("0\n1\n3 -5\n", "line 3: start offset -5 is negative"),
        ("0\n2\n3 10\n2 20\n", "line 4: epoch 2 at 20 does not follow epoch 3 at 10"),
    ],
)
def test_each_entry_is_checked_and_the_error_names_the_file_and_line(tmp_path, text, says):
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_text(text)
    with pytest.raises(CheckpointError) as raised:
        LeaderEpochCache.load(path, lambda: 0)
    assert str(raised.value) == f"{path}: {says}"
