"""Quota resolution (Kafka's precedence and sensor sharing), the sampled rate, throttle times, and the
dispatcher's hook: throttle_time_ms on the response and the connection muted."""

from __future__ import annotations

import pytest

from kraftpy.broker.quotas import (
    FETCH,
    PRODUCE,
    ClientQuotas,
    resolve_quota,
    throttle_time_ms,
    user_of,
)
from kraftpy.metadata.image import ClientQuotasImage, MetadataImage, quota_entity
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.messages import FetchResponse, ProduceResponse, RequestHeader
from kraftpy.rpc.rates import Rate

KEY = "producer_byte_rate"

#: Every level of Kafka's precedence, most specific first, each with its own value.
LEVELS = [
    ("/users/u/clients/c", {"user": "u", "client-id": "c"}, ("u", "c")),
    ("/users/u/clients/<default>", {"user": "u", "client-id": None}, ("u", "c")),
    ("/users/u", {"user": "u"}, ("u", "")),
    ("/users/<default>/clients/c", {"user": None, "client-id": "c"}, ("u", "c")),
    ("/users/<default>/clients/<default>", {"user": None, "client-id": None}, ("u", "c")),
    ("/users/<default>", {"user": None}, ("u", "")),
    ("/clients/c", {"client-id": "c"}, ("", "c")),
    ("/clients/<default>", {"client-id": None}, ("", "c")),
]


def image_of(entities: dict) -> ClientQuotasImage:
    return ClientQuotasImage({quota_entity(e.items()): {KEY: value} for e, value in entities})


@pytest.mark.parametrize("level", range(len(LEVELS)))
def test_precedence_takes_the_most_specific_entity_set(level):
    """With every level from ``level`` down set, the quota is ``level``'s, counted on its sensor."""
    entities = [(parts, float(i + 1)) for i, (_, parts, _) in enumerate(LEVELS) if i >= level]
    quota, sensor = resolve_quota(image_of(entities), KEY, "u", "c")
    assert quota == float(level + 1), LEVELS[level][0]
    assert sensor == LEVELS[level][2]


def test_other_users_and_clients_and_other_keys_do_not_match():
    quotas = image_of([({"user": "someone"}, 1.0), ({"client-id": "other"}, 2.0),
                       ({"user": "u", "client-id": "other"}, 3.0)])
    assert resolve_quota(quotas, KEY, "u", "c") is None
    assert resolve_quota(quotas, "consumer_byte_rate", "someone", "c") is None
    assert resolve_quota(quotas, KEY, "someone", "c") == (1.0, ("someone", ""))


def test_user_of_principal():
    assert user_of("User:alice") == "alice"
    assert user_of("User:ANONYMOUS") == "ANONYMOUS"


def test_rate_is_the_sum_over_the_time_its_windows_span():
    rate = Rate(samples=3, window_s=1.0)
    rate.record(100, 10.0)
    assert rate.measure(10.0) == 100  # at least one window
    rate.record(100, 11.5)
    assert rate.measure(12.0) == pytest.approx(200 / 2.0)
    # Windows older than samples * window are forgotten: the one that began at 10.0 goes at 13.0.
    rate.record(50, 12.6)
    assert rate.total(12.9) == 250 and rate.total(13.0) == 150
    assert rate.measure(13.0) == pytest.approx(150 / 1.5)


def test_throttle_time_is_kafkas_formula():
    # 20% over a quota measured over 10 s: 2 s to come back to it.
    assert throttle_time_ms(1200, 1000, 10.0) == 2000
    assert throttle_time_ms(1000, 1000, 10.0) == 0


class Conn:
    principal = "User:alice"
    throttle_ms = 0


class Images:
    def __init__(self, quotas: ClientQuotasImage) -> None:
        self.image = MetadataImage(client_quotas=quotas)


