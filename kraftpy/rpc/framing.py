"""Size-prefixed frames over a trio stream: 4-byte big-endian length, then that many bytes.

Both planes frame this way (Kafka's protocol and the msgpack control plane). A frame larger than
the limit, or a stream that ends inside a frame, raises `FrameError`; the caller closes that one
connection and nothing else.

Theory of operation: the request budget
---------------------------------------
A server's connections share one `RequestBudget` (``queued.max.request.bytes``): the bytes of
requests it holds in memory, from the first byte read to the moment the request has been handled
(`FramedStream.release`). A connection that cannot have the bytes it needs waits for them — it
stops reading its socket, so the peer's TCP window closes — instead of allocating. Frames come in
two sizes:

* a *small* frame (size prefix included, at most one read: 64 KiB) is read, then charged; a
  connection waits for budget after such a read, holding at most that read;
* a *large* frame is admitted whole before its body is read on: the rest of its announced size is
  reserved at once (Kafka's memory pool does the same), so a frame once admitted always completes
  and connections can never hold each other's half-read frames in a deadlock. Its buffer still
  grows only as bytes arrive (`FrameReader`).

Large frames may take the budget only up to ``limit - reserve``: the last `SMALL_REQUEST_RESERVE`
bytes are kept for small frames, so connections holding large frames (or announcing them and
trickling) never stop a client's ordinary requests. A large frame bigger than that share can never
be admitted and is refused like one over ``socket.request.max.bytes``. Waiters of each kind are
served in arrival order.

Invariant: ``used <= limit``; ``used`` is the sum of every connection's ``held`` bytes (its partial
frame, or the whole reservation of its admitted large frame) and of the frames handed out and not
yet released.
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import struct
from collections import deque
from collections.abc import AsyncIterator, Sequence

import trio

from kraftpy.protocol.errors import FrameTooLargeError
from kraftpy.protocol.frames import FrameReader

SIZE = struct.Struct(">i")
_READ_CHUNK = 65536
_MAX_READ = 8 * 1024 * 1024
#: Frames up to this size (prefix included) are small: they arrive in one read and are charged after it.
SMALL_FRAME = _READ_CHUNK
#: The part of a bounded budget that large frames may not take, kept for small frames.
SMALL_REQUEST_RESERVE = 1024 * 1024


class FrameError(Exception):
    """The peer sent something that is not a frame we accept; close its connection."""


class IdleConnection(Exception):
    """Nothing arrived for ``connections.max.idle.ms``: close the connection."""


class _Waiter:
    __slots__ = ("event", "granted", "size")

    def __init__(self, size: int) -> None:
        self.size = size
        self.granted = False
        self.event = trio.Event()


class RequestBudget:
    """The bytes of requests one server holds in memory, shared by all its connections.

    ``limit`` None is no bound (Kafka's ``queued.max.request.bytes=-1``): bytes are still counted.
    ``peak`` is the most ever held at once.
    """

    def __init__(self, limit: int | None, *, reserve: int = SMALL_REQUEST_RESERVE) -> None:
        if limit is not None and limit <= 0:
            limit = None
        self.limit = limit
        #: Kept for small frames: large frames are admitted only up to ``limit - reserve``.
        self.reserve = 0 if limit is None else min(reserve, limit // 2)
        self.used = 0
        self.peak = 0
        self._small: deque[_Waiter] = deque()
        self._large: deque[_Waiter] = deque()

    @property
    def largest_frame(self) -> int | None:
        """The largest frame (size prefix included) a connection can ever be admitted with."""
        return None if self.limit is None else self.limit - self.reserve

    @property
    def waiting(self) -> int:
        """Connections waiting for budget."""
        return len(self._small) + len(self._large)

    def _fits(self, size: int, large: bool) -> bool:
        if self.limit is None:
            return True
        return self.used + size <= self.limit - (self.reserve if large else 0)

    def _take(self, size: int) -> None:
        self.used += size
        if self.used > self.peak:
            self.peak = self.used

    async def acquire(self, size: int, *, large: bool) -> None:
        """Take ``size`` bytes, waiting (in arrival order) until they fit. Does not checkpoint when
        they fit at once: the caller has just read or is about to read its socket."""
        queue = self._large if large else self._small
        if not queue and self._fits(size, large):
            self._take(size)
            return
        waiter = _Waiter(size)
        queue.append(waiter)
        try:
            await waiter.event.wait()
        except BaseException:
            if waiter.granted:
                self.release(size)
            else:
                queue.remove(waiter)
                self._grant()  # the head may have changed
            raise

    def release(self, size: int) -> None:
        """Give back ``size`` bytes (a request handled, a connection closed)."""
        if size <= 0:
            return
        self.used -= size
        assert self.used >= 0, "released more request bytes than were taken"
        self._grant()

    def _grant(self) -> None:
        for queue, large in ((self._small, False), (self._large, True)):
            while queue and self._fits(queue[0].size, large):
                waiter = queue.popleft()
                self._take(waiter.size)
                waiter.granted = True
                waiter.event.set()


class FramedStream:
    """A trio stream read as frames (with the sans-IO `FrameReader`) and written as frames.

    With a ``budget`` every frame returned by `receive_frame` holds its bytes (size prefix included)
    of the budget until the caller gives them back with `release`. With ``idle_timeout`` (seconds),
    `receive_frame` raises `IdleConnection` when no byte arrived for that long; inside
    `expiring_when_idle` a watchdog task does the timing instead (see there).
    """

    def __init__(self, stream: trio.abc.Stream, max_frame_bytes: int, *, budget: RequestBudget | None = None,
                 idle_timeout: float | None = None) -> None:
        self.stream = stream
        self.max_frame_bytes = max_frame_bytes
        self.budget = budget
        self.idle_timeout = idle_timeout
        self._reader = FrameReader(max_frame_bytes)
        self._configured_max_frame_bytes = max_frame_bytes
        #: The setting a refused frame's message names.
        self.limit_setting = "socket.request.max.bytes"
        self._frames: deque[memoryview] = deque()
        self._send_lock = trio.Lock()
        #: Budget bytes this connection holds beyond its frames: its partial frame, or the whole
        #: reservation of its admitted large frame.
        self._held = 0
        #: The partial frame is large and its whole size is reserved.
        self._admitted = False
        self._closed = False
        #: Inside `expiring_when_idle`: when the wait for a frame's next bytes began (None: not waiting,
        #: or waiting is not idleness: answers under way, budget), and whether the watchdog fired.
        self._watched = False
        self._idle_since: float | None = None
        self._idle_expired = False

    def set_max_frame_bytes(self, max_frame_bytes: int, setting: str = "socket.request.max.bytes") -> None:
        """The largest frame from the next size prefix read on (``setting`` names it when a frame is
        refused): a SASL connection reads under sasl.server.max.receive.size until it has authenticated."""
        self.max_frame_bytes = self._reader.max_frame_size = max_frame_bytes
        self.limit_setting = setting

    def restore_max_frame_bytes(self) -> None:
        """Back to the limit the stream was made with (a SASL connection that has authenticated)."""
        self.set_max_frame_bytes(self._configured_max_frame_bytes)

    async def receive_frame(self, *, idle: bool = True) -> memoryview | None:
        """The next frame's payload, or None when the peer closed the connection between frames.
        ``idle=False``: no idle timeout for this one (the connection has requests under way)."""
        if self._frames:
            return self._frames.popleft()
        if self.idle_timeout is None or not idle:
            return await self._receive_frame(None)
        if self._watched:
            try:
                return await self._receive_frame(None, watched=True)
            finally:
                self._idle_since = None
        with trio.CancelScope() as idle:
            return await self._receive_frame(idle)
        raise self._idle_error()

    def _idle_error(self) -> IdleConnection:
        return IdleConnection(f"no request for {self.idle_timeout * 1000:.0f} ms (connections.max.idle.ms)")

    @contextlib.asynccontextmanager
    async def expiring_when_idle(self) -> AsyncIterator[None]:
        """Within this block a watchdog task times the connection's idleness, rather than a cancel scope
        per frame (entered, given a deadline and left for every request: a few percent of a small
        request's cost): `receive_frame` only notes when its wait began, and the watchdog, which wakes
        once per idle period at most, cancels the block once a wait has lasted ``idle_timeout``; the
        block then raises `IdleConnection`. Nothing in the block may be under way by then (a caller
        reads with ``idle=False`` while it answers requests). Without an idle timeout, or nested,
        it does nothing."""
        if self.idle_timeout is None or self._watched:
            yield
            return
        self._watched = True
        try:
            with trio.CancelScope() as block:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._expire_idle, block, self.idle_timeout)
                    try:
                        yield
                    finally:
                        nursery.cancel_scope.cancel()
        finally:
            self._watched = False
        if self._idle_expired:
            raise self._idle_error()

    async def _expire_idle(self, block: trio.CancelScope, timeout: float) -> None:
        while True:
            since = self._idle_since
            now = trio.current_time()
            if since is not None and now >= since + timeout:
                self._idle_expired = True
                block.cancel()
                return
            # The earliest a wait can have lasted ``timeout``: the one under way, or one that begins now.
            await trio.sleep_until((since if since is not None else now) + timeout)

    async def _receive_frame(self, idle: trio.CancelScope | None, *, watched: bool = False) -> memoryview | None:
        reader = self._reader
        budget = self.budget
        while not self._frames:
            size = reader.frame_size
            if budget is not None and size is not None and not self._admitted and size + 4 > SMALL_FRAME:
                self._idle_since = None
                await self._admit(budget, size + 4, idle)
            if idle is not None:
                idle.deadline = trio.current_time() + self.idle_timeout
            elif watched:
                self._idle_since = trio.current_time()
            # Inside a large frame ask for the rest at once: fewer wake-ups.
            want = max(_READ_CHUNK, min(reader.remaining, _MAX_READ)) if size is not None else _READ_CHUNK
            data = await self.stream.receive_some(want)
            if not data:
                if reader.pending:
                    raise FrameError(f"connection closed inside a frame ({reader.pending} bytes pending)")
                return None
            if budget is not None:
                # Bytes beyond an admitted frame's reservation are small-frame bytes: charged now.
                extra = len(data) - (min(len(data), reader.remaining) if self._admitted else 0)
                if extra:
                    if idle is not None:
                        idle.deadline = math.inf  # waiting for budget is not the peer's idleness
                    self._idle_since = None
                    await budget.acquire(extra, large=False)
                    self._held += extra
            try:
                frames = reader.feed(data)
            except FrameTooLargeError as exc:
                if exc.size >= 0 and self.limit_setting != "socket.request.max.bytes":
                    raise FrameError(f"frame of {exc.size} bytes exceeds {self.limit_setting}={self.max_frame_bytes}"
                                     ) from None
                raise FrameError(f"{exc} (limit {self.max_frame_bytes})") from None
            if budget is not None and frames:
                # The frames take their bytes with them; an admitted frame is the first to complete.
                self._held -= sum(len(f) + 4 for f in frames)
                self._admitted = False
            self._frames.extend(frames)
        return self._frames.popleft()

    async def _admit(self, budget: RequestBudget, total: int, idle: trio.CancelScope | None) -> None:
        """Reserve the rest of a large frame before reading on."""
        largest = budget.largest_frame
        if largest is not None and total > largest:
            raise FrameError(f"frame of {total - 4} bytes exceeds what queued.max.request.bytes={budget.limit} "
                             f"admits ({largest - 4} bytes)")
        if idle is not None:
            idle.deadline = math.inf
        await budget.acquire(total - self._held, large=True)
        self._held = total
        self._admitted = True

    def unread(self, frame: memoryview) -> None:
        """Put a frame `receive_frame` returned back in front of the others (a server looking at a
        connection's first frame to choose its protocol); it keeps holding its bytes of the budget."""
        self._frames.appendleft(frame)

    def release(self, frame: memoryview | bytes | int) -> None:
        """The request in ``frame`` (or a frame of that many bytes) has been handled: give its bytes
        back to the budget."""
        if self.budget is not None:
            self.budget.release((frame if isinstance(frame, int) else len(frame)) + 4)

    async def send_frame(self, payload: bytes | Sequence[bytes]) -> None:
        """Send one frame; concurrent senders on one stream never interleave."""
        parts = [payload] if isinstance(payload, bytes | bytearray | memoryview) else list(payload)
        size = sum(len(p) for p in parts)
        async with self._send_lock:
            await self.stream.send_all(SIZE.pack(size) + b"".join(parts))

    async def aclose(self) -> None:
        """Close the stream and give back what this connection holds of the budget (its partial
        frame and the frames read but not handed out)."""
        if not self._closed and self.budget is not None:
            self._closed = True
            held = self._held + sum(len(f) + 4 for f in self._frames)
            self._held = 0
            self._frames.clear()
            self.budget.release(held)
        await self.stream.aclose()


async def send_all_fast(stream: trio.abc.Stream, data: bytes | bytearray | memoryview) -> None:
    """``stream.send_all(data)``; on a plain socket without trio's scheduling point after every write that
    did not block: a request or an answer usually goes out in one write, and that round through trio's
    scheduler was a few percent of a small request's time. The task still yields when it reads the
    answer or the next request; a write that would block waits for the socket as trio's would. Writers
    of one stream must take turns (a server's answers go out in order, a client sends one request at a
    time): there is no check that two write at once."""
    if type(stream) is not trio.SocketStream:
        await stream.send_all(data)
        return
    sock = stream.socket
    fd = sock.fileno()
    if fd == -1:
        raise trio.ClosedResourceError("socket was already closed")
    view = memoryview(data)
    try:
        while view:
            try:
                sent = os.write(fd, view)
            except BlockingIOError:
                await trio.lowlevel.wait_writable(sock)
                continue
            view = view[sent:]
    except OSError as exc:
        if exc.errno == errno.EBADF:
            raise trio.ClosedResourceError("socket was already closed") from None
        raise trio.BrokenResourceError(f"socket connection broken: {exc}") from exc
