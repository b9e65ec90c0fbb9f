"""Kafka's 16-byte ids (cluster, directory, topic, incarnation) and their text form.

The text form is the URL-safe base64 of the 16 bytes without padding: 22 characters, as Kafka's
``Uuid.toString`` writes it.
"""

from __future__ import annotations

import base64
import binascii
import os
import random as _random

import attrs

_ZERO = bytes(16)
#: Kafka's reserved id of the __cluster_metadata topic (0 ... 1).
_METADATA_TOPIC = bytes(15) + b"\x01"
_RESERVED = (_ZERO, _METADATA_TOPIC)


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


def _check_length(_instance: object, _attribute: object, value: bytes) -> None:
    if len(value) != 16:
        raise ValueError(f"a Uuid is 16 bytes, got {len(value)}")


@attrs.frozen(order=True)
class Uuid:
    """A 16-byte id (topic ids, incarnation ids). ``str(uuid)`` is Kafka's base64 form."""

    raw: bytes = attrs.field(converter=bytes, validator=_check_length)

    @classmethod
    def coerce(cls, value: Uuid | bytes) -> Uuid:
        """Accept a ``Uuid`` or its 16 raw bytes (as msgpack hands them back)."""
        if isinstance(value, Uuid):
            return value
        if type(value) is bytes and len(value) == 16:  # what decoding hands over: checked here, built directly
            made = object.__new__(cls)
            object.__setattr__(made, "raw", value)
            return made
        return cls(value)

    @classmethod
    def from_base64(cls, text: str) -> Uuid:
        """Parse Kafka's display form; raises ``ValueError`` on anything else."""
        return cls(uuid_from_str(text))

    @classmethod
    def random(cls, rng: _random.Random) -> Uuid:
        """A fresh id drawn from ``rng`` (the controller stays a pure function of its inputs):
        never a reserved id, never one whose text starts with '-'."""
        while True:
            raw = rng.getrandbits(128).to_bytes(16, "big")
            if raw not in _RESERVED and not uuid_to_str(raw).startswith("-"):
                return cls(raw)

    def to_base64(self) -> str:
        return uuid_to_str(self.raw)

    def __str__(self) -> str:
        return self.to_base64()

    def __repr__(self) -> str:
        return f"Uuid({self.to_base64()!r})"


ZERO_UUID = Uuid(_ZERO)
METADATA_TOPIC_ID = Uuid(_METADATA_TOPIC)
