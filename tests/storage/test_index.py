"""Sparse offset and time indexes: lookups, truncation, the file format and its checks."""

from __future__ import annotations

import pytest

from kraftpy.storage.index import OFFSET_ENTRY, TIME_ENTRY, CorruptIndexError, OffsetIndex, TimeIndex


def test_offset_index_lookup_is_floor(tmp_path):
    index = OffsetIndex(tmp_path / "00000000000000000100.index", 100)
    for offset, position in [(103, 400), (109, 900), (120, 2000)]:
        index.append(offset, position)
    assert index.lookup(99) == (-1, 100, 0)
    assert index.lookup(102) == (-1, 100, 0)
    assert index.lookup(103) == (0, 103, 400)
    assert index.lookup(115) == (1, 109, 900)
    assert index.lookup(10**9) == (2, 120, 2000)
    with pytest.raises(ValueError):
        index.append(120, 3000)


def test_offset_index_file_is_relative_offset_and_position(tmp_path):
    index = OffsetIndex(tmp_path / "x.index", 100)
    index.append(103, 400)
    index.append(109, 900)
    index.save()
    assert index.path.read_bytes() == OFFSET_ENTRY.pack(3, 400) + OFFSET_ENTRY.pack(9, 900)
    index.truncate_to_offset(109)
    index.save()
    assert index.path.read_bytes() == OFFSET_ENTRY.pack(3, 400)
    again = OffsetIndex(index.path, 100)
    again.load(log_size=1000)
    assert again.lookup(200) == (0, 103, 400)


@pytest.mark.parametrize(
    "content",
    [
        OFFSET_ENTRY.pack(3, 400)[:5],  # torn entry
        OFFSET_ENTRY.pack(9, 900) + OFFSET_ENTRY.pack(3, 400),  # out of order
        OFFSET_ENTRY.pack(3, 5000),  # past the end of the log
        OFFSET_ENTRY.pack(-1, 0),
    ],
)
def test_offset_index_load_refuses_bad_files(tmp_path, content):
    path = tmp_path / "x.index"
    path.write_bytes(content)
    index = OffsetIndex(path, 100)
    with pytest.raises(CorruptIndexError):
        index.load(log_size=1000)
    assert len(index) == 0


def test_time_index_keeps_only_growing_timestamps(tmp_path):
    index = TimeIndex(tmp_path / "x.timeindex", 0)
    index.maybe_append(1000, 3)
    index.maybe_append(1000, 5)  # not larger: skipped
    index.maybe_append(1500, 9)
    assert len(index) == 2
    assert index.lookup(999) is None
    assert index.lookup(1000) == (1000, 3)
    assert index.lookup(1499) == (1000, 3)
    assert index.lookup(2000) == (1500, 9)
    index.save()
    assert index.path.read_bytes() == TIME_ENTRY.pack(1000, 3) + TIME_ENTRY.pack(1500, 9)
    index.truncate_to_offset(9)
    assert index.last_entry == (1000, 3)


def test_an_index_known_absent_stays_absent_while_it_has_no_entries(tmp_path):
    """A segment's index files are deleted when it is created; with no entry (a segment of an idle log,
    or one smaller than index.interval.bytes) a save does not create them, as a missing file is read as
    an empty index. The first entry creates the file; one not found when loading counts as absent too."""
    index = OffsetIndex(tmp_path / "00000000000000000000.index", 0)
    index.path.write_bytes(OFFSET_ENTRY.pack(3, 400))
    index.delete_file()
    index.save(fsync=True)
    assert not index.path.exists()
    index.append(3, 400)
    index.save()
    assert index.path.read_bytes() == OFFSET_ENTRY.pack(3, 400)
    index.truncate_to_offset(0)
    index.save()
    assert index.path.read_bytes() == b""  # a file that exists is cut, not removed
    again = TimeIndex(tmp_path / "00000000000000000000.timeindex", 0)
    with pytest.raises(FileNotFoundError):
        again.load(2**31)
    again.save()
    assert not again.path.exists()
    unknown = TimeIndex(tmp_path / "00000000000000000100.timeindex", 100)  # never looked at: written
    unknown.save()
    assert unknown.path.read_bytes() == b""
