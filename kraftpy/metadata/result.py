"""``ControllerResult``: what every controller write returns — records to append, and the response."""

from __future__ import annotations

from typing import Generic, TypeVar

import attrs

from kraftpy.metadata.records import MetadataRecord

R = TypeVar("R")


@attrs.frozen
class ControllerResult(Generic[R]):
    """``records`` are appended to the metadata log as one atomic batch, in order; ``response`` is sent
    once they are committed. Nothing changes until the records are replayed."""

    records: tuple[MetadataRecord, ...] = attrs.field(converter=tuple)
    response: R
