"""DescribeUserScramCredentials and AlterUserScramCredentials (KIP-554).

Describe is answered from this broker's metadata image: the mechanisms and iteration counts of each
user's credentials, never the salt or the keys. A null or empty user list describes every user; a user
named twice is answered DUPLICATE_RESOURCE, one without credentials RESOURCE_NOT_FOUND (Kafka's messages).

Alter is the controller's decision (kraftpy.metadata.scram_control): the broker forwards it and, once
it committed, waits until this broker's image holds the change, so a client that creates a user and then
authenticates as that user here gets in. When no controller answers, every user is answered
REQUEST_TIMED_OUT.
"""

from __future__ import annotations

from typing import Any

from kraftpy.broker.apis.forwarding import await_propagation
from kraftpy.broker.authorization import ALTER, DESCRIBE, NO_AUTHORIZATION, BrokerAuthorizer, cluster_refusal
from kraftpy.broker.controller_channel import ControllerChannel, ControllerUnavailable
from kraftpy.broker.metadata_cache import MetadataCache
from kraftpy.metadata import messages as m
from kraftpy.metadata.image import MetadataImage
from kraftpy.protocol.api_keys import ApiKey
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.messages import AlterUserScramCredentialsResponse, DescribeUserScramCredentialsResponse
from kraftpy.rpc.kafka_server import Connection


class ScramCredentialsApi:
    #: Set by the broker: DESCRIBE (describe) and ALTER (alter) on the cluster.
    authz: BrokerAuthorizer = NO_AUTHORIZATION

    def __init__(self, metadata: MetadataCache, channel: ControllerChannel) -> None:
        self.metadata = metadata
        self.channel = channel

    def handlers(self) -> dict[ApiKey, Any]:
        return {ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: self.handle_describe_user_scram_credentials,
                ApiKey.ALTER_USER_SCRAM_CREDENTIALS: self.handle_alter_user_scram_credentials}

    async def handle_describe_user_scram_credentials(
        self, header: Any, request: Any, conn: Connection
    ) -> DescribeUserScramCredentialsResponse:
        if (refused := cluster_refusal(self.authz, conn, DESCRIBE, ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS)) is not None:
            return refused
        Result = DescribeUserScramCredentialsResponse.DescribeUserScramCredentialsResult
        Info = DescribeUserScramCredentialsResponse.CredentialInfo
        users = self.metadata.image.scram.users
        names = [u.name for u in request.users] if request.users else sorted(users)
        results = []
        counts: dict[str, int] = {}
        for name in names:
            counts[name] = counts.get(name, 0) + 1
        for name in dict.fromkeys(names):
            creds = users.get(name)
            if counts[name] > 1:
                results.append(Result(user=name, error_code=ErrorCode.DUPLICATE_RESOURCE, error_message=(
                    "Cannot describe SCRAM credentials for the same user twice in a single request"),
                    credential_infos=[]))
            elif not creds:
                results.append(Result(user=name, error_code=ErrorCode.RESOURCE_NOT_FOUND,
                                      error_message="Attempt to describe a user credential that does not exist",
                                      credential_infos=[]))
            else:
                results.append(Result(user=name, error_code=ErrorCode.NONE, error_message=None, credential_infos=[
                    Info(mechanism=code, iterations=record.iterations) for code, record in sorted(creds.items())]))
        return DescribeUserScramCredentialsResponse(throttle_time_ms=0, error_code=ErrorCode.NONE,
                                                    error_message=None, results=results)

    async def handle_alter_user_scram_credentials(
        self, header: Any, request: Any, conn: Connection
    ) -> AlterUserScramCredentialsResponse:
        Result = AlterUserScramCredentialsResponse.AlterUserScramCredentialsResult
        if not self.authz.allows_cluster(conn, ALTER):
            names = dict.fromkeys([d.name for d in request.deletions] + [u.name for u in request.upsertions])
            return AlterUserScramCredentialsResponse(throttle_time_ms=0, results=[
                Result(user=name, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                       error_message="Cluster authorization failed.") for name in names])
        forwarded = m.AlterUserScramCredentialsRequest(
            deletions=tuple(m.ScramCredentialDeletion(d.name, d.mechanism) for d in request.deletions),
            upsertions=tuple(m.ScramCredentialUpsertion(u.name, u.mechanism, u.iterations, bytes(u.salt),
                                                        bytes(u.salted_password)) for u in request.upsertions),
        )
        try:
            answer = await self.channel.alter_user_scram_credentials(forwarded)
        except ControllerUnavailable as exc:
            names = dict.fromkeys([d.name for d in request.deletions] + [u.name for u in request.upsertions])
            return AlterUserScramCredentialsResponse(throttle_time_ms=0, results=[
                Result(user=name, error_code=ErrorCode.REQUEST_TIMED_OUT, error_message=str(exc)) for name in names])
        ok = {r.user for r in answer.results if r.error_code == ErrorCode.NONE}
        if ok:
            def arrived(image: MetadataImage) -> bool:
                scram = image.scram
                return all(scram.credential(d.name, d.mechanism) is None
                           for d in forwarded.deletions if d.name in ok) and all(
                    (c := scram.credential(u.name, u.mechanism)) is not None and c.salt == u.salt
                    for u in forwarded.upsertions if u.name in ok)

            await await_propagation(self.metadata, arrived)
        return AlterUserScramCredentialsResponse(throttle_time_ms=0, results=[
            Result(user=r.user, error_code=r.error_code, error_message=r.error_message) for r in answer.results])
