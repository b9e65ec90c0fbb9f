"""The Kafka-protocol server loop: in-order answers, sendfile parts, bad frames close one connection."""

import struct

import pytest
import trio
import trio.testing

from kraftpy.protocol.types import FileRegion
from kraftpy.rpc.kafka_server import BadRequest, KafkaServer


async def read_frame(stream):
    buf = b""
    while len(buf) < 4:
        buf += await stream.receive_some(4 - len(buf))
    (size,) = struct.unpack(">i", buf)
    body = b""
    while len(body) < size:
        chunk = await stream.receive_some(size - len(body))
        assert chunk
        body += chunk
    return body


def frame(payload):
    return struct.pack(">i", len(payload)) + payload


async def test_answers_in_order_with_file_regions(tmp_path):
    data = bytes(range(256)) * 4096
    path = tmp_path / "segment.log"
    path.write_bytes(data)
    fd = open(path, "rb")  # noqa: SIM115 - closed below
    handled = []
    slow_started, release_slow = trio.Event(), trio.Event()

    async def handler(payload, conn):
        handled.append(bytes(payload))
        if payload == b"slow":
            slow_started.set()
            await release_slow.wait()
            return [struct.pack(">i", 4), b"slow"]
        if payload == b"file":
            region = FileRegion(fd.fileno(), 1000, 300_000)
            return [struct.pack(">i", 4 + region.length), b"file", region]
        if payload == b"quiet":
            return None
        if payload == b"bad":
            raise BadRequest("does not parse")
        return [struct.pack(">i", len(payload)), payload]

    async with trio.open_nursery() as nursery:
        server = KafkaServer(handler, max_frame_bytes=1024)
        port = await nursery.start(server.serve, "127.0.0.1", 0)
        with trio.fail_after(30):  # bounds a failure only
            client = await trio.open_tcp_stream("127.0.0.1", port)
            await client.send_all(frame(b"slow") + frame(b"quiet") + frame(b"fast") + frame(b"file"))
            await slow_started.wait()
            # Every task has run as far as it can, yet only "slow" reached the handler: one at a time.
            await trio.testing.wait_all_tasks_blocked()
            assert handled == [b"slow"]
            release_slow.set()
            assert await read_frame(client) == b"slow"
            assert await read_frame(client) == b"fast"
            got = await read_frame(client)
            assert got[:4] == b"file" and got[4:] == data[1000:301_000]
            assert handled == [b"slow", b"quiet", b"fast", b"file"]

            other = await trio.open_tcp_stream("127.0.0.1", port)
            await other.send_all(frame(b"bad"))
            assert await other.receive_some(10) == b""  # closed
            too_big = await trio.open_tcp_stream("127.0.0.1", port)
            await too_big.send_all(struct.pack(">i", 2048) + b"x" * 100)
            assert await too_big.receive_some(10) == b""

            await client.send_all(frame(b"still here"))
            assert await read_frame(client) == b"still here"
        nursery.cancel_scope.cancel()
    fd.close()


def produce_frame(name: bytes) -> bytes:
    """A frame whose api key is Produce's (0), then a name the test handler reads."""
    return frame(struct.pack(">h", 0) + name)


def other_frame(name: bytes) -> bytes:
    return frame(struct.pack(">h", 3) + name)  # Metadata's api key


class PipelineHandler:
    """Produce frames that start with ``wait`` allow the next request, then wait for their release."""

    def __init__(self) -> None:
        self.started: list[bytes] = []
        self.releases: dict[bytes, trio.Event] = {}
        self.changed = trio.Event()

    async def __call__(self, payload, conn):
        from kraftpy.rpc.kafka_server import allow_next_request

        name = bytes(payload[2:])
        self.started.append(name)
        self.changed.set()
        self.changed = trio.Event()
        if name.startswith(b"wait"):
            allow_next_request()
            await self.releases.setdefault(name, trio.Event()).wait()
        if name == b"bad":
            raise BadRequest("does not parse")
        return [struct.pack(">i", len(name)), name]

    def release(self, name: bytes) -> None:
        self.releases.setdefault(name, trio.Event()).set()

    async def wait_started(self, count: int) -> None:
        """Wait until ``count`` requests reached the handler, then until nothing else can run."""
        while len(self.started) < count:
            await self.changed.wait()
        await trio.testing.wait_all_tasks_blocked()


