"""Producer ids for InitProducerId, handed out from blocks the controller allocates to this broker."""

from __future__ import annotations

from collections.abc import Callable

import trio

from kraftpy.broker.controller_channel import ControllerChannel, ControllerUnavailable
from kraftpy.metadata.messages import AllocateProducerIdsRequest
from kraftpy.protocol.errors import ErrorCode


class ProducerIdManager:
    """Kafka's RPCProducerIdManager: ids from the current block, a new block when it runs out.

    Invariant: ``_next <= _end``; every id handed out lies in a block the controller committed to
    this broker, so no two brokers ever hand out the same id.
    """

    def __init__(self, node_id: int, channel: ControllerChannel, broker_epoch: Callable[[], int]) -> None:
        self.node_id = node_id
        self.channel = channel
        self.broker_epoch = broker_epoch
        self._next = 0
        self._end = 0
        self._lock = trio.Lock()

    async def generate(self) -> int:
        """The next producer id; raises ControllerUnavailable when a block is needed and none comes."""
        async with self._lock:
            if self._next >= self._end:
                response = await self.channel.allocate_producer_ids(
                    AllocateProducerIdsRequest(self.node_id, self.broker_epoch())
                )
                if response.error_code != ErrorCode.NONE or response.producer_id_len <= 0:
                    raise ControllerUnavailable(
                        f"producer id block refused: {ErrorCode(response.error_code).name}"
                    )
                self._next = response.producer_id_start
                self._end = response.producer_id_start + response.producer_id_len
            producer_id = self._next
            self._next += 1
            return producer_id
