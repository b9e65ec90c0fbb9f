"""Control records Raft writes into the log itself.

A new leader appends a leader-change record as the first batch of its epoch (KIP-595): it marks
where the epoch starts, and the high watermark may not move until it is on a majority (Raft
thesis §3.6.2, the no-op entry of a new term). The value is a msgpack map modelled on Kafka's
LeaderChangeMessage: ``{"version": 0, "leader_id": int, "voters": [int], "granting_voters": [int]}``.
A dynamic quorum's kraft.version and voters records (KIP-853) are control records too
(kraftpy.raft.voters); `decode_control_record` reads any of them by its control key.
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs
import msgpack

from kraftpy.protocol.records import ControlRecordType, parse_control_key
from kraftpy.raft.voters import VoterSet, decode_kraft_version_record, decode_voters_record


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


@attrs.frozen
class KRaftVersionMessage:
    kraft_version: int


@attrs.frozen
class VotersMessage:
    voters: VoterSet

    def __repr__(self) -> str:
        return f"VotersMessage(voters={self.voters})"


def decode_control_record(key: bytes | None, value: bytes) -> LeaderChangeMessage | KRaftVersionMessage | VotersMessage:
    """A Raft control record by its key's type; ValueError for another type or a bad value."""
    _version, kind = parse_control_key(key)
    if kind == ControlRecordType.LEADER_CHANGE:
        return decode_leader_change(value)
    if kind == ControlRecordType.KRAFT_VERSION:
        return KRaftVersionMessage(decode_kraft_version_record(value))
    if kind == ControlRecordType.KRAFT_VOTERS:
        return VotersMessage(decode_voters_record(value))
    raise ValueError(f"not a Raft control record: type {kind}")
