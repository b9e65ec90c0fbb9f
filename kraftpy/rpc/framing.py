"""Size-prefixed frames over a trio stream: 4-byte big-endian length, then that many bytes.

Both planes frame this way (Kafka's protocol and the msgpack control plane). A frame larger than
the limit, or a stream that ends inside a frame, raises `FrameError`; the caller closes that one
connection and nothing else.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import trio

SIZE = struct.Struct(">i")
_READ_CHUNK = 65536


class FrameError(Exception):
    """The peer sent something that is not a frame we accept; close its connection."""


class FramedStream:
    def __init__(self, stream: trio.abc.Stream, max_frame_bytes: int) -> None:
        self.stream = stream
        self.max_frame_bytes = max_frame_bytes
        self._buf = bytearray()
        self._send_lock = trio.Lock()

    async def _fill(self, n: int) -> bool:
        """Read until the buffer holds ``n`` bytes; False on a clean end of stream at a boundary."""
        while len(self._buf) < n:
            data = await self.stream.receive_some(max(_READ_CHUNK, n - len(self._buf)))
            if not data:
                if self._buf:
                    raise FrameError(f"connection closed inside a frame ({len(self._buf)} bytes pending)")
                return False
            self._buf += data
        return True

    async def receive_frame(self) -> bytes | None:
        """The next frame's payload, or None when the peer closed the connection between frames."""
        if not await self._fill(4):
            return None
        (size,) = SIZE.unpack_from(self._buf)
        if size < 0:
            raise FrameError(f"negative frame size {size}")
        if size > self.max_frame_bytes:
            raise FrameError(f"frame of {size} bytes is over the limit of {self.max_frame_bytes}")
        if not await self._fill(4 + size):
            raise FrameError("connection closed inside a frame")
        payload = bytes(self._buf[4 : 4 + size])
        del self._buf[: 4 + size]
        return payload

    async def send_frame(self, payload: bytes | Sequence[bytes]) -> None:
        """Send one frame; concurrent senders on one stream never interleave."""
        parts = [payload] if isinstance(payload, bytes | bytearray | memoryview) else list(payload)
        size = sum(len(p) for p in parts)
        async with self._send_lock:
            await self.stream.send_all(SIZE.pack(size) + b"".join(parts))

    async def aclose(self) -> None:
        await self.stream.aclose()
