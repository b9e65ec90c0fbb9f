"""Size-prefixed frames in, (header, request) out; (correlation id, response) in, frame parts out.

Theory of operation
-------------------
Every Kafka message travels as a frame: an int32 size, then that many bytes. A request frame holds
a request header and a request body; a response frame a response header and a response body::

    request header v1:  int16 api_key | int16 api_version | int32 correlation_id | string client_id
    request header v2:  v1 + tagged fields                       (flexible request versions)
    response header v0: int32 correlation_id
    response header v1: v0 + tagged fields                       (flexible response versions)

The header version follows the message's flexible versions, with one exception: an ApiVersions
response always has header v0, because the client that sent the request cannot know yet whether the
broker speaks flexible versions (KIP-511).

Nothing here does I/O. :class:`FrameReader` takes bytes as they come off a socket and hands back
complete frames; :func:`parse_request` turns one frame into the generated header and request
objects or raises an :class:`~kraftpy.protocol.errors.ProtocolError` that names the api key,
version and correlation id; :func:`encode_response` turns a response object into the whole frame
as a list of parts. A part is a buffer or a :class:`~kraftpy.protocol.types.FileRegion`: the
connection writes buffers and ``os.sendfile``\\ s file regions, so record data read from a segment
is never copied through Python. The size prefix counts file regions by their ``length``.
"""

from __future__ import annotations

import struct
from typing import Any

from kraftpy.protocol.api_keys import API_VERSIONS, ApiKey, VersionRange
from kraftpy.protocol.errors import (
    FrameTooLargeError,
    InvalidRequestError,
    InvalidResponseError,
    UnsupportedVersionError,
)
from kraftpy.protocol.messages import REQUESTS, RESPONSES, RequestHeader, ResponseHeader
from kraftpy.protocol.schema import DecodeError, EncodeError
from kraftpy.protocol.types import FileRegion, FramePart, part_length

#: Kafka's default for ``socket.request.max.bytes``.
DEFAULT_MAX_FRAME_SIZE = 104857600

_SIZE = struct.Struct(">i")
_FIXED_REQUEST_HEADER = struct.Struct(">hhi")
_SIZE_AND_CORRELATION = struct.Struct(">ii")
_REQUEST_HEADER = RequestHeader.SCHEMA
_RESPONSE_HEADER = ResponseHeader.SCHEMA


class FrameReader:
    """Reassemble size-prefixed frames from a byte stream.

    ``feed`` returns every frame the new bytes complete, each a ``memoryview`` of its own buffer
    (without the size prefix), so decoded record fields may keep slices of it. A size prefix above
    ``max_frame_size`` raises :class:`FrameTooLargeError` before any of the body is buffered.

    A partial frame's buffer grows as its bytes arrive: the size a peer announces is never
    allocated up front, so a prefix of 100 MiB followed by a trickle costs the trickle, not 100 MiB.
    (The connection decides whether it may read on; see kraftpy.rpc.framing.)

    Invariant: at most one partial frame is buffered; ``pending`` is its byte count so far (size
    prefix included), and no more than ``pending`` bytes are held for it.
    """

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self.max_frame_size = max_frame_size
        self._prefix = bytearray()
        self._body: bytearray | None = None
        #: The announced size of the frame in ``_body`` (meaningful while ``_body`` is not None).
        self._size = 0

    @property
    def frame_size(self) -> int | None:
        """The announced size of the partial frame (without its prefix), None while it is not known."""
        return None if self._body is None else self._size

    @property
    def remaining(self) -> int:
        """Bytes still missing from the frame being reassembled (0 at a frame boundary)."""
        return 0 if self._body is None else self._size - len(self._body)

    @property
    def pending(self) -> int:
        """Bytes of an incomplete frame held so far, size prefix included (0 at a frame boundary)."""
        return len(self._prefix) if self._body is None else 4 + len(self._body)

    def feed(self, data: bytes | bytearray | memoryview) -> list[memoryview]:
        frames: list[memoryview] = []
        immutable = isinstance(data, bytes)
        view = memoryview(data) if immutable else _as_view(data)
        pos = 0
        end = len(view)
        while pos < end:
            body = self._body
            if body is None:
                need = 4 - len(self._prefix)
                if not self._prefix and end - pos >= 4:
                    (size,) = _SIZE.unpack_from(view, pos)
                    pos += 4
                else:
                    self._prefix += view[pos : pos + need]
                    pos += min(need, end - pos)
                    if len(self._prefix) < 4:
                        break
                    (size,) = _SIZE.unpack(self._prefix)
                    self._prefix.clear()
                if size < 0 or size > self.max_frame_size:
                    raise FrameTooLargeError(size, self.max_frame_size)
                if end - pos >= size:
                    # The whole frame is here: a slice of immutable input, else one copy.
                    chunk = view[pos : pos + size]
                    frames.append(chunk if immutable else memoryview(bytes(chunk)))
                    pos += size
                    continue
                body = self._body = bytearray()
                self._size = size
            take = min(end - pos, self._size - len(body))
            body += view[pos : pos + take]
            pos += take
            if len(body) == self._size:
                frames.append(memoryview(body))
                self._body = None
        return frames


