"""Producer-id blocks (KIP-730): brokers ask the controller for blocks of ids for idempotent producers.

Each block is ``PRODUCER_ID_BLOCK_SIZE`` ids starting at the image's next producer id; the
ProducerIdsRecord names the broker and its epoch and moves the next id past the block, so a block is
never handed out twice, even across controller fail-over.
"""

from __future__ import annotations

from kraftpy.metadata.controller_config import PRODUCER_ID_BLOCK_SIZE
from kraftpy.metadata.errors import Errors
from kraftpy.metadata.image import MetadataImage
from kraftpy.metadata.messages import AllocateProducerIdsRequest, AllocateProducerIdsResponse
from kraftpy.metadata.records import ProducerIdsRecord
from kraftpy.metadata.result import ControllerResult

MAX_PRODUCER_ID = 2**63 - 1


def allocate_producer_ids(
    image: MetadataImage, request: AllocateProducerIdsRequest
) -> ControllerResult[AllocateProducerIdsResponse]:
    reg = image.cluster.broker(request.broker_id)
    if reg is None or reg.epoch != request.broker_epoch:
        return ControllerResult([], AllocateProducerIdsResponse(Errors.STALE_BROKER_EPOCH))
    start = image.producer_ids.next_producer_id
    if start > MAX_PRODUCER_ID - PRODUCER_ID_BLOCK_SIZE:
        return ControllerResult([], AllocateProducerIdsResponse(Errors.UNKNOWN_SERVER_ERROR))
    record = ProducerIdsRecord(request.broker_id, request.broker_epoch, start + PRODUCER_ID_BLOCK_SIZE)
    return ControllerResult([record], AllocateProducerIdsResponse(Errors.NONE, start, PRODUCER_ID_BLOCK_SIZE))
