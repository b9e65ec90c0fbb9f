"""One segment: append with indexes, offset translation, reads, timestamps, truncation, recovery."""

from __future__ import annotations

import os

from kraftpy.protocol.batch_header import iter_batches, read_header
from kraftpy.storage.segment import BatchInfo, LogSegment, parse_segment_file_name, segment_file_name

from ._support import batch


def append(segment: LogSegment, data: bytes, now: int = 0) -> None:
    infos, position = [], 0
    for position, header in iter_batches(data):
        infos.append(BatchInfo(position, header.size, header.base_offset, header.last_offset,
                               header.max_timestamp, header.partition_leader_epoch, header.record_count))
    segment.append([data], infos, now)


def filled(tmp_path, batches=20, interval=200):
    segment = LogSegment.create(tmp_path, 50, interval, 0)
    offset = 50
    for i in range(batches):
        data = batch(3, base_offset=offset, timestamp=1000 + 10 * i, tag=i)
        append(segment, data)
        offset += 3
    return segment


def test_file_names_are_twenty_digits():
    assert segment_file_name(42) == "00000000000000000042.log"
    assert segment_file_name(42, ".index") == "00000000000000000042.index"
    assert parse_segment_file_name("00000000000000000042.log") == 42
    assert parse_segment_file_name("42.log") is None
    assert parse_segment_file_name("00000000000000000042.index") is None


def test_append_indexes_every_interval_and_translates_offsets(tmp_path):
    segment = filled(tmp_path)
    assert segment.next_offset == 110
    assert len(segment.index) > 3
    for offset in range(50, 110):
        position, header = segment.translate_offset(offset)
        assert header.base_offset <= offset <= header.last_offset
        assert read_header(os.pread(segment.fd, 61, position)).base_offset == header.base_offset
    assert segment.translate_offset(110) is None
    segment.close()


def test_read_respects_max_bytes_min_one_batch_and_max_offset(tmp_path):
    segment = filled(tmp_path)
    first_size = segment.translate_offset(50)[1].size
    region = segment.read(50, 1)
    assert region.length == first_size and region.first_offset == 50
    region = segment.read(50, 1, min_one_batch=False)
    assert region.length == 1
    region = segment.read(55, 10 * first_size, whole_batches=True)
    headers = [h for _, h in iter_batches(region.read_bytes())]
    assert headers[0].base_offset == 53 and sum(h.size for h in headers) == region.length
    following = segment.translate_offset(headers[-1].next_offset)[1]
    assert region.length <= 10 * first_size < region.length + following.size
    region = segment.read(50, 10**6, max_offset=62)
    assert [h.last_offset for _, h in iter_batches(region.read_bytes())] == [52, 55, 58, 61]
    region = segment.read(50, 10**6, max_offset=50)
    assert region.length == 0
    segment.close()


def test_find_by_timestamp(tmp_path):
    segment = filled(tmp_path)
    assert segment.find_by_timestamp(0)[1].base_offset == 50
    # batch i holds timestamps 1000+10i .. 1000+10i+2
    assert segment.find_by_timestamp(1072)[1].base_offset == 50 + 3 * 7
    assert segment.find_by_timestamp(1073)[1].base_offset == 50 + 3 * 8
    assert segment.find_by_timestamp(10**6) is None
    segment.close()


def test_truncate_to_drops_the_batch_holding_the_offset(tmp_path):
    segment = filled(tmp_path)
    removed = segment.truncate_to(64)  # batch 62..64 goes
    assert removed > 0
    assert segment.next_offset == 62
    assert segment.translate_offset(62) is None
    assert segment.max_timestamp == 1000 + 10 * 3 + 2
    assert os.fstat(segment.fd).st_size == segment.size
    segment.close()


def test_reopen_with_trusted_or_rebuilt_indexes_agree(tmp_path):
    segment = filled(tmp_path)
    segment.save_indexes()
    expected = [segment.translate_offset(o)[0] for o in range(50, 110)]
    state = (segment.next_offset, segment.max_timestamp, segment.offset_of_max_timestamp, len(segment.index))
    segment.close()
    for trust in (True, False):
        again = LogSegment.open(tmp_path, 50, 200, 0)
        again.load(trust_indexes=trust)
        assert [again.translate_offset(o)[0] for o in range(50, 110)] == expected
        assert (again.next_offset, again.max_timestamp, again.offset_of_max_timestamp, len(again.index)) == state
        again.close()


def test_recover_cuts_at_a_bad_crc(tmp_path):
    segment = filled(tmp_path, batches=5)
    position, header = segment.translate_offset(59)
    segment.close()
    with open(tmp_path / segment_file_name(50), "r+b") as f:
        f.seek(position + 40)
        byte = f.read(1)
        f.seek(position + 40)
        f.write(bytes([byte[0] ^ 0xFF]))
    again = LogSegment.open(tmp_path, 50, 200, 0)
    seen = []
    cut = again.recover(lambda h: seen.append(h.base_offset))
    assert cut == 2 * header.size
    assert again.size == position and again.next_offset == 59
    assert seen == [50, 53, 56]
    again.close()


def counting_preads(monkeypatch) -> list[int]:
    """Every ``os.pread`` from now on, by size."""
    sizes, real = [], os.pread
    monkeypatch.setattr(os, "pread", lambda fd, size, position: sizes.append(size) or real(fd, size, position))
    return sizes


def test_a_read_at_the_end_reads_only_the_new_batches_headers(tmp_path, monkeypatch):
    # One index entry per 4 KiB: some 60 small batches between two entries, all walked before.
    segment = LogSegment.create(tmp_path, 0, 4096, 0)
    for offset in range(40):
        append(segment, batch(1, base_offset=offset, tag=offset))
    assert segment.translate_offset(39)[1].base_offset == 39
    preads = counting_preads(monkeypatch)
    for offset in range(40, 60):
        # A follower, or a consumer at the end: the next read starts after the batch the last one ended on.
        append(segment, batch(1, base_offset=offset, tag=offset))
        position, header = segment.translate_offset(offset)
        assert header.base_offset == offset and position == segment.size - header.size
        assert segment.translate_offset(offset + 1) is None
    assert len(preads) == 20  # one header a new batch (walking from the index entry: about 50 a read)
    # An offset before the batch last walked to is found from the index, as before.
    assert segment.translate_offset(7)[1].base_offset == 7
    assert segment.translate_offset(45)[1].base_offset == 45
    segment.close()


def test_a_cut_forgets_the_batch_last_walked_to(tmp_path):
    segment = filled(tmp_path)
    assert segment.translate_offset(109)[1].base_offset == 107
    segment.truncate_to(104)  # 104..106 and 107..109 go
    assert segment.translate_offset(104) is None
    # Batches of other sizes at the same offsets: positions and headers come from the new file.
    append(segment, batch(1, base_offset=104, value_size=200, tag=1) + batch(5, base_offset=105, tag=2))
    position, header = segment.translate_offset(107)
    assert (header.base_offset, header.record_count) == (105, 5)
    assert read_header(os.pread(segment.fd, 61, position)) == header
    segment.close()
