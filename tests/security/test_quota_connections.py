"""Connection limits: max.connections.per.ip (and its overrides), max.connections, a listener's own
max.connections and max.connection.creation.rate refuse the extra connection at accept and serve the
rest; the broker's config keys build them."""

from __future__ import annotations

import socket
import struct

import pytest
import trio

from kraftpy.config import ConfigError, load_config
from kraftpy.rpc.connection_limits import ConnectionLimits, ListenerLimits, parse_ip_overrides
from kraftpy.rpc.kafka_server import KafkaServer
from tests.helpers.deployments import DevDeployment


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


async def read_frame(stream) -> bytes:
    buf = b""
    while len(buf) < 4:
        chunk = await stream.receive_some(4 - len(buf))
        if not chunk:
            return b""
        buf += chunk
    (size,) = struct.unpack(">i", buf)
    body = b""
    while len(body) < size:
        chunk = await stream.receive_some(size - len(body))
        assert chunk
        body += chunk
    return body


async def echo(payload, conn):
    return [struct.pack(">i", len(payload)), payload]


async def served(stream) -> bool:
    """Whether the server answers on ``stream`` (False: it closed it)."""
    try:
        await stream.send_all(frame(b"ping"))
    except trio.BrokenResourceError:
        return False
    try:
        return await read_frame(stream) == b"ping"
    except trio.BrokenResourceError:
        return False


class Log:
    def __init__(self) -> None:
        self.lines: list[tuple[str, dict]] = []

    def warning(self, event: str, **kw) -> None:
        self.lines.append((event, kw))

    info = debug = warning


async def serve_with(nursery, limits: ConnectionLimits) -> int:
    server = KafkaServer(echo, max_frame_bytes=1024, listener="PLAINTEXT")
    server.acceptor.limits = limits
    return await nursery.start(server.serve, "127.0.0.1", 0)


async def test_max_connections_per_ip_refuses_the_extra_connection_and_serves_the_rest():
    log = Log()
    limits = ConnectionLimits(max_connections_per_ip=2, log=log)
    async with trio.open_nursery() as nursery:
        port = await serve_with(nursery, limits)
        with trio.fail_after(30):
            first = await trio.open_tcp_stream("127.0.0.1", port)
            second = await trio.open_tcp_stream("127.0.0.1", port)
            assert await served(first) and await served(second)
            third = await trio.open_tcp_stream("127.0.0.1", port)
            assert not await served(third)
            fourth = await trio.open_tcp_stream("127.0.0.1", port)
            assert not await served(fourth)
            assert await served(first) and await served(second)
            assert limits.refused == {("PLAINTEXT", "max.connections.per.ip"): 2}
            # One line for both refusals (rate-limited), naming the limit.
            assert [kw["limit"] for _, kw in log.lines] == ["max.connections.per.ip"]
            # A connection that ends frees its place.
            await first.aclose()
            while limits.by_ip.get("127.0.0.1") != 1:
                await limits.wait_released()
            again = await trio.open_tcp_stream("127.0.0.1", port)
            assert await served(again)
        nursery.cancel_scope.cancel()


async def test_per_ip_override_and_max_connections():
    limits = ConnectionLimits(max_connections_per_ip=1, per_ip_overrides={"127.0.0.1": 3}, max_connections=2)
    async with trio.open_nursery() as nursery:
        port = await serve_with(nursery, limits)
        with trio.fail_after(30):
            streams = [await trio.open_tcp_stream("127.0.0.1", port) for _ in range(3)]
            results = [await served(s) for s in streams]
            # The override lifts the per-address limit to 3; max.connections=2 refuses the third.
            assert results == [True, True, False]
            assert limits.refused == {("PLAINTEXT", "max.connections"): 1}
        nursery.cancel_scope.cancel()


async def test_connection_creation_rate_refuses_past_the_rate():
    now = [100.0]
    limits = ConnectionLimits(listeners={"PLAINTEXT": ListenerLimits(max_connection_creation_rate=3)},
                              clock=lambda: now[0])
    async with trio.open_nursery() as nursery:
        port = await serve_with(nursery, limits)
        with trio.fail_after(30):
            streams = [await trio.open_tcp_stream("127.0.0.1", port) for _ in range(5)]
            assert [await served(s) for s in streams] == [True, True, True, False, False]
            assert limits.refused == {("PLAINTEXT", "max.connection.creation.rate"): 2}
            # Two windows later the rate (3 over 2 s) leaves room for three more per second.
            now[0] += 2.0
            later = await trio.open_tcp_stream("127.0.0.1", port)
            assert await served(later)
            assert await served(streams[0])
        nursery.cancel_scope.cancel()


