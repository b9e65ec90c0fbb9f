"""The msgpack control plane: requests, errors, timeouts, reconnects, malformed frames."""

import struct

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


async def start_server(nursery, handler, **kw):
    server = ControlServer(handler, **kw)
    port = await nursery.start(server.serve, "127.0.0.1", 0)
    return server, port


async def echo(api, body):
    if api == "echo":
        return {"echo": body}
    if api == "fail":
        raise RpcError("NOT_CONTROLLER", "ask another")
    if api == "slow":
        await trio.sleep(body["seconds"])
        return {"slept": body["seconds"]}
    if api == "crash":
        raise ValueError("bug")
    raise RpcError("UNSUPPORTED_VERSION", api)


async def test_request_response_and_error_codes():
    async with trio.open_nursery() as nursery:
        _, port = await start_server(nursery, echo)
        client = ControlClient(nursery, "127.0.0.1", port)
        assert await client.request("echo", {"x": [1, b"\x00", "s"]}) == {"echo": {"x": [1, b"\x00", "s"]}}
        with pytest.raises(RpcError) as err:
            await client.request("fail", {})
        assert err.value.code == "NOT_CONTROLLER" and err.value.message == "ask another"
        with pytest.raises(RpcError) as err:
            await client.request("crash", {})
        assert err.value.code == "UNKNOWN_SERVER_ERROR"
        assert await client.request("echo", {"after": 1}) == {"echo": {"after": 1}}
        nursery.cancel_scope.cancel()


async def test_concurrent_requests_are_answered_by_id_not_in_order(autojump_clock):
    async with trio.open_nursery() as nursery:
        _, port = await start_server(nursery, echo)
        client = ControlClient(nursery, "127.0.0.1", port, request_timeout=30)
        done = []

        async def call(seconds):
            done.append((await client.request("slow", {"seconds": seconds}))["slept"])

        async with trio.open_nursery() as calls:
            calls.start_soon(call, 5)
            calls.start_soon(call, 1)
        assert done == [1, 5]
        nursery.cancel_scope.cancel()


async def test_timeout_then_the_connection_still_serves(autojump_clock):
    async with trio.open_nursery() as nursery:
        _, port = await start_server(nursery, echo)
        client = ControlClient(nursery, "127.0.0.1", port)
        with pytest.raises(RequestTimeout):
            await client.request("slow", {"seconds": 10}, timeout=1)
        assert await client.request("echo", {}) == {"echo": {}}
        nursery.cancel_scope.cancel()


async def test_connect_failure_backs_off_then_reconnects(autojump_clock):
    async with trio.open_nursery() as nursery:
        listener = trio.socket.socket()
        await listener.bind(("127.0.0.1", 0))
        port = listener.getsockname()[1]
        listener.close()  # nothing listens there now
        client = ControlClient(nursery, "127.0.0.1", port, retry_backoff=0.5, max_backoff=2)
        with pytest.raises(ConnectionLost):
            await client.request("echo", {})
        start = trio.current_time()
        with pytest.raises(ConnectionLost):
            await client.request("echo", {})
        assert trio.current_time() - start >= 0.5  # waited out the back-off, on the mock clock
        server = ControlServer(echo)
        listeners = await trio.open_tcp_listeners(port, host="127.0.0.1")
        nursery.start_soon(trio.serve_listeners, server._handle_connection, listeners)
        await trio.sleep(3)
        assert await client.request("echo", {"ok": True}) == {"echo": {"ok": True}}
        nursery.cancel_scope.cancel()


async def test_server_restart_fails_pending_and_next_request_reconnects():
    async with trio.open_nursery() as nursery:
        server_scope = trio.CancelScope()

        async def run_server(task_status=trio.TASK_STATUS_IGNORED):
            with server_scope:
                server = ControlServer(echo)
                await server.serve("127.0.0.1", 0, task_status=task_status)

        port = await nursery.start(run_server)
        client = ControlClient(nursery, "127.0.0.1", port, request_timeout=10)
        assert await client.request("echo", {}) == {"echo": {}}
        server_scope.cancel()
        with pytest.raises(ConnectionLost):
            await client.request("slow", {"seconds": 5})
        server = ControlServer(echo)
        listeners = await trio.open_tcp_listeners(port, host="127.0.0.1")
        nursery.start_soon(trio.serve_listeners, server._handle_connection, listeners)
        for _ in range(100):  # the first attempt may still meet the closing connection
            try:
                assert await client.request("echo", {"again": 1}) == {"echo": {"again": 1}}
                break
            except ConnectionLost:
                await trio.sleep(0.01)
        else:
            raise AssertionError("never reconnected")
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
        good = ControlClient(nursery, "127.0.0.1", port)
        assert await good.request("echo", {"n": 1}) == {"echo": {"n": 1}}
        bad = await trio.open_tcp_stream("127.0.0.1", port)
        await bad.send_all(frame)
        with trio.fail_after(5):
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
