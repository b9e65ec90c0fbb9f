"""Replica placement: round robin from a random start with shifted followers, rack alternation."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kraftpy.metadata.placement import (
    PlacementBroker,
    PlacementError,
    assign_replicas,
    rack_alternated_list,
)

SIX = [PlacementBroker(i) for i in range(6)]


def test_leaders_go_round_robin_from_the_start_and_followers_follow_at_increasing_offsets():
    # The internals document's example: 6 brokers, start at broker 4.
    assignment = assign_replicas(SIX, 10, 3, random.Random(0), fixed_start_index=4)
    leaders = [replicas[0] for replicas in assignment]
    assert leaders == [4, 5, 0, 1, 2, 3, 4, 5, 0, 1]
    # Kafka's fixed start index is also the follower shift: partition 0's followers sit 1 + (4 + j) mod 5
    # steps after its leader, i.e. on brokers 3 and 5.
    assert assignment[0] == (4, 3, 5)


def test_follower_shift_grows_each_round_of_brokers():
    assignment = assign_replicas(SIX, 12, 2, random.Random(0), fixed_start_index=0)
    first_round = {r[0]: r[1] for r in assignment[:6]}
    second_round = {r[0]: r[1] for r in assignment[6:]}
    assert all(first_round[b] != second_round[b] for b in first_round)


def test_random_start_comes_from_the_injected_random():
    a = assign_replicas(SIX, 6, 2, random.Random(1))
    b = assign_replicas(SIX, 6, 2, random.Random(1))
    assert a == b
    assert {assign_replicas(SIX, 1, 1, random.Random(seed))[0][0] for seed in range(40)} == set(range(6))


def test_rack_alternated_list_matches_the_internals_document():
    brokers = [PlacementBroker(i, "r1" if i < 3 else "r2") for i in range(6)]
    assert rack_alternated_list(brokers) == [0, 3, 1, 4, 2, 5]


def test_rack_aware_placement_puts_the_first_follower_on_another_rack():
    brokers = [PlacementBroker(i, "r1" if i < 3 else "r2") for i in range(6)]
    # Leader of partition 0 on broker 4 (position 3 of the alternated list): first follower on broker 2.
    assignment = assign_replicas(brokers, 6, 2, random.Random(0), fixed_start_index=3)
    assert assignment[0][0] == 4
    for replicas in assignment:
        assert len({b < 3 for b in replicas}) == 2


@given(
    n=st.integers(1, 9), rf=st.integers(1, 9), partitions=st.integers(1, 30), seed=st.integers(0, 2**32),
    racks=st.integers(0, 3),
)
def test_placement_spreads_replicas_over_distinct_brokers_and_racks(n, rf, partitions, seed, racks):
    if rf > n:
        with pytest.raises(PlacementError):
            assign_replicas([PlacementBroker(i) for i in range(n)], partitions, rf, random.Random(seed))
        return
    brokers = [PlacementBroker(i, f"r{i % racks}" if racks else None) for i in range(n)]
    assignment = assign_replicas(brokers, partitions, rf, random.Random(seed))
    assert len(assignment) == partitions
    for replicas in assignment:
        assert len(set(replicas)) == rf and set(replicas) <= set(range(n))
        if racks:
            assert len({f"r{b % racks}" for b in replicas}) == min(rf, len({i % racks for i in range(n)}))
    leaders = Counter(r[0] for r in assignment)
    assert max(leaders.values()) - min(leaders.get(b, 0) for b in range(n)) <= 1
