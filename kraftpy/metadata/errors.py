"""Errors of the metadata layer: ``ApiError`` (a Kafka error code with its message), the exception a
handler raises to answer with one, and the exception for records that contradict the image.

The codes themselves are the protocol's ``ErrorCode`` (Kafka's numbers), re-exported as ``Errors``
so that responses carry exactly what the wire layer sends.
"""

from __future__ import annotations

import attrs

from kraftpy.protocol.errors import ErrorCode

#: Kafka's error codes, shared with the wire codec.
Errors = ErrorCode


@attrs.frozen
class ApiError:
    """An error code with an optional human-readable message, as Kafka's responses carry them."""

    error: Errors
    message: str | None = None

    @property
    def code(self) -> int:
        return int(self.error)

    @property
    def is_success(self) -> bool:
        return self.error is Errors.NONE


class ControllerError(Exception):
    """Raised inside a handler to answer with ``error``; never escapes the controller's entry points."""

    def __init__(self, error: Errors, message: str | None = None) -> None:
        super().__init__(message or error.name)
        self.api_error = ApiError(error, message)


class MetadataReplayError(Exception):
    """A record that cannot apply to the image it is replayed on (the log and the image disagree)."""
