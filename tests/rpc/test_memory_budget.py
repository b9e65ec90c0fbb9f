"""Request memory stays bounded: buffers grow as bytes arrive, all connections of a server share one
budget (queued.max.request.bytes), idle connections are closed, and running out of descriptors backs
off instead of spinning."""

from __future__ import annotations

import errno
import gc
import os
import resource
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import structlog
import trio
import trio.testing

from kraftpy.protocol.frames import FrameReader
from kraftpy.rpc.control import ControlClient, ControlServer, pack
from kraftpy.rpc.framing import SMALL_REQUEST_RESERVE, FramedStream, IdleConnection, RequestBudget
from kraftpy.rpc.kafka_server import KafkaServer

ROOT = Path(__file__).resolve().parents[2]

MiB = 1024 * 1024


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


async def read_frame(stream) -> bytes:
    buf = b""
    while len(buf) < 4:
        chunk = await stream.receive_some(4 - len(buf))
        assert chunk, "connection closed"
        buf += chunk
    (size,) = struct.unpack(">i", buf)
    body = b""
    while len(body) < size:
        chunk = await stream.receive_some(size - len(body))
        assert chunk, "connection closed"
        body += chunk
    return body


async def echo(payload, conn):
    return [struct.pack(">i", len(payload)), bytes(payload)]


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


async def wait_until(predicate) -> None:
    """Let every task run until ``predicate`` holds (the caller bounds it with fail_after)."""
    while not predicate():
        await trio.testing.wait_all_tasks_blocked()


# -- FrameReader ---------------------------------------------------------------------------------------


def test_a_partial_frame_holds_what_arrived_not_what_was_announced():
    import tracemalloc

    reader = FrameReader(max_frame_size=200 * MiB)
    tracemalloc.start()
    try:
        assert reader.feed(struct.pack(">i", 100 * MiB) + b"x" * 1000) == []
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert reader.pending == 1004 and reader.remaining == 100 * MiB - 1000 and reader.frame_size == 100 * MiB
    assert held < 64 * 1024  # not 100 MiB


# -- RequestBudget -------------------------------------------------------------------------------------


async def test_budget_waits_in_arrival_order_and_keeps_a_reserve_for_small_frames():
    budget = RequestBudget(4 * MiB)
    assert budget.reserve == SMALL_REQUEST_RESERVE and budget.largest_frame == 3 * MiB
    await budget.acquire(2 * MiB, large=True)
    order = []

    async def take(name, size, large):
        await budget.acquire(size, large=large)
        order.append(name)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(take, "big", 2 * MiB, True)  # 2 + 2 > 3 MiB (the large frames' share): waits
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(take, "later-large", 1, True)  # would fit, but "big" came first
        nursery.start_soon(take, "small", MiB, False)  # small frames may use the reserve
        await trio.testing.wait_all_tasks_blocked()
        assert order == ["small"] and budget.used == 3 * MiB and budget.waiting == 2
        budget.release(2 * MiB)  # 1 MiB used: "big" fits, then "later-large" does not
        await trio.testing.wait_all_tasks_blocked()
        assert order == ["small", "big"] and budget.waiting == 1
        budget.release(MiB)
        await trio.testing.wait_all_tasks_blocked()
        assert order == ["small", "big", "later-large"]
    assert budget.used == 2 * MiB + 1 and budget.peak == 3 * MiB
    budget.release(2 * MiB + 1)
    assert budget.used == 0


