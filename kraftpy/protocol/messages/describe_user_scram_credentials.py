"""DescribeUserScramCredentials (api key 50), version 0: which SCRAM mechanisms each user has a
credential for, and its iteration count (KIP-554). Never the salt or the keys. A null or empty user
list describes every user; a named user without credentials is answered RESOURCE_NOT_FOUND.

Mechanisms are Kafka's ScramMechanism codes: 1 SCRAM-SHA-256, 2 SCRAM-SHA-512.
"""

from kraftpy.protocol.schema import F, message

DescribeUserScramCredentialsRequest = message(
    "DescribeUserScramCredentialsRequest", api_key=50, kind="request", versions="0", flexible="0+", fields=[
        F("users", "[]UserName", "0+", [
            F("name", "string"),
        ], nullable="0+"),
    ],
)

DescribeUserScramCredentialsResponse = message(
    "DescribeUserScramCredentialsResponse", api_key=50, kind="response", versions="0", flexible="0+", fields=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+"),
        F("results", "[]DescribeUserScramCredentialsResult", "0+", [
            F("user", "string"),
            F("error_code", "int16"),
            F("error_message", "string", nullable="0+"),
            F("credential_infos", "[]CredentialInfo", "0+", [
                F("mechanism", "int8"),
                F("iterations", "int32"),
            ]),
        ]),
    ],
)
