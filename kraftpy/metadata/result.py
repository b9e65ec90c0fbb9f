"""``ControllerResult``: what every controller write returns — records to append, and the response."""

from __future__ import annotations

from typing import Generic, TypeVar

import attrs

from kraftpy.metadata.records import MetadataRecord

R = TypeVar("R")


@attrs.frozen
class ControllerResult(Generic[R]):
    """``records`` are appended to the metadata log in order; ``response`` is sent once they are
    committed. Nothing changes until the records are replayed.

    An ``atomic`` result is one batch: all of it commits or none. A result that is not (``atomic=False``,
    Kafka's ``ControllerResult.of`` beside ``atomicOf``, KIP-868) may be written as several batches of
    at most `NON_ATOMIC_BATCH_RECORDS` records, so that fencing a broker of 30,000 partitions is not one
    batch every node must replay at a stretch; if the leadership is lost between them, a prefix may
    commit. Only what is correct, and finished later by the controller, after any prefix is marked so:
    partition changes that move leaders and ISRs, with a broker's state change last or repeated."""

    records: tuple[MetadataRecord, ...] = attrs.field(converter=tuple)
    response: R
    atomic: bool = attrs.field(default=True, kw_only=True)


#: Records per batch of a result that is not atomic (Kafka writes up to 10,000 per batch; a Python
#: replica replays 2,000 partition changes in about 60 ms).
NON_ATOMIC_BATCH_RECORDS = 2000