def test_listener_limit_and_inter_broker_exemption():
    limits = ConnectionLimits(max_connections=1, inter_broker_listener="REPLICATION",
                              listeners={"CLIENTS": ListenerLimits(max_connections=5)}, clock=lambda: 0.0)
    assert limits.admit("CLIENTS", "10.0.0.1")
    assert not limits.admit("CLIENTS", "10.0.0.2")  # max.connections
    assert limits.admit("REPLICATION", "10.0.0.3")  # counted, never refused for max.connections
    assert limits.total == 2
    own = ConnectionLimits(listeners={"CLIENTS": ListenerLimits(max_connections=1)}, clock=lambda: 0.0)
    assert own.admit("CLIENTS", "a") and not own.admit("CLIENTS", "b")
    assert own.refused == {("CLIENTS", "listener.name.clients.max.connections"): 1}


def test_parse_ip_overrides():
    assert parse_ip_overrides("10.0.0.1:5, ::1:7,[fe80::1]:2") == {"10.0.0.1": 5, "::1": 7, "fe80::1": 2}
    assert parse_ip_overrides("") == {}
    with pytest.raises(ValueError, match="'nohost' is not address:count"):
        parse_ip_overrides("nohost")


BROKER = """\
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:9093
listeners=PLAINTEXT://127.0.0.1:9092,CLIENTS://127.0.0.1:9094,CONTROLLER://127.0.0.1:9093
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CLIENTS:PLAINTEXT,CONTROLLER:PLAINTEXT
controller.listener.names=CONTROLLER
log.dirs=/tmp/a
"""


def test_limits_from_the_broker_config():
    assert ConnectionLimits.from_config(load_config(text=BROKER)) is None  # nothing limited
    config = load_config(text=BROKER + "max.connections=100\nmax.connections.per.ip=5\n"
                         "max.connections.per.ip.overrides=10.0.0.1:50\nmax.connection.creation.rate=20\n"
                         "listener.name.clients.max.connections=10\n"
                         "listener.name.clients.max.connection.creation.rate=7\n")
    limits = ConnectionLimits.from_config(config)
    assert (limits.max_connections, limits.max_connections_per_ip) == (100, 5)
    assert limits.per_ip_overrides == {"10.0.0.1": 50}
    assert limits.inter_broker_listener == "PLAINTEXT"
    assert limits.listeners == {"PLAINTEXT": ListenerLimits(max_connection_creation_rate=20),
                                "CLIENTS": ListenerLimits(max_connections=10, max_connection_creation_rate=7)}
    with pytest.raises(ConfigError) as info:
        ConnectionLimits.from_config(load_config(text=BROKER + "max.connections.per.ip.overrides=10.0.0.1\n"))
    assert str(info.value) == "<string>:8: max.connections.per.ip.overrides=10.0.0.1: '10.0.0.1' is not address:count"


def _api_versions(sock: socket.socket) -> bool:
    """Whether the broker answers an ApiVersions v0 request on ``sock`` (False: it closed it)."""
    client_id = b"limits"
    body = struct.pack(">hhih", 18, 0, 7, len(client_id)) + client_id
    try:
        sock.sendall(struct.pack(">i", len(body)) + body)
        response = b""
        while len(response) < 4 or len(response) < 4 + struct.unpack(">i", response[:4])[0]:
            chunk = sock.recv(65536)
            if not chunk:
                return False
            response += chunk
    except (ConnectionResetError, BrokenPipeError):
        return False
    return struct.unpack(">i", response[4:8])[0] == 7


def test_a_broker_process_refuses_past_max_connections_per_ip(tmp_path):
    dev = DevDeployment(tmp_path / "dev")
    dev.proc.argv += ["--override", "max.connections.per.ip=3"]
    host, port = dev.bootstrap.split(":")
    with dev:
        socks = [socket.create_connection((host, int(port)), timeout=30) for _ in range(3)]
        assert all(_api_versions(s) for s in socks)
        extra = socket.create_connection((host, int(port)), timeout=30)
        assert not _api_versions(extra)
        line = dev.proc.wait_for("connection refused: over a connection limit")
        assert line["limit"] == "max.connections.per.ip" and line["peer_host"] == "127.0.0.1"
        assert all(_api_versions(s) for s in socks)  # the others are served
        for s in (*socks, extra):
            s.close()
