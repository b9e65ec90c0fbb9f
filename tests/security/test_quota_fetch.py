"""A consumer over its consumer_byte_rate (KIP-219, Kafka's getThrottledResponse): the fetch that would
take it over is answered with throttle_time_ms and no records, its bytes are not counted against the
client, and a fetch reads at most one window's worth of the quota, so a client back within its quota
gets its records. The broker's quota clock stands still (then jumps), so nothing depends on how fast the
test runs; each fetch is sent on a connection of its own (a throttled connection is muted)."""

from __future__ import annotations

from kraftpy.admin.client import AdminClient, parse_addresses
from kraftpy.broker.client import KafkaConnection
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.types import part_length
from tests.helpers.cluster import open_cluster
from tests.helpers.protocol import batch, fetch_request, produce

QUOTA = 1000  # bytes per second, one-second windows


async def _fetch(cluster, client_id: str):
    async with await KafkaConnection.connect("127.0.0.1", cluster.ports[1], client_id=client_id) as conn:
        return await conn.request(ApiKey.FETCH, 12, fetch_request("t", 0, 0))


def _fetched(response) -> int:
    return sum(part_length(p.records) for t in response.responses for p in t.partitions if p.records is not None)


async def test_a_throttled_fetch_carries_no_records_and_is_not_counted(tmp_path):
    async with open_cluster(tmp_path, brokers=1) as cluster:
        await cluster.create_topic("t")
        async with await KafkaConnection.connect("127.0.0.1", cluster.ports[1]) as conn:
            for i in range(8):  # batches of about 400 bytes
                answer = await produce(conn, "t", 0, batch(bytes([i]) * 300, bytes([i]) * 20))
                assert answer.error_code == ErrorCode.NONE
        async with AdminClient(parse_addresses(cluster.bootstrap)) as admin:
            assert await admin.alter_client_quotas([({"client-id": "reader"}, {"consumer_byte_rate": QUOTA})]) == [
                (ErrorCode.NONE, None)]
        quotas = cluster.brokers[1].quotas
        now = [1000.0]
        quotas.clock = lambda: now[0]

        # The fetch asks for 50 MiB but reads at most one window of the quota: it is within it.
        first = await _fetch(cluster, "reader")
        first_bytes = _fetched(first)
        assert first.throttle_time_ms == 0 and 600 < first_bytes <= QUOTA

        # The same again would take the client to twice its rate: throttle time, no records at all.
        second = await _fetch(cluster, "reader")
        assert second.error_code == ErrorCode.NONE
        assert second.throttle_time_ms > 0 and second.responses == []
        assert quotas.throttled_ms["Fetch"] == second.throttle_time_ms

        # Two seconds on, the client has fetched first_bytes over two seconds (the throttled answer was not
        # counted: with it, 3 * first_bytes / 2 s would be over the quota again), and gets its records.
        now[0] += 2.0
        third = await _fetch(cluster, "reader")
        assert third.throttle_time_ms == 0 and _fetched(third) == first_bytes

        # Another client id has no quota: never capped, never throttled.
        other = await _fetch(cluster, "someone-else")
        assert other.throttle_time_ms == 0 and _fetched(other) > QUOTA


async def test_a_fetch_throttled_for_request_time_carries_no_records_either(tmp_path):
    async with open_cluster(tmp_path, brokers=1) as cluster:
        await cluster.create_topic("t")
        async with await KafkaConnection.connect("127.0.0.1", cluster.ports[1]) as conn:
            assert (await produce(conn, "t", 0, batch(b"v" * 300))).error_code == ErrorCode.NONE
        async with AdminClient(parse_addresses(cluster.bootstrap)) as admin:
            assert await admin.alter_client_quotas([({"client-id": "busy"}, {"request_percentage": 0.0001})]) == [
                (ErrorCode.NONE, None)]
        quotas = cluster.brokers[1].quotas
        quotas.clock = lambda: 1000.0
        async with await KafkaConnection.connect("127.0.0.1", cluster.ports[1], client_id="busy") as conn:
            # The time the fetch's handling ran takes the client far over 0.0001% of a second: throttled,
            # and emptied as a throttled fetch is, whichever quota throttled it.
            fetched = await conn.request(ApiKey.FETCH, 12, fetch_request("t", 0, 0))
            assert fetched.throttle_time_ms > 0 and fetched.responses == []
            assert quotas.throttled_ms["Request"] == fetched.throttle_time_ms
