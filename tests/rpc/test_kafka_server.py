"""The Kafka-protocol server loop: in-order answers, sendfile parts, bad frames close one connection."""

import struct

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
