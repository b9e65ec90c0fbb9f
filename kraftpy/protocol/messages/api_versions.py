"""ApiVersions (api key 18), versions 0-4: what versions of each API the broker speaks; the first request of every client.

v4 is v3 on the wire. What changes is the answer (KAFKA-17011): before v4, a supported feature whose
lowest version is 0 is left out of ``supported_features``, because older clients fail to read it
(`supported_feature_keys`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kraftpy.protocol.schema import F, message

#: The first ApiVersions version whose answer may list a supported feature with a lowest version of 0.
FEATURE_MIN_VERSION_ZERO_VERSION = 4

ApiVersionsRequest = message(
    "ApiVersionsRequest", api_key=18, kind="request", versions="0-4", flexible="3+", fields=[
        F("client_software_name", "string", "3+"),
        F("client_software_version", "string", "3+"),
    ],
)

ApiVersionsResponse = message(
    "ApiVersionsResponse", api_key=18, kind="response", versions="0-4", flexible="3+", fields=[
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


def supported_feature_keys(features: Mapping[str, tuple[int, int]], version: int) -> list[Any]:
    """``supported_features`` of an ApiVersions answer of ``version`` for ``features`` (name to
    (lowest, highest) version), by name; before v4 without the features whose lowest version is 0."""
    return [ApiVersionsResponse.SupportedFeatureKey(name=name, min_version=low, max_version=high)
            for name, (low, high) in sorted(features.items())
            if low != 0 or version >= FEATURE_MIN_VERSION_ZERO_VERSION]
