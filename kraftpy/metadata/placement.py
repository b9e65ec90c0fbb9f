"""Where the replicas of new partitions go: Kafka's round-robin placement with shifted followers.

Without racks (Kafka's ``assignReplicasToBrokersRackUnaware``): brokers in id order; the leader of
partition ``p`` is broker ``(start + p) mod n`` for a random ``start``, and its followers sit at
increasing distances from it, the distance shifted by a second random value that grows by one every
``n`` partitions, so that followers of consecutive rounds do not pile on the same brokers.

With racks (``assignReplicasToBrokersRackAware``): the same walk over a rack-alternating broker list
(one broker of each rack in turn, racks in name order, brokers by id within a rack), skipping a
follower candidate whose rack already holds a replica of the partition while some rack holds none, or
that already holds one while some broker holds none. Brokers without a rack share one unnamed rack.

Both random values come from the injected ``random.Random``; ``fixed_start_index`` (used when adding
partitions to a topic) replaces both, as in Kafka.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import attrs


@attrs.frozen
class PlacementBroker:
    id: int
    rack: str | None = None


class PlacementError(ValueError):
    """The placement asked for cannot be made (replication factor above the broker count)."""


def _replica_index(first: int, shift: int, k: int, n: int) -> int:
    return (first + 1 + (shift + k) % (n - 1)) % n


def rack_alternated_list(brokers: Sequence[PlacementBroker]) -> list[int]:
    by_rack: dict[str | None, list[int]] = {}
    for broker in sorted(brokers, key=lambda b: b.id):
        by_rack.setdefault(broker.rack, []).append(broker.id)
    racks = sorted(by_rack, key=lambda r: (r is None, r or ""))
    iterators = {rack: iter(ids) for rack, ids in by_rack.items()}
    result: list[int] = []
    i = 0
    while len(result) < len(brokers):
        nxt = next(iterators[racks[i]], None)
        if nxt is not None:
            result.append(nxt)
        i = (i + 1) % len(racks)
    return result


def assign_replicas(
    brokers: Sequence[PlacementBroker],
    num_partitions: int,
    replication_factor: int,
    rng: random.Random,
    *,
    fixed_start_index: int = -1,
    start_partition_id: int = 0,
) -> list[tuple[int, ...]]:
    """Replicas (leader first) for partitions ``start_partition_id .. + num_partitions - 1``."""
    n = len(brokers)
    if replication_factor <= 0:
        raise PlacementError("Replication factor must be larger than 0.")
    if replication_factor > n:
        raise PlacementError(
            f"The target replication factor of {replication_factor} cannot be reached because only "
            f"{n} broker(s) are registered."
        )
    if num_partitions <= 0:
        return []
    rack_aware = any(b.rack is not None for b in brokers)
    ordered = rack_alternated_list(brokers) if rack_aware else sorted(b.id for b in brokers)
    rack_of = {b.id: b.rack for b in brokers}
    num_racks = len(set(rack_of.values()))
    start = fixed_start_index if fixed_start_index >= 0 else rng.randrange(n)
    shift = fixed_start_index if fixed_start_index >= 0 else rng.randrange(n)
    result: list[tuple[int, ...]] = []
    partition = max(0, start_partition_id)
    for _ in range(num_partitions):
        if partition > 0 and partition % n == 0:
            shift += 1
        first = (partition + start) % n
        replicas = [ordered[first]]
        if rack_aware:
            racks_used = {rack_of[ordered[first]]}
            k = 0
            for _ in range(replication_factor - 1):
                while True:
                    candidate = ordered[_replica_index(first, shift * num_racks, k, n)]
                    k += 1
                    rack = rack_of[candidate]
                    if (rack not in racks_used or len(racks_used) == num_racks) and (
                        candidate not in replicas or len(replicas) == n
                    ):
                        replicas.append(candidate)
                        racks_used.add(rack)
                        break
        else:
            for j in range(replication_factor - 1):
                replicas.append(ordered[_replica_index(first, shift, j, n)])
        result.append(tuple(replicas))
        partition += 1
    return result
