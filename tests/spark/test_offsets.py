"""Offset-range planning of the Spark data source against an in-memory lookup. No Spark, no broker."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kraftpy.spark.offsets import (
    DataLossError,
    OffsetRange,
    OffsetRangeError,
    batch_ranges,
    from_json_offsets,
    rate_limit,
    resolve_offsets,
    should_wait_for_more,
    split_ranges,
    stream_ranges,
    subscribed_partitions,
    to_json_offsets,
)
from kraftpy.spark.options import (
    Assign,
    Earliest,
    Latest,
    OptionError,
    SpecificOffsets,
    Subscribe,
    SubscribePattern,
    Timestamp,
    TimestampsByPartition,
)


class FakeLookup:
    """Partitions hold offsets [start, end); record i of a partition has timestamp 1000 + 10 * i."""

    def __init__(self, logs: dict[tuple[str, int], tuple[int, int]]) -> None:
        self.logs = logs

    def topics(self):
        counts: dict[str, int] = {}
        for topic, partition in self.logs:
            counts[topic] = max(counts.get(topic, 0), partition + 1)
        return counts

    def earliest(self, tps):
        return {tp: self.logs[tp][0] for tp in tps}

    def latest(self, tps):
        return {tp: self.logs[tp][1] for tp in tps}

    def for_timestamps(self, stamps):
        out = {}
        for tp, ts in stamps.items():
            start, end = self.logs[tp]
            out[tp] = next((o for o in range(start, end) if 1000 + 10 * o >= ts), -1)
        return out


LOOKUP = FakeLookup({("a", 0): (0, 100), ("a", 1): (20, 50), ("b", 0): (0, 0), ("__consumer_offsets", 0): (0, 3)})
A = [("a", 0), ("a", 1)]


def test_subscribed_partitions():
    topics = LOOKUP.topics()
    assert subscribed_partitions(Subscribe(("a", "missing")), topics) == A
    assert subscribed_partitions(SubscribePattern(".*"), topics) == [("a", 0), ("a", 1), ("b", 0)]
    assert subscribed_partitions(Assign((("a", 1),)), topics) == [("a", 1)]
    with pytest.raises(OffsetRangeError, match="partition 5 of topic 'a' does not exist"):
        subscribed_partitions(Assign((("a", 5),)), topics)
    with pytest.raises(OffsetRangeError, match="topic 'zz' does not exist"):
        subscribed_partitions(Assign((("zz", 0),)), topics)


def test_resolve_offsets_kinds():
    assert resolve_offsets(Earliest(), A, LOOKUP, "starting") == {("a", 0): 0, ("a", 1): 20}
    assert resolve_offsets(Latest(), A, LOOKUP, "ending") == {("a", 0): 100, ("a", 1): 50}
    spec = SpecificOffsets({("a", 0): 7, ("a", 1): -2})
    assert resolve_offsets(spec, A, LOOKUP, "starting") == {("a", 0): 7, ("a", 1): 20}
    spec = SpecificOffsets({("a", 0): -1, ("a", 1): 30})
    assert resolve_offsets(spec, A, LOOKUP, "ending") == {("a", 0): 100, ("a", 1): 30}
    assert resolve_offsets(Timestamp(1255), A, LOOKUP, "starting") == {("a", 0): 26, ("a", 1): 26}
    spec = TimestampsByPartition({("a", 0): 1000, ("a", 1): 1400})
    assert resolve_offsets(spec, A, LOOKUP, "starting") == {("a", 0): 0, ("a", 1): 40}


def test_specific_offsets_must_name_every_partition():
    with pytest.raises(OptionError, match="'startingOffsets' must name every partition.*missing: a-1"):
        resolve_offsets(SpecificOffsets({("a", 0): 1}), A, LOOKUP, "starting")
    with pytest.raises(OptionError, match="'endingOffsetsByTimestamp'.*not read: c-0"):
        resolve_offsets(TimestampsByPartition({("a", 0): 1, ("a", 1): 1, ("c", 0): 1}), A, LOOKUP, "ending")


def test_timestamp_past_the_data():
    with pytest.raises(OffsetRangeError, match="no record at or after the timestamp in a-1"):
        resolve_offsets(Timestamp(1600), A, LOOKUP, "starting")
    assert resolve_offsets(Timestamp(1600), A, LOOKUP, "starting", "latest") == {("a", 0): 60, ("a", 1): 50}
    # An ending timestamp past the data ends at the latest offset.
    assert resolve_offsets(Timestamp(1600), A, LOOKUP, "ending") == {("a", 0): 60, ("a", 1): 50}


def test_batch_ranges_checks():
    earliest, latest = LOOKUP.earliest(A), LOOKUP.latest(A)
    assert batch_ranges({("a", 0): 10, ("a", 1): 20}, {("a", 0): 100, ("a", 1): 20}, earliest, latest, True) == [
        OffsetRange("a", 0, 10, 100)]
    with pytest.raises(OffsetRangeError, match="starting offset 60 of a-0 is after its ending offset 50"):
        batch_ranges({("a", 0): 60, ("a", 1): 20}, {("a", 0): 50, ("a", 1): 50}, earliest, latest, True)
    with pytest.raises(OffsetRangeError, match="endingOffsets of a-1 is 51, but the partition ends at 50"):
        batch_ranges({("a", 0): 0, ("a", 1): 20}, {("a", 0): 50, ("a", 1): 51}, earliest, latest, True)
    with pytest.raises(DataLossError, match="starting offset 5 of a-1 is before its earliest offset 20.*failOnDataLoss"):
        batch_ranges({("a", 0): 0, ("a", 1): 5}, {("a", 0): 50, ("a", 1): 50}, earliest, latest, True)
    assert batch_ranges({("a", 0): 0, ("a", 1): 5}, {("a", 0): 0, ("a", 1): 50}, earliest, latest, False) == [
        OffsetRange("a", 1, 20, 50)]


def test_split_ranges():
    ranges = [OffsetRange("a", 0, 0, 10_000), OffsetRange("a", 1, 0, 10), OffsetRange("b", 0, 5, 5)]
    assert split_ranges(ranges) == ranges[:2]
    assert split_ranges(ranges, min_partitions=2) == ranges[:2]
    split = split_ranges(ranges, min_partitions=5)
    # The small range stays whole; the large one takes the other four tasks.
    assert split == [OffsetRange("a", 0, 0, 2500), OffsetRange("a", 0, 2500, 5000), OffsetRange("a", 0, 5000, 7500),
                     OffsetRange("a", 0, 7500, 10_000), OffsetRange("a", 1, 0, 10)]
    # Three equal ranges into seven tasks: 3 + 2 + 2 (Spark's rounding would plan 6).
    even = [OffsetRange("t", p, 0, 100) for p in range(3)]
    assert [len([r for r in split_ranges(even, 7) if r.partition == p]) for p in range(3)] == [3, 2, 2]
    capped = split_ranges([OffsetRange("a", 0, 0, 10)], max_records_per_partition=3)
    assert [(r.start, r.end) for r in capped] == [(0, 2), (2, 4), (4, 7), (7, 10)]


@given(st.lists(st.integers(0, 10_000), min_size=1, max_size=6), st.integers(1, 40), st.none() | st.integers(1, 5000))
def test_split_covers_every_offset_once(sizes, min_partitions, max_records):
    ranges = [OffsetRange("t", i, 100, 100 + size) for i, size in enumerate(sizes)]
    split = split_ranges(ranges, min_partitions, max_records)
    for i, size in enumerate(sizes):
        pieces = [r for r in split if r.partition == i]
        covered = [o for r in pieces for o in range(r.start, r.end)]
        assert covered == list(range(100, 100 + size))
        assert all(r.size > 0 for r in pieces)
        if max_records is not None:
            assert all(r.size <= max_records for r in pieces)
    if max_records is None:
        ranges_with_data = sum(1 for s in sizes if s)
        wanted = ranges_with_data if min_partitions <= ranges_with_data else min(min_partitions, sum(sizes))
        assert len(split) == wanted


def test_json_offsets_round_trip():
    offsets = {("b", 0): 3, ("a", 10): 7, ("a", 2): 0}
    as_json = to_json_offsets(offsets)
    assert as_json == {"a": {"2": 0, "10": 7}, "b": {"0": 3}}
    assert from_json_offsets(as_json) == offsets


def test_rate_limit_is_proportional_and_exact():
    start = {("a", 0): 0, ("a", 1): 0, ("a", 2): 10}
    latest = {("a", 0): 900, ("a", 1): 100, ("a", 2): 10}
    assert rate_limit(start, latest, 100) == {("a", 0): 90, ("a", 1): 10, ("a", 2): 10}
    assert rate_limit(start, latest, 5000) == latest
    # Small partitions are not starved, and the total stays within the limit.
    small = rate_limit({("a", 0): 0, ("a", 1): 0}, {("a", 0): 1000, ("a", 1): 1}, 10)
    assert small == {("a", 0): 9, ("a", 1): 1}


@given(st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 5000)), min_size=1, max_size=8), st.integers(1, 3000))
def test_rate_limit_never_exceeds_the_limit(parts, limit):
    start = {("t", i): s for i, (s, _) in enumerate(parts)}
    latest = {("t", i): s + n for i, (s, n) in enumerate(parts)}
    end = rate_limit(start, latest, limit)
    total = sum(end[tp] - start[tp] for tp in start)
    assert total == min(limit, sum(n for _, n in parts))
    assert all(start[tp] <= end[tp] <= latest[tp] for tp in start)


def test_min_offsets_per_trigger():
    assert not should_wait_for_more(50, None, 0, 10, 1000)
    assert not should_wait_for_more(50, 50, 0, 10, 1000)
    assert should_wait_for_more(49, 50, 0, 10, 1000)
    assert not should_wait_for_more(49, 50, 0, 1000, 1000)


def test_stream_ranges_new_deleted_and_truncated_partitions():
    start = {("a", 0): 5, ("a", 1): 7}
    end = {("a", 0): 9, ("a", 1): 7, ("a", 2): 4}
    assert stream_ranges(start, end, {("a", 2): 0}, True) == [OffsetRange("a", 0, 5, 9), OffsetRange("a", 2, 0, 4)]
    with pytest.raises(DataLossError, match="partition a-1 is gone"):
        stream_ranges(start, {("a", 0): 9}, {}, True)
    assert stream_ranges(start, {("a", 0): 9}, {}, False) == [OffsetRange("a", 0, 5, 9)]
    with pytest.raises(DataLossError, match="offset of a-0 went back from 5 to 2"):
        stream_ranges(start, {("a", 0): 2, ("a", 1): 7}, {}, True)
    with pytest.raises(DataLossError, match="new partition a-2 starts at offset 3, not 0"):
        stream_ranges(start, end, {("a", 2): 3}, True)
    assert stream_ranges(start, end, {("a", 2): 3}, False) == [OffsetRange("a", 0, 5, 9), OffsetRange("a", 2, 3, 4)]


def test_unknown_client_setting_is_an_option_error():
    from kraftpy.spark.offsets import ClientOffsetLookup

    with pytest.raises(OptionError, match="kafka.* options are not accepted.*no.such.setting"):
        ClientOffsetLookup({"bootstrap.servers": "127.0.0.1:1", "no.such.setting": "1"})
