"""DescribeCluster (api key 60), versions 0-2: the cluster id, controller and brokers.

Version 2 is Kafka 4.0's (KIP-1073), newer than the reference definitions: the request may ask for
fenced brokers too (IncludeFencedBrokers) and each broker says whether it is fenced (IsFenced)."""

from kraftpy.protocol.schema import F, message

DescribeClusterRequest = message(
    "DescribeClusterRequest", api_key=60, kind="request", versions="0-2", flexible="0+", fields=[
        F("include_cluster_authorized_operations", "bool"),
        F("endpoint_type", "int8", "1+", default=1),
        F("include_fenced_brokers", "bool", "2+", default=False),
    ],
)

DescribeClusterResponse = message(
    "DescribeClusterResponse", api_key=60, kind="response", versions="0-2", flexible="0+", fields=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+", default=None),
        F("endpoint_type", "int8", "1+", default=1),
        F("cluster_id", "string"),
        F("controller_id", "int32", default=-1),
        F("brokers", "[]DescribeClusterBroker", "0+", [
            F("broker_id", "int32"),
            F("host", "string"),
            F("port", "int32"),
            F("rack", "string", nullable="0+", default=None),
            F("is_fenced", "bool", "2+", default=False),
        ]),
        F("cluster_authorized_operations", "int32", default=-2147483648),
    ],
)
