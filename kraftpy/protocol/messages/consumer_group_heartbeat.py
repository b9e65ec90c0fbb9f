"""ConsumerGroupHeartbeat (api key 68), versions 0-1 (KIP-848): join, stay in and leave a consumer group.

A member joins with member epoch 0, heartbeats with the epoch the coordinator gave it, leaves with -1
(a static member with -2: it will come back). Fields that did not change since the last heartbeat
are sent null. Version 1 (Kafka 4.0's, unstable in 3.9) adds a topic regex the broker evaluates, and
its members choose their own member id."""

from kraftpy.protocol.schema import F, message

ConsumerGroupHeartbeatRequest = message(
    "ConsumerGroupHeartbeatRequest", api_key=68, kind="request", versions="0-1", flexible="0+", fields=[
        F("group_id", "string"),
        F("member_id", "string"),
        F("member_epoch", "int32"),
        F("instance_id", "string", nullable="0+", default=None),
        F("rack_id", "string", nullable="0+", default=None),
        F("rebalance_timeout_ms", "int32", default=-1),
        F("subscribed_topic_names", "[]string", nullable="0+", default=None),
        F("subscribed_topic_regex", "string", "1+", nullable="1+", default=None),
        F("server_assignor", "string", nullable="0+", default=None),
        F("topic_partitions", "[]TopicPartitions", "0+", [
            F("topic_id", "uuid"),
            F("partitions", "[]int32"),
        ], nullable="0+", default=None),
    ],
)

ConsumerGroupHeartbeatResponse = message(
    "ConsumerGroupHeartbeatResponse", api_key=68, kind="response", versions="0-1", flexible="0+", fields=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+", default=None),
        F("member_id", "string", nullable="0+", default=None),
        F("member_epoch", "int32"),
        F("heartbeat_interval_ms", "int32"),
        F("assignment", "Assignment", "0+", [
            F("topic_partitions", "[]TopicPartitions", "0+", [
                F("topic_id", "uuid"),
                F("partitions", "[]int32"),
            ]),
        ], nullable="0+", default=None),
    ],
)
