"""UnregisterBroker on a broker: forwarded to the controller, answered once this broker's metadata no
longer has the broker; Kafka's errors for an unknown id and for a controller that does not answer."""

from __future__ import annotations

from kraftpy.broker.client import KafkaConnection
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.messages import UnregisterBrokerRequest
from tests.helpers.cluster import open_cluster


async def test_unregister_broker_is_forwarded_and_seen_by_the_broker_that_answers(tmp_path):
    async with open_cluster(tmp_path, brokers=2) as cluster:
        await cluster.create_topic("t", partitions=2, replication_factor=2)
        async with await KafkaConnection.connect("127.0.0.1", cluster.ports[1]) as conn:
            # A running broker is not unregistered (anyone could do it to a healthy cluster).
            response = await conn.request(ApiKey.UNREGISTER_BROKER, 0, UnregisterBrokerRequest(broker_id=2))
            assert response.error_code == ErrorCode.INVALID_REQUEST and cluster.image.cluster.broker(2) is not None
            await cluster.fence(2)
            response = await conn.request(ApiKey.UNREGISTER_BROKER, 0, UnregisterBrokerRequest(broker_id=2))
            assert (response.error_code, response.error_message) == (ErrorCode.NONE, None)
            assert [r.broker_id for name, r in cluster.controller.requests if name == "unregister_broker"] == [2, 2]
            assert cluster.image.cluster.broker(2) is None
            # The broker that answered already knows: broker 2 left its metadata, and every ISR.
            assert cluster.brokers[1].image.cluster.broker(2) is None
            topic = cluster.brokers[1].image.topics.get_by_name("t")
            assert all(2 not in p.isr for p in topic.partitions.values())

            response = await conn.request(ApiKey.UNREGISTER_BROKER, 0, UnregisterBrokerRequest(broker_id=2))
            assert response.error_code == ErrorCode.BROKER_ID_NOT_REGISTERED
            assert response.error_message == "Broker ID 2 is not registered."

            cluster.controller.available = False
            response = await conn.request(ApiKey.UNREGISTER_BROKER, 0, UnregisterBrokerRequest(broker_id=1))
            assert response.error_code == ErrorCode.REQUEST_TIMED_OUT
            assert "controller" in response.error_message
