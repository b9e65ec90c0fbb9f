"""Size-prefixed frames over a trio stream: 4-byte big-endian length, then that many bytes.

Both planes frame this way (Kafka's protocol and the msgpack control plane). A frame larger than
the limit, or a stream that ends inside a frame, raises `FrameError`; the caller closes that one
connection and nothing else.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Sequence

import trio

from kraftpy.protocol.errors import FrameTooLargeError
from kraftpy.protocol.frames import FrameReader

SIZE = struct.Struct(">i")
_READ_CHUNK = 65536
_MAX_READ = 8 * 1024 * 1024


class FrameError(Exception):
    """The peer sent something that is not a frame we accept; close its connection."""


class FramedStream:
    """A trio stream read as frames (with the sans-IO `FrameReader`) and written as frames."""

    def __init__(self, stream: trio.abc.Stream, max_frame_bytes: int) -> None:
        self.stream = stream
        self.max_frame_bytes = max_frame_bytes
        self._reader = FrameReader(max_frame_bytes)
        self._frames: deque[memoryview] = deque()
        self._send_lock = trio.Lock()

    async def receive_frame(self) -> memoryview | None:
        """The next frame's payload, or None when the peer closed the connection between frames."""
        while not self._frames:
            # Inside a large frame (a produce request) ask for the rest at once: fewer wake-ups.
            data = await self.stream.receive_some(max(_READ_CHUNK, min(self._reader.remaining, _MAX_READ)))
            if not data:
                if self._reader.pending:
                    raise FrameError(f"connection closed inside a frame ({self._reader.pending} bytes pending)")
                return None
            try:
                self._frames.extend(self._reader.feed(data))
            except FrameTooLargeError as exc:
                raise FrameError(f"{exc} (limit {self.max_frame_bytes})") from None
        return self._frames.popleft()

    async def send_frame(self, payload: bytes | Sequence[bytes]) -> None:
        """Send one frame; concurrent senders on one stream never interleave."""
        parts = [payload] if isinstance(payload, bytes | bytearray | memoryview) else list(payload)
        size = sum(len(p) for p in parts)
        async with self._send_lock:
            await self.stream.send_all(SIZE.pack(size) + b"".join(parts))

    async def aclose(self) -> None:
        await self.stream.aclose()
