"""UnregisterBroker: forwarded to the controller (Kafka's ``kafka-cluster.sh unregister``).

Which brokers the cluster knows is the controller's decision (see forwarding). The controller
fences the broker if it is not fenced yet, takes it out of every ISR and leadership, and forgets
its registration (UnregisterBrokerRecord); an id it does not know is answered
BROKER_ID_NOT_REGISTERED. Once that committed, the handler waits until the broker is gone from this
broker's metadata too, so a client that unregisters a broker and then describes the cluster no
longer finds it.
"""

from __future__ import annotations

from typing import Any

from kraftpy.broker.apis.forwarding import await_propagation
from kraftpy.broker.authorization import ALTER, NO_AUTHORIZATION, BrokerAuthorizer, cluster_refusal
from kraftpy.broker.controller_channel import ControllerChannel
from kraftpy.broker.metadata_cache import MetadataCache
from kraftpy.metadata import messages as m
from kraftpy.metadata.image import MetadataImage
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.messages import UnregisterBrokerResponse
from kraftpy.rpc.kafka_server import Connection


class BrokersApi:
    #: Set by the broker: ALTER on the cluster.
    authz: BrokerAuthorizer = NO_AUTHORIZATION

    def __init__(self, metadata: MetadataCache, channel: ControllerChannel) -> None:
        self.metadata = metadata
        self.channel = channel

    def handlers(self) -> dict[ApiKey, Any]:
        return {ApiKey.UNREGISTER_BROKER: self.handle_unregister_broker}

    async def handle_unregister_broker(self, header: Any, request: Any, conn: Connection) -> UnregisterBrokerResponse:
        if (refused := cluster_refusal(self.authz, conn, ALTER, ApiKey.UNREGISTER_BROKER)) is not None:
            return refused
        broker_id = request.broker_id
        mresp = await self.channel.unregister_broker(m.UnregisterBrokerRequest(broker_id))
        if mresp.error_code == ErrorCode.NONE:
            def gone(image: MetadataImage) -> bool:
                return image.cluster.broker(broker_id) is None

            await await_propagation(self.metadata, gone)
        return UnregisterBrokerResponse(throttle_time_ms=0, error_code=mresp.error_code,
                                        error_message=mresp.error_message)
