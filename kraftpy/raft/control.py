"""Control records Raft writes into the log itself.

A new leader appends a leader-change record as the first batch of its epoch (KIP-595): it marks
where the epoch starts, and the high watermark may not move until it is on a majority (Raft
thesis §3.6.2, the no-op entry of a new term). The value is a msgpack map modelled on Kafka's
LeaderChangeMessage: ``{"version": 0, "leader_id": int, "voters": [int], "granting_voters": [int]}``.
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs
import msgpack


@attrs.frozen
class LeaderChangeMessage:
    leader_id: int
    voters: tuple[int, ...] = attrs.field(converter=tuple)
    granting_voters: tuple[int, ...] = attrs.field(converter=tuple)


def encode_leader_change(leader_id: int, voters: Iterable[int], granting_voters: Iterable[int]) -> bytes:
    return msgpack.packb(
        {
            "version": 0,
            "leader_id": leader_id,
            "voters": sorted(voters),
            "granting_voters": sorted(granting_voters),
        }
    )


def decode_leader_change(value: bytes) -> LeaderChangeMessage:
    data = msgpack.unpackb(value)
    return LeaderChangeMessage(data["leader_id"], data["voters"], data["granting_voters"])
