"""ConsumerGroupDescribe (api key 69), version 0 (KIP-848): a consumer group's epochs, assignor and members,
each with its current and target assignment."""

from kraftpy.protocol.schema import F, message


def _assignment(name: str) -> F:
    return F(name, "Assignment", "0+", [
        F("topic_partitions", "[]TopicPartitions", "0+", [
            F("topic_id", "uuid"),
            F("topic_name", "string"),
            F("partitions", "[]int32"),
        ]),
    ])


ConsumerGroupDescribeRequest = message(
    "ConsumerGroupDescribeRequest", api_key=69, kind="request", versions="0", flexible="0+", fields=[
        F("group_ids", "[]string"),
        F("include_authorized_operations", "bool"),
    ],
)

ConsumerGroupDescribeResponse = message(
    "ConsumerGroupDescribeResponse", api_key=69, kind="response", versions="0", flexible="0+", fields=[
        F("throttle_time_ms", "int32"),
        F("groups", "[]DescribedGroup", "0+", [
            F("error_code", "int16"),
            F("error_message", "string", nullable="0+", default=None),
            F("group_id", "string"),
            F("group_state", "string"),
            F("group_epoch", "int32"),
            F("assignment_epoch", "int32"),
            F("assignor_name", "string"),
            F("members", "[]Member", "0+", [
                F("member_id", "string"),
                F("instance_id", "string", nullable="0+", default=None),
                F("rack_id", "string", nullable="0+", default=None),
                F("member_epoch", "int32"),
                F("client_id", "string"),
                F("client_host", "string"),
                F("subscribed_topic_names", "[]string"),
                F("subscribed_topic_regex", "string", nullable="0+", default=None),
                _assignment("assignment"),
                _assignment("target_assignment"),
            ]),
            F("authorized_operations", "int32", default=-2147483648),
        ]),
    ],
)
