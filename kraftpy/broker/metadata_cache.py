"""`MetadataCache`: the metadata image a broker answers from (Kafka's KRaftMetadataCache).

The broker's metadata publisher sets a new image once the replicas reflect it (logs opened,
roles applied), so a handler that sees a topic in the cache finds its partitions served. Handlers
read `image` and never keep it across an await they expect to change it; a handler that needs a
change of its own to arrive (CreateTopics waiting for its topic) waits with `wait_for`, which
parks on the cache's change event and re-checks on every wake-up.
"""

from __future__ import annotations

from collections.abc import Callable

import trio

from kraftpy.metadata.image import EMPTY_IMAGE, MetadataImage
from kraftpy.protocol.errors import ErrorCode


class MetadataCache:
    def __init__(self) -> None:
        self.image: MetadataImage = EMPTY_IMAGE
        self._changed = trio.Event()

    @property
    def changed(self) -> trio.Event:
        """Set (and replaced) when the next image is set."""
        return self._changed

    def set_image(self, image: MetadataImage) -> None:
        self.image = image
        event, self._changed = self._changed, trio.Event()
        event.set()

    async def wait_for(self, done: Callable[[MetadataImage], bool], timeout_s: float) -> bool:
        """Park until ``done(image)`` holds (True) or ``timeout_s`` passes (False)."""
        with trio.move_on_after(timeout_s):
            while not done(self.image):
                await self._changed.wait()
            return True
        return False

    # -- answers several handlers share -------------------------------------------------------------

    def alive_brokers(self, listener: str) -> list[tuple[int, str, int, str | None]]:
        """(id, host, port, rack) of every unfenced broker's endpoint on ``listener``, by id."""
        out = []
        for broker_id, reg in sorted(self.image.cluster.brokers.items()):
            if reg.fenced:
                continue
            for endpoint in reg.listeners:
                if endpoint.name == listener:
                    out.append((broker_id, endpoint.host, endpoint.port, reg.rack))
                    break
        return out

    def current_leader(self, topic: str, index: int, listener: str) -> tuple[int, int, tuple[str, int, str | None] | None] | None:
        """(leader id, leader epoch, its (host, port, rack) on ``listener`` or None) of a partition as this
        broker's metadata has it, for the answers that tell a client where a partition moved (KIP-951);
        None for an unknown partition or one without a leader."""
        topic_image = self.image.topics.get_by_name(topic)
        reg = topic_image.partitions.get(index) if topic_image is not None else None
        if reg is None or reg.leader < 0:
            return None
        broker = self.image.cluster.broker(reg.leader)
        endpoint = None
        if broker is not None and not broker.fenced:
            for listener_endpoint in broker.listeners:
                if listener_endpoint.name == listener:
                    endpoint = (listener_endpoint.host, listener_endpoint.port, broker.rack)
                    break
        return reg.leader, reg.leader_epoch, endpoint

    def partition_error(self, topic: str, index: int) -> ErrorCode:
        """The error for a partition this broker does not lead: unknown, or led elsewhere."""
        topic_image = self.image.topics.get_by_name(topic)
        if topic_image is None or index not in topic_image.partitions:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return ErrorCode.NOT_LEADER_OR_FOLLOWER

    def broker_epoch(self, broker_id: int) -> int:
        reg = self.image.cluster.broker(broker_id)
        return reg.epoch if reg is not None else -1