async def serve(nursery, handler):
    server = KafkaServer(handler, max_frame_bytes=4 * 1024 * 1024)
    port = await nursery.start(server.serve, "127.0.0.1", 0)
    return await trio.open_tcp_stream("127.0.0.1", port)


async def test_produce_requests_start_while_the_ones_before_wait_and_are_answered_in_order():
    handler = PipelineHandler()
    async with trio.open_nursery() as nursery:
        client = await serve(nursery, handler)
        with trio.fail_after(30):  # bounds a failure only
            await client.send_all(produce_frame(b"wait-1") + produce_frame(b"wait-2") + produce_frame(b"fast"))
            await handler.wait_started(3)
            # All three reached the handler while the first two still wait for their release.
            assert handler.started == [b"wait-1", b"wait-2", b"fast"]
            handler.release(b"wait-2")  # answered out of order by the handler...
            await trio.testing.wait_all_tasks_blocked()
            handler.release(b"wait-1")
            # ...and in order on the wire.
            assert [await read_frame(client) for _ in range(3)] == [b"wait-1", b"wait-2", b"fast"]
        nursery.cancel_scope.cancel()


async def test_any_other_request_waits_until_every_answer_before_it_is_sent():
    handler = PipelineHandler()
    async with trio.open_nursery() as nursery:
        client = await serve(nursery, handler)
        with trio.fail_after(30):
            await client.send_all(produce_frame(b"wait-1") + other_frame(b"metadata") + produce_frame(b"after"))
            await handler.wait_started(1)
            assert handler.started == [b"wait-1"]  # the Metadata request waits for the produce's answer
            handler.release(b"wait-1")
            assert await read_frame(client) == b"wait-1"
            assert await read_frame(client) == b"metadata"
            assert await read_frame(client) == b"after"
            assert handler.started == [b"wait-1", b"metadata", b"after"]
        nursery.cancel_scope.cancel()


async def test_a_produce_that_does_not_allow_it_is_answered_before_the_next_starts():
    handler = PipelineHandler()
    hold = trio.Event()

    async def holding(payload, conn):
        if bytes(payload[2:]) != b"hold":
            return await handler(payload, conn)
        handler.started.append(b"hold")  # never calls allow_next_request: as sequential as Kafka
        handler.changed.set()
        await hold.wait()
        return [struct.pack(">i", 4), b"hold"]

    async with trio.open_nursery() as nursery:
        client = await serve(nursery, holding)
        with trio.fail_after(30):
            await client.send_all(produce_frame(b"hold") + produce_frame(b"next"))
            await handler.wait_started(1)
            assert handler.started == [b"hold"]
            hold.set()
            assert await read_frame(client) == b"hold"
            assert await read_frame(client) == b"next"
        nursery.cancel_scope.cancel()