def test_over_quota_sets_throttle_time_and_mutes_the_connection():
    now = [0.0]
    images = Images(ClientQuotasImage({quota_entity([("user", "alice")]): {KEY: 1000.0}}))
    quotas = ClientQuotas(lambda: images.image, window_num=11, window_size_s=1.0, clock=lambda: now[0])
    header = RequestHeader(request_api_key=0, request_api_version=9, correlation_id=1, client_id="app")
    conn = Conn()
    within = ProduceResponse(responses=[], throttle_time_ms=0)
    assert quotas.after_request(ApiKey.PRODUCE, header, None, 900, within, conn) == 0
    assert within.throttle_time_ms == 0 and conn.throttle_ms == 0
    now[0] = 0.5
    over = ProduceResponse(responses=[], throttle_time_ms=0)
    # 2100 bytes over a one-second window against 1000/s: 1.1 s to come back to the quota.
    assert quotas.after_request(ApiKey.PRODUCE, header, None, 1200, over, conn) == 1100
    assert over.throttle_time_ms == 1100 and conn.throttle_ms == 1100
    assert quotas.throttled_ms[PRODUCE] == 1100
    # acks=0: no response, the connection is muted all the same.
    conn.throttle_ms = 0
    assert quotas.after_request(ApiKey.PRODUCE, header, None, 1000, None, conn) > 0
    assert conn.throttle_ms > 0
    # Another user is not held to alice's quota.
    other = Conn()
    other.principal = "User:bob"
    assert quotas.after_request(ApiKey.PRODUCE, header, None, 10_000, ProduceResponse(responses=[]), other) == 0


def test_a_throttle_is_at_most_the_whole_window_span():
    images = Images(ClientQuotasImage({quota_entity([("client-id", None)]): {KEY: 1.0}}))
    quotas = ClientQuotas(lambda: images.image, window_num=11, window_size_s=1.0, clock=lambda: 0.0)
    header = RequestHeader(request_api_key=0, request_api_version=9, correlation_id=1, client_id="x")
    assert quotas.after_request(ApiKey.PRODUCE, header, None, 10**9, None, Conn()) == 11_000


def test_fetch_counts_record_bytes_of_consumers_only():
    images = Images(ClientQuotasImage({quota_entity([("client-id", "c")]): {"consumer_byte_rate": 100.0}}))
    quotas = ClientQuotas(lambda: images.image, clock=lambda: 0.0)
    header = RequestHeader(request_api_key=1, request_api_version=12, correlation_id=1, client_id="c")
    Partition = FetchResponse.PartitionData
    response = FetchResponse(throttle_time_ms=0, responses=[FetchResponse.FetchableTopicResponse(
        topic="t", partitions=[Partition(partition_index=0, error_code=0, high_watermark=0, records=b"x" * 300)])])

    class Request:
        replica_id = -1

    class Follower:
        replica_id = 2

    # The fetch handler counts the record bytes it is about to send (throttle_fetch): over the rate, they are
    # taken back out and the fetch is answered with the throttle time and no records.
    assert quotas.throttle_fetch(header, Conn(), 300) == 2000
    assert quotas.throttle_fetch(header, Conn(), 300) == 2000  # the refused bytes were not counted
    response.throttle_time_ms = 2000
    # A follower's fetch is never a consumer's; a consumer's throttled answer mutes its connection.
    assert quotas.after_request(ApiKey.FETCH, header, Follower(), 50, response, Conn()) == 0
    assert quotas.after_request(ApiKey.FETCH, header, Request(), 50, response, Conn()) == 2000
    assert quotas.throttled_ms[FETCH] == 2000


async def test_request_percentage_counts_the_connection_tasks_running_time():
    import time

    images = Images(ClientQuotasImage({quota_entity([("client-id", "busy")]): {"request_percentage": 1.0}}))
    quotas = ClientQuotas(lambda: images.image, clock=lambda: 0.0)
    header = RequestHeader(request_api_key=3, request_api_version=12, correlation_id=1, client_id="busy")
    conn = Conn()
    quotas.after_request(ApiKey.METADATA, header, None, 10, None, conn)  # starts watching this task
    deadline = time.perf_counter() + 0.05
    while time.perf_counter() < deadline:  # 50 ms of this task's own work
        pass
    # At least 5% of a second (50 ms) of this task's time against a 1% quota: at least 4 s of throttle.
    throttle = quotas.after_request(ApiKey.METADATA, header, None, 10, None, conn)
    assert 3900 <= throttle <= 11_000 and conn.throttle_ms == throttle
    # ApiVersions is exempt.
    assert quotas.after_request(ApiKey.API_VERSIONS, header, None, 10, None, Conn()) == 0
