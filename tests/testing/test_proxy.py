"""What `kraftpy.testing` adds to the fault proxy: ``hold`` (a connection across a cut is held open and
silent until the heal, not refused, so its peer waits instead of reconnecting at once), and telling a
peer by its whole connection. The proxy's other faults are tested with the fault harness
(tests/jepsen/test_nemesis.py)."""

from __future__ import annotations

import functools
import os
import socket

import pytest
import trio
from trio.testing import wait_all_tasks_blocked

from kraftpy.testing.proxy import Proxy, Route, SocketOwners, by_source_address, socket_inode

SOURCES = {"127.0.0.21": "a", "127.0.0.22": "b"}


async def echo(stream: trio.SocketStream) -> None:
    async with stream:
        async for data in stream:
            await stream.send_all(data)


async def test_a_connection_across_a_cut_is_held_silent_until_the_heal(nursery):
    listeners = await nursery.start(functools.partial(trio.serve_tcp, echo, 0, host="127.0.0.1"))
    echo_port = listeners[0].socket.getsockname()[1]
    proxy = Proxy([Route(n, ("127.0.0.1", echo_port)) for n in "ab"], identify=by_source_address(SOURCES),
                  hold=True)
    await nursery.start(proxy.run)
    proxy.partition([("a", "b")])
    held = await trio.open_tcp_stream(*proxy.address("b"), local_address="127.0.0.21")
    await held.send_all(b"ping")
    with trio.fail_after(10):  # until the proxy has told who connected (in a worker thread) and decided
        while not proxy.stats["held"]:
            await trio.sleep(0.005)
    assert proxy.stats["held"] == 1 and proxy.stats["refused"] == 0
    with socket.fromfd(held.socket.fileno(), socket.AF_INET, socket.SOCK_STREAM) as peek:
        with pytest.raises(BlockingIOError):  # neither closed nor answered: open and silent
            peek.recv(1, socket.MSG_DONTWAIT)
    proxy.heal()
    await wait_all_tasks_blocked()
    try:  # the heal closes it (a reset: the proxy never read what was sent); its peer connects again
        assert await held.receive_some() == b""
    except trio.BrokenResourceError:
        pass
    again = await trio.open_tcp_stream(*proxy.address("b"), local_address="127.0.0.21")
    await again.send_all(b"pong")
    assert await again.receive_some() == b"pong"
    await again.aclose()
    await held.aclose()


def test_a_peer_is_found_by_its_connection_not_only_its_port():
    """Linux may give two outgoing connections one local port when they go to different addresses: the
    peer's socket is the one connected to the proxy's port."""
    listeners = [socket.create_server(("127.0.0.1", 0)) for _ in range(2)]
    clients = []
    try:
        for listener in listeners:
            client = socket.socket()
            client.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            client.bind(("127.0.0.1", clients[0].getsockname()[1] if clients else 0))
            client.connect(listener.getsockname())
            clients.append(client)
        local = clients[0].getsockname()
        assert clients[1].getsockname() == local
        inodes = [os.fstat(c.fileno()).st_ino for c in clients]
        for listener, inode in zip(listeners, inodes, strict=True):
            assert socket_inode(local, {listener.getsockname()[1]}) == inode
    finally:
        for s in clients + listeners:
            s.close()


async def test_a_proxy_tells_its_socket_owners_which_ports_peers_connect_to(nursery):
    owners = SocketOwners(dict)
    proxy = Proxy([Route("a", ("127.0.0.1", 9)), Route("b", ("127.0.0.1", 9))], identify=owners)
    await nursery.start(proxy.run)
    assert owners.remote_ports is not None and owners.remote_ports() == {proxy.address(n)[1] for n in "ab"}


async def test_a_connection_cut_while_its_upstream_opens_is_closed(nursery, monkeypatch):
    """`partition` closes the connections it knows; one whose upstream was still being opened is closed
    as soon as it is, not piped across the cut."""
    listeners = await nursery.start(functools.partial(trio.serve_tcp, echo, 0, host="127.0.0.1"))
    echo_port = listeners[0].socket.getsockname()[1]
    proxy = Proxy([Route(n, ("127.0.0.1", echo_port)) for n in "ab"], identify=by_source_address(SOURCES))
    await nursery.start(proxy.run)
    opening, go_on = trio.Event(), trio.Event()
    open_tcp_stream = trio.open_tcp_stream

    async def slowly(*args, **kwargs):
        opening.set()
        await go_on.wait()
        return await open_tcp_stream(*args, **kwargs)

    monkeypatch.setattr(trio, "open_tcp_stream", slowly)
    client = await open_tcp_stream(*proxy.address("b"), local_address="127.0.0.21")
    await opening.wait()
    proxy.partition([("a", "b")])
    go_on.set()
    await client.send_all(b"ping")
    try:
        assert await client.receive_some() == b""
    except trio.BrokenResourceError:
        pass  # closed with "ping" unread: a reset
    assert proxy.stats["closed_by_partition"] == 1
    await client.aclose()