async def test_a_produce_with_acks_0_or_1_alone_on_its_connection_runs_in_the_connections_task():
    """Only acks=all waits for anything beyond its append: a Produce with acks=0 or 1, with no answer
    under way before it, is handled in the task that reads the connection, as any other request is
    (sparing a task's start); acks=all, and any Produce behind one under way, gets a task of its own."""
    from kraftpy.protocol.api_keys import ApiKey
    from kraftpy.protocol.frames import encode_request, join_frame
    from kraftpy.protocol.messages import MetadataRequest, ProduceRequest
    from kraftpy.rpc.kafka_server import allow_next_request

    tasks: dict[str, object] = {}
    releases: dict[str, trio.Event] = {}

    def request(name: str, acks: int | None) -> bytes:
        body = (MetadataRequest(topics=[]) if acks is None
                else ProduceRequest(acks=acks, transactional_id=name, timeout_ms=1, topic_data=[]))
        key = ApiKey.METADATA if acks is None else ApiKey.PRODUCE
        return bytes(join_frame(encode_request(key, 12 if acks is None else 9, 1, "client", body)))

    async def handler(payload, conn):
        from kraftpy.protocol.frames import parse_request

        _, body = parse_request(payload)
        name = getattr(body, "transactional_id", None) or "metadata"
        tasks[name] = trio.lowlevel.current_task()
        if name.startswith("all"):
            allow_next_request()
            await releases.setdefault(name, trio.Event()).wait()
        return [struct.pack(">i", len(name)), name.encode()]

    async with trio.open_nursery() as nursery:
        client = await serve(nursery, handler)
        with trio.fail_after(30):  # bounds a failure only
            await client.send_all(request("metadata", None) + request("one", 1) + request("zero", 0))
            assert [await read_frame(client) for _ in range(2)] == [b"metadata", b"one"]
            await client.send_all(request("all", -1) + request("one-behind", 1))
            while "one-behind" not in tasks:
                await trio.sleep(0)
            releases.setdefault("all", trio.Event()).set()
            assert [await read_frame(client) for _ in range(3)] == [b"zero", b"all", b"one-behind"]
        nursery.cancel_scope.cancel()
    assert tasks["one"] is tasks["metadata"] and tasks["zero"] is tasks["metadata"]
    assert tasks["all"] is not tasks["metadata"]
    assert tasks["one-behind"] is not tasks["metadata"] and tasks["one-behind"] is not tasks["all"]


async def test_the_pipeline_is_bounded_in_requests_and_bytes(monkeypatch):
    from kraftpy.rpc import kafka_server

    monkeypatch.setattr(kafka_server, "PIPELINED_PRODUCES", 3)
    handler = PipelineHandler()
    async with trio.open_nursery() as nursery:
        client = await serve(nursery, handler)
        with trio.fail_after(30):
            await client.send_all(b"".join(produce_frame(b"wait-%d" % i) for i in range(5)))
            await handler.wait_started(3)
            assert handler.started == [b"wait-0", b"wait-1", b"wait-2"]  # three under way at most
            handler.release(b"wait-0")
            assert await read_frame(client) == b"wait-0"
            await handler.wait_started(4)
            assert handler.started == [b"wait-0", b"wait-1", b"wait-2", b"wait-3"]
            for i in range(1, 5):
                handler.release(b"wait-%d" % i)
            assert [await read_frame(client) for _ in range(4)] == [b"wait-%d" % i for i in range(1, 5)]

            # Bytes: a frame that would take the requests under way past PIPELINED_PRODUCE_BYTES waits.
            monkeypatch.setattr(kafka_server, "PIPELINED_PRODUCE_BYTES", 1500)
            big = b"wait-big" + b"x" * 2000
            await client.send_all(produce_frame(b"wait-small") + produce_frame(big))
            await handler.wait_started(6)
            assert handler.started[-1] == b"wait-small"
            handler.release(b"wait-small")
            assert await read_frame(client) == b"wait-small"
            await handler.wait_started(7)
            assert handler.started[-1] == big
            handler.release(big)
            assert await read_frame(client) == big
        nursery.cancel_scope.cancel()


async def test_a_failing_request_under_way_closes_the_connection_and_only_it():
    handler = PipelineHandler()
    async with trio.open_nursery() as nursery:
        server = KafkaServer(handler, max_frame_bytes=1024)
        port = await nursery.start(server.serve, "127.0.0.1", 0)
        with trio.fail_after(30):
            client = await trio.open_tcp_stream("127.0.0.1", port)
            other = await trio.open_tcp_stream("127.0.0.1", port)
            await client.send_all(produce_frame(b"wait-1") + produce_frame(b"bad"))
            # The bad one fails while the first waits: the connection closes with no answer at all.
            assert await client.receive_some(10) == b""
            await other.send_all(produce_frame(b"fine"))
            assert await read_frame(other) == b"fine"
            assert server.connections == 1
        nursery.cancel_scope.cancel()


