"""ApiVersions (api key 18), versions 0-3: what versions of each API the broker speaks; the first request of every client."""

from kraftpy.protocol.schema import F, message

ApiVersionsRequest = message(
    "ApiVersionsRequest", api_key=18, kind="request", versions="0-3", flexible="3+", fields=[
        F("client_software_name", "string", "3+"),
        F("client_software_version", "string", "3+"),
    ],
)

ApiVersionsResponse = message(
    "ApiVersionsResponse", api_key=18, kind="response", versions="0-3", flexible="3+", fields=[
        F("error_code", "int16"),
        F("api_keys", "[]ApiVersion", "0+", [
            F("api_key", "int16"),
            F("min_version", "int16"),
            F("max_version", "int16"),
        ]),
        F("throttle_time_ms", "int32", "1+"),
        F("supported_features", "[]SupportedFeatureKey", "3+", [
            F("name", "string", "3+"),
            F("min_version", "int16", "3+"),
            F("max_version", "int16", "3+"),
        ], tag=0),
        F("finalized_features_epoch", "int64", "3+", default=-1, tag=1),
        F("finalized_features", "[]FinalizedFeatureKey", "3+", [
            F("name", "string", "3+"),
            F("max_version_level", "int16", "3+"),
            F("min_version_level", "int16", "3+"),
        ], tag=2),
        F("zk_migration_ready", "bool", "3+", default=False, tag=3),
    ],
)
