"""Garbage on the wire: random, truncated, oversized and wrongly versioned frames to a live broker.

Whatever a client sends, only its own connection suffers: the broker keeps serving a second
client, whose produce and fetch still work, and no log changes.
"""

from __future__ import annotations

import struct
import tempfile
from pathlib import Path

import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kraftpy.broker.client import KafkaConnection
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.frames import encode_request, join_frame
from kraftpy.protocol.messages import ListOffsetsRequest, MetadataRequest
from tests.helpers.cluster import open_cluster
from tests.helpers.protocol import batch, fetch, fetch_request, produce, produce_request, values_of

MAX_FRAME = 65536


def _valid_frames() -> list[bytes]:
    def frame(api_key, version, request):
        return join_frame(encode_request(api_key, version, 5, "fuzz", request))

    return [
        frame(ApiKey.PRODUCE, 9, produce_request("ghost", 0, batch(b"boo"))),
        frame(ApiKey.FETCH, 12, fetch_request("t", 0, 0)),
        frame(ApiKey.METADATA, 12, MetadataRequest(topics=None)),
        frame(ApiKey.LIST_OFFSETS, 7, ListOffsetsRequest(replica_id=-1, topics=[])),
    ]


VALID = _valid_frames()


def _sized(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


random_frames = st.binary(min_size=0, max_size=300).map(_sized)
truncated_frames = st.tuples(st.sampled_from(VALID), st.integers(0, 400)).map(
    lambda fc: _sized(fc[0][4:][: min(fc[1], len(fc[0]) - 5)]))
oversized_frames = st.integers(MAX_FRAME + 1, 2**31 - 1).map(lambda n: struct.pack(">i", n) + b"\x00" * 64)
negative_frames = st.integers(-(2**31), -1).map(lambda n: struct.pack(">i", n))
wrong_versions = st.tuples(st.sampled_from(VALID), st.integers(-(2**15), 2**15 - 1)).map(
    lambda fv: fv[0][:6] + struct.pack(">h", fv[1]) + fv[0][8:])
unknown_apis = st.tuples(st.sampled_from(VALID), st.integers(-(2**15), 2**15 - 1)).map(
    lambda fk: fk[0][:4] + struct.pack(">h", fk[1]) + fk[0][6:])
bad_frames = st.one_of(random_frames, truncated_frames, oversized_frames, negative_frames, wrong_versions,
                       unknown_apis)


async def _drain(port: int, frame: bytes) -> None:
    """Send ``frame`` on a connection of its own, end it, and read until the broker closes it."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    try:
        await stream.send_all(frame)
        # Half-close: a frame cut short then ends with the stream, which the broker must survive too.
        await stream.send_eof()
        with trio.fail_after(30):  # the broker closes every such connection; this only bounds a failure
            while await stream.receive_some(65536):
                pass
    except trio.BrokenResourceError:
        pass
    finally:
        await stream.aclose()


async def _check(frames: list[bytes]) -> None:
    with tempfile.TemporaryDirectory() as root:
        async with open_cluster(Path(root), brokers=1, socket_request_max_bytes=MAX_FRAME) as cluster:
            await cluster.create_topic("t")
            port = cluster.ports[1]
            async with await KafkaConnection.connect("127.0.0.1", port) as good:
                assert (await produce(good, "t", 0, batch(b"before"))).error_code == ErrorCode.NONE
                log = cluster.partition(1, "t").log
                before = (log.log_end_offset, log.read_bytes(0, 1 << 20))
                async with trio.open_nursery() as nursery:
                    for frame in frames:
                        nursery.start_soon(_drain, port, frame)
                assert (log.log_end_offset, log.read_bytes(0, 1 << 20)) == before
                # The well-behaved client, on a connection opened before the garbage, is still served.
                data = await fetch(good, "t", 0, 0)
                assert values_of(data.records) == [b"before"]
                assert (await produce(good, "t", 0, batch(b"after"))).base_offset == 1


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(bad_frames, min_size=1, max_size=6))
def test_bad_frames_close_only_their_own_connection(frames):
    trio.run(_check, frames)
