"""What the fuzzer sends: one `Frame` per input, the pools of names it draws from, and lying values.

A frame is the exact bytes for one fresh connection (size prefix included), plus what the campaign
needs to judge the outcome: the port, the api, the mutation class and a line saying what was done,
whether to half-close the connection after sending, and tags that known bugs match on.

Lying values make the project's own generated encoders write malformed lengths: a `LyingBytes`
is written with its real bytes but reports another ``len()``, so the length prefix the encoder
writes says what we want (``-1`` writes a null where none is allowed; a huge count says the array
runs past the frame). `LyingStr` and `LyingList` do the same for strings and arrays.
"""

from __future__ import annotations

import random
from typing import Any

import attrs

KAFKA = "kafka"
CONTROL = "control"
#: Kafka-protocol frames sent to the controller listener (kraftpy.metadata.controller_kafka).
CONTROLLER_KAFKA = "controller-kafka"
KAFKA_PORTS = (KAFKA, CONTROLLER_KAFKA)


@attrs.define
class Frame:
    index: int
    port: str
    #: The api as the frame claims it ("Produce v9", "raft:VoteRequest", "BrokerHeartbeat").
    api: str
    #: The mutation class ("valid", "field:int-boundary", "batch:codec", "ctl:huge-epoch", ...).
    klass: str
    detail: str
    data: bytes
    #: Send EOF after the frame (the Kafka server answers, then closes; on the control port only for
    #: frames cut short on purpose, since its server drops pending answers at EOF).
    half_close: bool = True
    #: Notable properties known bugs match on (e.g. "raft-epoch-out-of-range").
    tags: frozenset[str] = frozenset()


@attrs.define
class Pools:
    """Names and ids the generators draw from; refreshed from the target between chunks.

    Protected topics receive produce traffic whose acknowledgements are checked at the end, so no
    generator deletes, truncates or reconfigures them; scratch topics take the destructive requests.
    """

    protected: dict[str, int] = attrs.Factory(dict)  # name -> partition count
    scratch: dict[str, int] = attrs.Factory(dict)
    topic_ids: dict[str, bytes] = attrs.Factory(dict)  # name -> 16-byte id
    groups: tuple[str, ...] = ("fuzz-group-a", "fuzz-group-b")
    broker_id: int = 1
    voters: tuple[int, ...] = (1,)
    cluster_id: str = ""
    #: Raft state of the target as last read: epoch, leader, log end offset, high watermark.
    raft_epoch: int = 0
    raft_leader: int = 1
    raft_end_offset: int = 0
    raft_high_watermark: int = 0
    #: Kafka api key -> (min, max) version the target serves (from ApiVersions).
    served: dict[int, tuple[int, int]] = attrs.Factory(dict)
    #: The same for the target's controller listener (its own ApiVersions).
    controller_served: dict[int, tuple[int, int]] = attrs.Factory(dict)

    def protected_ids(self) -> set[bytes]:
        return {self.topic_ids[n] for n in self.protected if n in self.topic_ids}

    def scratch_ids(self) -> list[bytes]:
        return [self.topic_ids[n] for n in self.scratch if n in self.topic_ids]


class LyingBytes(bytes):
    """Bytes whose ``len()`` is ``claimed``: the encoder writes that length, then the real bytes."""

    def __new__(cls, data: bytes, claimed: int) -> LyingBytes:
        obj = super().__new__(cls, data)
        obj.claimed = claimed
        return obj

    def __len__(self) -> int:
        return self.claimed


class LyingStr(str):
    """A string whose UTF-8 encoding is ``raw`` with a length prefix of ``claimed``."""

    def __new__(cls, raw: bytes, claimed: int | None = None) -> LyingStr:
        obj = super().__new__(cls, raw.decode("utf-8", "replace"))
        obj.raw = raw
        obj.claimed = len(raw) if claimed is None else claimed
        return obj

    def encode(self, *args: Any, **kwargs: Any) -> bytes:
        return LyingBytes(self.raw, self.claimed)


class LyingList(list):
    """A list whose ``len()`` (the array count the encoder writes) is ``claimed``."""

    def __init__(self, items: list, claimed: int) -> None:
        super().__init__(items)
        self.claimed = claimed

    def __len__(self) -> int:
        return self.claimed


def frame_rng(seed: int, index: int) -> random.Random:
    """The random source of frame ``index``: every frame can be made again alone from (seed, index)."""
    return random.Random(f"kraftpy-fuzz:{seed}:{index}")


def random_name(rng: random.Random, prefix: str = "fz") -> str:
    return f"{prefix}-{rng.getrandbits(40):010x}"


#: Topic names the fuzzer makes up come from a pool this large: a Metadata request may create the
#: topic it names, and a pool keeps what a long campaign creates (and the memory it costs) bounded.
TOPIC_NAME_POOL = 64


def topic_name(rng: random.Random, prefix: str) -> str:
    return f"{prefix}-{rng.randrange(TOPIC_NAME_POOL)}"
