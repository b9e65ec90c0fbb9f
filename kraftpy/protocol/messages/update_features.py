"""UpdateFeatures (api key 57), versions 0-2: raise (or, with a downgrade type, lower) finalized feature
levels, as kafka-features.sh upgrade / downgrade / disable send it. Version 0 says a downgrade with
``allow_downgrade``; from version 1 each update has an ``upgrade_type`` (1 upgrade, 2 safe downgrade,
3 unsafe downgrade) and the request may only validate; version 2's response has no per-feature results."""

from kraftpy.protocol.schema import F, message

UpdateFeaturesRequest = message(
    "UpdateFeaturesRequest", api_key=57, kind="request", versions="0-2", flexible="0+", fields=[
        F("timeout_ms", "int32", default=60000),
        F("feature_updates", "[]FeatureUpdateKey", "0+", [
            F("feature", "string"),
            F("max_version_level", "int16"),
            F("allow_downgrade", "bool", "0"),
            F("upgrade_type", "int8", "1+", default=1),
        ]),
        F("validate_only", "bool", "1+", default=False),
    ],
)

UpdateFeaturesResponse = message(
    "UpdateFeaturesResponse", api_key=57, kind="response", versions="0-2", flexible="0+", fields=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+"),
        F("results", "[]UpdatableFeatureResult", "0-1", [
            F("feature", "string"),
            F("error_code", "int16"),
            F("error_message", "string", nullable="0+"),
        ]),
    ],
)