async def test_small_file_regions_go_out_in_the_write_of_the_bytes_around_them(tmp_path, monkeypatch):
    """A tail fetch's small regions are read and written with the answer's bytes in one write; large
    ones, and small ones past the answer's share, still go by sendfile; the bytes are the same."""
    from kraftpy.rpc import kafka_server

    data = bytes(range(256)) * 4096
    path = tmp_path / "segment.log"
    path.write_bytes(data)
    sendfiles: list[int] = []
    real_sendfile = kafka_server._sendfile

    async def counting_sendfile(stream, fd, offset, length):
        sendfiles.append(length)
        await real_sendfile(stream, fd, offset, length)

    monkeypatch.setattr(kafka_server, "_sendfile", counting_sendfile)
    monkeypatch.setattr(kafka_server, "COALESCED_ANSWER_BYTES", 3000)
    with open(path, "rb") as fd:
        regions = [FileRegion(fd.fileno(), 10, 1000), FileRegion(fd.fileno(), 5000, 100_000),
                   FileRegion(fd.fileno(), 7, 1500), FileRegion(fd.fileno(), 99, 900)]

        async def handler(payload, conn):
            parts = [b"head", regions[0], b"mid", regions[1], regions[2], b"and", regions[3], b"tail"]
            size = sum(part.length if isinstance(part, FileRegion) else len(part) for part in parts)
            return [struct.pack(">i", size), *parts]

        expected = (b"head" + data[10:1010] + b"mid" + data[5000:105_000] + data[7:1507] + b"and" + data[99:999]
                    + b"tail")
        async with trio.open_nursery() as nursery:
            server = KafkaServer(handler, max_frame_bytes=1024)
            port = await nursery.start(server.serve, "127.0.0.1", 0)
            with trio.fail_after(30):  # bounds a failure only
                client = await trio.open_tcp_stream("127.0.0.1", port)
                await client.send_all(frame(b"fetch"))
                assert await read_frame(client) == expected
            nursery.cancel_scope.cancel()
    # The 100 KB region by sendfile, and the last small one: the first two small ones used the answer's share.
    assert sendfiles == [100_000, 900]


async def test_large_answers_are_written_from_the_servers_worker_threads(tmp_path, monkeypatch):
    """An answer with THREADED_WRITE_BYTES or more of file regions is written off the event loop, by at
    most write_threads at once; the bytes are those of the parts, in order (an empty
    region and empty bytes included), and smaller answers are still written by the event loop."""
    import threading

    from kraftpy.rpc import kafka_server

    data = bytes(range(256)) * 8192  # 2 MiB
    path = tmp_path / "segment.log"
    path.write_bytes(data)
    loop_thread = threading.get_ident()
    hops: list[int] = []
    at_once = [0, 0]  # now, most
    real_write_some = kafka_server._write_some

    def watched_write_some(out, writes, index, offset):
        hops.append(threading.get_ident())
        at_once[0] += 1
        at_once[1] = max(at_once)
        try:
            return real_write_some(out, writes, index, offset)
        finally:
            at_once[0] -= 1

    monkeypatch.setattr(kafka_server, "_write_some", watched_write_some)
    with open(path, "rb") as fd:
        def parts_for(payload: bytes) -> list:
            if payload == b"small":
                return [b"small", FileRegion(fd.fileno(), 0, 100_000)]
            return [b"head", FileRegion(fd.fileno(), 10, 700_000), b"", b"mid", FileRegion(fd.fileno(), 5, 0),
                    FileRegion(fd.fileno(), 800_000, 1_200_000), b"tail"]

        async def handler(payload, conn):
            parts = parts_for(payload)
            size = sum(part.length if isinstance(part, FileRegion) else len(part) for part in parts)
            return [struct.pack(">i", size), *parts]

        big = b"head" + data[10:700_010] + b"mid" + data[800_000:2_000_000] + b"tail"
        async with trio.open_nursery() as nursery:
            server = KafkaServer(handler, max_frame_bytes=1024, write_threads=1)
            port = await nursery.start(server.serve, "127.0.0.1", 0)
            with trio.fail_after(60):  # bounds a failure only
                async def read_big() -> None:
                    client = await trio.open_tcp_stream("127.0.0.1", port)
                    await client.send_all(frame(b"big"))
                    assert await read_frame(client) == big

                async with trio.open_nursery() as readers:
                    for _ in range(3):
                        readers.start_soon(read_big)
                assert hops and loop_thread not in hops
                assert at_once[1] == 1  # write_threads=1
                hops.clear()
                client = await trio.open_tcp_stream("127.0.0.1", port)
                await client.send_all(frame(b"small"))
                assert await read_frame(client) == b"small" + data[:100_000]
                assert hops == []
            nursery.cancel_scope.cancel()


