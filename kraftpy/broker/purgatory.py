"""Kafka's purgatory, trio-style: requests parked until a partition changes or their deadline passes.

A produce with acks=all waits until the high watermark passes its last offset; a long-poll fetch
waits until enough bytes are readable. Neither polls. Each partition owns two `Watchers` sets —
one notified when its log end offset moves (what followers' fetches wait for), one when its high
watermark moves or its leadership changes (what consumers' fetches and acks=all produces wait
for). A parked request adds one `trio.Event` to the sets of every partition it reads or writes,
sleeps on it until the deadline, then checks its condition again: a wake-up is a hint, never a
promise, so a spurious one costs a re-check and nothing else.

A set may also carry one standing callback (``on_notify``), called on every notification whether or
not a request is parked: a partition tells the fetch sessions that hold it that it changed (see
kraftpy.broker.apis.fetch, "Sessions in proportion to the change").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import trio


class Watchers:
    """The events parked on one kind of change of one partition."""

    __slots__ = ("_events", "_on_notify")

    def __init__(self, on_notify: Callable[[], None] | None = None) -> None:
        self._events: set[trio.Event] = set()
        self._on_notify = on_notify

    def __len__(self) -> int:
        return len(self._events)

    def add(self, event: trio.Event) -> None:
        self._events.add(event)

    def discard(self, event: trio.Event) -> None:
        self._events.discard(event)

    def notify(self) -> None:
        """Wake every parked request (each re-checks its own condition)."""
        if self._on_notify is not None:
            self._on_notify()
        if self._events:
            events, self._events = self._events, set()
            for event in events:
                event.set()


async def wait_for_change(watchers: Iterable[Watchers], deadline: float) -> bool:
    """Park until one of ``watchers`` is notified (True) or trio's clock reaches ``deadline`` (False)."""
    event = trio.Event()
    sets = list(watchers)
    for w in sets:
        w.add(event)
    try:
        with trio.move_on_at(deadline):
            await event.wait()
            return True
        return False
    finally:
        for w in sets:
            w.discard(event)
