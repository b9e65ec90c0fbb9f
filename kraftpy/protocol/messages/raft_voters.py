"""AddRaftVoter (api key 80) and RemoveRaftVoter (81), version 0: a dynamic controller quorum's voters
changed (KIP-853) - what kafka-metadata-quorum.sh add-controller and remove-controller send to the
controllers (``--bootstrap-controller``). kraftpy's controllers serve them on their listener; its brokers
do not forward them."""

from kraftpy.protocol.schema import F, message

AddRaftVoterRequest = message(
    "AddRaftVoterRequest", api_key=80, kind="request", versions="0", flexible="0+", fields=[
        F("cluster_id", "string", nullable="0+"),
        F("timeout_ms", "int32"),
        F("voter_id", "int32"),
        F("voter_directory_id", "uuid"),
        F("listeners", "[]Listener", "0+", [
            F("name", "string"),
            F("host", "string"),
            F("port", "uint16"),
        ]),
    ],
)

AddRaftVoterResponse = message(
    "AddRaftVoterResponse", api_key=80, kind="response", versions="0", flexible="0+", fields=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+"),
    ],
)

RemoveRaftVoterRequest = message(
    "RemoveRaftVoterRequest", api_key=81, kind="request", versions="0", flexible="0+", fields=[
        F("cluster_id", "string", nullable="0+"),
        F("voter_id", "int32"),
        F("voter_directory_id", "uuid"),
    ],
)

RemoveRaftVoterResponse = message(
    "RemoveRaftVoterResponse", api_key=81, kind="response", versions="0", flexible="0+", fields=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+"),
    ],
)