async def test_a_cancelled_waiter_takes_nothing_and_gives_way():
    budget = RequestBudget(4 * MiB)
    await budget.acquire(3 * MiB, large=True)
    got = []
    async with trio.open_nursery() as nursery:
        waiting = trio.CancelScope()

        async def wait_for(name, size):
            with waiting if name == "first" else trio.CancelScope():
                await budget.acquire(size, large=True)
                got.append(name)

        nursery.start_soon(wait_for, "first", 2 * MiB)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(wait_for, "second", MiB // 2)  # queued behind "first"
        await trio.testing.wait_all_tasks_blocked()
        assert budget.waiting == 2 and got == []
        waiting.cancel()  # "first" gives up: nothing taken, and "second" is at the head now
        await trio.testing.wait_all_tasks_blocked()
        assert got == [] and budget.waiting == 1  # 3 + 0.5 > 3 MiB
        budget.release(MiB)
    assert got == ["second"] and budget.used == 2 * MiB + MiB // 2 and budget.waiting == 0


# -- the Kafka port --------------------------------------------------------------------------------------


async def test_connections_announcing_100_mib_and_trickling_stay_within_the_budget():
    """The probe: many connections announce 100 MiB and trickle. Before, each allocated 100 MiB at
    once. Now one large frame is admitted at a time (the budget is 200 MiB, Kafka's 100 MiB frames),
    the others stop being read, memory grows only by what arrived, and a client is served meanwhile."""
    tricklers = 10
    server = KafkaServer(echo, max_frame_bytes=100 * MiB, queued_max_request_bytes=200 * MiB)
    budget = server.budget
    async with trio.open_nursery() as nursery:
        port = await nursery.start(server.serve, "127.0.0.1", 0)
        with trio.fail_after(60):  # bounds a failure only
            before = rss_bytes()
            streams = []
            for _ in range(tricklers):
                stream = await trio.open_tcp_stream("127.0.0.1", port)
                await stream.send_all(struct.pack(">i", 100 * MiB) + b"t" * 1000)
                streams.append(stream)
            await wait_until(lambda: budget.waiting == tricklers - 1)
            for _ in range(3):  # keep trickling: waiting connections are not read
                for stream in streams:
                    await stream.send_all(b"t" * 1000)
            normal = await trio.open_tcp_stream("127.0.0.1", port)
            for i in range(5):
                await normal.send_all(frame(b"ping %d" % i))
                assert await read_frame(normal) == b"ping %d" % i
            grown = rss_bytes() - before
            # One 100 MiB reservation (admitted, not allocated) and a little more for the others.
            assert 100 * MiB <= budget.used <= budget.limit
            assert budget.peak <= budget.limit
            assert grown < 40 * MiB, f"RSS grew by {grown / MiB:.0f} MiB"
            for stream in streams:
                await stream.aclose()
            await wait_until(lambda: budget.used == 0)
            await normal.send_all(frame(b"after"))
            assert await read_frame(normal) == b"after"
        nursery.cancel_scope.cancel()


async def test_large_frames_complete_one_after_another_and_release_their_bytes():
    """Frames that do not fit together wait their turn; each is read whole, answered, then released."""
    size = 3 * MiB
    server = KafkaServer(echo, max_frame_bytes=8 * MiB, queued_max_request_bytes=8 * MiB)
    payloads = [bytes([i]) * size for i in range(4)]
    async with trio.open_nursery() as nursery:
        port = await nursery.start(server.serve, "127.0.0.1", 0)
        with trio.fail_after(60):  # bounds a failure only
            async def one(payload):
                stream = await trio.open_tcp_stream("127.0.0.1", port)
                async with trio.open_nursery() as inner:
                    inner.start_soon(stream.send_all, frame(payload))
                    assert await read_frame(stream) == payload
                await stream.aclose()

            async with trio.open_nursery() as clients:
                for payload in payloads:
                    clients.start_soon(one, payload)
            assert server.budget.peak <= 7 * MiB  # two 3 MiB frames at most: 8 MiB minus the reserve
            await wait_until(lambda: server.budget.used == 0)
        nursery.cancel_scope.cancel()


async def test_a_frame_the_budget_can_never_admit_closes_that_connection_only():
    with structlog.testing.capture_logs() as logs:
        server = KafkaServer(echo, max_frame_bytes=100 * MiB, queued_max_request_bytes=4 * MiB)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(server.serve, "127.0.0.1", 0)
        with trio.fail_after(30), structlog.testing.capture_logs() as logs:
            big = await trio.open_tcp_stream("127.0.0.1", port)
            await big.send_all(struct.pack(">i", 10 * MiB) + b"x" * 100)
            assert await big.receive_some(10) == b""  # closed
            other = await trio.open_tcp_stream("127.0.0.1", port)
            await other.send_all(frame(b"fine"))
            assert await read_frame(other) == b"fine"
        reasons = [line["reason"] for line in logs if line["event"] == "closing connection"]
        assert reasons and "queued.max.request.bytes=4194304" in reasons[0]
        assert server.budget.used <= len(b"fine") + 4
        nursery.cancel_scope.cancel()


# -- the control port --------------------------------------------------------------------------------------


async def test_the_control_port_has_its_own_budget():
    async def handler(api, body):
        return {"ok": True}

    server = ControlServer(handler, max_frame_bytes=100 * MiB, queued_max_request_bytes=200 * MiB)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(server.serve, "127.0.0.1", 0)
        with trio.fail_after(60):  # bounds a failure only
            before = rss_bytes()
            streams = []
            for _ in range(5):
                stream = await trio.open_tcp_stream("127.0.0.1", port)
                await stream.send_all(struct.pack(">i", 100 * MiB) + pack({"id": 1, "api": "x", "body": {}}))
                streams.append(stream)
            await wait_until(lambda: server.budget.waiting == 4)
            client = ControlClient(nursery, "127.0.0.1", port, request_timeout=30, connect_timeout=30)
            assert await client.request("anything", {}) == {"ok": True}
            assert server.budget.peak <= server.budget.limit
            assert rss_bytes() - before < 40 * MiB
            for stream in streams:
                await stream.aclose()
            await client.aclose()
            await wait_until(lambda: server.budget.used == 0)
        nursery.cancel_scope.cancel()


# -- connections.max.idle.ms ------------------------------------------------------------------------------


async def test_idle_connections_are_closed_after_connections_max_idle_ms(autojump_clock):
    slow_done = trio.Event()

    async def handler(payload, conn):
        if payload == b"slow":
            await trio.sleep(900)  # a request in progress is not idleness
            slow_done.set()
        return [struct.pack(">i", len(payload)), bytes(payload)]

    server = KafkaServer(handler, max_frame_bytes=1024, connections_max_idle_ms=600_000)
    client, server_side = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(server._serve_connection, server_side)
        await client.send_all(frame(b"slow"))
        assert await read_frame(client) == b"slow"
        # Active every 500 s: stays open well past one idle period.
        for _ in range(3):
            await trio.sleep(500)
            await client.send_all(frame(b"hi"))
            assert await read_frame(client) == b"hi"
        # Bytes trickling inside one frame are activity too.
        await client.send_all(struct.pack(">i", 3))
        for byte in b"abc":
            await trio.sleep(500)
            await client.send_all(bytes([byte]))
        assert await read_frame(client) == b"abc"
        quiet_since = trio.current_time()
        assert await client.receive_some(10) == b""  # the server closed it
        assert trio.current_time() - quiet_since == pytest.approx(600, abs=1)
    assert server.connections == 0


async def test_waiting_for_the_budget_is_not_idleness(autojump_clock):
    """A connection whose large frame waits for request bytes longer than connections.max.idle.ms is
    served once another gives them back, not closed as idle."""
    release = trio.Event()

    async def handler(payload, conn):
        if payload == b"hold":
            await release.wait()  # holds its bytes of the budget until released
        return [struct.pack(">i", 8), bytes(payload[:8]).ljust(8)]

    limit = 2 * MiB
    server = KafkaServer(handler, max_frame_bytes=8 * MiB, queued_max_request_bytes=limit,
                         connections_max_idle_ms=60_000)
    holder, holder_side = trio.testing.memory_stream_pair()
    waiter, waiter_side = trio.testing.memory_stream_pair()
    large = b"L" * (limit - SMALL_REQUEST_RESERVE - 8)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(server._serve_connection, holder_side)
        nursery.start_soon(server._serve_connection, waiter_side)
        await holder.send_all(frame(b"hold"))
        await wait_until(lambda: server.budget.used > 0)
        nursery.start_soon(waiter.send_all, frame(large))
        await wait_until(lambda: server.budget.waiting == 1)
        await trio.sleep(600)  # ten idle periods waiting for the budget
        assert server.connections == 2
        release.set()
        assert await read_frame(holder) == b"hold".ljust(8)
        assert await read_frame(waiter) == large[:8]
        nursery.cancel_scope.cancel()


async def test_the_idle_watchdog_closes_at_the_timeout_to_the_tick_and_nests(autojump_clock):
    """`FramedStream.expiring_when_idle`: a wait of exactly idle_timeout ends the block with
    IdleConnection, however the waits before it went; a nested block adds no second watchdog."""
    client, server_side = trio.testing.memory_stream_pair()
    framed = FramedStream(server_side, 1024, idle_timeout=100.0)
    got = []
    with pytest.raises(IdleConnection):
        async with framed.expiring_when_idle():
            async with framed.expiring_when_idle():
                for delay in (99.0, 1.0, 50.0):
                    await trio.sleep(delay)
                    await client.send_all(frame(b"x"))
                    got.append(bytes(await framed.receive_frame()))
                    await trio.sleep(500)  # handling it is not idleness
                quiet_since = trio.current_time()
                await framed.receive_frame()
    assert got == [b"x"] * 3
    assert trio.current_time() - quiet_since == 100.0


async def test_a_watched_connection_enters_no_cancel_scope_per_frame(autojump_clock, monkeypatch):
    """Inside `expiring_when_idle`, reading frames enters no cancel scope of its own (the cost it was
    made to save); outside, each frame's idle wait is one."""
    entered = []
    original = trio.CancelScope.__enter__

    def counting(scope):
        entered.append(scope)
        return original(scope)

    async def read_three(framed, client):
        for _ in range(3):
            await client.send_all(frame(b"y"))
            assert bytes(await framed.receive_frame()) == b"y"

    client, server_side = trio.testing.memory_stream_pair()
    framed = FramedStream(server_side, 1024, idle_timeout=100.0)
    async with framed.expiring_when_idle():
        await trio.testing.wait_all_tasks_blocked()  # the watchdog asleep (one scope per idle period)
        monkeypatch.setattr(trio.CancelScope, "__enter__", counting)
        await read_three(framed, client)
        monkeypatch.undo()
        assert entered == []
        monkeypatch.setattr(trio.CancelScope, "__enter__", counting)
    monkeypatch.undo()
    entered.clear()
    monkeypatch.setattr(trio.CancelScope, "__enter__", counting)
    await read_three(framed, client)
    monkeypatch.undo()
    assert len(entered) == 3


async def test_a_negative_idle_time_never_closes(autojump_clock):
    server = KafkaServer(echo, max_frame_bytes=1024, connections_max_idle_ms=-1)
    client, server_side = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(server._serve_connection, server_side)
        await trio.sleep(10 * 24 * 3600)
        await client.send_all(frame(b"still"))
        assert await read_frame(client) == b"still"
        nursery.cancel_scope.cancel()


async def test_framed_stream_without_budget_reads_as_before():
    left, right = trio.testing.memory_stream_pair()
    framed = FramedStream(right, 10 * MiB)
    payload = b"z" * (3 * MiB)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(left.send_all, frame(payload) + frame(b"tail"))
        assert bytes(await framed.receive_frame()) == payload
        assert bytes(await framed.receive_frame()) == b"tail"


# -- accept at the open-files limit -------------------------------------------------------------------------


def test_accept_at_the_open_files_limit_backs_off_logs_once_and_recovers():
    """In a process of its own: the episode takes every descriptor but one, and any thread of the test
    process that frees one meanwhile (a client an earlier test left, closing a socket as it reconnects;
    a finalizer) lets the server's accept() succeed, and the episode waits for failures that never come.
    This once failed so in a full run, after other tests in the same process."""
    done = subprocess.run([sys.executable, "-c", "import trio; from tests.rpc.test_memory_budget import "
                           "accept_at_the_open_files_limit as episode; trio.run(episode)"],
                          cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr


async def accept_at_the_open_files_limit() -> None:
    """At the open-files limit, accept() fails with EMFILE: the server backs off, logs one line for the
    whole episode, and takes the waiting connection once a descriptor is free again."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    with structlog.testing.capture_logs() as logs:
        server = KafkaServer(echo, max_frame_bytes=1024)
        fillers: list[int] = []
        async with trio.open_nursery() as nursery:
            port = await nursery.start(server.serve, "127.0.0.1", 0)
            with trio.fail_after(60):  # bounds a failure only
                # No collection while the descriptors are all taken: a finalizer of an earlier test's
                # garbage (a socket left to the collector) would free one, and accept() would not fail.
                gc.collect()
                gc.disable()
                in_use = len(os.listdir("/proc/self/fd"))
                resource.setrlimit(resource.RLIMIT_NOFILE, (in_use + 16, hard))
                try:
                    # Take every descriptor but one, which the client takes: the server's accept()
                    # then fails with EMFILE.
                    while True:
                        try:
                            fillers.append(os.open(os.devnull, os.O_RDONLY))
                        except OSError as exc:
                            assert exc.errno == errno.EMFILE
                            break
                    os.close(fillers.pop())
                    client = await trio.open_tcp_stream("127.0.0.1", port)
                    await client.send_all(frame(b"waiting in the backlog"))
                    while server.acceptor.failed_accepts < 5:  # backing off: 10, 20, 40, 80 ms ...
                        await server.acceptor.accept_failed()
                finally:
                    for fd in fillers:
                        os.close(fd)
                    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
                    gc.enable()
                assert await read_frame(client) == b"waiting in the backlog"
                later = await trio.open_tcp_stream("127.0.0.1", port)
                await later.send_all(frame(b"later"))
                assert await read_frame(later) == b"later"
            nursery.cancel_scope.cancel()
    warnings = [line for line in logs if line["event"] == "cannot accept connections, backing off"]
    assert len(warnings) == 1, warnings  # one line for the whole episode, not one per attempt
    assert "EMFILE" in warnings[0]["error"] and "exc_info" not in warnings[0]
    recovered = [line for line in logs if line["event"] == "accepting connections again"]
    assert len(recovered) == 1 and recovered[0]["failed_attempts"] >= 4
