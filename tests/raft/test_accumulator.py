"""BatchAccumulator: proposals gathered for the linger time, promised offsets kept, atomic proposals."""

from __future__ import annotations

import pytest

from kraftpy.raft.accumulator import BatchAccumulator
from kraftpy.raft.batch import encoded_size_bound

INF = float("inf")


def test_without_linger_every_proposal_is_due_at_once() -> None:
    acc = BatchAccumulator(epoch=3, next_offset=10, linger=0.0, max_batch_bytes=1 << 20)
    assert acc.next_deadline() == INF and not acc.due(5.0)
    assert acc.append([b"a", b"b"], 5.0) == 10
    assert acc.due(5.0)
    assert acc.drain(5.0) == [(10, [b"a", b"b"])]
    assert acc.next_offset == 12 and acc.pending_records == 0


def test_proposals_within_the_linger_time_share_a_batch() -> None:
    acc = BatchAccumulator(epoch=1, next_offset=0, linger=0.05, max_batch_bytes=1 << 20)
    assert acc.append([b"a"], 1.0) == 0
    assert acc.append([b"b", b"c"], 1.02) == 1
    assert acc.next_deadline() == pytest.approx(1.05)
    assert acc.drain(1.04) == []
    assert acc.drain(1.05) == [(0, [b"a", b"b", b"c"])]
    assert acc.append([b"d"], 2.0) == 3  # the next batch starts its own linger time
    assert acc.next_deadline() == pytest.approx(2.05)


def test_a_full_batch_is_closed_and_a_proposal_never_split() -> None:
    one = [b"x" * 100]
    limit = encoded_size_bound(one * 3)
    acc = BatchAccumulator(epoch=1, next_offset=5, linger=10.0, max_batch_bytes=limit)
    for _ in range(3):
        acc.append(one, 0.0)
    assert not acc.due(0.0)
    assert acc.append(one + one, 0.0) == 8  # does not fit: the open batch closes, this one starts anew
    assert acc.due(0.0)
    assert acc.drain(0.0) == [(5, one * 3)]
    assert acc.drain(10.0) == [(8, one * 2)]
    with pytest.raises(ValueError):
        acc.append(one * 4, 11.0)  # alone larger than a batch
    with pytest.raises(ValueError):
        acc.append([], 11.0)


def test_a_batch_gathers_proposals_up_to_the_record_limit_and_one_proposal_stays_whole() -> None:
    acc = BatchAccumulator(epoch=1, next_offset=0, linger=10.0, max_batch_bytes=1 << 20, max_batch_records=3)
    acc.append([b"a", b"b"], 0.0)
    acc.append([b"c"], 0.0)  # three: still one batch
    assert acc.append([b"d"], 0.0) == 3  # a fourth record: the open batch closes
    assert acc.append([b"e", b"f", b"g", b"h"], 0.0) == 4  # more than the limit alone: its own batch, whole
    acc.append([b"i"], 0.0)
    assert acc.drain(10.0) == [(0, [b"a", b"b", b"c"]), (3, [b"d"]), (4, [b"e", b"f", b"g", b"h"]), (8, [b"i"])]
