"""Long requests take turns with everything else on the event loop.

A request may name a million topics or partitions. Answered in one go it would hold the event loop —
every other connection, the heartbeats to the controller, replication — for seconds. Handlers walk
what a request names with a `Pacer` and let other tasks run whenever it says so: every
`WORK_PER_TURN` units of work (a topic, a partition, a config entry), about a millisecond.

    pace = Pacer()
    for topic in request.topics:
        ...
        if pace.due(len(topic.partitions)):
            await trio.lowlevel.checkpoint()

The state a handler reads may change between two turns (a leader moves); each item is answered from
the state it was looked up in, as Kafka's handler threads do.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import TypeVar

#: Units of work (items looked up or answered) between two turns of the other tasks.
WORK_PER_TURN = 1000

K = TypeVar("K", bound=Hashable)


class Pacer:
    """Counts work done and says when it is time to let other tasks run."""

    __slots__ = ("_done", "every")

    def __init__(self, every: int = WORK_PER_TURN) -> None:
        self.every = every
        self._done = 0

    def due(self, work: int = 1) -> bool:
        """Count ``work`` more units; True (and the count starts again) once a turn's worth is done."""
        self._done += work
        if self._done < self.every:
            return False
        self._done = 0
        return True


def first_seen(keys: Iterable[K]) -> list[K]:
    """Each key once, in the order of its first appearance (Kafka answers a topic named twice once)."""
    return list(dict.fromkeys(keys))
