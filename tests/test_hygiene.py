"""Checks on the tests themselves: the autojump clock refuses real sockets."""

import pytest
import trio
import trio.testing


def refused():
    return pytest.RaisesGroup(pytest.RaisesExc(Exception, match="autojump_clock with a real socket"),
                              allow_unwrapped=True, flatten_subgroups=True)


async def test_autojump_clock_refuses_real_sockets(autojump_clock):
    with refused():
        await trio.open_tcp_listeners(0, host="127.0.0.1")
    with refused():
        await trio.open_tcp_stream("127.0.0.1", 9)
    with refused():
        trio.socket.socket()


async def test_autojump_clock_serves_in_memory_streams(autojump_clock):
    client, server = trio.testing.memory_stream_pair()
    await client.send_all(b"ping")
    assert await server.receive_some() == b"ping"
    start = trio.current_time()
    with trio.move_on_after(3600):
        await server.receive_some()  # nobody sends: the virtual clock jumps to the timeout
    assert trio.current_time() - start == 3600


async def test_without_the_autojump_clock_real_sockets_open():
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    async with listeners[0]:
        assert listeners[0].socket.getsockname()[1] > 0