def test_a_threaded_write_stops_where_the_socket_would_block_and_goes_on_from_there(tmp_path):
    """`_write_some` writes until the socket would block and says where it stopped; called again from
    there it writes the rest, and the reader gets every byte once, in order."""
    import socket

    from kraftpy.rpc.kafka_server import _socket_writes, _write_some

    data = bytes(range(251)) * 2000
    path = tmp_path / "segment.log"
    path.write_bytes(data)
    writer, reader = socket.socketpair()
    with writer, reader, open(path, "rb") as fd:
        writer.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        writer.setblocking(False)
        writes = _socket_writes([b"a" * 3000, b"b", FileRegion(fd.fileno(), 7, 400_000), b"", b"end"])
        assert [w if isinstance(w, bytes) else w.length for w in writes] == [b"a" * 3000 + b"b", 400_000, b"end"]
        received = bytearray()
        index, offset, stops = 0, 0, 0
        while index < len(writes):
            index, offset = _write_some(writer.fileno(), writes, index, offset)
            stops += index < len(writes)
            reader.settimeout(0)
            try:
                while True:
                    received += reader.recv(1 << 16)
            except BlockingIOError:
                pass
        assert stops >= 2  # it stopped where the socket would block, and went on from there
        assert bytes(received) == b"a" * 3000 + b"b" + data[7:400_007] + b"end"


def test_a_threaded_write_to_a_closed_peer_is_a_broken_stream(tmp_path):
    import socket

    from kraftpy.rpc.kafka_server import _write_some

    path = tmp_path / "segment.log"
    path.write_bytes(b"x" * 100_000)
    writer, reader = socket.socketpair()
    reader.close()
    with writer, open(path, "rb") as fd, pytest.raises(trio.BrokenResourceError):
        _write_some(writer.fileno(), [b"head", FileRegion(fd.fileno(), 0, 100_000)], 0, 0)


def phase_sums(request: str) -> dict[str, tuple[float, float]]:
    """(sum, count) of each phase of ``request``'s time, and of its total, as the registry has them now."""
    from kraftpy.metrics import REGISTRY
    from kraftpy.rpc.kafka_server import PHASES

    def read(name: str, labels: dict[str, str]) -> tuple[float, float]:
        return (REGISTRY.get_sample_value(f"{name}_sum", labels) or 0.0,
                REGISTRY.get_sample_value(f"{name}_count", labels) or 0.0)

    found = {phase: read("kraftpy_request_phase_seconds", {"request": request, "phase": phase}) for phase in PHASES}
    found["total"] = read("kraftpy_request_duration_seconds", {"request": request})
    return found


def grown(before: dict, after: dict) -> dict[str, tuple[float, float]]:
    return {key: (round(after[key][0] - before[key][0], 6), after[key][1] - before[key][1]) for key in after}


