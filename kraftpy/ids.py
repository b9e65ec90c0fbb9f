"""Kafka's 16-byte ids (cluster, directory, topic, incarnation) and their text form.

The text form is the URL-safe base64 of the 16 bytes without padding: 22 characters, as Kafka's
``Uuid.toString`` writes it.
"""

from __future__ import annotations

import base64
import binascii
import os

ZERO_UUID = bytes(16)
#: Kafka's reserved id of the __cluster_metadata topic (0 ... 1).
METADATA_TOPIC_ID = bytes(15) + b"\x01"
_RESERVED = (ZERO_UUID, METADATA_TOPIC_ID)


def uuid_to_str(raw: bytes) -> str:
    if len(raw) != 16:
        raise ValueError(f"an id has 16 bytes, not {len(raw)}")
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def uuid_from_str(text: str) -> bytes:
    """Parse the 22-character form; raises ValueError with a reason for anything else."""
    if len(text) != 22:
        raise ValueError(f"{text!r} is not a 22-character base64 id")
    try:
        raw = base64.urlsafe_b64decode(text + "==")
    except (binascii.Error, ValueError):
        raise ValueError(f"{text!r} is not URL-safe base64") from None
    if len(raw) != 16 or uuid_to_str(raw) != text:
        raise ValueError(f"{text!r} is not a base64 encoding of 16 bytes")
    return raw


def random_uuid() -> bytes:
    """16 random bytes, never a reserved id and never one whose text starts with '-'
    (it would read as a command-line flag), as Kafka's ``Uuid.randomUuid`` guarantees."""
    while True:
        raw = os.urandom(16)
        if raw not in _RESERVED and not uuid_to_str(raw).startswith("-"):
            return raw


def random_uuid_str() -> str:
    return uuid_to_str(random_uuid())