def request_header_version(api_key: int, api_version: int) -> int:
    """2 for flexible request versions, else 1."""
    return 2 if REQUESTS[api_key].SCHEMA.is_flexible(api_version) else 1


def response_header_version(api_key: int, api_version: int) -> int:
    """1 for flexible response versions, else 0; always 0 for ApiVersions."""
    if api_key == ApiKey.API_VERSIONS:
        return 0
    return 1 if RESPONSES[api_key].SCHEMA.is_flexible(api_version) else 0


def _as_view(frame: bytes | bytearray | memoryview) -> memoryview:
    view = frame if isinstance(frame, memoryview) else memoryview(frame)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    return view


def parse_request(
    frame: bytes | bytearray | memoryview,
    versions: dict[ApiKey, VersionRange] = API_VERSIONS,
    *,
    allow_trailing_bytes: bool = False,
) -> tuple[Any, Any]:
    """Decode one request frame (without its size prefix) into ``(RequestHeader, request)``.

    Raises :class:`InvalidRequestError` for an unknown api key, a header or body that does not
    parse, or bytes after the body, and :class:`UnsupportedVersionError` for a version outside
    ``versions``. Both carry api key, version and correlation id as far as they could be read.
    ``records`` fields of the request are slices of ``frame``.

    ``allow_trailing_bytes`` ignores bytes after the body, as Kafka's broker does: librdkafka
    2.x writes Metadata v11-v12 requests with the v10-only IncludeClusterAuthorizedOperations
    field (and an empty tagged field) after the body.
    """
    buf = _as_view(frame)
    if len(buf) < _FIXED_REQUEST_HEADER.size:
        raise InvalidRequestError(f"request frame of {len(buf)} bytes is shorter than a request header")
    api_key, api_version, correlation_id = _FIXED_REQUEST_HEADER.unpack_from(buf, 0)
    ids = {"api_key": api_key, "api_version": api_version, "correlation_id": correlation_id}
    cls = REQUESTS.get(api_key)
    supported = versions.get(api_key) if cls is not None else None
    if supported is None:
        raise InvalidRequestError(f"unknown api key {api_key}", **ids)
    if not supported.accepts(api_version):
        raise UnsupportedVersionError(
            f"{ApiKey(api_key).name} v{api_version} is not supported "
            f"(accepted v{supported.min_accepted}-v{supported.max_version})",
            **ids,
        )
    schema = cls.SCHEMA
    try:
        header, pos = _REQUEST_HEADER.decode(2 if schema.is_flexible(api_version) else 1, buf, 0)
    except DecodeError as exc:
        raise InvalidRequestError(f"malformed request header: {exc}", **ids) from exc
    try:
        body, pos = schema.decode(api_version, buf, pos)
    except DecodeError as exc:
        raise InvalidRequestError(f"malformed {schema.name}: {exc}", **ids) from exc
    if pos != len(buf) and not allow_trailing_bytes:
        raise InvalidRequestError(f"{len(buf) - pos} bytes after the end of {schema.name}", **ids)
    return header, body


_INT16 = struct.Struct(">h")


