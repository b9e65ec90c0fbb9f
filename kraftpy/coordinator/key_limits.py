"""The longest group id and transactional id a coordinator can keep.

Their records' keys in ``__consumer_offsets`` and ``__transaction_state`` hold them as Kafka's strings
with an int16 length: at most 32,767 UTF-8 bytes. Newer request versions carry longer ones (compact
strings), so a coordinator refuses such an id before anything is written (INVALID_GROUP_ID for a group,
INVALID_REQUEST for a transactional id) instead of failing when it encodes the record.
"""

from __future__ import annotations

MAX_ID_BYTES = 32767


def too_long(identifier: str) -> bool:
    """More UTF-8 bytes than a record key can hold."""
    return len(identifier) > MAX_ID_BYTES // 4 and len(identifier.encode("utf-8", "surrogatepass")) > MAX_ID_BYTES
