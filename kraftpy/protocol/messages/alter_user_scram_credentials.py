"""AlterUserScramCredentials (api key 51), version 0: add, replace or remove users' SCRAM credentials
(KIP-554). The client salts and hashes the password itself; only the salt and SaltedPassword travel.
Brokers forward it to the active controller, which writes UserScramCredentialRecord /
RemoveUserScramCredentialRecord; one result per user named.
"""

from kraftpy.protocol.schema import F, message

AlterUserScramCredentialsRequest = message(
    "AlterUserScramCredentialsRequest", api_key=51, kind="request", versions="0", flexible="0+", fields=[
        F("deletions", "[]ScramCredentialDeletion", "0+", [
            F("name", "string"),
            F("mechanism", "int8"),
        ]),
        F("upsertions", "[]ScramCredentialUpsertion", "0+", [
            F("name", "string"),
            F("mechanism", "int8"),
            F("iterations", "int32"),
            F("salt", "bytes"),
            F("salted_password", "bytes"),
        ]),
    ],
)

AlterUserScramCredentialsResponse = message(
    "AlterUserScramCredentialsResponse", api_key=51, kind="response", versions="0", flexible="0+", fields=[
        F("throttle_time_ms", "int32"),
        F("results", "[]AlterUserScramCredentialsResult", "0+", [
            F("user", "string"),
            F("error_code", "int16"),
            F("error_message", "string", nullable="0+"),
        ]),
    ],
)