async def test_a_requests_time_is_split_into_kafkas_phases(autojump_clock):
    """Each answered request's time goes to Kafka's RequestMetrics phases, on trio's clock: local (its
    handler), remote (inside `waiting_remotely`), response_queue (behind the connection's earlier answer),
    response_send; they add up to its total. A handler may rename its request (FetchConsumer)."""
    from kraftpy.metrics import name_request, waiting_remotely
    from kraftpy.rpc.kafka_server import allow_next_request

    async def handler(payload, conn):
        name = bytes(payload[2:])
        if name == b"replicated":  # an acks=all produce: appended, then parked for the followers
            await trio.sleep(0.25)
            allow_next_request()
            with waiting_remotely():
                await trio.sleep(2)
        elif name == b"next":  # appended meanwhile, answered after the one before it
            await trio.sleep(0.5)
        elif name == b"long-poll":
            name_request("FetchConsumer")
            with waiting_remotely():
                await trio.sleep(0.75)
        return [struct.pack(">i", len(name)), name]

    waiting_remotely().__enter__()  # outside a request's task it counts nothing (and needs no exit)
    before = {name: phase_sums(name) for name in ("Produce", "FetchConsumer")}
    server = KafkaServer(handler, max_frame_bytes=1024)
    client, server_side = trio.testing.memory_stream_pair()  # a real socket would not do on a virtual clock
    async with trio.open_nursery() as nursery:
        nursery.start_soon(server._serve_connection, server_side)
        await client.send_all(produce_frame(b"replicated") + produce_frame(b"next"))
        assert [await read_frame(client) for _ in range(2)] == [b"replicated", b"next"]
        await client.send_all(frame(struct.pack(">h", 1) + b"long-poll"))  # Fetch's api key
        assert await read_frame(client) == b"long-poll"
        nursery.cancel_scope.cancel()
    produce = grown(before["Produce"], phase_sums("Produce"))
    assert produce["local"] == (0.75, 2)  # 0.25 and 0.5
    assert produce["remote"] == (2.0, 2)
    # The second was read once the first allowed it (at 0.25), answered at 0.75 and sent after the
    # first, at 2.25: 1.5 s in the response queue.
    assert produce["response_queue"] == (1.5, 2)
    assert produce["request_queue"] == (0.0, 2) and produce["response_send"] == (0.0, 2)
    assert produce["total"] == (2.25 + 2.0, 2)
    fetch = grown(before["FetchConsumer"], phase_sums("FetchConsumer"))
    assert fetch["remote"] == (0.75, 1) and fetch["local"] == (0.0, 1) and fetch["total"] == (0.75, 1)


# -- send_all_fast: answers written without a scheduling point ------------------------------------------


async def _socket_stream_pair() -> tuple[trio.SocketStream, trio.SocketStream]:
    left, right = trio.socket.socketpair()
    return trio.SocketStream(left), trio.SocketStream(right)


async def test_send_all_fast_writes_a_small_answer_without_letting_another_task_run():
    from kraftpy.rpc.framing import send_all_fast

    writer, reader = await _socket_stream_pair()
    ran = []

    async def other_task():
        ran.append(True)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(other_task)
        await send_all_fast(writer, b"answer")
        assert ran == []  # no scheduling point: trio's send_all would have let it run
        assert await reader.receive_some(100) == b"answer"
        await trio.sleep(0)
    assert ran == [True]
    await writer.aclose()
    await reader.aclose()


async def test_send_all_fast_waits_for_a_full_socket_and_writes_everything_in_order():
    from kraftpy.rpc.framing import send_all_fast

    writer, reader = await _socket_stream_pair()
    payload = bytes(range(256)) * (16 * 1024)  # 4 MiB: far past the socket buffers
    got = bytearray()

    async def read_all():
        while len(got) < len(payload):
            got.extend(await reader.receive_some(1 << 16))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(read_all)
        await send_all_fast(writer, payload)
    assert bytes(got) == payload
    await writer.aclose()
    await reader.aclose()


async def test_send_all_fast_to_a_closed_peer_or_socket_raises_trios_stream_errors():
    from kraftpy.rpc.framing import send_all_fast

    writer, reader = await _socket_stream_pair()
    await reader.aclose()
    with pytest.raises(trio.BrokenResourceError):
        for _ in range(100):  # the first write may still land in the buffer
            await send_all_fast(writer, b"x" * 65536)
    await writer.aclose()
    with pytest.raises(trio.ClosedResourceError):
        await send_all_fast(writer, b"late")


async def test_send_all_fast_on_another_stream_is_its_send_all():
    from kraftpy.rpc.framing import send_all_fast

    left, right = trio.testing.memory_stream_pair()
    await send_all_fast(left, b"through send_all")
    assert await right.receive_some(100) == b"through send_all"
