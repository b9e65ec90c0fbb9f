"""One connection as the handshake fuzzer drives it: TCP, optionally TLS through memory BIOs, writes cut
into pieces of any size, and raw bytes written under (or instead of) TLS.

`trio.SSLStream` hides the records; the fuzzer needs them: a ClientHello taken from the client's
outgoing BIO and damaged before it is sent, a handshake written one byte per ``send``, a close_notify
in the middle of a frame, a record whose MAC no longer verifies, a plaintext ClientHello injected
after the handshake. `Wire` keeps an `ssl.SSLObject` over two `ssl.MemoryBIO`\\ s and moves the bytes
itself, so each of those is a few lines.

Every failure of the peer (a close, a reset, a TLS alert, an EOF where bytes were due) raises
`Closed`; timing is the caller's (the campaign bounds each attempt).
"""

from __future__ import annotations

import socket
import ssl
from typing import Any

import trio

from kraftpy.protocol.frames import FrameReader, decode_response, encode_request, join_frame

MAX_ANSWER_BYTES = 64 * 1024 * 1024


class Closed(Exception):
    """The broker closed the connection (or broke it, or a TLS alert ended it)."""


class Silent(Exception):
    """The broker neither answered nor closed within the wait bound (`Wire.wait_bound`)."""


class Wire:
    """A client connection: ``chunk`` bytes per ``send`` (None: all at once)."""

    def __init__(self, stream: trio.SocketStream, context: ssl.SSLContext | None = None,
                 chunk: int | None = None) -> None:
        self.stream = stream
        self.chunk = chunk
        #: Seconds one wait for the broker may last (None: no bound); past it, `Silent`.
        self.wait_bound: float | None = None
        #: How long the TLS handshake took (or lasted until it failed); None before one.
        self.handshake_seconds: float | None = None
        self.sent: list[bytes] = []  # what went on the socket, for the report (capped)
        self._sent_bytes = 0
        self._reader = FrameReader(MAX_ANSWER_BYTES)
        self._frames: list[memoryview] = []
        self._correlation = 0
        self._eof = False
        self.tls: ssl.SSLObject | None = None
        if context is not None:
            self._incoming = ssl.MemoryBIO()
            self._outgoing = ssl.MemoryBIO()
            self.tls = context.wrap_bio(self._incoming, self._outgoing, server_side=False, server_hostname=None)
        try:
            stream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass

    @classmethod
    async def open(cls, port: int, context: ssl.SSLContext | None = None, chunk: int | None = None) -> Wire:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        return cls(stream, context, chunk)

    @property
    def local_port(self) -> int | None:
        try:
            return self.stream.socket.getsockname()[1]
        except OSError:
            return None

    # -- bytes on the socket ----------------------------------------------------------------------

    async def raw(self, data: bytes, chunk: int | None = None) -> None:
        """Write ``data`` on the socket as it is (under TLS: not encrypted), ``chunk`` bytes per send."""
        chunk = chunk or self.chunk or len(data) or 1
        if self._sent_bytes < 4096:
            self.sent.append(data[:4096 - self._sent_bytes])
        self._sent_bytes += len(data)
        try:
            for start in range(0, len(data), chunk):
                await self.stream.send_all(data[start:start + chunk])
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            raise Closed(f"send: {exc}") from None

    async def eof(self) -> None:
        try:
            await self.stream.send_eof()
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass

    async def _receive_raw(self) -> bytes:
        try:
            with trio.fail_after(self.wait_bound if self.wait_bound is not None else float("inf")):
                data = await self.stream.receive_some(65536)
        except trio.TooSlowError:
            raise Silent(f"no answer nor close within {self.wait_bound:g}s") from None
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            raise Closed(f"receive: {exc}") from None
        if not data:
            raise Closed("EOF")
        return data

    # -- TLS --------------------------------------------------------------------------------------

    def pending_tls_bytes(self) -> bytes:
        """What the TLS client has to send now (a ClientHello, a Finished, records), taken off the BIO."""
        assert self.tls is not None
        return self._outgoing.read()

    async def flush_tls(self) -> None:
        data = self.pending_tls_bytes()
        if data:
            await self.raw(data)

    def client_hello(self) -> bytes:
        """Start the handshake and return the ClientHello the client would send (not sent)."""
        assert self.tls is not None
        try:
            self.tls.do_handshake()
        except ssl.SSLWantReadError:
            pass
        return self.pending_tls_bytes()

    async def handshake(self, stop_after_bytes: int | None = None) -> None:
        """Do the TLS handshake; with ``stop_after_bytes``, return once that many handshake bytes went out."""
        assert self.tls is not None
        written = 0
        started = trio.current_time()
        try:
            await self._handshake(stop_after_bytes, written)
        finally:
            self.handshake_seconds = trio.current_time() - started

    async def _handshake(self, stop_after_bytes: int | None, written: int) -> None:
        assert self.tls is not None
        while True:
            try:
                self.tls.do_handshake()
                done = True
            except ssl.SSLWantReadError:
                done = False
            except ssl.SSLError as exc:
                await self._flush_quietly()
                raise Closed(f"TLS: {exc.reason or exc}") from None
            data = self.pending_tls_bytes()
            if stop_after_bytes is not None and written + len(data) >= stop_after_bytes:
                await self.raw(data[:max(0, stop_after_bytes - written)])
                return
            written += len(data)
            if data:
                await self.raw(data)
            if done:
                return
            self._incoming.write(await self._receive_raw())

    async def _flush_quietly(self) -> None:
        try:
            await self.flush_tls()
        except Closed:
            pass

    async def close_notify(self) -> None:
        """Send the TLS close_notify alert (the connection stays open underneath)."""
        assert self.tls is not None
        try:
            self.tls.unwrap()
        except (ssl.SSLWantReadError, ssl.SSLError):
            pass
        await self.flush_tls()

    def encrypt(self, data: bytes) -> bytes:
        """The TLS records carrying ``data``, not sent (to be damaged, or sent with `raw`)."""
        assert self.tls is not None
        self.tls.write(data)
        return self.pending_tls_bytes()

    # -- application data -------------------------------------------------------------------------

    async def send(self, data: bytes) -> None:
        if self.tls is None:
            await self.raw(data)
            return
        try:
            await self.raw(self.encrypt(data))
        except ssl.SSLError as exc:
            raise Closed(f"TLS: {exc.reason or exc}") from None

    async def receive_some(self) -> bytes:
        if self.tls is None:
            return await self._receive_raw()
        while True:
            try:
                data = self.tls.read(65536)
            except ssl.SSLWantReadError:
                pass
            except ssl.SSLZeroReturnError:
                raise Closed("TLS close_notify") from None
            except ssl.SSLError as exc:
                raise Closed(f"TLS: {exc.reason or exc}") from None
            else:
                if data:
                    return data
                raise Closed("TLS EOF")
            await self._flush_quietly()  # a TLS 1.3 server may wait for nothing; keep the client polite
            try:
                self._incoming.write(await self._receive_raw())
            except Closed:
                self._incoming.write_eof()
                raise

    async def receive_frame(self) -> bytes:
        while not self._frames:
            try:
                self._frames.extend(self._reader.feed(await self.receive_some()))
            except Closed:
                raise
            except Exception as exc:  # an answer frame that cannot even be reassembled
                raise Closed(f"unreadable answer: {exc}") from None
        return bytes(self._frames.pop(0))

    def frame(self, api_key: int, version: int, body: Any, client_id: str | None = "kraftpy-fuzz") -> tuple[int, bytes]:
        """(correlation id, the size-prefixed request) for a request object."""
        self._correlation += 1
        data = join_frame(encode_request(api_key, version, self._correlation, client_id, body))
        return self._correlation, data

    async def request(self, api_key: int, version: int, body: Any) -> tuple[int, Any]:
        """Send a request and return (correlation id of the answer, decoded body); `Closed` on a close,
        `kraftpy.protocol.errors.InvalidResponseError` on an answer that does not decode."""
        correlation, data = self.frame(api_key, version, body)
        await self.send(data)
        answer = await self.receive_frame()
        header, response = decode_response(api_key, version, answer)
        if header.correlation_id != correlation:
            raise WrongCorrelation(f"answer for correlation id {header.correlation_id}, asked {correlation}")
        return correlation, response

    async def aclose(self) -> None:
        with trio.CancelScope(shield=True):
            await trio.aclose_forcefully(self.stream)


class WrongCorrelation(Exception):
    """An answer carrying another request's correlation id."""
