"""The msgpack control plane: requests, errors, timeouts, reconnects, malformed frames."""

import struct

import attrs
import pytest
import trio
import trio.testing

from kraftpy.rpc.control import (
    ConnectionLost,
    ControlClient,
    ControlServer,
    RequestTimeout,
    RpcError,
    pack,
)
from kraftpy.rpc.wire import WireCodec


async def start_server(nursery, handler, **kw):
    server = ControlServer(handler, **kw)
    port = await nursery.start(server.serve, "127.0.0.1", 0)
    return server, port


def client_for(nursery, port, **kw):
    """A client whose timeouts only bound a failure: no check waits for them to pass."""
    return ControlClient(nursery, "127.0.0.1", port, **{"request_timeout": 30, "connect_timeout": 30, **kw})


async def echo(api, body):
    if api == "echo":
        return {"echo": body}
    if api == "fail":
        raise RpcError("NOT_CONTROLLER", "ask another")
    if api == "crash":
        raise ValueError("bug")
    if api == "decode":
        return {"x": WIRE.decode(body["value"]).x}
    raise RpcError("UNSUPPORTED_VERSION", api)


@attrs.frozen
class Point:
    x: int


WIRE = WireCodec([Point])


async def test_request_response_and_error_codes():
    async with trio.open_nursery() as nursery:
        _, port = await start_server(nursery, echo)
        client = client_for(nursery, port)
        assert await client.request("echo", {"x": [1, b"\x00", "s"]}) == {"echo": {"x": [1, b"\x00", "s"]}}
        with pytest.raises(RpcError) as err:
            await client.request("fail", {})
        assert err.value.code == "NOT_CONTROLLER" and err.value.message == "ask another"
        with pytest.raises(RpcError) as err:
            await client.request("crash", {})
        assert err.value.code == "UNKNOWN_SERVER_ERROR"
        assert await client.request("echo", {"after": 1}) == {"echo": {"after": 1}}
        nursery.cancel_scope.cancel()


async def test_a_body_that_does_not_decode_is_answered_invalid_request():
    """A handler that meets a WireError (an unknown tag, a missing or unexpected field) answers
    INVALID_REQUEST naming the API: the caller's fault, never UNKNOWN_SERVER_ERROR."""
    async with trio.open_nursery() as nursery:
        _, port = await start_server(nursery, echo)
        client = client_for(nursery, port)
        for value in ({"@": "Nope"}, {"@": "Point"}, {"@": "Point", "x": 1, "y": 2}):
            with pytest.raises(RpcError) as err:
                await client.request("decode", {"value": value})
            assert err.value.code == "INVALID_REQUEST" and err.value.message.startswith("decode: "), err.value
        assert await client.request("decode", {"value": {"@": "Point", "x": 1}}) == {"x": 1}
        nursery.cancel_scope.cancel()


async def test_concurrent_requests_are_answered_by_id_not_in_order():
    slow_arrived, release_slow, fast_answered = trio.Event(), trio.Event(), trio.Event()

    async def handler(api, body):
        if api == "slow":
            slow_arrived.set()
            await release_slow.wait()
        return {"n": body["n"]}

    async with trio.open_nursery() as nursery:
        _, port = await start_server(nursery, handler)
        client = client_for(nursery, port)
        answered = []

        async def call(api, n):
            answered.append((api, (await client.request(api, {"n": n}))["n"]))
            if api == "fast":
                fast_answered.set()

        with trio.fail_after(30):  # a server that answers in order never answers "fast": fail, not hang
            async with trio.open_nursery() as calls:
                calls.start_soon(call, "slow", 1)
                await slow_arrived.wait()  # the first request is in the handler, unanswered
                calls.start_soon(call, "fast", 2)
                await fast_answered.wait()
                assert answered == [("fast", 2)]  # the second request overtook the first on one connection
                release_slow.set()
        assert answered == [("fast", 2), ("slow", 1)]  # and each caller got its own answer
        nursery.cancel_scope.cancel()