def _uvarint_at(buf: memoryview, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise ValueError("varint longer than 5 bytes")


def produce_acks(frame: bytes | bytearray | memoryview) -> int | None:
    """The ``acks`` of a Produce request frame, read without decoding the request: the header's client
    id and tagged fields and the transactional id are skipped. None when the frame is not a Produce or
    ends before its acks (its decoding then says what is wrong with it). A server uses it to decide how
    to run the request before it is parsed (acks=all may wait for the followers)."""
    buf = _as_view(frame)
    try:
        api_key, api_version, _ = _FIXED_REQUEST_HEADER.unpack_from(buf, 0)
        if api_key != ApiKey.PRODUCE:
            return None
        pos = _FIXED_REQUEST_HEADER.size
        (client_id,) = _INT16.unpack_from(buf, pos)
        pos += 2 + max(client_id, 0)
        flexible = REQUESTS[ApiKey.PRODUCE].SCHEMA.is_flexible(api_version)
        if flexible:
            tagged, pos = _uvarint_at(buf, pos)
            for _ in range(tagged):
                _, pos = _uvarint_at(buf, pos)
                size, pos = _uvarint_at(buf, pos)
                pos += size
        if api_version >= 3:  # transactional_id, a nullable string
            if flexible:
                length, pos = _uvarint_at(buf, pos)
                pos += max(length - 1, 0)
            else:
                (length,) = _INT16.unpack_from(buf, pos)
                pos += 2 + max(length, 0)
        (acks,) = _INT16.unpack_from(buf, pos)
        return acks
    except (IndexError, ValueError, struct.error):
        return None


def _finish(out: bytearray, parts: list) -> list[FramePart]:
    """Close a frame whose first four bytes are the size placeholder."""
    if not parts:
        _SIZE.pack_into(out, 0, len(out) - 4)
        return [out]
    if out:
        parts.append(out)
    total = 0
    for part in parts:
        total += part_length(part)
    _SIZE.pack_into(parts[0], 0, total - 4)
    return parts


def encode_response(correlation_id: int, api_key: int, api_version: int, response: Any) -> list[FramePart]:
    """The whole response frame (size prefix, header, body) as a list of parts.

    ``records`` fields may hold bytes, memoryviews, :class:`FileRegion`\\ s or lists of them; large
    buffers and file regions become parts of their own, everything else is packed into bytearrays.
    """
    cls = RESPONSES.get(api_key)
    if cls is None:
        raise EncodeError(f"unknown api key {api_key}")
    if not isinstance(response, cls):
        raise TypeError(f"api key {api_key} responds with {cls.__name__}, not {type(response).__name__}")
    out = bytearray(8)
    _SIZE_AND_CORRELATION.pack_into(out, 0, 0, correlation_id)
    if response_header_version(api_key, api_version) == 1:
        out.append(0)  # no tagged fields in the header
    parts: list = []
    cls.SCHEMA.encode(api_version, response, out, parts)
    return _finish(out, parts)


def encode_request(
    api_key: int,
    api_version: int,
    correlation_id: int,
    client_id: str | None,
    request: Any,
) -> list[FramePart]:
    """The whole request frame (size prefix, header v1/v2, body) as a list of parts."""
    cls = REQUESTS.get(api_key)
    if cls is None:
        raise EncodeError(f"unknown api key {api_key}")
    if not isinstance(request, cls):
        raise TypeError(f"api key {api_key} takes {cls.__name__}, not {type(request).__name__}")
    out = bytearray(4)
    parts: list = []
    header = RequestHeader(api_key, api_version, correlation_id, client_id)
    _REQUEST_HEADER.encode(request_header_version(api_key, api_version), header, out, parts)
    cls.SCHEMA.encode(api_version, request, out, parts)
    return _finish(out, parts)


def decode_response(api_key: int, api_version: int, frame: bytes | bytearray | memoryview) -> tuple[Any, Any]:
    """Decode one response frame (without its size prefix) into ``(ResponseHeader, response)``.

    The caller knows ``api_key`` and ``api_version`` from the request with the same correlation id.
    """
    buf = _as_view(frame)
    cls = RESPONSES.get(api_key)
    if cls is None:
        raise InvalidResponseError(f"unknown api key {api_key}", api_key=api_key, api_version=api_version)
    schema = cls.SCHEMA
    try:
        header, pos = _RESPONSE_HEADER.decode(response_header_version(api_key, api_version), buf, 0)
        body, pos = schema.decode(api_version, buf, pos)
    except DecodeError as exc:
        raise InvalidResponseError(f"malformed {schema.name}: {exc}", api_key=api_key,
                                   api_version=api_version) from exc
    if pos != len(buf):
        raise InvalidResponseError(
            f"{len(buf) - pos} bytes after the end of {schema.name}",
            api_key=api_key,
            api_version=api_version,
            correlation_id=header.correlation_id,
        )
    return header, body


def frame_size(parts: list[FramePart]) -> int:
    """Bytes on the wire for ``parts``, size prefix included."""
    return sum(part_length(p) for p in parts)


def join_frame(parts: list[FramePart]) -> bytes:
    """One bytes object for a frame without file regions (for clients and tests)."""
    if any(isinstance(p, FileRegion) for p in parts):
        raise ValueError("a frame with file regions must be written with sendfile, not joined")
    return b"".join(parts)