async def test_timeout_then_the_connection_still_serves():
    release = trio.Event()

    async def handler(api, body):
        if api == "hang":
            await release.wait()
            return {"late": True}
        return await echo(api, body)

    async with trio.open_nursery() as nursery:
        _, port = await start_server(nursery, handler)
        client = client_for(nursery, port)
        assert await client.request("echo", {"n": 1}) == {"echo": {"n": 1}}
        connection = client._conn
        # Nothing answers "hang" until the gate opens, so the short timeout has to fire.
        with trio.fail_after(30), pytest.raises(RequestTimeout):
            await client.request("hang", {}, timeout=0.1)
        release.set()  # the answer now arrives for a caller that left; the client drops it
        await trio.testing.wait_all_tasks_blocked()
        assert await client.request("echo", {"n": 2}) == {"echo": {"n": 2}}
        assert client._conn is connection and not connection.closed
        nursery.cancel_scope.cancel()


async def test_connect_failure_backs_off_then_reconnects(monkeypatch):
    attempts = []
    open_tcp_stream = trio.open_tcp_stream

    async def recording_open_tcp_stream(*args, **kwargs):
        attempts.append(trio.current_time())
        return await open_tcp_stream(*args, **kwargs)

    monkeypatch.setattr(trio, "open_tcp_stream", recording_open_tcp_stream)
    async with trio.open_nursery() as nursery:
        # Bound but not listening: connects are refused at once, and the port stays ours.
        sock = trio.socket.socket()
        await sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        client = client_for(nursery, port, retry_backoff=0.1, max_backoff=0.2)
        for _ in range(3):
            with pytest.raises(ConnectionLost):
                await client.request("echo", {})
        # Each attempt starts a back-off after the previous one failed: lower bounds, never upper.
        assert attempts[1] - attempts[0] >= 0.1
        assert attempts[2] - attempts[1] >= 0.2  # doubled
        sock.listen()
        await nursery.start(trio.serve_listeners, ControlServer(echo)._handle_connection,
                            [trio.SocketListener(sock)])
        assert await client.request("echo", {"ok": True}) == {"echo": {"ok": True}}
        assert len(attempts) == 4 and attempts[3] - attempts[2] >= 0.2  # one attempt, after its back-off
        nursery.cancel_scope.cancel()


async def test_server_restart_fails_pending_and_next_request_reconnects():
    arrived = trio.Event()

    async def handler(api, body):
        if api == "hang":
            arrived.set()
            await trio.sleep_forever()
        return await echo(api, body)

    async with trio.open_nursery() as nursery:
        server_scope = trio.CancelScope()
        server_stopped = trio.Event()

        async def run_server(task_status=trio.TASK_STATUS_IGNORED):
            try:
                with server_scope:
                    await ControlServer(handler).serve("127.0.0.1", 0, task_status=task_status)
            finally:
                server_stopped.set()  # its listener and connections are closed

        async def stop_server_while_hang_is_pending():
            await arrived.wait()
            server_scope.cancel()

        port = await nursery.start(run_server)
        client = client_for(nursery, port)
        assert await client.request("echo", {}) == {"echo": {}}
        nursery.start_soon(stop_server_while_hang_is_pending)
        with trio.fail_after(30), pytest.raises(ConnectionLost):  # a client that missed the close hangs
            await client.request("hang", {})
        await server_stopped.wait()
        listeners = await trio.open_tcp_listeners(port, host="127.0.0.1")
        nursery.start_soon(trio.serve_listeners, ControlServer(handler)._handle_connection, listeners)
        assert await client.request("echo", {"again": 1}) == {"echo": {"again": 1}}
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("frame", [
    struct.pack(">i", 5) + b"\xc1\xc1\xc1\xc1\xc1",          # not msgpack
    struct.pack(">i", 1) + pack([1])[:1],                      # not a map
    b"\x00\x00\x00\x09" + pack({"id": "x", "api": 1, "body": 2}),  # wrong types (size is off too)
    struct.pack(">i", -4),                                     # negative size
    struct.pack(">i", 1 << 30),                                # over the limit
])
async def test_malformed_frame_closes_that_connection_only(frame):
    async with trio.open_nursery() as nursery:
        _, port = await start_server(nursery, echo, max_frame_bytes=1 << 20)
        good = client_for(nursery, port)
        assert await good.request("echo", {"n": 1}) == {"echo": {"n": 1}}
        bad = await trio.open_tcp_stream("127.0.0.1", port)
        await bad.send_all(frame)
        with trio.fail_after(30):  # bounds a failure only
            while True:  # the server closes the bad connection: we read EOF
                try:
                    data = await bad.receive_some(100)
                except trio.BrokenResourceError:
                    break
                if not data:
                    break
        await bad.aclose()
        assert await good.request("echo", {"n": 2}) == {"echo": {"n": 2}}
        nursery.cancel_scope.cancel()
